"""The agent's chat, as text (../shared/method.md §3 "Action format / prompt"; paper App. B).

Two prompt styles, chosen by environment (`envs.PROMPT_STYLES`; an episode carries its own):

- "paper" (ScienceWorld): the structure of the paper's appendix, described below.
- "compact" (the exploration trap): task, one-line instruction and observation (which names the room's
  objects and doors); no few-shot runs and no list of the valid actions: under constrained decoding they
  reach the model through the decoder, and the list was half of every turn's tokens (every prompt token
  is paid for at every step, in sampling and in scoring, on a CPU). Tips go at the very end of the
  message, right before the agent answers, as a short "Notes" list. Departure, measured in
  benchmarks/bench_lesson.py: the embedded 135M model reads the notes only when they are short, close to
  the answer and phrased in the valid-action wording.

Step 0's user message holds the instructions, the few-shot example runs, the task, the allowed action
formats, the `look around` hint, the items that may be focused on, the inventory and the first
observation. Every later step's user message is the new observation. Each step's user message ends
with the same instruction: explore when unsure, answer with exactly one action on one line. The past
steps stay in the chat as user/assistant turns (full history, recipe `max_history: -1`).

In memory rollouts the retrieved tips are appended to the step's user message as a `<tip>` block
(`with_tips`); the tip-free variant is the same message without it (paper §4.2, off-policy update).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

from empo2_studio.envs.task_text import PLAN_SEPARATOR, focus_items  # noqa: F401  (re-exported: notes' plans; the prompt lists the items)
from empo2_studio.types import Observation, RetrievedTip

INTRO = (
    "You are an agent in a text world. You act by writing commands; the world answers with what "
    "happens. Here are runs of similar experiments that were done successfully:"
)
FINAL_INSTRUCTION = (
    "When you are not sure what to do, try an action you have not tried yet to explore. "
    "Reply with exactly one action, on one line, in one of the allowed formats, and nothing else."
)
LOOK_HINT = 'When you arrive in a new place, use "look around" to see what is there.'
TIPS_HEADER = "Notes you wrote during your earlier attempts at this task:"

_DEFAULT_FORMATS = ("look around", "go to LOC", "open OBJ", "pick up OBJ", "focus on OBJ", "move OBJ to OBJ")


def action_formats(env_name: str) -> tuple[str, ...]:
    """The allowed action formats of `env_name` (from `envs.ACTION_FORMATS`); a short generic list
    when the environment does not declare any."""
    try:
        from empo2_studio.envs import ACTION_FORMATS
    except ImportError:
        return _DEFAULT_FORMATS
    return tuple(ACTION_FORMATS.get(env_name, _DEFAULT_FORMATS))


def _examples_block(fewshot: Sequence[str]) -> str:
    if not fewshot:
        return ""
    runs = [f"Example {i}:\n{text.strip()}" for i, text in enumerate(fewshot, 1)]
    return INTRO + "\n\n" + "\n\n".join(runs) + "\n\n"


COMPACT_INSTRUCTION = "Reply with one action."
COMPACT_NOTES_HEADER = "Notes from your earlier attempts:"


def prompt_style(env_name: str) -> str:
    """"compact" or "paper" for `env_name` (`envs.PROMPT_STYLES`; see the module docstring)."""
    from empo2_studio.envs import PROMPT_STYLES

    return PROMPT_STYLES.get(env_name, "paper")


def _compact_state(obs: Observation) -> str:
    inventory = obs.inventory.strip()
    lines = [f"Observation: {obs.text.strip()}"]
    if inventory and "nothing" not in inventory:
        lines.append(inventory)
    return "\n".join(lines)


def first_user_message(env_name: str, obs: Observation, fewshot: Sequence[str]) -> str:
    """Step 0's user message: instructions, few-shot runs, task, formats, hints, inventory, observation
    ("paper" style), or task, instruction and observation ("compact" style)."""
    if prompt_style(env_name) == "compact":
        return (
            f"Task: {obs.task_description} Focusing on anything else fails the task. "
            f"{COMPACT_INSTRUCTION}\n\n{_compact_state(obs)}"
        )
    items = focus_items(obs.task_description)
    lines = [
        f"Your task: {obs.task_description}",
        "Allowed action formats (OBJ is an object, LOC a place): " + ", ".join(action_formats(env_name)) + ".",
        LOOK_HINT,
    ]
    if items:
        lines.append(
            "The only things you may focus on are: " + ", ".join(items) + ". Focusing on anything "
            "else, such as a container, ends the task as failed."
        )
    lines.append(f"Inventory: {obs.inventory.strip() or '(empty)'}")
    lines.append(f"Observation: {obs.text.strip()}")
    return _examples_block(fewshot) + "\n".join(lines) + "\n\n" + FINAL_INSTRUCTION


def step_user_message(obs: Observation, env_name: str = "") -> str:
    """The user message of a later step: the new observation and the one-action instruction
    ("paper" style), or the observation (and inventory when it holds something) ("compact" style)."""
    if prompt_style(env_name) == "compact":
        return _compact_state(obs)
    return f"Observation: {obs.text.strip()}\n\n{FINAL_INSTRUCTION}"


ENTRY_SUFFIX = "; at that step the action taken was "
"""Where a stored per-step entry's own tip ends (see `memory.tip_store.entry_text`)."""


def note_text(entry: str) -> str:
    """The tip part of a stored entry (the per-step action and score suffix removed)."""
    return entry.split(ENTRY_SUFFIX, 1)[0].strip()


COMPACT_MAX_NOTES = 3
"""A compact prompt shows at most this many distinct pinned curated tips (a teacher's tips agree with
each other). The paper's top 10 puts up to 10 notes in every turn of a with-tips trap episode, and
reading them becomes most of an iteration's time (docs/notebook/2026-12-03-lesson-speed-changes.md)."""
COMPACT_MAX_OWN_NOTES = 1
"""…and at most this many of the agent's own notes: the best-scored one. Notes of different episodes
contradict each other, and the 135M model follows the last one it reads as readily as the right one
(trap-light-bulb, the shipped warm start: with a note that saw the bulb alone P(focus on it | in its room)
0.98; with a failed episode's "…was not in: hallway, kitchen" beside it 0.35–0.65; docs/departures.md)."""


def compact_cut_reason(shown: Sequence[RetrievedTip], tip: RetrievedTip) -> str:
    """Why `tip` was left out of a compact prompt that shows `shown` (for the Episodes view)."""
    if shown and shown[0].pinned and not tip.pinned:
        return "a curated tip is pinned: only curated tips are shown"
    n = COMPACT_MAX_NOTES if shown and shown[0].pinned else COMPACT_MAX_OWN_NOTES
    which = "the best-scored note" if n == 1 else f"the {n} best-scored notes"
    return f"a compact prompt shows {which} only (score {tip.score:.1f})"


def compact_notes_cut(tips: Sequence[RetrievedTip]) -> tuple[list[RetrievedTip], list[RetrievedTip]]:
    """Split retrieved entries (in retrieval order: best score first) into those whose note is one of
    the first `COMPACT_MAX_OWN_NOTES` distinct notes, and the rest (not shown in a compact prompt). When
    curated tips are pinned, only they are shown, up to `COMPACT_MAX_NOTES` distinct ones: a teacher's
    tip next to the agent's own notes of failed episodes loses to them (trap-light-bulb variation 1, in the bulb's
    room: P(focus) 0.95 with the curated tip alone, 0.34 with two record lines beside it, one of them
    naming the hallway)."""
    if any(t.pinned for t in tips):
        shown, cut = _first_notes([t for t in tips if t.pinned], COMPACT_MAX_NOTES)
        return shown, cut + [t for t in tips if not t.pinned]
    return _first_notes(tips, COMPACT_MAX_OWN_NOTES)


def _first_notes(tips: Sequence[RetrievedTip], n: int) -> tuple[list[RetrievedTip], list[RetrievedTip]]:
    kept_notes: list[str] = []
    shown, cut = [], []
    for t in tips:
        note = note_text(t.text)
        if note not in kept_notes and len(kept_notes) < n:
            kept_notes.append(note)
        (shown if note in kept_notes else cut).append(t)
    return shown, cut


TOKEN_PIECE = re.compile(r"\w+|[^\w\s]")
"""A word or one punctuation mark: the unit of `tip_tokens`."""


def tip_tokens(text: str) -> int:
    """The tokens `text` costs a prompt, by proxy: its words and punctuation marks (`TOKEN_PIECE`).

    No tokenizer is at hand where tips are chosen (`rollout.retrieval`), and the budget must count the
    same in every arm. On the trap's notes the proxy is within one token of the SmolLM2 tokenizer's count
    (20/19, 23/23, 26/27, 20/20 on four notes, 2026-12-06); benchmarks/bench_memory_structure.py records
    the ratio over every note it shows.

    >>> tip_tokens("The red light bulb is in the workshop.")  # 8 words and the full stop
    9
    """
    return len(TOKEN_PIECE.findall(text))


def budget_cut(tips: Sequence[RetrievedTip], budget: int, style: str) -> tuple[list[RetrievedTip], list[RetrievedTip]]:
    """Split tips (in rank order) into those shown within `budget` tokens and the rest (`memory.tip_token_budget`).

    A tip costs what it adds to the prompt: "compact" shows each distinct note once (`tips_block`), so an
    entry whose note is already shown costs 0 and a new note costs `tip_tokens(note)`; "paper" shows every
    entry, which costs `tip_tokens(entry)`. The first tip that would take the total over `budget` is cut,
    and so is every tip after it (rank order is kept: a short lower-ranked tip never jumps a long
    better one). `budget` 0 means no budget: nothing is cut.

    >>> a, b = RetrievedTip("a", "x y z", 0.0, 1.0), RetrievedTip("b", "u v", 0.0, 0.9)
    >>> [[t.tip_id for t in part] for part in budget_cut([a, b], 4, "paper")]
    [['a'], ['b']]
    """
    if budget == 0:
        return list(tips), []
    seen: set[str] = set()
    used = 0
    for k, t in enumerate(tips):
        text = note_text(t.text) if style == "compact" else t.text
        cost = 0 if style == "compact" and text in seen else tip_tokens(text)
        if used + cost > budget:
            return list(tips[:k]), list(tips[k:])
        used += cost
        seen.add(text)
    return list(tips), []


def plan_note(actions: Sequence[str], opening: str = "To finish the task: ") -> str:
    """A note that states `actions` as a plan `remaining_plan` can cut.

    >>> plan_note(["go to workshop", "focus on buzzer"])
    'To finish the task: go to workshop, then focus on buzzer.'
    """
    return opening + PLAN_SEPARATOR.join(actions) + "."


def remaining_plan(note: str, played: Sequence[str]) -> str:
    """`note` with the leading steps of its plan that the agent has already played dropped.

    The plan is the first sentence that follows a ": " and joins 2+ steps by `PLAN_SEPARATOR` (what
    follows it, e.g. the model's own sentence after a record line, is kept). Steps are
    matched in order against `played` (the episode's actions so far, a subsequence match, so detours
    in between do not matter); the note is returned unchanged when no step or every step matched, or
    when it has no plan. The 135M model cannot keep its place in a plan of 4+ steps: shown the whole
    plan back in the hallway with the watering can, it gives the plan's next room 0.18 and the first room
    it names 0.34, and in the flower's room "focus" 0.32
    (docs/notebook/2026-12-02-warm-start-v3-and-plans.md). The prompt keeps the
    place for it; what it uses is its own history, never the environment's state.

    >>> note = "The can is in the shed: go to shed, then pick up can, then go to hallway."
    >>> remaining_plan(note, ["go to kitchen", "go to shed"])
    'The can is in the shed: pick up can, then go to hallway.'
    >>> remaining_plan(note, ["pick up can"]) == note  # the first step was never played
    True
    """
    for m in re.finditer(": ", note):  # the plan: the first "…: a, then b" sentence
        end = note.find(". ", m.end())
        sentence = note[m.end() :] if end < 0 else note[m.end() : end]
        steps = [s.strip() for s in sentence.rstrip().rstrip(".").split(PLAN_SEPARATOR)]
        if len(steps) >= 2:
            break
    else:
        return note
    done = 0
    for action in played:
        if done < len(steps) and action.strip() == steps[done]:
            done += 1
    if done in (0, len(steps)):
        return note
    tail = note[m.end() :][len(sentence.rstrip().rstrip(".")) :]  # the sentence's period and what follows
    return note[: m.end()] + PLAN_SEPARATOR.join(steps[done:]) + tail


def with_plan_progress(tip: RetrievedTip, played: Sequence[str]) -> RetrievedTip:
    """`tip` as a compact prompt shows it after `played`: its note's plan from the first step not yet
    played (`remaining_plan`), the stored entry's per-step suffix kept."""
    note, sep, rest = tip.text.partition(ENTRY_SUFFIX)
    shown = remaining_plan(note.strip(), played)
    if shown == note.strip():
        return tip
    return dataclasses.replace(tip, text=shown + sep + rest)


def tips_block(tips: Sequence[RetrievedTip], style: str = "paper") -> str:
    """The tips block for retrieved tips ("" when there are none).

    "paper": the `<tip>` block with every retrieved entry, as the recipe renders it. "compact": a
    "Notes" list with each distinct tip once (an episode stores one entry per step, all sharing its
    tip, so the paper block repeats one tip up to 10 times; the small model and the CPU pay for each).
    """
    if not tips:
        return ""
    if style == "compact":
        notes = list(dict.fromkeys(note_text(t.text) for t in tips))
        return "\n\n" + COMPACT_NOTES_HEADER + "\n" + "\n".join(f"- {n}" for n in notes)
    return "\n\n<tip> " + TIPS_HEADER + "\n" + "\n".join(t.text.strip() for t in tips) + "\n</tip>\n\n"


def with_tips(user_message: str, tips: Sequence[RetrievedTip], style: str = "paper") -> str:
    """`user_message` with the retrieved tips appended (unchanged when `tips` is empty)."""
    return user_message + tips_block(tips, style)


def conversation_text(turns: Sequence[tuple[str, str]]) -> str:
    """The conversation as one string, the memory key text (paper §2): "user: … assistant: …" per
    turn, joined by spaces; a turn whose action is "" (not yet answered) contributes its user part only."""
    parts = []
    for user, assistant in turns:
        parts.append(f"user: {user}")
        if assistant:
            parts.append(f"assistant: {assistant}")
    return " ".join(parts)


def episode_transcript(task_description: str, first_observation: str, steps: Sequence[tuple[str, str]]) -> str:
    """A finished episode as one block of text: the task, the first observation, then each (action,
    observation after it) as "> action" and the observation, the last one included.

    A reflection context that holds only what the episode saw and did: no instructions, valid-action
    lists or notes read (a note read names rooms the episode may never have seen). Used by note writers
    trained on it (scripts/make_warmstart.py `--context transcript`, docs/notebook/2026-12-04-writer-signal.md).
    """
    lines = [f"Task: {task_description.strip()}", "", "What happened:", first_observation.strip()]
    for action, observation in steps:
        lines += [f"> {action}", observation.strip()]
    return "\n".join(lines)
