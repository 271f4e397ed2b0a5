"""Wrong-place tips shown: how often a memory shows a tip written in another room (issue 49, item 2).

Definitions (docs/memory-structure.md, "Wrong-place tips"):

- The agent's *place at a step* is where the observation it acted on put it: the first observation for
  step 0, the previous step's observation after that (`TextEnv.place_of`); an observation that names no
  place keeps the place before it. This is `StructuredTipStore.episode_places`, for any memory.
- A tip entry's *place* is the place at the step that wrote it. A structured store records it at write
  time (its `place` column). A flat store keeps no place, so it is derived from the entry's source
  episode: the place at the first step of that episode whose action is the entry's action (the flat
  store keeps only the first of identical entries, which is that step's). Entries of group `anywhere`
  (a teacher's tip) and entries whose place is unknown are left out.
- A shown entry is *wrong-place* when its place differs from the agent's place at the step it was shown.
  Counted over every step of every memory episode, over the entries of `Step.tips` (what the prompt was
  built from, after the compact and budget cuts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from empo2_studio.memory.structure import ANYWHERE
from empo2_studio.types import Episode

PlaceOf = Callable[[str], "str | None"]


def step_places(episode: Episode, place_of: PlaceOf) -> list[str | None]:
    """The agent's place at each step of `episode` (module docstring); None until an observation names one."""
    place = place_of(episode.first_observation) if episode.first_observation else None
    out: list[str | None] = []
    for i, step in enumerate(episode.steps):
        if i > 0:
            place = place_of(episode.steps[i - 1].observation) or place
        out.append(place)
    return out


def derived_place(action: str, source: Episode | None, place_of: PlaceOf) -> str | None:
    """A flat entry's place: the agent's place at the first step of its source episode that played
    `action` (module docstring); None when the episode is unknown or never played it."""
    if source is None:
        return None
    places = step_places(source, place_of)
    for step, place in zip(source.steps, places):
        if (step.action or step.sample.text) == action:
            return place
    return None


def entry_places(store: Any, task: str, episodes: Iterable[Episode], place_of: PlaceOf) -> dict[str, str | None]:
    """tip id → place for every tip of `task` in `store`: the recorded group of a store that groups
    by place (`StructuredTipStore` with `rules.by_place`), else derived from `episodes` (the source
    episodes; `derived_place`)."""
    rules = getattr(store, "rules", None)
    if rules is not None and rules.by_place:
        out: dict[str, str | None] = {}
        for g in store.groups(task):
            for r in store.group_rows(task, g.variation, g.place):
                out[r["id"]] = r["place"]
        return out
    by_id = {e.episode_id: e for e in episodes}
    return {t.tip_id: derived_place(t.action, by_id.get(t.source_episode_id), place_of) for t in store.list_tips(task=task)}


def wrong_place_counts(episodes: Sequence[Episode], places: Mapping[str, str | None], place_of: PlaceOf) -> dict[str, float]:
    """Wrong-place tips shown over `episodes` (module docstring).

    Returns {"memory_steps": steps that showed at least one tip, "shown": entries shown, "placed":
    shown entries with a known place other than `anywhere` (and a known agent place), "wrong": those
    whose place differs from the agent's, "wrong_share": wrong / placed (0.0 when nothing was placed),
    "wrong_per_step": wrong / memory_steps (0.0 when none)}. Counts are floats (JSON-ready).
    """
    steps = shown = placed = wrong = 0
    for episode in episodes:
        for step, here in zip(episode.steps, step_places(episode, place_of)):
            if not step.tips:
                continue
            steps += 1
            for tip in step.tips:
                shown += 1
                where = places.get(tip.tip_id)
                if where is None or where == ANYWHERE or here is None:
                    continue
                placed += 1
                wrong += where != here
    return {"memory_steps": float(steps), "shown": float(shown), "placed": float(placed), "wrong": float(wrong),
            "wrong_share": wrong / placed if placed else 0.0, "wrong_per_step": wrong / steps if steps else 0.0}  # fmt: skip
