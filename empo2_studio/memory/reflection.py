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
from empo2_studio.policy.prompts import focus_items
from empo2_studio.types import Episode

MAX_TIP_WORDS = 100
FALLBACK_PREFIX = "[no tip written by the model]"
RECORD_PREFIX = "[from the record]"
"""Marks the structured, trajectory-derived line of a tip (not written by the model)."""
OWN_NOTE_PREFIX = "[the model's note]"
_ROOM = re.compile(r"This room is called the ([^.]+)\. In it, you see: (.*?)(?:\. Doors lead to|$)")

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
            user_text=prompts.with_tips(step.user_message, step.tips, prompts.prompt_style(episode.env)),
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
    return [with_record(clean_tip(r, e), e) for r, e in zip(replies, episodes)]


def record_line(
    task_description: str,
    steps: Sequence[tuple[str, float, str]],
    notes_read: Sequence[str] = (),
    *,
    guess: bool = True,
) -> str:
    """The structured line of a tip, derived from the trajectory and the notes it read (no model call).

    Args:
        task_description: the task text; the objects it says to focus on are what the line looks for.
        steps: (executed action, reward, observation after the action) per step, in order; the
            first observation of the episode may be passed as a step with action "".
        notes_read: the notes the episode read. Where they saw the target or the tool a task names
            ("…water it with the watering can"; "The watering can was seen in the R.") this line
            repeats, with its plan; the rooms they searched without finding either
            (`searched_in_notes`) count as searched here too, so a chain of failed episodes, each
            reading the last one's note, tries every room once instead of two rooms in turn.
        guess: False leaves out the guessed room of a target never seen (and its plan).

    Returns:
        "[from the record] The X was seen in the R. Next time: go to R, then focus on X, then turn on X."
        (the plan ends with `finishing_action`, else the focus; it is written after a win too) — or,
        when X was never seen, "The X was not in: hallway, kitchen." and, when a door the episode saw
        leads to a room not yet searched, a plan that goes to the first such room and ends there:
        "Next time: go to workshop." Without a plan, or with one that cannot name the
        finishing action (then written only while its last step never scored), the line lists "Actions
        that scored: a, b." and "Action that failed the task: c.". When the task names a tool (`tool_of`), the
        line says where it was seen ("The watering can was seen in the bedroom.") or not ("The
        watering can was not in: hallway, kitchen.", the plan then trying the first unsearched room
        behind a door), and the plan starts by fetching it, walking the doors the episode saw: "go to
        bedroom, then pick up watering can, then go to hallway, then go to workshop, then focus on X,
        then water X." Parts with nothing to say are left out; "" when there is nothing at all.

    Departure (issue 10 of this project, not in the paper): the embedded 135M model writes mostly
    unusable tips, so each tip carries this line next to the model's own sentence. It names rooms and
    actions in the environment's own wording, which a small model can follow. The plan for an unseen X
    is there because the model goes where a note points: next to "…was not in: hallway, kitchen" alone
    it went to the kitchen (P 0.65–0.69, trap-light-bulb); with the plan after it, to the plan's room
    (0.95–0.98) and never to the searched one (≤ 0.03). It stops at that room: a guessed "…, then
    focus on X" made the model focus on whatever the room held when X was not there (0.99, −100).
    """
    targets = focus_items(task_description)
    tool = tool_of(task_description)
    seen_in: dict[str, str] = {}
    searched: list[str] = []
    doors: list[str] = []
    adjacent: dict[str, set[str]] = {}
    for _, _, observation in steps:
        rooms = _ROOM.findall(observation)
        for room, contents in rooms:
            room = room.strip()
            items = _items(contents)
            for target in [*targets, tool]:
                if target and target in items and target not in seen_in:
                    seen_in[target] = room
            if room not in searched:
                searched.append(room)
        doors += [d for d in _doors(observation) if d not in doors]
        if len(rooms) == 1:  # the doors named are this room's: remember both directions
            room = rooms[0][0].strip()
            for d in _doors(observation):
                adjacent.setdefault(room, set()).add(d)
                adjacent.setdefault(d, set()).add(room)
    start = searched[0] if searched else ""
    tool_room = seen_in.pop(tool, "") or _seen_in_notes(notes_read, tool) if tool else ""
    for target in targets:  # a room a note it read saw the target in is known too: keep its plan
        if target not in seen_in and (room := _seen_in_notes(notes_read, target)):
            seen_in[target] = room
    parts = [f"The {t} was seen in the {room}." for t, room in seen_in.items()]
    missing = [t for t in targets if t not in seen_in]
    guessed = ""
    if missing and searched:
        searched += [r for r in searched_in_notes(notes_read, missing[0]) or () if r not in searched]
        parts.append(f"The {missing[0]} was not in: {', '.join(searched)}.")
        guessed = next((d for d in doors if d not in searched), "") if guess else ""
    if tool and tool_room:
        parts.append(f"The {tool} was seen in the {tool_room}.")
    elif tool and searched:  # never seen: where it was not, and the first unsearched room to try
        not_in = searched + [r for r in searched_in_notes(notes_read, tool) or () if r not in searched]
        parts.append(f"The {tool} was not in: {', '.join(not_in)}.")
        tool_room = next((d for d in doors if d not in not_in), "")
    scored = [a for a, r, _ in steps if a and r > 0]
    failed = [a for a, r, _ in steps if a and r < 0]
    # A target seen: the whole winning plan in the valid actions' wording, which the warm-started model
    # follows as it follows a curated tip. "Seen in the kitchen" alone left it in "turn on" loops; a
    # plan that stopped at the focus left find-animal's agent never picking up.
    target = next(iter(seen_in), "") or (missing[0] if guessed else "")
    room = seen_in.get(target, guessed)
    # A guessed room ends the plan: told "go to kitchen, then focus on X" with X not there, the model
    # focused on the kitchen's table (0.99: −100, the task failed); told "go to kitchen." it went there
    # (0.90–0.99) and back out (1.00), and a record that then saw X gives the whole plan.
    plan = _plan(task_description, target, room, start, tool, tool_room, adjacent, reach_only=target not in seen_in) if target else []  # fmt: skip
    if plan and finishing_action(task_description, target):
        # A whole plan alone, after a win too: next to "Actions that scored: go to kitchen[, …]." the
        # model replayed "go to kitchen" in the kitchen instead of focusing (P(focus) 0.37–0.58 with
        # that sentence, 0.95–0.97 with the plan alone; shipped warm start, trap-light-bulb variations 0, 1,
        # 36, 37; water-plant's first step 0.01 → 0.99).
        parts.append("Next time: " + ", then ".join(plan) + ".")
    else:  # no plan, or one that cannot name the finish (ScienceWorld's "move it to …"): the record too
        parts += ["Actions that scored: " + ", ".join(dict.fromkeys(scored)) + "."] if scored else []
        parts += [f"Action that failed the task: {failed[-1]}."] if failed else []
        parts += ["Next time: " + ", then ".join(plan) + "."] if plan and plan[-1] not in scored else []
    return f"{RECORD_PREFIX} " + " ".join(parts) if parts else ""


def _plan(
    task_description: str, target: str, room: str, start: str, tool: str, tool_room: str,
    adjacent: dict[str, set[str]], *, reach_only: bool = False,
) -> list[str]:  # fmt: skip
    """The winning actions as the record knows them: to the tool's room and pick it up (when the task
    names a tool), to `room`, focus, finish; with `reach_only` (a guessed room) it ends on reaching
    `room`. [] when a tool is needed and no room is known or left to try for it: a plan without it
    could not be finished ("water X" is valid only while holding the can)."""
    plan: list[str] = []
    here = start
    if tool:
        if not tool_room:
            return []
        plan += [f"go to {r}" for r in _route(here, tool_room, adjacent)] + [f"pick up {tool}"]
        here = tool_room
    # From the start the plan always names the room, even when no route is known (a start room unknown,
    # or ScienceWorld's observations, which name no doors); after the tool, only the walk still left.
    walk = _route(here, room, adjacent) if here != room else []
    plan += [f"go to {r}" for r in (walk if walk or tool else [room])]
    if reach_only:
        return plan
    finish = finishing_action(task_description, target)
    return plan + [f"focus on {target}"] + ([finish] if finish else [])


def _route(start: str, goal: str, adjacent: dict[str, set[str]]) -> list[str]:
    """The rooms to walk through from `start` to `goal` over the doors the episode saw (shortest,
    ties broken by name; `goal` alone when the seen doors do not connect them)."""
    if start == goal:
        return []
    previous: dict[str, str] = {start: start}
    frontier = [start]
    while frontier and goal not in previous:
        nxt: list[str] = []
        for room in frontier:
            for d in sorted(adjacent.get(room, ())):
                if d not in previous:
                    previous[d] = room
                    nxt.append(d)
        frontier = nxt
    if goal not in previous:
        return [goal]
    path = [goal]
    while previous[path[-1]] != start:
        path.append(previous[path[-1]])
    return path[::-1]


_DOORS = re.compile(r"Doors lead to: ([^.]*)\.")
_NOT_IN = re.compile(r"The ([^.]+?) was not in: ([^.]*)\.")  # one sentence: not "…seen in R. The can"


def _doors(observation: str) -> list[str]:
    """Rooms the observation's "Doors lead to: the kitchen, the workshop." names, in order."""
    return [
        re.sub(r"^the\s+", "", d.strip()) for m in _DOORS.findall(observation) for d in m.split(",") if d.strip()
    ]


def _seen_in_notes(notes: Sequence[str], thing: str) -> str:
    """The room a record line among `notes` saw `thing` in ("The X was seen in the R."); "" if none."""
    for note in notes:
        m = re.search(rf"The {re.escape(thing)} was seen in the ([^.]+)\.", note)
        if m:
            return m.group(1).strip()
    return ""


def searched_in_notes(notes: Sequence[str], target: str) -> list[str] | None:
    """Rooms that record lines among `notes` say were searched without finding `target`, in order;
    None when one of them says where `target` was seen (the room is known: nothing to guess).

    >>> searched_in_notes(["[from the record] The frog was not in: hallway, kitchen. Next time: …"], "frog")
    ['hallway', 'kitchen']
    """
    if any(f"The {target} was seen in the " in note for note in notes):
        return None
    rooms: list[str] = []
    for note in notes:
        for what, where in _NOT_IN.findall(note):
            if what == target:
                rooms += [r.strip() for r in where.split(",") if r.strip() and r.strip() not in rooms]
    return rooms


_THEN = re.compile(
    r"\bThen,?\s+(\w+) it(?: (on|off|up|down|in|out))?(?:\s+with\b[^.]*)?\s*(?:\.|$)", re.IGNORECASE
)


_WITH = re.compile(r"\bThen,?\s+\w+ it\b[^.]*?\bwith (?:the |a |an )?([^.]+?)\s*(?:\.|$)", re.IGNORECASE)


def tool_of(task_description: str) -> str:
    """The object the description's "Then, <verb> it with the <tool>." sentence names; "" when none.

    >>> tool_of("Your task is to water the red flower. Then, water it with the watering can.")
    'watering can'
    >>> tool_of("Your task is to turn on the red light bulb. Then, turn it on.")
    ''
    """
    m = _WITH.search(task_description)
    return m.group(1).strip() if m else ""


def finishing_action(task_description: str, target: str) -> str:
    """The action that finishes the task after the focus, in the valid actions' verb-object wording,
    read from the description's "Then, <verb> it [particle] [with …]." sentence; "" when it has none
    or another form (ScienceWorld's "Then, move it to the red box …" names a second object).

    >>> finishing_action("Your task is to find the frog. First, focus on the frog. Then, pick it up.", "frog")
    'pick up frog'
    >>> finishing_action("Your task is to water the red flower. Then, water it with the watering can.", "red flower")
    'water red flower'
    """
    m = _THEN.search(task_description)
    if not m:
        return ""
    verb, particle = m.group(1).lower(), m.group(2)
    return f"{verb} {particle.lower()} {target}" if particle else f"{verb} {target}"


def _items(contents: str) -> set[str]:
    """The objects of a room's "you see" list, articles dropped: whole names, so that the target
    "rabbit" is not found in a room that holds only "a toy rabbit" (a trap's decoy)."""
    parts = re.split(r",\s*|\s+and\s+", contents)
    return {re.sub(r"^(?:a|an|the|some)\s+", "", p.strip().rstrip(".")) for p in parts if p.strip()}


def episode_record(episode: Episode) -> str:
    """`record_line` of a played episode; the first observation is read from step 0's user message."""
    if not episode.steps:
        return ""
    first = ("", 0.0, episode.steps[0].user_message)
    steps = [(s.action or s.sample.text, s.reward, s.observation) for s in episode.steps]
    read = list(dict.fromkeys(t.text for s in episode.steps for t in s.tips))
    return record_line(_task_description(episode), [first, *steps], read)


def _task_description(episode: Episode) -> str:
    first = episode.steps[0].user_message if episode.steps else ""
    m = re.search(r"Task: (.*?)(?:\n|$)", first) or re.search(r"Your task: (.*?)(?:\n|$)", first)
    return m.group(1) if m else ""


def with_record(tip: str, episode: Episode) -> str:
    """The stored tip: the structured record line, then the model's own sentence marked as such
    (a fallback tip, which only restates the score and actions, is dropped when a record exists)."""
    record = episode_record(episode)
    if not record:
        return tip
    if not tip or tip.startswith(FALLBACK_PREFIX):
        return record
    return _cap_words(f"{record} {OWN_NOTE_PREFIX} {tip}")


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
