"""The Episodes tab: a naive and a memory episode of the open session's env, side by side.

Handlers first (plain functions: values in, values or updates out), then the tab's layout and wiring
(`build_episodes_tab`). The environment is always the session's: the form shows it read-only, a
session switch renews the task, variation and step-limit line (`refresh`), and `start_side_by_side`
refuses an env other than the session's even when a client sends one.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import gradio as gr

from empo2_studio.app import figures, render, workers
from empo2_studio.app.pair_memory import lesson_step_limit, memory_line, memory_when_done, offer_updates, store_tip
from empo2_studio.app import job_panel as jp
from empo2_studio.app.handlers import user_errors, whole_number
from empo2_studio.app.job_panel import JobPanel
from empo2_studio.config import EMBEDDED_MODEL
from empo2_studio.trainer import PAPER_TRAIN_VARIATIONS
from empo2_studio.types import ENV_NAMES

if TYPE_CHECKING:
    from empo2_studio.app.studio import Studio

SPLITS = ("train", "dev", "test")
MAX_VARIATION_CHOICES = 200
SCIENCEWORLD_NOTE = (
    "**ScienceWorld with the embedded 135M model.** {actions}, but on its own it rarely scores: "
    "without a tip a side-by-side pair usually ends with both columns at the same low score. The shipped note "
    "writer serves the trap only, so on find-animal (and the other find tasks) the tips a pair stores in a new "
    "session are the search record: the rooms the episode stood in and one to try next, or, once a focus scored, the "
    "whole winning plan (docs/benchmarks/sw_search.md); on other tasks, the actions that scored. A ScienceWorld "
    "session starts from an adapter fine-tuned to follow a tip that lists a task's steps and to take an object "
    "to the room and box its task names: with the plan pinned (Tips tab) it won 0.88–1.00 of its episodes on "
    "test variations of three other tasks (20 episodes; docs/benchmarks/scienceworld.md).\n\n"
    "On **find-animal** (the animals are all outside; the task does not say so) the pair offers the Lesson's "
    "tip and plays the Lesson's 10 steps. Measured with this adapter on train variations 0, 1, 5 and 10, seeds "
    "0 and 1, at T = 1.0 and 0.4 (16 pairs): the naive side never won (it picked up what was in its room and "
    "played on to the limit); the memory side read the tip, teleported outside, took the animal to the box "
    "the task names (the kitchen in 12 of them, the bathroom in 4) and won all 16 in 6 steps. A pair took "
    "16.6–38.6 s on a loaded 2-core CPU "
    "(docs/benchmarks/sw_pair.md). "
    "The **Lesson** tab plays the whole story: from this adapter its distilled naive agent won 0.70–0.85 of "
    "its episodes on ten test variations it never saw (0.00 before; seeds 0–2; docs/benchmarks/sw_lesson.md)."
)
"""Shown in the Episodes tab while a ScienceWorld session is open with the embedded model; `{actions}`
is what its decoding (`NOTE_ACTIONS`) lets it play."""
NOTE_ACTIONS = {
    "constrained": "It plays valid actions (its sampling is restricted to the step's valid actions)",
    "action": "It plays valid actions (it draws one of the step's valid actions)",
    "free": "It writes its actions as free text, so many are not valid (ScienceWorld answers \"No known "
            "action matches that input.\" and the step is lost)",
}  # fmt: skip
"""What the note says the model plays, per `policy.decoding`."""


# ---- form choices ---------------------------------------------------------------------------------
def session_env(studio: Studio, run_id: str) -> str:
    """The env the session plays (the only env its episodes may use)."""
    return studio.session(run_id).config.env.name


def preselected(studio: Studio, env_name: str, run_id: str | None = None) -> tuple[list[str], str | None]:
    """(the env's tasks, the task the form preselects: the session's when it belongs to this env, else
    the first; None for an env without tasks)."""
    tasks = list(studio.meta_env(env_name).task_names())
    own = studio.session(run_id).config.env.task if run_id else None
    return tasks, own if own in tasks else (tasks[0] if tasks else None)


@user_errors
def env_changed(studio: Studio, env_name: str, split: str, run_id: str | None = None) -> tuple[Any, Any]:
    """The env's task list (`preselected`), and that task's variations in `split`."""
    tasks, task = preselected(studio, env_name, run_id)
    return gr.Dropdown(choices=tasks, value=task), task_changed(studio, env_name, task, split, run_id)


def variation_choices(studio: Studio, env_name: str, task: str, split: str, run_id: str | None = None) -> list[int]:
    """Variations of `task` in `split`; on the train split of the session's own task, the session's
    training variations when its config names them."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    variations = list(studio.meta_env(env_name).variations(task, split))
    if run_id and split == "train":
        env_cfg = studio.session(run_id).config.env
        if env_cfg.name == env_name and env_cfg.task == task and env_cfg.variations:
            variations = [v for v in variations if v in env_cfg.variations] or variations
    return variations[:MAX_VARIATION_CHOICES]


@user_errors
def task_changed(studio: Studio, env_name: str, task: str | None, split: str, run_id: str | None = None) -> Any:
    """Variation choices of `task` in `split`, labelled with the split ("3 · train")."""
    if not task:
        return gr.Dropdown(choices=[], value=None)
    variations = variation_choices(studio, env_name, task, split, run_id)
    choices = [(f"{v} · {split}", v) for v in variations]
    return gr.Dropdown(choices=choices, value=variations[0] if variations else None)


def checkpoint_choices(studio: Studio, run_id: str) -> list[tuple[str, str]]:
    """("current weights", "current") then every checkpoint of the session, newest first."""
    found = sorted(studio.session(run_id).checkpoints(), reverse=True)
    return [("current weights", "current")] + [(f"iteration {it}", str(path)) for it, path in found]


def check_checkpoint(studio: Studio, run_id: str, checkpoint: str | None) -> None:
    """ValueError naming `checkpoint` and the valid ones unless it is None, "" or one of
    `checkpoint_choices` (so a bad pick is refused before a job starts)."""
    valid = [path for _, path in checkpoint_choices(studio, run_id)]
    if checkpoint not in (None, "", *valid):
        raise ValueError(f"unknown checkpoint {checkpoint!r} of session {run_id!r}; valid: {', '.join(valid)}")


def session_line(studio: Studio, run_id: str) -> str:
    """What the form plays: the session's env, task, training variations and step limit."""
    env = studio.session(run_id).config.env
    limit = env.step_limit
    if limit is None:
        limit = f"the task's ({studio.meta_env(env.name).step_limit(env.task)})"
    offered = variation_choices(studio, env.name, env.task, "train", run_id)  # what the dropdown offers
    trained = list(env.variations) or offered[:PAPER_TRAIN_VARIATIONS]
    if offered == trained:
        variations = f"training variations {_listed(offered)}"
    else:
        variations = f"variations {_listed(offered)} of the train split (training uses {_listed(trained)})"
    return (f"Plays session `{run_id}`'s env **{env.name}** · its task `{env.task}` · {variations} · "
            f"step limit {limit}")  # fmt: skip


def _listed(numbers: list[int]) -> str:
    """"0–23" for a run of three or more consecutive numbers, else "0, 1" / "2, 5, 9"."""
    if len(numbers) >= 3 and numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"{numbers[0]}–{numbers[-1]}"
    return ", ".join(map(str, numbers))


def pick_line(studio: Studio, run_id: str, task: str | None, variation: Any, split: str) -> str:
    """The info line of what *Run side by side* plays now. For the session's own task on the train
    split, `session_line` (its training variations and step limit); for another task or split, that
    task's step limit and which task the session trains on. Both end with the chosen task, variation
    and split ("**this pair**: `find-animal` variation 3 (train)"). `session_line` alone before a task
    is chosen."""
    env = studio.session(run_id).config.env
    if not task:
        return session_line(studio, run_id)
    lesson = lesson_step_limit(env, task)
    if task == env.task and split == "train" and lesson is None:
        line = session_line(studio, run_id)
    else:
        own = studio.meta_env(env.name).step_limit(task)
        limit = (f"{lesson} (the Lesson's, as on the Lesson tab; the task's own is {own})" if lesson is not None
                 else env.step_limit if env.step_limit is not None else f"the task's ({own})")  # fmt: skip
        which = f"its task `{task}`" if task == env.task else f"task `{task}` (the session trains on `{env.task}`)"
        line = f"Plays session `{run_id}`'s env **{env.name}** · {which} · step limit {limit}"
    chosen = "no variation chosen yet" if variation in (None, "") else f"variation {variation} ({split})"
    return f"{line} · **this pair**: `{task}` {chosen}"


def embedded_model(studio: Studio) -> bool:
    """The studio runs the embedded SmolLM2 model (not a test model, not another checkpoint)."""
    return studio.model.policy_spec == "real" and studio.model.policy_config.model == EMBEDDED_MODEL


def model_note(studio: Studio, run_id: str) -> Any:
    """The ScienceWorld note (visible) for a ScienceWorld session on the embedded model, else hidden."""
    show = session_env(studio, run_id) == "scienceworld" and embedded_model(studio)
    note = SCIENCEWORLD_NOTE.format(actions=NOTE_ACTIONS[studio.model.policy_config.decoding]) if show else ""
    return gr.Markdown(note, visible=show)


# ---- running a pair ---------------------------------------------------------------------------------
@user_errors
def start_side_by_side(
    studio: Studio, run_id: str, env_name: str | None, task: str, variation: Any, split: str,
    seed: Any, temperature: Any, checkpoint: str | None,
) -> tuple[str, str, Any, int]:  # fmt: skip
    """Validate the picks and start a side-by-side job on the session's env (`env_name` None = the
    session's; another env is refused). Returns `job_panel.started(job)`."""
    own = session_env(studio, run_id)
    if env_name not in (None, "", own):
        raise ValueError(f"session {run_id!r} plays {own}, not {env_name}; open a {env_name} session "
                         "in the Sessions tab to play it")  # fmt: skip
    if not task:
        raise ValueError("pick a task first")
    if task not in studio.meta_env(own).task_names():
        raise ValueError(f"unknown {own} task {task!r}; valid: {', '.join(studio.meta_env(own).task_names())}")
    if variation is None or variation == "":
        raise ValueError(f"pick a variation of {task!r} ({split} split)")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    valid = studio.meta_env(own).variations(task, split)
    try:
        variation = whole_number(variation, "variation")
    except ValueError as exc:
        raise ValueError(f"{exc}; valid in the {split} split of {task}: {valid[0]}…{valid[-1]}") from None
    if variation not in valid:
        raise ValueError(f"{task} has no variation {variation} in the {split} split; valid: {valid[0]}…{valid[-1]}")
    temperature = float(temperature)
    if not 0.0 < temperature <= 10.0:
        raise ValueError(f"temperature must be in (0, 10], got {temperature}")
    check_checkpoint(studio, run_id, checkpoint)
    kwargs = dict(run_id=run_id, env_name=own, task=task, variation=variation, split=split,
                  seed=whole_number(seed, "seed", 0), temperature=temperature, checkpoint=checkpoint)
    job = studio.jobs.start("episodes", lambda j: workers.side_by_side(studio, j, **kwargs),
                            label=f"side by side {task} v{variation}", run_id=run_id)
    return jp.started(job)


def side_by_side_view(data: dict[str, Any]) -> tuple[str, str, Any]:
    """(naive column html, memory column html, score chart) from a side-by-side job's data."""
    naive_steps, memory_steps = data.get("naive", []), data.get("memory", [])
    finished = data.get("episodes") or data.get("played") or (None, None)
    header = data.get("header", "")
    fig = figures.episode_scores_figure(
        {"naive": [s.score for s in naive_steps], "memory": [s.score for s in memory_steps]}
    )
    return (
        render.column_html("naive", naive_steps, header=header, finished=finished[0]),
        render.column_html("memory", memory_steps, header=header, finished=finished[1]),
        fig,
    )


def poll_side_by_side(studio: Studio, job_id: str | None, seen: Any) -> tuple[Any, ...]:
    """Timer tick: (status, naive html, memory html, chart, timer, seen)."""
    return jp.poll(studio.jobs, job_id, seen, 3, lambda job: side_by_side_view(job.snapshot()))


def saved_pairs(studio: Studio, run_id: str) -> list[tuple[str, str]]:
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
def open_pair(studio: Studio, run_id: str, group_id: str | None) -> tuple[Any, ...]:
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


def _refresh_saved_when_done(studio: Studio) -> Any:
    def fn(rid: str, job_id: str | None) -> Any:
        job = studio.jobs.get(job_id)
        if job is None or job.status != "done" or not job.claim("_listed"):
            return gr.skip()
        return gr.Dropdown(choices=saved_pairs(studio, rid))

    return fn


# ---- layout and wiring ------------------------------------------------------------------------------
def build_episodes_tab(studio: Studio, run_id: gr.State) -> dict[str, Any]:
    """Components and wiring of the Episodes tab. Returns its `panel`, `refresh` (the form of a
    session, on page load and every switch) and `clear` (the previous session's pair, on a switch)."""
    first = studio.default_run_id
    with gr.Row():
        env = gr.Radio(list(ENV_NAMES), value=session_env(studio, first), label="Environment (the session's)",
                       interactive=False, elem_id="ep-env")  # fmt: skip
        task = gr.Dropdown(label="Task", choices=[], elem_id="ep-task", scale=2)
        split = gr.Radio(list(SPLITS), value="train", label="Split", elem_id="ep-split")
        variation = gr.Dropdown(label="Variation (split)", choices=[], elem_id="ep-variation")
    info = gr.Markdown(elem_id="ep-session")
    note = gr.Markdown(visible=False, elem_id="ep-note")
    memory_md = gr.Markdown(elem_id="ep-memory-line")
    with gr.Row():
        tip = gr.Textbox(label="Curated tip", lines=2, visible=False, elem_id="ep-tip", scale=4)
        store = gr.Button("Store this tip in the session's memory", size="sm", visible=False,
                          elem_id="ep-store-tip", scale=1)  # fmt: skip
    with gr.Row():
        seed = gr.Number(0, label="Seed", precision=None, elem_id="ep-seed")
        temperature = gr.Slider(0.05, 2.0, value=0.4, step=0.05, label="Temperature", elem_id="ep-temperature")
        checkpoint = gr.Dropdown(label="Adapter / checkpoint", choices=[("current weights", "current")],
                                 value="current", elem_id="ep-checkpoint")
        run = gr.Button("▶ Run side by side", variant="primary", elem_id="ep-run")
        stop = gr.Button("■ Stop", elem_id="ep-stop")
    panel = JobPanel.create("ep")
    with gr.Row(equal_height=False):
        naive = gr.HTML(elem_id="ep-naive")
        memory = gr.HTML(elem_id="ep-memory")
    chart = gr.Plot(figures.episode_scores_figure({}), show_label=False, elem_id="ep-chart")
    with gr.Row():
        saved = gr.Dropdown(label="Saved episode pairs of this session", choices=[], elem_id="ep-saved", scale=3)
        reopen = gr.Button("Reopen", elem_id="ep-reopen")

    # The info line, the offered tip and the memory count follow every pick. After a task or split pick
    # they are renewed in a `then`, not by the variation's `change`: two tasks can share the variation
    # number, and a value that does not change fires no `change` (the line kept the old task). A session
    # switch renews them in `refresh`.
    def follow(rid: str, t: str | None, v: Any, s: str) -> tuple[Any, ...]:
        return (pick_line(studio, rid, t, v, s), *offer_updates(studio, rid, t, v))

    follow_io = ([run_id, task, variation, split], [info, tip, store, memory_md])
    for picked in (task, split):
        picked.input(lambda e, t, s, rid: task_changed(studio, e, t, s, rid), [env, task, split, run_id], [variation]
                     ).then(follow, *follow_io, show_progress="hidden")  # fmt: skip
    variation.input(follow, *follow_io, show_progress="hidden")
    store.click(partial(store_tip, studio), [run_id, task, variation, tip], [memory_md])
    panel.on_start(run.click, partial(start_side_by_side, studio),
                   [run_id, env, task, variation, split, seed, temperature, checkpoint])
    panel.on_poll(partial(poll_side_by_side, studio), [naive, memory, chart]).then(
        _refresh_saved_when_done(studio), [run_id, panel.job_id], saved, show_progress="hidden").then(
        memory_when_done(studio), [run_id, panel.job_id, task, variation], memory_md, show_progress="hidden")
    panel.on_stop(stop, studio.jobs)
    reopen.click(partial(open_pair, studio), [run_id, saved], [naive, memory, chart, panel.status])

    def refresh(rid: str) -> dict[Any, Any]:
        """The session's env, its task and training variations, step limit, checkpoints and pairs."""
        env_name = session_env(studio, rid)
        tasks, variations = env_changed(studio, env_name, "train", rid)
        # the picks as values (a component made inside an event keeps no `.value` to read back)
        first = preselected(studio, env_name, rid)[1]
        offered = variation_choices(studio, env_name, first, "train", rid) if first else []
        v = offered[0] if offered else None
        box, button, counted = offer_updates(studio, rid, first, v)
        return {env: gr.Radio(value=env_name), task: tasks, split: gr.Radio(value="train"), variation: variations,
                info: pick_line(studio, rid, first, v, "train"), note: model_note(studio, rid),
                tip: box, store: button, memory_md: counted,
                checkpoint: gr.Dropdown(choices=checkpoint_choices(studio, rid), value="current"),
                saved: gr.Dropdown(choices=saved_pairs(studio, rid), value=None)}  # fmt: skip

    def clear(rid: str) -> dict[Any, Any]:
        """A switch: the previous session's pair and job leave the page."""
        return {panel.job_id: None, panel.seen: -1, panel.status: jp.job_status_html(None), naive: "",
                memory: "", chart: figures.episode_scores_figure({})}  # fmt: skip

    def on_open(rid: str, t: str | None, v: Any) -> str:
        """The tab opened: count the memory again (tips may have been stored elsewhere, or the model
        was still loading when the page was)."""
        return memory_line(studio, rid, t, v)

    return {"panel": panel, "env": env, "task": task, "variation": variation, "checkpoint": checkpoint,
            "saved": saved, "note": note, "tip": tip, "store": store, "memory": memory_md,
            "on_open": (on_open, [run_id, task, variation], [memory_md]),
            "refresh": (refresh, [env, task, split, variation, info, note, tip, store, memory_md, checkpoint, saved]),
            "clear": (clear, [panel.job_id, panel.seen, panel.status, naive, memory, chart])}  # fmt: skip
