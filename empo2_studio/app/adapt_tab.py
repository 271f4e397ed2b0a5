"""The Adapt tab: a trained checkpoint on a task it was not trained on, weights frozen, memory on.

Handlers first (plain functions), then the tab's layout and wiring (`build_adapt_tab`). Trial 0 plays
without memory (the baseline); later trials retrieve the tips written by earlier ones; the adapter
checksum before and after shows the weights were not touched (paper §4, out-of-distribution).
"""

from __future__ import annotations

import json
from functools import partial
from typing import TYPE_CHECKING, Any

import gradio as gr

from empo2_studio.app import figures, workers
from empo2_studio.app import job_panel as jp
from empo2_studio.app.episodes_tab import check_checkpoint, checkpoint_choices
from empo2_studio.app.handlers import user_errors, whole_number
from empo2_studio.app.job_panel import JobPanel
from empo2_studio.config import WARM_START_DIR

if TYPE_CHECKING:
    from empo2_studio.app.studio import Studio


def unseen_tasks(studio: Studio, run_id: str) -> list[str]:
    """Tasks of the session's env other than the one it trains on."""
    from empo2_studio.envs import unseen_tasks as unseen

    cfg = studio.session(run_id).config
    return unseen(studio.meta_env(cfg.env.name).task_names(), cfg.env)


MAX_TRIALS = 20
"""Most memory trials one Adapt run plays (the paper's adaptation uses 10; each trial is a group)."""
NO_ADAPTER_SAW = " · no shipped adapter trained on it"
"""How the task list marks a task no adapter under assets/warmstart/ names in its `seen` (its data, by
task name; a trap fixed-family task still shares its goal with a search-family one the adapters saw)."""


def adapter_trained_tasks() -> set[str]:
    """Every task some shipped adapter trained on: the union of `seen` (its whole init chain) over the
    warmstart.json files under `WARM_START_DIR`; an unreadable file adds nothing."""
    out: set[str] = set()
    for meta in WARM_START_DIR.glob("*/warmstart.json"):
        try:
            out |= set(json.loads(meta.read_text(encoding="utf-8")).get("seen", {}))
        except (OSError, ValueError, AttributeError):
            continue
    return out


def task_choices(studio: Studio, run_id: str) -> list[tuple[str, str]]:
    """(label, task) for the task list: the session's unseen tasks, those no shipped adapter trained on
    first and labelled so (`NO_ADAPTER_SAW`), then the rest, each group in the env's order."""
    trained = adapter_trained_tasks()
    tasks = unseen_tasks(studio, run_id)
    return ([(t + NO_ADAPTER_SAW, t) for t in tasks if t not in trained]
            + [(t, t) for t in tasks if t in trained])  # fmt: skip


@user_errors
def start_adapt(studio: Studio, run_id: str, checkpoint: str | None, task: str | None, trials: Any) -> tuple[Any, ...]:
    """Start an adaptation run (frozen weights, memory on). Returns `job_panel.started(job)`."""
    if not task:
        raise ValueError("pick an unseen task")
    unseen = unseen_tasks(studio, run_id)
    if task not in unseen:
        env = studio.session(run_id).config.env
        why = (f"the task session {run_id!r} trains on" if task == env.task else f"not a {env.name} task")
        raise ValueError(f"{task!r} is {why}; the unseen tasks of session {run_id!r}: {', '.join(unseen)}")
    trials = whole_number(trials, "trials K", 1, MAX_TRIALS)
    check_checkpoint(studio, run_id, checkpoint)
    job = studio.jobs.start(
        "adapt", lambda j: workers.adapt(studio, j, run_id=run_id, checkpoint=checkpoint, task=task, trials=trials),
        label=f"adapt to {task}", run_id=run_id,
    )
    return jp.started(job)


def adapt_view(data: dict[str, Any]) -> tuple[Any, str]:
    """(trial chart, checksum markdown) from an adaptation job's data."""
    before, after = data.get("checksum_before"), data.get("checksum_after")
    lines = [f"adapter checksum before: `{before[:16]}`" if before else "adapter checksum before: –"]
    if after:
        verdict = "**weights untouched**" if after == before else "**WEIGHTS CHANGED**"
        lines.append(f"adapter checksum after: `{after[:16]}` — {verdict}")
    return figures.adapt_figure(data.get("trials", [])), "\n\n".join(lines)


def poll_adapt(studio: Studio, job_id: str | None, seen: Any) -> tuple[Any, ...]:
    """Timer tick: (status html, chart, checksum markdown, timer, seen)."""
    return jp.poll(studio.jobs, job_id, seen, 2, lambda job: adapt_view(job.snapshot()))


# ---- layout and wiring ------------------------------------------------------------------------------
def build_adapt_tab(studio: Studio, run_id: gr.State) -> dict[str, Any]:
    """Components and wiring of the Adapt tab. Returns its `panel` and `refresh`."""
    gr.Markdown("Adapt a trained checkpoint to a task it was **not** trained on: trial 0 plays without "
                "memory (the baseline), later trials retrieve the tips written by earlier ones. "
                "The weights stay frozen — the adapter checksum is shown before and after. Tasks no shipped "
                "adapter trained on (by name) come first; on the trap they share their goals with the search "
                "family the adapters trained on, in other layouts.")
    with gr.Row():
        checkpoint = gr.Dropdown(label="Checkpoint", choices=[], elem_id="ad-checkpoint")
        task = gr.Dropdown(label="Unseen task", choices=[], elem_id="ad-task")
        trials = gr.Number(5, label=f"Trials K (1–{MAX_TRIALS})", precision=None, elem_id="ad-trials")
        start = gr.Button("▶ Adapt", variant="primary", elem_id="ad-start")
        stop = gr.Button("■ Stop", elem_id="ad-stop")
    panel = JobPanel.create("ad")
    chart = gr.Plot(figures.adapt_figure([]), show_label=False, elem_id="ad-chart")
    checksum = gr.Markdown(elem_id="ad-checksum")
    panel.on_start(start.click, partial(start_adapt, studio), [run_id, checkpoint, task, trials])
    panel.on_poll(partial(poll_adapt, studio), [chart, checksum])
    panel.on_stop(stop, studio.jobs)

    def refresh(rid: str) -> dict[Any, Any]:
        """The session's checkpoints (newest preselected) and its env's other tasks."""
        ckpts, tasks = checkpoint_choices(studio, rid), task_choices(studio, rid)
        return {checkpoint: gr.Dropdown(choices=ckpts, value=ckpts[1][1] if len(ckpts) > 1 else "current"),
                task: gr.Dropdown(choices=tasks, value=tasks[0][1] if tasks else None)}  # fmt: skip

    return {"panel": panel, "checkpoint": checkpoint, "task": task, "refresh": (refresh, [checkpoint, task])}
