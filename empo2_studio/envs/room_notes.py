"""The record line: what a finished episode of a room world found, in the words its actions use.

The trap and ScienceWorld describe a room as "This room is called the kitchen. In it, you see: a table,
a green light bulb. Doors lead to: the hallway, the workshop." This module reads that text, and the task
description (`envs.task_text`), to write one line about an episode without any model call:

    [from the record] The green light bulb was seen in the kitchen.
    Next time: go to kitchen, then focus on green light bulb, then turn on green light bulb.

Both environments return it from `summarise_episode` (the `TextEnv` hook), and the memory stores it
after the tip the policy wrote (`memory.reflection.with_record`).

Departure (not in the paper): the embedded 135M model writes mostly unusable tips, so each tip carries
this line next to the model's own sentence. It names rooms and actions in the environment's own
wording, which a small model can follow. The plan for an unseen target is there because the model goes
where a note points: next to "…was not in: hallway, kitchen" alone it went to the kitchen (P 0.65–0.69,
trap-light-bulb); with the plan after it, to the plan's room (0.95–0.98) and never to the searched one
(≤ 0.03). It stops at that room: a guessed "…, then focus on X" made the model focus on whatever the
room held when X was not there (0.99, −100).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from empo2_studio.envs.task_text import finishing_action, focus_items, tool_of
from empo2_studio.types import Episode

RECORD_PREFIX = "[from the record]"
"""Marks the structured, trajectory-derived line of a tip (not written by the model)."""

_ROOM = re.compile(r"This room is called the ([^.]+)\. In it, you see: (.*?)(?:\. Doors lead to|$)")
_DOORS = re.compile(r"Doors lead to: ([^.]*)\.")
_NOT_IN = re.compile(r"The ([^.]+?) was not in: ([^.]*)\.")  # one sentence: not "…seen in R. The can"


def episode_record(episode: Episode) -> str:
    """`record_line` of a played episode: its task description, first observation, each step's
    (executed action, reward, observation) and the notes it read; "" for an episode without steps."""
    if not episode.steps:
        return ""
    return record_line(episode.task_description, episode_steps(episode), notes_read(episode))


def notes_read(episode: Episode) -> list[str]:
    """The distinct tip texts a played episode's steps showed, in the order first shown."""
    return list(dict.fromkeys(t.text for s in episode.steps for t in s.tips))


def episode_steps(episode: Episode) -> list[tuple[str, float, str]]:
    """The (executed action, reward, observation after it) of each step of a played episode, led by its
    first observation as a step with action "" and reward 0: what `record_line` and `walk_steps` read."""
    first = ("", 0.0, episode.first_observation)
    return [first, *((s.action or s.sample.text, s.reward, s.observation) for s in episode.steps)]


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
    """
    targets, tool = focus_items(task_description), tool_of(task_description)
    walk = walk_steps(steps, [*targets, tool])
    found = _Findings(walk.seen_in, list(walk.searched))
    parts = _where(found, walk, targets, tool, notes_read, guess=guess)
    # A target seen: the whole winning plan in the valid actions' wording, which the warm-started model
    # follows as it follows a curated tip. "Seen in the kitchen" alone left it in "turn on" loops; a
    # plan that stopped at the focus left find-animal's agent never picking up.
    target = next(iter(found.seen_in), "") or (found.missing[0] if found.guessed else "")
    room = found.seen_in.get(target, found.guessed)
    # A guessed room ends the plan: told "go to kitchen, then focus on X" with X not there, the model
    # focused on the kitchen's table (0.99: −100, the task failed); told "go to kitchen." it went there
    # (0.90–0.99) and back out (1.00), and a record that then saw X gives the whole plan.
    plan = (
        _plan(task_description, target, room, walk.start, tool, found.tool_room, walk.adjacent,
              reach_only=target not in found.seen_in)
        if target else []
    )  # fmt: skip
    parts += _closing(plan, finishing_action(task_description, target) if plan else "", steps)
    return f"{RECORD_PREFIX} " + " ".join(parts) if parts else ""


@dataclass
class Walk:
    """What the observations of one episode showed (`walk_steps`)."""

    seen_in: dict[str, str] = field(default_factory=dict)
    """Thing looked for → the first room it was seen in."""
    searched: list[str] = field(default_factory=list)
    """Rooms seen, in order (the first is the start)."""
    doors: list[str] = field(default_factory=list)
    """Rooms any observation's doors lead to, in order."""
    adjacent: dict[str, set[str]] = field(default_factory=dict)
    """Room → rooms one door away (both directions), from observations that describe one room."""
    objects: list[str] = field(default_factory=list)
    """Every object a room description listed, in order of first sight (articles dropped)."""

    @property
    def start(self) -> str:
        return self.searched[0] if self.searched else ""


def walk_steps(steps: Sequence[tuple[str, float, str]], things: Sequence[str]) -> Walk:
    """Read every observation of `steps` ((action, reward, observation) as `episode_steps` gives them):
    the rooms described, the objects they listed, where each of `things` was first seen, the doors named."""
    walk = Walk()
    for _, _, observation in steps:
        rooms = _ROOM.findall(observation)
        for room, contents in rooms:
            room = room.strip()
            items = _items(contents)
            walk.objects += sorted(i for i in items if i not in walk.objects)
            for thing in things:
                if thing and thing in items and thing not in walk.seen_in:
                    walk.seen_in[thing] = room
            if room not in walk.searched:
                walk.searched.append(room)
        walk.doors += [d for d in _doors(observation) if d not in walk.doors]
        if len(rooms) == 1:  # the doors named are this room's: remember both directions
            room = rooms[0][0].strip()
            for d in _doors(observation):
                walk.adjacent.setdefault(room, set()).add(d)
                walk.adjacent.setdefault(d, set()).add(room)
    return walk


@dataclass
class _Findings:
    """Where the targets and the tool were (or were not), with the notes read taken into account."""

    seen_in: dict[str, str]
    searched: list[str]
    missing: list[str] = field(default_factory=list)
    guessed: str = ""
    """The room to try for the first missing target ("" when none or not guessing)."""
    tool_room: str = ""
    """Where the tool was seen, or the first unsearched room to try for it."""


def _where(
    found: _Findings, walk: Walk, targets: Sequence[str], tool: str, notes_read: Sequence[str], *, guess: bool
) -> list[str]:
    """The "was seen in" / "was not in" sentences; fills `found`'s missing, guessed and tool_room."""
    found.tool_room = found.seen_in.pop(tool, "") or _seen_in_notes(notes_read, tool) if tool else ""
    for target in targets:  # a room a note it read saw the target in is known too: keep its plan
        if target not in found.seen_in and (room := _seen_in_notes(notes_read, target)):
            found.seen_in[target] = room
    parts = [f"The {t} was seen in the {room}." for t, room in found.seen_in.items()]
    found.missing = [t for t in targets if t not in found.seen_in]
    searched = found.searched
    if found.missing and searched:
        searched += [r for r in searched_in_notes(notes_read, found.missing[0]) or () if r not in searched]
        parts.append(f"The {found.missing[0]} was not in: {', '.join(searched)}.")
        found.guessed = next((d for d in walk.doors if d not in searched), "") if guess else ""
    if tool and found.tool_room:
        parts.append(f"The {tool} was seen in the {found.tool_room}.")
    elif tool and searched:  # never seen: where it was not, and the first unsearched room to try
        not_in = searched + [r for r in searched_in_notes(notes_read, tool) or () if r not in searched]
        parts.append(f"The {tool} was not in: {', '.join(not_in)}.")
        found.tool_room = next((d for d in walk.doors if d not in not_in), "")
    return parts


def _closing(plan: list[str], finish: str, steps: Sequence[tuple[str, float, str]]) -> list[str]:
    """The line's last sentences: the whole plan alone when it names the finishing action, else what
    scored, what failed and the plan while its last step never scored."""
    if plan and finish:
        # A whole plan alone, after a win too: next to "Actions that scored: go to kitchen[, …]." the
        # model replayed "go to kitchen" in the kitchen instead of focusing (P(focus) 0.37–0.58 with
        # that sentence, 0.95–0.97 with the plan alone; trap-light-bulb variations 0, 1, 36, 37;
        # water-plant's first step 0.01 → 0.99).
        return ["Next time: " + ", then ".join(plan) + "."]
    # No plan, or one that cannot name the finish (ScienceWorld's "move it to …"): the record too.
    scored = [a for a, r, _ in steps if a and r > 0]
    failed = [a for a, r, _ in steps if a and r < 0]
    parts = ["Actions that scored: " + ", ".join(dict.fromkeys(scored)) + "."] if scored else []
    parts += [f"Action that failed the task: {failed[-1]}."] if failed else []
    parts += ["Next time: " + ", then ".join(plan) + "."] if plan and plan[-1] not in scored else []
    return parts


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


def _doors(observation: str) -> list[str]:
    """Rooms the observation's "Doors lead to: the kitchen, the workshop." names, in order."""
    return [
        re.sub(r"^the\s+", "", d.strip()) for m in _DOORS.findall(observation) for d in m.split(",") if d.strip()
    ]


def _items(contents: str) -> set[str]:
    """The objects of a room's "you see" list, articles dropped: whole names, so that the target
    "rabbit" is not found in a room that holds only "a toy rabbit" (a trap's decoy)."""
    parts = re.split(r",\s*|\s+and\s+", contents)
    return {re.sub(r"^(?:a|an|the|some)\s+", "", p.strip().rstrip(".")) for p in parts if p.strip()}


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
