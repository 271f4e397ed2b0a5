"""The Episodes tab's memory before a pair: what the memory side will retrieve, and the Lesson's
curated tip offered for the chosen variation.

A session that holds no tip for a variation plays two alike columns (the memory episode retrieves
nothing), so the first pair of a new session showed no difference. For a lesson task (the trap's, and
ScienceWorld's find-animal) the tab offers the Lesson's curated tip for the chosen variation
(`lesson.curated_tip`), editable; it is
stored only when the user clicks the store button (`store_tip`). `memory_line` says how many enabled
tips the memory episode can retrieve. Plain functions: values in, values or updates out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gradio as gr

from empo2_studio.app.handlers import user_errors, whole_number
from empo2_studio.lesson import LESSON_TASKS, SCIENCEWORLD_LESSON_TASKS, TIP_SCORE, curated_tip, lesson_env
from empo2_studio.lesson.scienceworld import LESSON_STEP_LIMIT
from empo2_studio.types import SPLITS

if TYPE_CHECKING:
    from empo2_studio.app.studio import Studio
    from empo2_studio.config import EnvConfig


def lesson_step_limit(env: EnvConfig, task: str | None) -> int | None:
    """The step limit a pair of `task` plays on a session with env config `env` when it is not the
    session's: on a ScienceWorld session without its own limit, a Lesson task (find-animal) plays the
    Lesson's `LESSON_STEP_LIMIT` (10; the tip's plan takes 6), not the task's 30, as the Lesson does. A
    naive find-animal episode that does not focus on something at once wanders to the limit: 30 steps
    took a pair up to 102 s on a loaded 2-core CPU, and never won (52 pairs, notebook
    2026-12-06-scienceworld-lesson.md, bar 6). None otherwise (the session's or the task's limit)."""
    if env.name == "scienceworld" and env.step_limit is None and task in SCIENCEWORLD_LESSON_TASKS:
        return LESSON_STEP_LIMIT
    return None


def _env_name(studio: Studio, run_id: str) -> str:
    return studio.session(run_id).config.env.name


def tip_offer(studio: Studio, run_id: str, task: str | None, variation: Any) -> str | None:
    """The Lesson's curated tip for (task, variation) when the task is a lesson task of the session's
    env and the variation is one of the task's (`lesson.curated_tip`: where the target is, then the
    winning actions; ScienceWorld's find-animal plays the simulator's gold path once, seconds, then it
    is cached); None otherwise (other ScienceWorld tasks have no curated tips)."""
    if not task or task not in LESSON_TASKS or variation in (None, ""):
        return None
    if lesson_env(task) != _env_name(studio, run_id):
        return None
    try:
        return curated_tip(task, whole_number(variation, "variation", 0))
    except (ValueError, KeyError):
        return None  # a task or variation the trap does not know: nothing to offer


def memory_line(studio: Studio, run_id: str, task: str | None, variation: Any) -> str:
    """How many enabled tips the session's memory holds for (task, variation), i.e. what the memory
    episode can retrieve; with none, that the memory side will play like the naive one. Says the count
    waits for the model while it is still being prepared (the tip store needs the embedder)."""
    if not task or variation in (None, ""):
        return ""
    if not studio.model_ready:
        return "**Memory**: counted once the model is ready (open this tab again)."
    v = whole_number(variation, "variation", 0)
    tips = studio.store(run_id).list_tips(task=task, variation=v, enabled=True)
    if not tips:
        where = ("the curated one below, or your own in the Tips tab" if tip_offer(studio, run_id, task, v) is not None
                 else "write one in the Tips tab")  # fmt: skip
        return (f"**Memory** of `{task}` variation {v}: **no tip**, so the memory episode retrieves nothing "
                f"and plays like the naive one. Store a tip first ({where}).")  # fmt: skip
    curated = sum(t.origin != "generated" for t in tips)
    return (f"**Memory** of `{task}` variation {v}: {len(tips)} enabled tip(s), {curated} curated "
            f"(added by hand or imported): what the memory episode retrieves from.")  # fmt: skip


def offer_updates(studio: Studio, run_id: str, task: str | None, variation: Any) -> tuple[Any, Any, str]:
    """(tip box, store button, memory line) for the chosen task and variation: the box pre-filled with
    the curated tip and both shown when there is one (`tip_offer`), hidden otherwise."""
    offer = tip_offer(studio, run_id, task, variation)
    label = f"Curated tip for {task} variation {variation} (the Lesson's; edit it, then store it)"
    shown = offer is not None
    return (gr.Textbox(value=offer or "", label=label if shown else "Curated tip", visible=shown),
            gr.Button(visible=shown), memory_line(studio, run_id, task, variation))  # fmt: skip


@user_errors
def store_tip(studio: Studio, run_id: str, task: str | None, variation: Any, text: str | None) -> str:
    """Store `text` as a curated tip (score `TIP_SCORE`, the best, so it ranks first) of (task,
    variation) in the session's memory, where the next memory episode retrieves it. A tip with exactly
    this text already there is enabled instead of stored twice. Returns the memory line after it.

    Raises (as a one-line refusal): ValueError for a task or variation the session's env does not have,
    or an empty text."""
    own = _env_name(studio, run_id)
    tasks = studio.meta_env(own).task_names()
    if task not in tasks:
        raise ValueError(f"unknown {own} task {task!r}; valid: {', '.join(tasks)}")
    v = whole_number(variation, "variation", 0)
    valid = sorted({x for split in SPLITS for x in studio.meta_env(own).variations(task, split)})
    if v not in valid:
        raise ValueError(f"{task} has no variation {v}; valid: {valid[0]}…{valid[-1]}")
    text = (text or "").strip()
    if not text:
        raise ValueError("the tip is empty; write one (or pick the variation again to refill the curated tip)")
    store = studio.store(run_id)
    same = [t for t in store.list_tips(task=task, variation=v) if t.text == text]
    if same:
        if not same[0].enabled:
            store.update_tip(same[0].tip_id, enabled=True)
        return f"This tip was already stored (enabled). {memory_line(studio, run_id, task, v)}"
    tip = store.add_tip(task, v, text, score=TIP_SCORE)
    return f"Stored tip {tip.tip_id[:8]}. {memory_line(studio, run_id, task, v)}"


def memory_when_done(studio: Studio) -> Any:
    """After a pair's job: the memory line again (the pair stored its own tips)."""

    def fn(rid: str, job_id: str | None, t: str | None, v: Any) -> Any:
        job = studio.jobs.get(job_id)
        if job is None or job.status != "done" or not job.claim("_memory_counted"):
            return gr.skip()
        return memory_line(studio, rid, t, v)

    return fn
