"""The Lesson on ScienceWorld: find-animal, where the exploration trap is real (issue 47, bar 2).

Every find-animal variation keeps its animals outside (225 of 225 variations; ../shared/method.md §3),
the task text does not say so, and about 92 % of the variations start indoors, where focusing on any
object ends the episode at −100. The pre-filled tip says where animals are and the winning actions in
the words of the step's valid actions, as the trap's curated tip does (`TrapEnv.curated_tip`): with
the "easy" simplification's teleport, "teleport to outside, then look around, then focus on <an animal
there>, then pick up <it>, then teleport to <the box's room>, then move <it> to <the box>".

The animal is one the simulator's own gold path focuses on (`ScienceWorldEnv.valid_gold_path`); the
box and its room come from the task text ("… move it to the red box in the kitchen."). Building a tip
plays the gold path once (5–15 s with a running JVM), so tips are cached per (task, variation).

find-animal is in `envs.scienceworld.HELD_OUT_TASKS`: no shipped adapter trains on it, so what the
distilled agent does on test variations is what the lesson taught, not what a warm start saw.
"""

from __future__ import annotations

import threading
from typing import Any

from empo2_studio.envs.sw_search import find_plan
from empo2_studio.policy.prompts import plan_note

SCIENCEWORLD_LESSON_TASKS = ("find-animal",)
"""ScienceWorld tasks the Lesson offers (held out from every shipped adapter)."""
TIP_OPENING = "Animals are never indoors: "
LESSON_VARIATIONS = (0, 1, 30, 31, 60, 61, 90, 91)
"""The lesson's default train variations: two from each of four blocks of 30, whose outside animals
differ (0–29 blue jay, butterfly, dove; 30–59 baby wolf, crocodile, turtle; 60–89 butterfly, frog,
turtle; 90–119 blue jay, giant tortoise, parrot eggs). The objects outside that are not animals are the
same in every variation, so tips naming many animals teach which names are not. Naive success on dev
variations 150–159 after the lesson: 0.35 and 0.40 (seeds 0, 1), against 0.05 for variations 0, 1 × 8
episodes and 0.15 for eight variations of one block (docs/notebook/2026-12-06-sw-lesson-variety.md).
Every one of them keeps its box in the kitchen: from the adapter before the named-room warm start the
distilled agent took the animal there on every test variation (0.00); from the shipped one, which reads
the box's room from the task, test 225–234 went 0.00 → 0.70 / 0.75 / 0.85 (seeds 0–2,
docs/benchmarks/sw_lesson.md)."""
LESSON_EPISODES = 2
"""Episodes per variation and playing stage: eight variations × 2 = the 16 memory episodes two
variations × 8 gave, so the lesson's time stays about the same."""
LESSON_STEP_LIMIT = 10
"""Steps per lesson episode: the tip's plan takes 6, so 10 leaves room for a detour and keeps a
naive episode (which wanders to the limit unless it focuses on something) short."""
SCIENCEWORLD_NOTE = (
    " · find-animal's animals are always outside and the task does not say so; a naive episode starts "
    f"indoors and ends at −100 when it focuses on anything there; {LESSON_STEP_LIMIT} steps per episode; "
    "a variation's first tip plays the simulator's gold path once (seconds)"
)
"""What the Lesson tab's session line adds for the ScienceWorld lesson."""
_cache: dict[tuple[str, int], str] = {}
_lock = threading.Lock()


def tip_plan(task_description: str, gold: list[str]) -> list[str]:
    """The lesson's winning actions from the task text and the mapped gold path.

    >>> tip_plan("Your task is to find a(n) animal. First, focus on the thing. Then, move it to the red box in the kitchen.",
    ...          ["go to outside", "look around", "focus on dove", "pick up dove", "go to kitchen", "move dove to red box"])
    ['teleport to outside', 'look around', 'focus on dove', 'pick up dove', 'teleport to kitchen', 'move dove to red box']

    Raises:
        ValueError: the task text names no box and room, or the gold path focuses on nothing.
    """
    focus = next((a for a in gold if a.startswith("focus on ")), None)
    bad = f"not a find-animal task text or gold path: {task_description!r}, {gold}"
    if focus is None:
        raise ValueError(bad)
    try:
        return find_plan(task_description, focus.removeprefix("focus on "), "outside")
    except ValueError:  # no box and room in the text
        raise ValueError(bad) from None


def curated_tip(task: str, variation: int, env: Any = None) -> str:
    """The lesson's pre-filled tip for a find-animal variation: `TIP_OPENING` + the plan of `tip_plan`.

    `env`: a `ScienceWorldEnv` to use (its episode is ended); None starts one for the call. Cached.

    Raises:
        ValueError: `task` is not a ScienceWorld lesson task, or `variation` is not one of its
            variations (before a JVM starts).
    """
    if task not in SCIENCEWORLD_LESSON_TASKS:
        raise ValueError(f"the ScienceWorld lesson runs on {list(SCIENCEWORLD_LESSON_TASKS)}, got {task!r}")
    from empo2_studio.envs.scienceworld import ScienceWorldEnv

    with _lock:
        if (task, variation) in _cache:
            return _cache[(task, variation)]
        own = env is None
        env = env or ScienceWorldEnv()
        try:
            env.check_variation(task, variation)
            gold, _ = env.valid_gold_path(task, variation)
            text = env.reset(task, variation).task_description
        finally:
            if own:
                env.close()
        tip = plan_note(tip_plan(text, gold), TIP_OPENING)
        _cache[(task, variation)] = tip
        return tip


def curated_tips(task: str, variations: tuple[int, ...] | list[int]) -> list[str]:
    """`curated_tip` of each variation, the uncached ones played on one simulator (one JVM start, not one
    per variation). Raises as `curated_tip` does."""
    from empo2_studio.envs.scienceworld import ScienceWorldEnv

    env = ScienceWorldEnv() if any((task, v) not in _cache for v in variations) else None
    try:
        return [curated_tip(task, v, env) for v in variations]
    finally:
        if env is not None:
            env.close()
