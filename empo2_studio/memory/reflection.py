"""Reflection: the policy writes one tip about each finished episode (paper §2).

Each episode's conversation is rebuilt as policy `Turn`s exactly as the policy saw it while acting:
every step's user message with that step's retrieved-tips block (`prompts.with_tips`), answered by
the exact sampled action tokens. `policy.write_tips` then answers `TIP_INSTRUCTION` as a new user
message after that conversation. Departure: the authors' recipe appends the retrieved tip texts raw
here; showing the same text the policy acted on lets the reflection reuse the episode's sampling KV
cache instead of re-reading a memory episode's whole, tip-heavy conversation (measured: a memory
iteration's tip writing dominated its wall time).

The reply is cleaned to one line of at most `MAX_TIP_WORDS` words: the first non-blank line,
whitespace squeezed, a leading "Tip:"/"Summary:" label and wrapping quotes removed, cut at 100
words. When nothing usable comes back (empty, no letter or digit at all, an echo of the
instruction — a small model often repeats the prompt — or a loop of a few repeated words), the tip
is a deterministic fallback that says so: "[no tip written by the model] The episode ended with
score R/100 after N steps; last actions: a; b; c."
"""

from __future__ import annotations

import re
from typing import Sequence

from empo2_studio.policy import Policy, Turn, prompts
from empo2_studio.types import Episode

MAX_TIP_WORDS = 100
FALLBACK_PREFIX = "[no tip written by the model]"

TIP_INSTRUCTION = (
    "Thank you for playing. This trajectory has now ended. "
    "Summarise it for your future self: what you did, what you found out about the environment, "
    "and how far you are from completing the task. "
    "Answer in a single line of fewer than 100 words, with nothing else."
)
"""The reflection prompt (own wording of the paper's tip-generation prompt, §2)."""

_LABEL = re.compile(r"^(tip|summary|answer|reflection)\s*[:\-]\s*", re.IGNORECASE)
_QUOTES = "\"'`“”‘’"


def episode_turns(episode: Episode) -> tuple[Turn, ...]:
    """The episode's conversation as turns: user message (+ its tips block) → sampled action ids."""
    return tuple(
        Turn(
            user_text=prompts.with_tips(step.user_message, step.tips),
            action_ids=tuple(step.sample.token_ids),
            valid_actions=step.valid_actions,
        )
        for step in episode.steps
    )


def write_tips(policy: Policy, episodes: Sequence[Episode]) -> list[str]:
    """Ask the policy for one tip per episode (one batched `policy.write_tips` call).

    Returns one cleaned tip per episode, in order: one line, ≤ 100 words, never empty (see
    `clean_tip` for the fallback). Raises ValueError if the policy returns a different number of
    replies than episodes.
    """
    if not episodes:
        return []
    # Episode ids are the rollout's sampling keys: episodes played with `keep_caches` reuse their cache.
    replies = policy.write_tips(
        [episode_turns(e) for e in episodes], TIP_INSTRUCTION, keys=[e.episode_id for e in episodes]
    )
    if len(replies) != len(episodes):
        raise ValueError(f"policy.write_tips returned {len(replies)} tips for {len(episodes)} episodes")
    return [clean_tip(r, e) for r, e in zip(replies, episodes)]


def clean_tip(reply: str | None, episode: Episode) -> str:
    """One line of ≤ 100 words from the model's reply, or the deterministic fallback summary."""
    line = _first_line(reply or "")
    line = _LABEL.sub("", line).strip().strip(_QUOTES).strip()
    if not re.search(r"[A-Za-z0-9]", line) or _echoes_instruction(line) or _loops(line):
        return fallback_tip(episode)
    return _cap_words(line)


_INSTRUCTION_WORDS = frozenset(re.findall(r"[a-z0-9]+", TIP_INSTRUCTION.lower()))


def _echoes_instruction(line: str) -> bool:
    """True when most of the reply's words come from the instruction itself (the prompt parroted back):
    stored as a tip it would teach nothing and would be retrieved into later prompts."""
    words = re.findall(r"[a-z0-9]+", line.lower())
    return len(words) >= 3 and sum(w in _INSTRUCTION_WORDS for w in words) / len(words) >= 0.6


def _loops(line: str) -> bool:
    """True for a degenerate reply that repeats a few words over and over (greedy decoding of a small
    model can loop until the token limit: "you finished it, you finished it, …")."""
    words = re.findall(r"[a-z0-9]+", line.lower())
    return len(words) >= 20 and len(set(words)) / len(words) < 0.3


def fallback_tip(episode: Episode) -> str:
    """Deterministic summary used when the model wrote no usable tip (marked as such)."""
    actions = [s.action or s.sample.text for s in episode.steps][-3:]
    tail = "; last actions: " + "; ".join(a for a in actions if a) if any(actions) else ""
    text = (
        f"{FALLBACK_PREFIX} The episode ended with score {episode.score:.1f}/100 "
        f"after {len(episode.steps)} steps{tail}."
    )
    return _cap_words(text)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return " ".join(line.split())
    return ""


def _cap_words(text: str) -> str:
    words = text.split()
    return " ".join(words[:MAX_TIP_WORDS])
