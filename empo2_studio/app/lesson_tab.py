"""The Lesson tab: the studio's one phenomenon in five stages (see `empo2_studio.lesson`).

1 · naive fails in the trap; 2 · curated tips say where the target is; 3 · with the tips it succeeds;
4 · distill learns the actions taken with tips on the tip-free prompt; 5 · naive succeeds too. The
chart shows the success rate of stages 1, 3 and 5. Tasks: the trap world's, and ScienceWorld's
find-animal (`lesson.scienceworld`).

The lesson runs on its own session of the task's env, `lesson-<task>` (created on first use with this
studio's model and embedder), whatever session the page has open, so the lesson's episodes are the only
distillation baseline. *Play the lesson* opens a new one (`lesson-<task>-2`, …) when the current one has
played; the stage buttons continue the current one. Jobs run in the studio's worker threads.
"""

from __future__ import annotations

import re
import time
from functools import partial
from typing import TYPE_CHECKING, Any

import gradio as gr

from empo2_studio.app import charts
from empo2_studio.app import job_panel as jp
from empo2_studio.app.handlers import user_errors
from empo2_studio.app.job_panel import JobPanel
from empo2_studio.app.lesson_form import (
    BOXES_PER_ROW, MAX_TIP_BOXES, parse_variations, settings_from_form, task_defaults, tip_boxes, tips_from_boxes,  # noqa: F401
)  # fmt: skip
from empo2_studio.app.jobs import Job, readable_error
from empo2_studio.config import RunConfig
from empo2_studio.lesson import (
    LESSON_TASKS, PLAY_STAGES, STAGE_TITLES, STAGES, TRAP_TASKS, Lesson, LessonSettings, StageResult, lesson_countdown,
    lesson_defaults, lesson_env, lesson_seconds, minutes_text, rates_from_metrics, rates_note, results_from_metrics,
    train_variations,
)  # fmt: skip
from empo2_studio.lesson.run_config import lesson_run_config
from empo2_studio.lesson.scienceworld import SCIENCEWORLD_NOTE
from empo2_studio.lesson.timing import UNIT_NAMES

if TYPE_CHECKING:
    from empo2_studio.app.studio import Studio

TASK_CHOICES = [(f"{t} (trap)", t) for t in TRAP_TASKS] + [
    (f"{t} (ScienceWorld)", t) for t in LESSON_TASKS if t not in TRAP_TASKS]
TABLE_HEADERS = ["variation", "episodes", "successes", "success rate", "mean score"]
DISTILL_HEADERS = ["step", "loss/policy", "no signal", "grad norm", "seconds"]
TABLE_MAX_HEIGHT = 480
"""Pixels: room for a header and 10 rows, so 5 variations + "all" or 5 distill steps are never cut."""
JOB_KIND = "lesson"
LESSON_LEARNING_RATE = 2e-3
"""The lesson's LoRA learning rate for Distill now (the training default, 1e-4, barely moves the adapter
in a few steps). On 16 memory episodes of trap-light-bulb variations 0–1 (bench_lesson.py part distill,
seeds 0–2), naive success after 5 steps 0.00 → 0.44 (0.38–0.50); 3 steps at 1e-3 → 0.35."""


# ---- the lesson's own session -----------------------------------------------------------------------
def _lesson_ids(studio: Studio, task: str) -> list[tuple[int, str]]:
    """Existing lesson sessions of `task` as (k, run id), k = 1 for `lesson-<task>`."""
    pattern = re.compile(rf"^lesson-{re.escape(task)}(?:-(\d+))?$")
    found = []
    for path in studio.root.iterdir() if studio.root.is_dir() else ():
        m = pattern.match(path.name)
        if m and (path / "config.json").is_file():
            found.append((int(m.group(1) or 1), path.name))
    return sorted(found)


def current_lesson_id(studio: Studio, task: str) -> str:
    """The task's newest lesson session id (`lesson-<task>` when there is none yet)."""
    found = _lesson_ids(studio, task)
    return found[-1][1] if found else f"lesson-{task}"


def lesson_config(studio: Studio, task: str, run_id: str) -> RunConfig:
    """Config of a new lesson session (`lesson.run_config.lesson_run_config` of the launch session's)."""
    return lesson_run_config(studio.session(studio.default_run_id).config, task, run_id, LESSON_LEARNING_RATE)


def lesson_session(studio: Studio, task: str, *, fresh: bool = False) -> Any:
    """Open (or create) the task's current lesson session; with `fresh`, a new one when the current
    one has already played episodes (so the lesson starts from the warm start, nothing distilled)."""
    name = lesson_env(task)
    run_id = current_lesson_id(studio, task)
    if (studio.root / run_id / "config.json").is_file():
        session = studio.session(run_id)
        if session.config.env.name != name:
            raise ValueError(f"session {run_id!r} is not a {name} session; rename or remove it")
        if not fresh or not session.episodes():
            return session
        found = _lesson_ids(studio, task)
        run_id = f"lesson-{task}-{found[-1][0] + 1}"
    return studio.create_session(lesson_config(studio, task, run_id))


# ---- starting and polling ---------------------------------------------------------------------------
@user_errors
def start_lesson(
    studio: Studio, stage: str, task: str, variations: Any, episodes: Any, distill_steps: Any, *tips: Any
) -> tuple[Any, ...]:
    """Start the whole lesson (`stage` "all") or one stage as a job. Returns
    `job_panel.started(job, lesson run id, session markdown)`."""
    if stage != "all" and stage not in STAGES:
        raise ValueError(f"unknown lesson stage {stage!r}; valid: all, {', '.join(STAGES)}")
    if studio.jobs.running(JOB_KIND):
        raise ValueError("a lesson is already running; stop it first")
    settings = settings_from_form(task, variations, episodes, distill_steps)
    texts = tips_from_boxes(settings.variations, tips)
    if stage in ("all", "tips"):
        for v, text in texts.items():
            if not text.strip():
                raise ValueError(f"the tip of variation {v} is empty; write one (or pick the variations again to refill it)")
    session = lesson_session(studio, task, fresh=stage == "all")
    run_id = session.dir.name
    studio.check_compatible(session.config)
    label = "the lesson" if stage == "all" else STAGE_TITLES[stage]
    job = studio.jobs.start(JOB_KIND, lambda j: run_lesson_job(studio, j, run_id=run_id, settings=settings,
                                                                 stage=stage, tips=texts),
                            label=f"{label} on {run_id}", run_id=run_id)  # fmt: skip
    job.update(lesson_run_id=run_id, lesson_stage=stage, lesson_task=task)
    return jp.started(job, run_id, session_markdown(studio, run_id, task))


def measured_rates(studio: Studio, env: str = "trap") -> dict[str, float]:
    """Seconds per unit measured by this machine's lessons in `env` (`lesson.timing.rates_from_metrics`
    over those lesson sessions of the studio, oldest first, so the newest measurement wins)."""
    rows: list[dict] = []
    tasks = [t for t in LESSON_TASKS if lesson_env(t) == env]
    sessions = [run_id for task in tasks for _, run_id in _lesson_ids(studio, task)]
    for run_id in sorted(sessions, key=lambda r: (studio.root / r / "metrics.jsonl").stat().st_mtime
                         if (studio.root / r / "metrics.jsonl").is_file() else 0.0):  # fmt: skip
        rows += [r for r in studio.session(run_id).metrics() if r.get("kind") == "lesson"]
    return rates_from_metrics(rows)


def run_lesson_job(
    studio: Studio, job: Job, *, run_id: str, settings: LessonSettings, stage: str, tips: dict[int, str]
) -> list[dict]:
    """Job body: the lesson (or one stage) on the session's trainer. `job.data["results"]` holds
    stage → StageResult dict: each finished stage, and the running stage's rows so far (each
    variation's row, each distill step, as soon as it is computed; `running` True)."""
    job.update(message="preparing the trainer")
    t0 = time.perf_counter()
    lesson = Lesson(studio.trainer(run_id), settings, rates=measured_rates(studio, lesson_env(settings.task)))
    timed = [st for st in STAGES if st in UNIT_NAMES and stage in ("all", st)]  # the stages that take time
    if timed:  # the same figures as the tab's expected time (`time_hint`), counted down as units end
        lesson.countdown = job.countdown = lesson_countdown(len(settings.variations), settings.episodes,
                                                            settings.distill_steps, lesson.rates, timed)  # fmt: skip
    results: list[StageResult] = []

    def show(result: StageResult) -> None:
        done = dict(job.snapshot().get("results", {}))
        done[result.stage] = result.to_dict()
        job.update(results=done)

    def on_stage(result: StageResult) -> None:
        results.append(result)
        show(result)

    def progress(fraction: float, message: str) -> None:
        job.update(progress=fraction, message=message)

    if stage == "all":
        lesson.run_all(tips, stop=job.stop_event, progress=progress, on_stage=on_stage, on_partial=show)
    else:
        job.update(stage=stage)

        def staged(fraction: float, message: str) -> None:
            progress(fraction, f"{STAGE_TITLES[stage]}: {message}")

        on_stage(lesson.run_stage(stage, tips, stop=job.stop_event, progress=staged, on_partial=show))
    last = results[-1] if results else None
    summary = " · ".join(_stage_summary(r) for r in results) or "nothing played"
    took = minutes_text(time.perf_counter() - t0)
    if job.stop_requested:  # what ran and what the session kept: rows of finished groups and steps, checkpoints
        cut = f"stopped during {STAGE_TITLES[last.stage]}" if last is not None and last.stopped else "stopped"
        kept = f"{run_id} keeps the finished groups and steps" if results else "nothing saved"
        ckpt = next((r.checkpoint for r in results if r.checkpoint), "")
        ckpt = f" and the checkpoint {ckpt.rsplit('/', 1)[-1]}" if ckpt else ""
        job.update(message=f"{cut} after {took}: {summary} · {kept}{ckpt}")
        return [r.to_dict() for r in results]
    job.update(progress=1.0 if last is not None else job.progress, message=f"{run_id}: {summary} · {took} in all")
    return [r.to_dict() for r in results]


def _stage_summary(result: StageResult) -> str:
    title = STAGE_TITLES[result.stage]
    if result.stage in PLAY_STAGES:
        return f"{title} {result.success_rate:.0%}"
    if result.stage == "distill":
        flat = result.steps and all(s.get("train/no_signal") for s in result.steps)
        return f"{title} ×{len(result.steps)}" + (" (no learning signal: every return equal)" if flat else "")
    return f"{title} ({len(result.tips)} stored)"


def stage_table(result: StageResult | None) -> list[list[Any]]:
    """A stage's table rows as plain JSON values: per variation [variation, episodes, successes,
    success rate "50%", mean score] (and an "all" row for several variations) for a playing stage;
    per step [step, loss/policy, no signal "yes"/"no", grad norm, seconds] for the distill stage."""
    if result is None:
        return []
    if result.stage == "distill":
        return [[int(s.get("step", 0)), round(s.get("loss/policy", 0.0), 5), "yes" if s.get("train/no_signal") else "no",
                 round(s.get("grad/norm", 0.0), 4), round(s["seconds"], 1) if "seconds" in s else ""]
                for s in result.steps]  # fmt: skip
    rows: list[list[Any]] = [[x.variation, x.episodes, x.successes, f"{x.success_rate:.0%}", round(x.mean_score, 1)]
                             for x in result.rows]  # fmt: skip
    if len(result.rows) > 1:
        rows.append(["all", result.episodes, sum(x.successes for x in result.rows), f"{result.success_rate:.0%}",
                     round(result.mean_score, 1)])  # fmt: skip
    return rows


def lesson_view(results: dict[str, StageResult]) -> tuple[Any, ...]:
    """(naive table, memory table, naive-again table, distill table, chart) of the stages played."""
    tables = [gr.Dataframe(value=stage_table(results.get(stage)), headers=TABLE_HEADERS) for stage in PLAY_STAGES]
    tables.append(gr.Dataframe(value=stage_table(results.get("distill")), headers=DISTILL_HEADERS))
    bars = [{"stage": s, "title": STAGE_TITLES[s], "success_rate": results[s].success_rate, "successes":
             sum(x.successes for x in results[s].rows), "episodes": results[s].episodes,
             "mean_score": results[s].mean_score} for s in PLAY_STAGES
            if s in results and results[s].episodes]  # a stage stopped before any episode ended draws no bar  # fmt: skip
    return (*tables, charts.lesson_figure(bars))


def _results_of(data: dict[str, Any]) -> dict[str, StageResult]:
    return {k: StageResult.from_dict(v) for k, v in data.get("results", {}).items()}


def poll_lesson(studio: Studio, job_id: str | None, seen: Any) -> tuple[Any, ...]:
    """Timer tick: (status html, 4 tables, chart, session markdown, timer, seen). Stages the
    job has not played show the session's earlier results; the session line is renewed at the end."""

    def draw(job: Job) -> tuple[Any, ...]:
        data = job.snapshot()
        results = {**_saved_results(studio, job), **_results_of(data)}
        run_id = data.get("lesson_run_id")
        task = data["lesson_task"] if data.get("lesson_task") in LESSON_TASKS else TRAP_TASKS[0]
        return (*lesson_view(results), session_markdown(studio, run_id, task) if job.finished and run_id else gr.skip())

    return jp.poll(studio.jobs, job_id, seen, 6, draw)


def _saved_results(studio: Studio, job: Job) -> dict[str, StageResult]:
    """For a single-stage job: the other stages as the session's metrics last recorded them."""
    run_id = job.data.get("lesson_run_id") or job.run_id
    if not run_id or job.data.get("lesson_stage") == "all":
        return {}
    try:
        session = studio.session(run_id)
    except KeyError:
        return {}
    return results_from_metrics(session.metrics(), session.config.env.task)


def session_line(studio: Studio, run_id: str, task: str = TRAP_TASKS[0]) -> str:
    """The lesson session line of `task`: which session, env and weights."""
    env = lesson_env(task)
    exists = (studio.root / run_id / "config.json").is_file()
    where = f"`{run_id}`" if exists else f"`{run_id}` (created when the lesson starts)"
    ckpt = studio.session(run_id).latest_checkpoint() if exists else None
    weights = f"distilled weights of iteration {ckpt[0]}" if ckpt else "the warm start (nothing distilled)"
    note = SCIENCEWORLD_NOTE if env == "scienceworld" else ""
    return f"**Lesson session** {where} · {env} env · {weights}{note}"


def session_markdown(studio: Studio, run_id: str, task: str = TRAP_TASKS[0], settings: LessonSettings | None = None) -> str:
    """`session_line`, and the time its lesson (`settings`; None: the default one) is expected to take here."""
    rates = measured_rates(studio, lesson_env(task))
    return f"{session_line(studio, run_id, task)}\n\n{time_hint(rates, task, settings)}"


def time_hint(rates: dict[str, float], task: str = TRAP_TASKS[0], settings: LessonSettings | None = None) -> str:
    """How long the lesson of `settings` (None: `task`'s default one, `lesson_defaults`) takes on this
    machine, and where that figure comes from."""
    d = settings or lesson_defaults(task)
    which = "the lesson as set" if settings is not None else "the default lesson"
    seconds = lesson_seconds(len(d.variations), d.episodes, d.distill_steps, rates)
    return (f"**Expected time** of {which} ({len(d.variations)} variations, {d.episodes} episodes each, "
            f"{d.distill_steps} distill steps): {minutes_text(seconds)}, from {rates_note(rates, lesson_env(task))}. "
            "While it runs, the status line shows the elapsed time and counts the time left down from these "
            "figures, then from each step as it is measured.")  # fmt: skip


def lesson_form_time(studio: Studio, task: str | None, variations: Any, episodes: Any, distill_steps: Any) -> str:
    """The session line with the expected time of the lesson the form describes (a form value changed),
    or what is wrong with a value in place of the time."""
    task = task if task in LESSON_TASKS else TRAP_TASKS[0]
    run_id = current_lesson_id(studio, task)
    try:
        settings = settings_from_form(task, variations, episodes, distill_steps)
    except ValueError as exc:  # a half-typed form: say so, no error popup
        return f"{session_line(studio, run_id, task)}\n\n**Expected time**: — ({readable_error(exc)})"
    return session_markdown(studio, run_id, task, settings)


@user_errors
def lesson_opened(studio: Studio, task: str | None, variations: Any) -> tuple[Any, ...]:
    """Task picked / page loaded: (session markdown, 4 tip boxes, 4 tables, chart) from the task's
    current lesson session (its last recorded stages)."""
    task = task if task in LESSON_TASKS else TRAP_TASKS[0]
    run_id = current_lesson_id(studio, task)
    results: dict[str, StageResult] = {}
    if (studio.root / run_id / "config.json").is_file():
        results = results_from_metrics(studio.session(run_id).metrics(), task)
    return (session_markdown(studio, run_id, task), *tip_boxes(task, variations), *lesson_view(results))


# ---- the tab -----------------------------------------------------------------------------------------
INTRO = (
    "**The lesson.** An agent in the exploration trap focuses on the look-alike it can see and fails "
    "(in the trap world, or in ScienceWorld's find-animal, whose animals are all outside). "
    "A curated tip saying where the target is rescues it; distillation then trains the actions it took "
    "*with* the tip on the prompt *without* it, so the naive agent succeeds too. "
    "Stages: **1** naive episodes → **2** store the tips below → **3** episodes with the tips → "
    "**4** distill → **5** naive episodes again. The memory episodes write no tips of their own: the "
    "tips you store here are the only memory. The lesson runs on its own session "
    "(`lesson-<task>`), whatever session this page has open; "
    "*Play the lesson* starts from the shipped warm start (no lesson distilled) in a new lesson session "
    "when the current one has already played. Rows appear as they are computed: each variation's, each distill step's."
)


def build_lesson_tab(studio: Studio) -> dict[str, Any]:
    """Components and wiring of the Lesson tab. Returns its load hooks for `layout.build_blocks`."""
    gr.Markdown(INTRO, elem_id="ls-intro")
    with gr.Row():
        task = gr.Dropdown(TASK_CHOICES, value=TRAP_TASKS[0], label="Task", elem_id="ls-task")
        first = lesson_defaults(TRAP_TASKS[0])
        variations = gr.Dropdown([str(v) for v in train_variations(first.task)], value=[str(v) for v in first.variations],
                                 multiselect=True, label=f"Variations (train, ≤ {MAX_TIP_BOXES})", elem_id="ls-variations")  # fmt: skip
        episodes = gr.Number(first.episodes, label="Episodes per variation", precision=None, elem_id="ls-episodes")
        distill_steps = gr.Number(LessonSettings().distill_steps, label="Distill steps", precision=None, elem_id="ls-distill-steps")
    session_md = gr.Markdown(elem_id="ls-session")
    gr.Markdown("**Curated tips** (stage 2 stores exactly what these boxes say; pre-filled with where the "
                "target is and the winning actions)")
    boxes = []
    for row in range(0, MAX_TIP_BOXES, BOXES_PER_ROW):
        with gr.Row():
            boxes += [gr.Textbox(label=f"Tip for variation {i}", lines=3, visible=i < 2, elem_id=f"ls-tip-{i}")
                      for i in range(row, row + BOXES_PER_ROW)]  # fmt: skip
    with gr.Row():
        play = gr.Button("▶ Play the lesson", variant="primary", elem_id="ls-play", scale=2)
        stage_buttons = {stage: gr.Button(STAGE_TITLES[stage], elem_id=f"ls-stage-{stage}", size="sm")
                         for stage in STAGES}  # fmt: skip
        stop = gr.Button("■ Stop", elem_id="ls-stop")
    panel = JobPanel.create("ls")
    with gr.Row(equal_height=False):
        with gr.Column():
            chart = gr.Plot(show_label=False, elem_id="ls-chart")
        with gr.Column():
            shown = {}
            for stage in ("naive", "memory", "distill", "naive_again"):  # in stage order on the page
                shown[stage] = gr.Dataframe(
                    headers=DISTILL_HEADERS if stage == "distill" else TABLE_HEADERS, value=[],
                    label=STAGE_TITLES[stage], interactive=False, elem_id=f"ls-table-{stage}", max_height=TABLE_MAX_HEIGHT,
                )  # fmt: skip
            tables = [shown[stage] for stage in (*PLAY_STAGES, "distill")]  # the order `lesson_view` returns
    lesson_rid = gr.State(None)

    form = [task, variations, episodes, distill_steps, *boxes]
    panel.on_start(play.click, partial(start_lesson, studio, "all"), form, lesson_rid, session_md)
    for stage, button in stage_buttons.items():
        panel.on_start(button.click, partial(start_lesson, studio, stage), form, lesson_rid, session_md)
    panel.on_poll(partial(poll_lesson, studio), [*tables, chart, session_md])
    panel.on_stop(stop, studio.jobs)
    opened_outputs = [session_md, *boxes, *tables, chart]
    # The start buttons, and the picks themselves, wait while a pick refills the tip boxes (a ScienceWorld
    # tip reads the simulator's gold path, seconds): a ▶ Play clicked meanwhile read empty boxes and was
    # refused ("the tip of variation 30 is empty"), walkthrough of 2026-12-07; a second pick meanwhile would
    # give the buttons back before its own refill. `then`, not `success`: they come back either way.
    starts = [play, *stage_buttons.values(), task, variations]
    hold = (lambda: [gr.update(interactive=False)] * len(starts), None, starts)
    release = (lambda: [gr.update(interactive=True)] * len(starts), None, starts)
    task.input(*hold, show_progress="hidden").then(task_defaults, [task], [variations, episodes]).then(
        partial(lesson_opened, studio), [task, variations], opened_outputs).then(*release, show_progress="hidden")
    variations.input(*hold, show_progress="hidden").then(
        lambda t, v: tip_boxes(t, v), [task, variations], boxes).then(*release, show_progress="hidden")
    for box in (variations, episodes, distill_steps):  # the expected time follows the form, as the Race tab's
        box.change(partial(lesson_form_time, studio), [task, variations, episodes, distill_steps], session_md,
                   show_progress="hidden")  # fmt: skip

    def on_load(demo: gr.Blocks) -> None:
        demo.load(partial(lesson_opened, studio), [task, variations], opened_outputs)
        panel.on_load_attach(demo, studio.jobs, (JOB_KIND,))  # any session: the lesson runs on its own

    return {"on_load": on_load, "panel": panel}
