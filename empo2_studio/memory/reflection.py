"""Reflection: the policy writes one tip about each finished episode (paper §2).

The caller hands over each episode's conversation exactly as the policy saw it while acting (built
by `rollout.conversation`: every step's user message with that step's tips block, answered by the
exact sampled action tokens); `policy.write_tips` answers `TIP_INSTRUCTION` as a new user message
after it. This module never builds prompts itself, so it imports nothing of the policy: the policy
is any object with a `write_tips` method (`TipWriter`).

Departure: the authors' recipe appends the retrieved tip texts raw here; showing the same text the
policy acted on lets the reflection reuse the episode's sampling KV cache instead of re-reading a
memory episode's whole, tip-heavy conversation (measured: a memory iteration's tip writing dominated
its wall time).

The reply is cleaned to one line of at most `MAX_TIP_WORDS` words: the first non-blank line,
whitespace squeezed, a leading "Tip:"/"Summary:" label and wrapping quotes removed, cut at 100
words. When nothing usable comes back (empty, no letter or digit at all, an echo of the
instruction — a small model often repeats the prompt — or a loop of a few repeated words), the tip
is a deterministic fallback that says so: "[no tip written by the model] The episode ended with
score R/100 after N steps; last actions: a; b; c." The stored tip puts the environment's own
summary of the episode last (`Episode.record`, from `TextEnv.summarise_episode`), see `with_record`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

from empo2_studio.types import Episode

MAX_TIP_WORDS = 100
FALLBACK_PREFIX = "[no tip written by the model]"
OWN_NOTE_PREFIX = "[the model's note]"
"""Marks the model's own sentence, before the environment's record line, in a stored tip."""

TIP_INSTRUCTION = (
    "Thank you for playing. This trajectory has now ended. "
    "Summarise it for your future self: what you did, what you found out about the environment, "
    "and how far you are from completing the task. "
    "Answer in a single line of fewer than 100 words, with nothing else."
)
"""The reflection prompt (own wording of the paper's tip-generation prompt, §2)."""

OBSERVATION_NOTE_INSTRUCTION = (
    "Write one short sentence for your future self about what this observation shows of the things your task "
    "names: the room they are in, or that they are not in this room. If it shows no room, write: Nothing new."
)
"""The observation-note prompt (not in the paper; `write_observation_notes`)."""
NOTHING_NEW = "Nothing new."
"""The observation-note reply that adds nothing to the tip."""

_LABEL = re.compile(r"^(tip|summary|answer|reflection)\s*[:\-]\s*", re.IGNORECASE)
_QUOTES = "\"'`“”‘’"


class TipWriter(Protocol):
    """What reflection needs of a policy (`policy.Policy.write_tips` has this signature)."""

    def write_tips(
        self, conversations: Sequence[Sequence[Any]], instruction: str | Sequence[str], *,
        keys: Sequence[str] | None = None,
    ) -> list[str]:  # fmt: skip
        """One greedy reply to `instruction` (or to each conversation's own) after each conversation
        (policy `Turn`s), in order."""
        ...


def write_tips(
    writer: TipWriter, episodes: Sequence[Episode], conversations: Sequence[Sequence[Any]], *, context: str = "episode"
) -> list[str]:
    """Ask the policy for one tip per episode (one batched `writer.write_tips` call).

    Args:
        writer: the policy (anything with `write_tips`).
        episodes: finished episodes; each one's `record` (the environment's summary) ends its tip.
        conversations: each episode's turns as the policy saw them (`rollout.conversation`).
        context: "episode" (paper §2): `TIP_INSTRUCTION` after each conversation; "observation": the
            notes about each observation, joined (`write_observation_notes`; `conversations` unused).

    Returns one stored tip per episode, in order: the cleaned reply (one line, ≤ 100 words, never
    empty, see `clean_tip` for the fallback) before the episode's record line (`with_record`).
    Raises ValueError if the conversations or the policy's replies do not match the episodes in number,
    or on another `context`.
    """
    if context == "observation":
        return [with_record(t, e.record) for t, e in zip(write_observation_notes(writer, episodes), episodes, strict=True)]
    if context != "episode":
        raise ValueError(f"reflection context {context!r}: expected 'episode' or 'observation'")
    if len(conversations) != len(episodes):
        raise ValueError(f"write_tips got {len(conversations)} conversations for {len(episodes)} episodes")
    if not episodes:
        return []
    # Episode ids are the rollout's sampling keys: episodes played with `keep_caches` reuse their cache.
    replies = writer.write_tips(list(conversations), TIP_INSTRUCTION, keys=[e.episode_id for e in episodes])
    if len(replies) != len(episodes):
        raise ValueError(f"policy.write_tips returned {len(replies)} tips for {len(episodes)} episodes")
    return [with_record(clean_tip(r, e), e.record) for r, e in zip(replies, episodes)]


def observation_prompt(task_description: str, observation: str) -> str:
    """The user message of one observation note: the task, one observation, `OBSERVATION_NOTE_INSTRUCTION`."""
    return f"Task: {task_description.strip()}\n\nObservation: {observation.strip()}\n\n{OBSERVATION_NOTE_INSTRUCTION}"


def episode_observations(episode: Episode) -> list[str]:
    """The distinct observations of a played episode, in order: its first one, then each step's (the
    last included); a room looked at twice is written about once."""
    texts = (o.strip() for o in (episode.first_observation, *(s.observation for s in episode.steps)))
    return list(dict.fromkeys(t for t in texts if t))


def write_observation_notes(writer: TipWriter, episodes: Sequence[Episode]) -> list[str]:
    """One tip per episode made of the notes the policy writes about each of its observations.

    Departure (not in the paper, whose tip is one reflection on the whole trajectory): the writer
    answers `OBSERVATION_NOTE_INSTRUCTION` after the task and one observation at a time
    (`observation_prompt`, one batched greedy `writer.write_tips` call over the distinct prompts of every
    episode's `episode_observations`), and the tip is its replies joined (`join_observation_notes`). Every word
    is the model's; the code only splits the episode and joins the lines. Why: the 135M writer
    answering about a whole episode named the wrong room in about half its notes, while whether one
    room's object list holds the target is learnable (docs/notebook/2026-12-04-observation-notes.md).

    Returns one tip per episode, in order, without a record line (`with_record` adds it).
    Raises ValueError if the writer returns another number of replies than there are distinct prompts.
    """
    per_episode = [[observation_prompt(e.task_description, o) for o in episode_observations(e)] for e in episodes]
    # A group's episodes share a layout and see the same rooms: each distinct prompt is written about once
    # (greedy, so the same note), which took one group's note writing from 48 prompts to about 10.
    prompts = list(dict.fromkeys(p for ps in per_episode for p in ps))
    if not prompts:
        return []
    replies = writer.write_tips([()] * len(prompts), prompts)
    if len(replies) != len(prompts):
        raise ValueError(f"policy.write_tips returned {len(replies)} notes for {len(prompts)} observations")
    note = dict(zip(prompts, replies))
    return [join_observation_notes([note[p] for p in ps], e) for ps, e in zip(per_episode, episodes)]


def join_observation_notes(replies: Sequence[str], episode: Episode) -> str:
    """The tip made of one episode's observation notes: the sentences of each reply's first line, unquoted,
    in order, each distinct sentence once (a room seen twice, once with the can and once without, repeats
    its verdict), without "Nothing new." and unusable replies (no letter or digit, a loop); cut at
    `MAX_TIP_WORDS` words. The `fallback_tip` when nothing is left."""
    kept: dict[str, str] = {}  # sentence, as compared → as written
    for reply in replies:
        line = _first_line(reply).strip().strip(_QUOTES).strip()
        if _loops(line):
            continue
        for sentence in _SENTENCE_END.split(line):
            if re.search(r"[A-Za-z0-9]", sentence) and _plain(sentence) != _plain(NOTHING_NEW):
                kept.setdefault(_plain(sentence), sentence.strip())
    text = " ".join(kept.values())
    return _cap_words(text) if text else fallback_tip(episode)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _plain(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def with_record(tip: str, record: str) -> str:
    """The stored tip: the model's own sentence marked as such, then the environment's record line
    (`Episode.record`), which is kept whole within `MAX_TIP_WORDS` (the model's sentence is cut to fit);
    the record alone when the tip is a fallback (it only restates the score and actions) or nothing of
    the model's sentence fits; `tip` alone when `record` is "".

    The record comes last because the small policy acts on the last instruction it reads: with the
    model's own sentence *after* a record line that saw the target, the embedded model's P(focus on it
    | in its room) fell from 0.97 to 0.02 when that sentence was an action ("go to workshop") and to
    0.80–0.96 for chatter; with the sentence first it stayed 0.90–0.99
    (docs/notebook/2026-12-04-record-last.md).
    """
    if not record:
        return tip
    if not tip or tip.startswith(FALLBACK_PREFIX):
        return record
    room = MAX_TIP_WORDS - len(record.split()) - len(OWN_NOTE_PREFIX.split())
    own = " ".join(tip.split()[: max(room, 0)])
    return f"{OWN_NOTE_PREFIX} {own} {record}" if own else _cap_words(record)


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
