"""The Race tab: EMPO² vs GRPO from the same untrained weights, interleaved iterations (see `race.py`).

Arm "EMPO²" trains with the open session's config, arm "GRPO" with the same config minus memory
rollouts and the novelty bonus. Each arm gets its own session (`<session>-race-empo2` / `-race-grpo`,
listed in the Sessions tab for comparison) and optimizer; both share the one loaded model, whose LoRA
weights are swapped between iterations. Stop acts after the current iteration (both arms always
have played the same number); each arm's checkpoint is saved at the end.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import gradio as gr
import pandas as pd

from empo2_studio.app import charts
from empo2_studio.app import job_panel as jp
from empo2_studio.app.handlers import user_errors, whole_number
from empo2_studio.app.job_panel import JobPanel
from empo2_studio.app.jobs import Job
from empo2_studio.race import ARM_LABELS, ARMS, Race, arm_rows_summary, lora_state

JOB_KIND = "race"
TABLE_HEADERS = ["iteration", "arm", "update mode", "success rate", "mean score", "seconds"]


def race_config(studio: Any, run_id: str, iterations: Any, group_size: Any, step_limit: Any) -> Any:
    """The EMPO² arm's config: the session's, with the form's group size, step limit and iterations
    (a blank step limit keeps the session's). ValueError names a bad value."""
    cfg = studio.session(run_id).config
    limit = cfg.env.step_limit if step_limit in (None, "") else whole_number(step_limit, "step limit", 1)
    return cfg.with_overrides(
        rollout={"group_size": whole_number(group_size, "group size", 2)}, env={"step_limit": limit},
        train={"iterations": whole_number(iterations, "iterations", 1)},
    ).validate()  # fmt: skip


def race_defaults(studio: Any, run_id: str) -> tuple[int, int, Any]:
    """(iterations, group size, step limit) shown for the session: 2 iterations, its group size and step limit."""
    cfg = studio.session(run_id).config
    return 2, cfg.rollout.group_size, cfg.env.step_limit


@user_errors
def start_race(studio: Any, run_id: str, iterations: Any, group_size: Any, step_limit: Any) -> tuple[Any, ...]:
    """Start the race as a job. Returns `job_panel.started(job)`."""
    if studio.jobs.running(JOB_KIND):
        raise ValueError("a race is already running; stop it first")
    cfg = race_config(studio, run_id, iterations, group_size, step_limit)
    studio.check_compatible(cfg)
    n = cfg.train.iterations
    job = studio.jobs.start(JOB_KIND, lambda j: run_race_job(studio, j, run_id=run_id, cfg=cfg, iterations=n),
                            label=f"race EMPO² vs GRPO on {run_id}", run_id=run_id)  # fmt: skip
    return jp.started(job)


def run_race_job(studio: Any, job: Job, *, run_id: str, cfg: Any, iterations: int) -> dict[str, list[dict]]:
    """Job body: both arms from the untrained adapter, `iterations` interleaved iterations;
    `job.data["rows"]` = arm → metrics rows so far, `job.data["sessions"]` = arm → run id."""
    job.update(message="preparing the model")
    policy = studio.fresh_policy()
    race = None
    try:
        race = Race.create(studio.root, cfg, policy=policy, embedder=studio.embedder(), run_id=run_id,
                           initial_state=lora_state(policy))  # fmt: skip
        sessions = {arm: t.session.run_id for arm, t in race.trainers.items()}
        job.update(sessions=sessions, rows={arm: [] for arm in ARMS},
                   message=f"iteration 1 of {iterations} · sessions " + ", ".join(sessions.values()))

        def on_phase(arm: str, line: str) -> None:
            job.update(message=f"iteration {race.iteration + 1} of {iterations} · {ARM_LABELS.get(arm, arm)} · {line}")

        def on_iteration(done: int, reports: dict[str, Any]) -> None:
            scores = " · ".join(f"{ARM_LABELS.get(a, a)} {r.metrics.get('rollout/success_rate', 0):.0%} "
                                f"({r.metrics.get('rollout/score_mean', 0):.1f})" for a, r in reports.items())  # fmt: skip
            job.update(progress=done / iterations, rows={a: list(r) for a, r in race.rows.items()},
                       message=f"iteration {done} of {iterations} done · success (score): {scores}")

        done = race.run(iterations, stop=job.stop_event, on_iteration=on_iteration, on_phase=on_phase)
        job.update(message=f"{done} iteration(s) per arm · checkpoints saved in " + ", ".join(sessions.values()))
        return {a: list(r) for a, r in race.rows.items()}
    finally:
        if race is not None:
            race.close()
        studio.fresh_policy()  # leave the shared model as the studio expects it ("fresh")


def race_view(data: dict[str, Any]) -> tuple[Any, Any]:
    """(chart, table) from a race job's data."""
    rows = data.get("rows", {})
    frame = pd.DataFrame(arm_rows_summary(rows), columns=TABLE_HEADERS)
    return charts.race_figure(rows, ARM_LABELS), frame


def poll_race(studio: Any, job_id: str | None, seen: int) -> tuple[Any, ...]:
    """Timer tick: (status html, chart, table, timer, seen version)."""
    return jp.poll(studio.jobs, job_id, seen, 2, lambda job: race_view(job.snapshot()))


INTRO = (
    "**EMPO² vs GRPO.** Two runs from the same untrained weights, trained side by side with interleaved "
    "iterations: **EMPO²** with this session's config, **GRPO** the same without memory rollouts "
    "(p = 0) and without the novelty bonus. Each arm has its own session (`<session>-race-empo2`, "
    "`-race-grpo`: compare them in the Sessions tab) and optimizer; they share the one loaded model, "
    "whose LoRA weights are swapped between iterations. Stop acts after the current iteration. "
    "On a CPU with the embedded model an iteration takes minutes: try group 2, step limit 4, 1 iteration."
)


def build_race_tab(studio: Any, run_id: gr.State) -> dict[str, Any]:
    """Components and wiring of the Race tab."""
    gr.Markdown(INTRO, elem_id="rc-intro")
    iterations0, group0, limit0 = race_defaults(studio, studio.default_run_id)
    with gr.Row():
        iterations = gr.Number(iterations0, label="Iterations", precision=0, elem_id="rc-iterations")
        group = gr.Number(group0, label="Group size N", precision=0, elem_id="rc-group")
        limit = gr.Number(limit0, label="Step limit (blank = the task's)", precision=0, elem_id="rc-step-limit")
        start = gr.Button("▶ Start the race", variant="primary", elem_id="rc-start")
        stop = gr.Button("■ Stop after this iteration", elem_id="rc-stop")
    panel = JobPanel.create("rc")
    chart = gr.Plot(show_label=False, elem_id="rc-chart")
    table = gr.Dataframe(headers=TABLE_HEADERS, value=[], interactive=False, label="Per iteration",
                         elem_id="rc-table", max_height=260)  # fmt: skip
    panel.on_start(start.click, partial(start_race, studio), [run_id, iterations, group, limit])
    panel.on_poll(partial(poll_race, studio), [chart, table])
    panel.on_stop(stop, studio.jobs)

    def refresh(rid: str) -> dict[Any, Any]:
        """A session switch: that session's group size and step limit (the iteration count is kept)."""
        _, g, s = race_defaults(studio, rid)
        return {group: gr.Number(value=g), limit: gr.Number(value=s)}

    return {"panel": panel, "refresh": (refresh, [group, limit])}
