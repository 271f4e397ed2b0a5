"""The Train tab: the session's training knobs, Start / Stop, the training charts, and Distill now.

Handlers first (plain functions), then the tab's layout and wiring (`build_train_tab`). A form that
differs from the session's config (other than the iteration count) trains a new session with that
config, so every session's config.json says what trained it; the page then switches to it.
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Sequence

import gradio as gr

from empo2_studio.app import figures, workers
from empo2_studio.app import job_panel as jp
from empo2_studio.app.handlers import user_errors
from empo2_studio.app.job_panel import JobPanel
from empo2_studio.config import LOW_PROB_RULES, RunConfig

if TYPE_CHECKING:
    from empo2_studio.app.studio import Studio

TRAIN_FIELDS: tuple[tuple[str, str], ...] = (
    ("rollout", "p_memory"), ("rollout", "q_off_policy"), ("rollout", "group_size"),
    ("policy", "lora_r"), ("policy", "lora_alpha"), ("train", "learning_rate"),
    ("algo", "low_prob_mask"), ("algo", "low_prob_threshold"), ("algo", "intrinsic_coef"),
    ("train", "iterations"),
)  # fmt: skip
"""The run-config fields the Train form edits, in form order."""


def config_form_values(studio: Studio, run_id: str) -> list[Any]:
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
def start_training(studio: Studio, run_id: str, *values: Any) -> tuple[Any, ...]:
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


def train_charts(studio: Studio, run_id: str) -> list[Any]:
    """The Train tab's five figures from the session's metrics.jsonl."""
    return figures.train_figures(studio.session(run_id).metrics())


def poll_training(studio: Studio, job_id: str | None, seen: Any, run_id: str) -> tuple[Any, ...]:
    """Timer tick: (status html, 5 figures…, timer, seen)."""
    return jp.poll(studio.jobs, job_id, seen, 5, lambda job: train_charts(studio, run_id))


def distill_choices(studio: Studio, run_id: str) -> list[tuple[str, str]]:
    """Memory episodes of the session (the ones distillation learns from), newest first."""
    eps = [e for e in studio.session(run_id).episodes() if e.rollout_mode == "memory"]
    eps.sort(key=lambda e: -e.created_at)
    return [(f"{e.task} v{e.variation} · score {e.score:g} · {e.episode_id}", e.episode_id) for e in eps]


@user_errors
def start_distill(studio: Studio, run_id: str, episode_ids: Sequence[str] | None) -> tuple[Any, ...]:
    """Start one distillation update on the picked episodes. Returns `job_panel.started(job)`."""
    if not episode_ids:
        raise ValueError("pick at least one memory episode to distill")
    ids = list(episode_ids)
    valid = [episode_id for _, episode_id in distill_choices(studio, run_id)]
    unknown = [i for i in ids if i not in valid]
    if unknown:
        shown = ", ".join(valid[:5]) + (f" … ({len(valid)} in all)" if len(valid) > 5 else "")
        raise ValueError(f"not a memory episode of session {run_id!r}: {', '.join(map(repr, unknown))}; "
                         f"valid: {shown or 'none yet (play a memory episode first)'}")  # fmt: skip
    job = studio.jobs.start("distill", lambda j: workers.distill(studio, j, run_id=run_id, episode_ids=ids),
                            label=f"distill {len(ids)} episode(s)", run_id=run_id)
    return jp.started(job)


# ---- layout and wiring ------------------------------------------------------------------------------
def _form() -> list[Any]:
    """The form's components in `TRAIN_FIELDS` order."""
    # Number boxes carry no min/max: out-of-range values reach the config's validation, whose message
    # names the field and the valid range (Gradio's own says only "Value 1 is less than minimum value 2").
    with gr.Row():
        p_memory = gr.Slider(0, 1, step=0.05, label="p (memory rollout probability)", elem_id="tr-p")
        q_off = gr.Slider(0, 1, step=0.01, label="q (off-policy | memory)", elem_id="tr-q")
        group = gr.Number(label="Group size N", precision=None, elem_id="tr-group")
        lora_r = gr.Number(label="LoRA rank", precision=None, elem_id="tr-lora-r")
        lora_alpha = gr.Number(label="LoRA alpha", precision=None, elem_id="tr-lora-alpha")
    with gr.Row():
        lr = gr.Number(label="Learning rate", elem_id="tr-lr")
        mask = gr.Dropdown(list(LOW_PROB_RULES), label="Low-prob masking rule", elem_id="tr-mask")
        delta = gr.Number(label="δ (log-prob threshold ≤ 0)", elem_id="tr-delta")
        intrinsic = gr.Number(label="Intrinsic reward coef", elem_id="tr-intrinsic")
        iterations = gr.Number(label="Iterations", precision=None, elem_id="tr-iterations")
    by_field = {("rollout", "p_memory"): p_memory, ("rollout", "q_off_policy"): q_off, ("rollout", "group_size"): group,
                ("policy", "lora_r"): lora_r, ("policy", "lora_alpha"): lora_alpha, ("train", "learning_rate"): lr,
                ("algo", "low_prob_mask"): mask, ("algo", "low_prob_threshold"): delta,
                ("algo", "intrinsic_coef"): intrinsic, ("train", "iterations"): iterations}  # fmt: skip
    return [by_field[f] for f in TRAIN_FIELDS]


def build_train_tab(studio: Studio, run_id: gr.State) -> dict[str, Any]:
    """Components and wiring of the Train tab. Returns its `panel`, `form`, `plots`, `distill_ids`,
    `refresh` and `switched` (wires what follows a start that created a new session)."""
    gr.Markdown("Changing anything but *Iterations* starts a **new session** with that config "
                "(each session's config.json is what trained it). The LoRA rank and alpha are fixed "
                "while the studio runs (one loaded model); the env and step limit are the session's.")
    form = _form()
    with gr.Row():
        start = gr.Button("▶ Start training", variant="primary", elem_id="tr-start")
        stop = gr.Button("■ Stop", elem_id="tr-stop")
    panel = JobPanel.create("tr")
    with gr.Row():
        plots = [gr.Plot(show_label=False, elem_id=e) for e in ("tr-score", "tr-loss", "tr-clip")]
    with gr.Row():
        plots += [gr.Plot(show_label=False, elem_id=e) for e in ("tr-mask-frac", "tr-tips")]
    with gr.Accordion("Distill now (curate tips → run memory episodes → distill)", open=True):
        with gr.Row():
            distill_ids = gr.Dropdown(label="Memory episodes to distill", multiselect=True, choices=[],
                                      elem_id="tr-distill-ids", scale=4)
            distill = gr.Button("Distill now", elem_id="tr-distill")

    started = panel.on_start(start.click, partial(start_training, studio), [run_id, *form], run_id)
    panel.on_start(distill.click, partial(start_distill, studio), [run_id, distill_ids])
    polled = panel.on_poll(partial(poll_training, studio), plots, [run_id])
    panel.on_stop(stop, studio.jobs)

    def refresh(rid: str) -> dict[Any, Any]:
        """The session's config in the form, its charts and its memory episodes."""
        # both follow `TRAIN_FIELDS` / `figures.train_figures`; strict: a changed count fails here
        return {**dict(zip(form, config_form_values(studio, rid), strict=True)),
                **dict(zip(plots, train_charts(studio, rid), strict=True)),
                distill_ids: gr.Dropdown(choices=distill_choices(studio, rid), value=[])}  # fmt: skip

    def switched(fn: Callable[[str], dict[Any, Any]], outputs: list[Any]) -> None:
        started.then(fn, [run_id], outputs)

    return {"panel": panel, "form": form, "plots": plots, "distill_ids": distill_ids,
            "refresh": (refresh, [*form, *plots, distill_ids]), "switched": switched, "polled": polled}  # fmt: skip
