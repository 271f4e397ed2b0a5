"""Handlers of the Episodes, Train and Adapt tabs: plain functions, values in, values/updates out.

Every handler takes the `Studio` first (bound with functools.partial in `layout.py`) and the widget
values after it. Handlers that start work return a job id at once (the job runs in a worker
thread); `poll_*` handlers render a job's live data for a `gr.Timer` tick, and return `gr.skip()`
for outputs that have not changed; both keep the return convention of `job_panel` (status first). Bad input raises `gr.Error` with a readable message; nothing
is changed in that case.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import replace
from typing import Any, Callable, Sequence

import gradio as gr

from empo2_studio.app import charts, render, workers
from empo2_studio.app import job_panel as jp
from empo2_studio.app.jobs import readable_error
from empo2_studio.config import RunConfig

SPLITS = ("train", "dev", "test")
MAX_VARIATION_CHOICES = 200


def whole_number(value: Any, what: str, minimum: int | None = None) -> int:
    """A form value (a number, or its text) as an int. ValueError naming `what` and the value when it
    is empty, not a number, fractional (1.5 is not rounded) or below `minimum`."""
    bound = "" if minimum is None else f" ≥ {minimum}"
    if value is None or not str(value).strip():
        raise ValueError(f"{what} is empty; enter a whole number{bound}")
    try:
        number = float(str(value).strip())
    except ValueError:
        number = math.nan
    if not number.is_integer() or (minimum is not None and number < minimum):
        raise ValueError(f"{what} must be a whole number{bound}, got {value!r}")
    return int(number)


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn ValueError/KeyError/RuntimeError/OSError into `gr.Error` (a readable toast, no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except (ValueError, KeyError, RuntimeError, OSError, TypeError) as exc:
            raise gr.Error(readable_error(exc)) from exc

    return wrapper


# ---- Episodes tab ---------------------------------------------------------------------------------
@user_errors
def env_changed(studio: Any, env_name: str, split: str, run_id: str | None = None) -> tuple[Any, Any]:
    """New env picked: its task list (the session's task preselected when it belongs to this env,
    else the first), and that task's variations in `split`."""
    tasks = list(studio.meta_env(env_name).task_names())
    own = studio.session(run_id).config.env.task if run_id else None
    task = own if own in tasks else (tasks[0] if tasks else None)
    return gr.Dropdown(choices=tasks, value=task), task_changed(studio, env_name, task, split)


@user_errors
def task_changed(studio: Any, env_name: str, task: str | None, split: str) -> Any:
    """Variation choices of `task` in `split`, labelled with the split ("3 · train")."""
    if not task:
        return gr.Dropdown(choices=[], value=None)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    variations = list(studio.meta_env(env_name).variations(task, split))[:MAX_VARIATION_CHOICES]
    choices = [(f"{v} · {split}", v) for v in variations]
    return gr.Dropdown(choices=choices, value=variations[0] if variations else None)


def checkpoint_choices(studio: Any, run_id: str) -> list[tuple[str, str]]:
    """("current weights", "current") then every checkpoint of the session, newest first."""
    found = sorted(studio.session(run_id).checkpoints(), reverse=True)
    return [("current weights", "current")] + [(f"iteration {it}", str(path)) for it, path in found]


@user_errors
def start_side_by_side(
    studio: Any, run_id: str, env_name: str, task: str, variation: Any, split: str,
    seed: Any, temperature: Any, checkpoint: str | None,
) -> tuple[str, str, Any, int]:  # fmt: skip
    """Validate the picks and start a side-by-side job. Returns `job_panel.started(job)`."""
    if not task:
        raise ValueError("pick a task first")
    if variation is None or variation == "":
        raise ValueError(f"pick a variation of {task!r} ({split} split)")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    temperature = float(temperature)
    if not 0.0 < temperature <= 10.0:
        raise ValueError(f"temperature must be in (0, 10], got {temperature}")
    kwargs = dict(run_id=run_id, env_name=env_name, task=task, variation=int(variation), split=split,
                  seed=int(seed), temperature=temperature, checkpoint=checkpoint)
    job = studio.jobs.start("episodes", lambda j: workers.side_by_side(studio, j, **kwargs),
                            label=f"side by side {task} v{variation}", run_id=run_id)
    return jp.started(job)


def side_by_side_view(data: dict[str, Any]) -> tuple[str, str, Any]:
    """(naive column html, memory column html, score chart) from a side-by-side job's data."""
    naive_steps, memory_steps = data.get("naive", []), data.get("memory", [])
    finished = data.get("episodes") or (None, None)
    header = data.get("header", "")
    fig = charts.episode_scores_figure(
        {"naive": [s.score for s in naive_steps], "memory": [s.score for s in memory_steps]}
    )
    return (
        render.column_html("naive", naive_steps, header=header, finished=finished[0]),
        render.column_html("memory", memory_steps, header=header, finished=finished[1]),
        fig,
    )


def poll_side_by_side(studio: Any, job_id: str | None, seen: int) -> tuple[Any, ...]:
    """Timer tick: (status, naive html, memory html, chart, timer, seen version)."""
    return jp.poll(studio.jobs, job_id, seen, 3, lambda job: side_by_side_view(job.snapshot()))


def saved_pairs(studio: Any, run_id: str) -> list[tuple[str, str]]:
    """Saved side-by-side pairs of the session, newest first: (label, group id)."""
    pairs: dict[str, list[Any]] = {}
    for ep in studio.session(run_id).episodes():
        if ep.group_id.startswith("side-"):
            pairs.setdefault(ep.group_id, []).append(ep)
    out = []
    for gid, eps in sorted(pairs.items(), key=lambda kv: -kv[1][0].created_at):
        by = {e.rollout_mode: e for e in eps}
        n, m = by.get("naive"), by.get("memory")
        scores = [f"{side} {ep.score:g}" if ep else f"{side} –" for side, ep in (("naive", n), ("memory", m))]
        label = f"{eps[0].task} v{eps[0].variation} seed {eps[0].seed} · " + " · ".join(scores)
        out.append((label, gid))
    return out


@user_errors
def open_pair(studio: Any, run_id: str, group_id: str | None) -> tuple[Any, ...]:
    """Reopen a saved pair: (naive html, memory html, chart, status)."""
    if not group_id:
        raise ValueError("pick a saved episode pair")
    eps = [e for e in studio.session(run_id).episodes() if e.group_id == group_id]
    if not eps:
        raise KeyError(f"no saved episodes with id {group_id!r} in session {run_id!r}")
    by = {e.rollout_mode: e for e in eps}
    first = eps[0]
    data = {
        "naive": list(by["naive"].steps) if "naive" in by else [],
        "memory": list(by["memory"].steps) if "memory" in by else [],
        "episodes": (by.get("naive"), by.get("memory")),
        "header": f"{first.task} · variation {first.variation} ({first.split}) · seed {first.seed} · saved",
    }
    return (*side_by_side_view(data), render.progress_html(1.0, f"reopened {group_id}"))


# ---- Train tab ------------------------------------------------------------------------------------
TRAIN_FIELDS: tuple[tuple[str, str], ...] = (
    ("rollout", "p_memory"), ("rollout", "q_off_policy"), ("rollout", "group_size"),
    ("policy", "lora_r"), ("policy", "lora_alpha"), ("train", "learning_rate"),
    ("algo", "low_prob_mask"), ("algo", "low_prob_threshold"), ("algo", "intrinsic_coef"),
    ("train", "iterations"),
)  # fmt: skip
"""The run-config fields the Train form edits, in form order."""


def config_form_values(studio: Any, run_id: str) -> list[Any]:
    """Current values of `TRAIN_FIELDS` in the session's config."""
    cfg = studio.session(run_id).config
    return [getattr(getattr(cfg, section), name) for section, name in TRAIN_FIELDS]


def config_from_form(base: RunConfig, values: Sequence[Any]) -> RunConfig:
    """`base` with the form's values applied; raises ValueError naming a bad value."""
    if len(values) != len(TRAIN_FIELDS):
        raise ValueError(f"expected {len(TRAIN_FIELDS)} form values, got {len(values)}")
    overrides: dict[str, dict[str, Any]] = {}
    for (section, name), value in zip(TRAIN_FIELDS, values):
        current = getattr(getattr(base, section), name)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise ValueError(f"{section}.{name} is empty; enter a value (the session has {current!r})")
        if isinstance(current, int) and not isinstance(current, bool):
            if value is None or float(value) != int(float(value)):
                raise ValueError(f"{section}.{name} must be a whole number, got {value!r}")
            value = int(float(value))
        elif isinstance(current, float):
            value = float(value)
        overrides.setdefault(section, {})[name] = value
    return base.with_overrides(**overrides).validate()


def _same_run(a: RunConfig, b: RunConfig) -> bool:
    """Configs equal apart from the iteration count (which only says how long to train now)."""
    return a.with_overrides(train={"iterations": 1}) == b.with_overrides(train={"iterations": 1})


@user_errors
def start_training(studio: Any, run_id: str, *values: Any) -> tuple[Any, ...]:
    """Start a training job. Returns `job_panel.started(job, run_id)`: the trained session's id last.

    When the form differs from the session's config (other than the iteration count), a new session
    with the form's config is created and trained, so every session's config.json says what trained it.
    """
    if studio.jobs.running("train"):
        raise ValueError("a training job is already running; stop it first")
    session = studio.session(run_id)
    cfg = config_from_form(session.config, values)
    studio.check_compatible(cfg)
    if not _same_run(cfg, session.config):
        session = studio.create_session(_new_run(cfg, run_id))
        run_id = session.dir.name
    iterations = cfg.train.iterations
    job = studio.jobs.start("train", lambda j: workers.train(studio, j, run_id=run_id, iterations=iterations),
                            label=f"train {run_id}", run_id=run_id)
    return jp.started(job, run_id)


def _new_run(cfg: RunConfig, parent: str) -> RunConfig:
    return replace(cfg, run_id=f"{parent}-{time.strftime('%m%d-%H%M%S')}")


def train_charts(studio: Any, run_id: str) -> list[Any]:
    """The Train tab's five figures from the session's metrics.jsonl."""
    return charts.train_figures(studio.session(run_id).metrics())


def poll_training(studio: Any, job_id: str | None, seen: int, run_id: str) -> tuple[Any, ...]:
    """Timer tick: (status html, 5 figures…, timer, seen version)."""
    return jp.poll(studio.jobs, job_id, seen, 5, lambda job: train_charts(studio, run_id))


def distill_choices(studio: Any, run_id: str) -> list[tuple[str, str]]:
    """Memory episodes of the session (the ones distillation learns from), newest first."""
    eps = [e for e in studio.session(run_id).episodes() if e.rollout_mode == "memory"]
    eps.sort(key=lambda e: -e.created_at)
    return [(f"{e.task} v{e.variation} · score {e.score:g} · {e.episode_id}", e.episode_id) for e in eps]


@user_errors
def start_distill(studio: Any, run_id: str, episode_ids: Sequence[str] | None) -> tuple[Any, ...]:
    """Start one distillation update on the picked episodes. Returns `job_panel.started(job)`."""
    if not episode_ids:
        raise ValueError("pick at least one memory episode to distill")
    ids = list(episode_ids)
    job = studio.jobs.start("distill", lambda j: workers.distill(studio, j, run_id=run_id, episode_ids=ids),
                            label=f"distill {len(ids)} episode(s)", run_id=run_id)
    return jp.started(job)


# ---- Adapt tab ------------------------------------------------------------------------------------
def unseen_tasks(studio: Any, run_id: str) -> list[str]:
    """Tasks of the session's env other than the one it trains on."""
    from empo2_studio.envs import unseen_tasks as unseen

    cfg = studio.session(run_id).config
    return unseen(studio.meta_env(cfg.env.name).task_names(), cfg.env)


@user_errors
def start_adapt(studio: Any, run_id: str, checkpoint: str | None, task: str | None, trials: Any) -> tuple[Any, ...]:
    """Start an adaptation run (frozen weights, memory on). Returns `job_panel.started(job)`."""
    if not task:
        raise ValueError("pick an unseen task")
    trials = int(trials)
    if trials < 1:
        raise ValueError(f"trials must be ≥ 1, got {trials}")
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
    return charts.adapt_figure(data.get("trials", [])), "\n\n".join(lines)


def poll_adapt(studio: Any, job_id: str | None, seen: int) -> tuple[Any, ...]:
    """Timer tick: (status html, chart, checksum markdown, timer, seen version)."""
    return jp.poll(studio.jobs, job_id, seen, 2, lambda job: adapt_view(job.snapshot()))


def model_status(studio: Any) -> tuple[str, Any]:
    """Banner polled at start-up: (markdown, timer) while the model is being prepared."""
    jobs = [j for j in studio.jobs.jobs() if j.kind == "model"]
    job = jobs[-1] if jobs else None
    if job is None:
        return "", gr.Timer(active=False)
    if job.status == "failed":
        return f"**Model error:** the model could not be prepared: {job.error}", gr.Timer(active=False)
    if job.finished:
        return f"Model: {job.message}", gr.Timer(active=False)
    return f"**Preparing the model…** {job.message} ({job.progress:.0%})", gr.Timer(active=True)
