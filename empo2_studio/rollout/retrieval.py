"""Which tips a memory step shows: the query text, and when the memory is asked.

Flat memory (`memory.structure = "flat"`, the paper): every memory step asks the store with its query,
the tip-free conversation so far plus the new message (its tail, `KEY_TAIL_CHARS`).

Structured memory (`"structured"`, docs/memory-structure.md): the store is asked at an episode's first
step and whenever the observation puts the agent in a new place (`TextEnv.place_of`; an observation
naming no place keeps the place it had), with that place; the steps between show the tips fetched on
entering, so the notes of one room stay put while the agent acts in it.

Both: compact prompts show the first distinct notes only and plans from their first unplayed step
(`prompts.compact_notes_cut`, `prompts.with_plan_progress`), applied at every step; then, with
`memory.tip_token_budget` > 0, the tips are cut in rank order to that many tokens (`prompts.budget_cut`),
so every memory (every experiment arm) shows at most the same number of tip tokens.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from empo2_studio.policy import prompts
from empo2_studio.types import RetrievedTip, SkippedTip

if TYPE_CHECKING:
    from empo2_studio.memory import TipMemory

KEY_TAIL_CHARS = 1000
"""Key and query texts keep the conversation's last this-many characters (about 250 MiniLM word-pieces).

Departure from the recipe, which embeds the whole conversation: all-MiniLM-L6-v2 reads only its first
256 word-pieces, so every key of a task would embed the same instructions and few-shot opening (cosine
1.0 between any two conversations of a variation, measured) and the similarity threshold would let
every tip through. The tail holds the latest observations and actions, so similarity follows the agent's state."""


def cap(text: str) -> str:
    """The part of a key/query text the embedder should see: its tail (see KEY_TAIL_CHARS)."""
    return text[-KEY_TAIL_CHARS:]


def is_structured(store: Any) -> bool:
    """Does the store retrieve by place (a `memory.StructuredTipStore` whose rules group by place)?"""
    return callable(getattr(store, "episode_places", None)) and getattr(getattr(store, "rules", None), "by_place", False)


def retrieve_tips(
    store: TipMemory | None, running: list[Any], messages: list[str], task: str, timings: Any
) -> tuple[list[list[RetrievedTip]], list[list[SkippedTip]]]:
    """Tips for every running episode's next prompt, and the nearest ones not shown with the reason:
    none for naive episodes; the memory episodes' queries embedded in one batch per variation (module
    docstring). `running` holds the rollout's live episodes (`variation`, `pairs`, `obs`, `env`,
    `prompt_style`, `steps`, and `place` / `held` for a structured store). Recorded tips carry the
    shown text, so every rebuild sees what was sampled."""
    found: list[list[RetrievedTip]] = [[] for _ in running]
    skipped: list[list[SkippedTip]] = [[] for _ in running]
    wanted = [i for i, ep in enumerate(running) if ep.rollout_mode == "memory"]
    if not wanted:
        return found, skipped
    t0 = time.perf_counter()
    if is_structured(store):
        ask, places = [], []
        for i in wanted:
            ep = running[i]
            place = ep.env.place_of(ep.obs.text) or ep.place
            if ep.held is None or place != ep.place:
                ask.append(i)
                places.append(place)
            ep.place = place
    else:
        ask, places = wanted, None
    for variation in dict.fromkeys(running[i].variation for i in ask):  # a store searches one variation at a time
        mine = [k for k, i in enumerate(ask) if running[i].variation == variation]
        queries = [cap(prompts.conversation_text([*running[ask[k]].pairs, (messages[ask[k]], "")])) for k in mine]
        where = {} if places is None else {"places": [places[k] for k in mine]}
        for k, got in zip(mine, store.retrieve_explained(task, variation, queries, **where)):
            running[ask[k]].held = got
    budget = getattr(getattr(store, "cfg", None), "tip_token_budget", 0)  # a test's fake store has no config
    for i in wanted:
        tips, miss = running[i].held
        found[i], skipped[i] = list(tips), list(miss)
        if running[i].prompt_style == "compact":
            found[i], cut = prompts.compact_notes_cut(found[i])
            why = [prompts.compact_cut_reason(found[i], t) for t in cut]
            skipped[i] = [SkippedTip(t.tip_id, t.text, t.score, t.similarity, w) for t, w in zip(cut, why)] + skipped[i]
            found[i] = [prompts.with_plan_progress(t, [a for _, a in running[i].pairs]) for t in found[i]]
        if budget:
            found[i], over = prompts.budget_cut(found[i], budget, running[i].prompt_style)
            why = f"over the tip token budget ({budget} tokens, memory.tip_token_budget)"
            skipped[i] = [SkippedTip(t.tip_id, t.text, t.score, t.similarity, why) for t in over] + skipped[i]
    timings.add("memory", t0)
    return found, skipped
