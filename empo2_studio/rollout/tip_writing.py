"""Tip writing after a rollout (paper §2): each finished episode's tip, stored under its conversation.

`write_group_tips` asks the policy (or a note writer) for one tip per episode and stores it;
`key_text` is the memory key an episode's tips are stored under; `forget_and_stop` drops an abandoned
group's sampling caches when a job is stopped.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from empo2_studio.policy import prompts
from empo2_studio.rollout.conversation import conversation
from empo2_studio.rollout.retrieval import cap as _cap
from empo2_studio.stopping import StopRequested, stop_requested
from empo2_studio.types import Episode

if TYPE_CHECKING:
    from empo2_studio.memory import TipMemory
    from empo2_studio.policy import Policy
    from empo2_studio.rollout.episodes import Timings


def write_group_tips(
    policy: Policy, store: TipMemory, episodes: Sequence[Episode], *, timings: Timings | None = None,
    writer: Policy | None = None, note_context: str = "episode",
) -> list[Episode]:  # fmt: skip
    """Let the policy write one tip per episode and store it (paper §2; all modes, as the recipe does).

    The tip of each episode goes into `store.add_episode_tips(episode, tip, key_text)` (one entry per
    step); `key_text` is the episode's final tip-free conversation. Episodes whose cleaned tip is empty
    store nothing. Sampling caches kept for the episodes (`keep_caches`) are reused, then dropped.
    `writer`: another policy writes the tips (`memory.note_writer`; None: `policy`), which drops the
    actor's caches first; `note_context` as `memory.reflection.write_tips`'s `context`.

    Returns:
        The episodes with `tip` set (same order).
    """
    from empo2_studio.memory.reflection import write_tips  # imported late: memory pulls in lancedb

    if not episodes:
        return []
    if stop_requested():  # before any tip is stored: the group's caches go, nothing is half-written
        forget_and_stop(policy, [e.episode_id for e in episodes])
    t0 = time.perf_counter()
    if (writer is not None and writer is not policy) or note_context != "episode":
        for e in episodes:  # the kept sampling caches are the actor's, of the episode's whole conversation
            policy.forget(e.episode_id)
    tips = write_tips(writer or policy, episodes, [conversation(e) for e in episodes], context=note_context)
    out = []
    for episode, tip in zip(episodes, tips, strict=True):
        if tip.strip():
            store.add_episode_tips(episode, tip, key_text(episode))
        out.append(replace(episode, tip=tip))
    if timings is not None:
        timings.add("memory", t0)
    return out


def forget_and_stop(policy: Policy, keys: Sequence[str]) -> None:
    """Drop the sampling caches of an abandoned group, then raise `StopRequested`."""
    for key in keys:
        policy.forget(key)
    raise StopRequested("stopped by request")


def key_text(episode: Episode) -> str:
    """The memory key of a finished episode: its tip-free conversation as "user: … assistant: …"."""
    return _cap(prompts.conversation_text([(s.user_message, s.sample.text) for s in episode.steps]))
