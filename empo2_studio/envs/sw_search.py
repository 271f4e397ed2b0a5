"""The record line of a ScienceWorld find task: the rooms an episode searched, and what it found.

ScienceWorld's find tasks never name their target: "Your task is to find a(n) animal. First, focus on
the thing. Then, move it to the red box in the kitchen." (find-animal; find-plant, find-living-thing and
find-non-living-thing word it the same way). `envs.room_notes` looks for the object a task says to focus
on, here "the thing", so on these tasks it could only list the actions that scored (on find-animal,
"teleport to kitchen": the task's partial credit for the box's room, which points away from the animals;
docs/notebook/2026-12-07-sw-race-probe.md). This line reads what an episode can know instead:

- **found**: a "focus on X" that scored means X is a(n) <category>, in the room the agent stood in (or
  picked X up in, when it carried X there first). The
  line is the whole plan in the valid actions' words and nothing else, the form the ScienceWorld adapter
  follows best (P(whole plan) along it 0.84 on six dev variations, against 0.16 for "The animal was the
  dove, in the outside: …" and 0.36 for "… in the outside. Next time: …";
  docs/notebook/2026-12-07-sw-search-record.md):

      [from the record] Next time: teleport to outside, then look around, then focus on dove, then pick
      up dove, then teleport to kitchen, then move dove to red box.

- **not found**: every room the episode stood in (start, "You teleport to the X.", "This room is called
  the X.") and the rooms the notes it read list, then one room to try next:

      [from the record] No animal was found in: hallway, kitchen. Next time: teleport to workshop, then look around.

  The room to try is drawn at random (seeded by `key`) among the ten rooms of the house and yard not yet
  stood in. Standing in a room is not searching it (an agent outside that focused on the axe stood among
  the animals), so once every room was stood in, the draw starts a second pass over all but the room the
  episode ended in. A memory step shows one note, the best-scored (`prompts.compact_notes_cut`), so a
  memory group goes where that note says: about one new room per trial. The draw knows which rooms exist,
  not where anything is.

Departure (not in the paper): the paper's 7B policy writes its own tips; the embedded 135M model writes
nothing a later episode can use on ScienceWorld, so this line stands in for that reflection
(`EnvConfig.record_line`, docs/departures.md).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from empo2_studio.envs.places import SCIENCEWORLD_PLACES, place_in
from empo2_studio.envs.room_notes import RECORD_PREFIX
from empo2_studio.envs.task_text import PLAN_SEPARATOR
_FIND = re.compile(r"\bfind an?(?:\(n\))? ([^.]+?)\.\s*First, focus on the thing\.", re.IGNORECASE)
_BOX = re.compile(r"move it to the (?P<box>[\w ]+? box) in the (?P<room>[\w ]+?)\.")
_FOUND = re.compile(r"Next time: teleport to ([\w ]+?), then look around, then focus on ([\w -]+?), then ")
_NOT_FOUND = re.compile(r"No ([\w -]+?) was found in: ([^.]*)\.")


def find_category(task_description: str) -> str:
    """The category a ScienceWorld find task asks for ("animal", "living thing"); "" for any other task,
    and for a find task whose text names no box and room (`find_plan` could not finish it).

    >>> find_category("Your task is to find a(n) animal. First, focus on the thing. Then, move it to the red box in the kitchen.")
    'animal'
    >>> find_category("Your task is to turn on the red light bulb. First, focus on the red light bulb.")
    ''
    """
    m = _FIND.search(task_description)
    return m.group(1).strip() if m and _BOX.search(task_description) else ""


def find_plan(task_description: str, target: str, room: str) -> list[str]:
    """The winning actions of a find task once its target and the target's room are known: to the room,
    look, focus, pick it up, to the box's room (read from the task text), into the box.

    >>> find_plan("Your task is to find a(n) animal. First, focus on the thing. Then, move it to the red box in the kitchen.",
    ...           "dove", "outside")
    ['teleport to outside', 'look around', 'focus on dove', 'pick up dove', 'teleport to kitchen', 'move dove to red box']

    Raises:
        ValueError: the task text names no box and room ("… move it to the red box in the kitchen.").
    """
    m = _BOX.search(task_description)
    if m is None:
        raise ValueError(f"the task text names no box and room: {task_description!r}")
    return [f"teleport to {room}", "look around", f"focus on {target}", f"pick up {target}",
            f"teleport to {m['room']}", f"move {target} to {m['box']}"]  # fmt: skip


def search_record(
    task_description: str, steps: Sequence[tuple[str, float, str]], notes_read: Sequence[str] = (), *, key: str = ""
) -> str:
    """The record line of one episode of a find task (module docstring); "" for a task that is not one
    (or a find task whose text names no box: no plan could be finished). Never raises.

    Args:
        task_description: the task text (`find_category` reads the category, `find_plan` the box).
        steps: (executed action, reward, observation after it) per step, the first observation as a step
            with action "" (`room_notes.episode_steps`). Rewards are score differences (−100…100 scale).
        notes_read: the notes the episode read; only their record part (after the last `RECORD_PREFIX`) is
            read, never the model's own sentence before it. A found plan among them is repeated when this
            episode found nothing itself and did not try that focus and fail; the rooms their not-found
            lines list count as stood in.
        key: seeds the draw of the room to try (the same key, the same line).
    """
    category = find_category(task_description)
    if not category:
        return ""
    stood: list[str] = []
    here: str | None = None
    held_from: dict[str, str] = {}  # thing picked up → the room it was picked up in
    failed: set[str] = set()
    for action, reward, observation in steps:
        if action.startswith("focus on "):
            target = action.removeprefix("focus on ")
            if reward > 0 and (room := held_from.get(target, here)):  # carried here: plan from where it was
                return _found(task_description, target, room)
            failed.add(target)
        if action.startswith("pick up ") and here:
            held_from.setdefault(action.removeprefix("pick up "), here)
        here = place_in(observation, SCIENCEWORLD_PLACES) or here
        if here and here not in stood:
            stood.append(here)
    records = [note.rpartition(RECORD_PREFIX)[2] for note in notes_read if RECORD_PREFIX in note]
    for record in records:  # a find task's notes are its own variation's: a plan one of them found holds
        if (m := _FOUND.search(record)) and m.group(1) in SCIENCEWORLD_PLACES and m.group(2) not in failed:
            return _found(task_description, m.group(2), m.group(1))
    for record in records:
        for what, rooms in _NOT_FOUND.findall(record):
            if what == category:
                stood += [r for r in (x.strip() for x in rooms.split(",")) if r in SCIENCEWORLD_PLACES and r not in stood]
    if not stood:
        return ""
    # Standing in a room is not searching it (outside, an agent that focused on the axe stood among the
    # animals), so once every room was stood in without a find, a second pass draws from all but the room
    # this episode ended in.
    left = [p for p in SCIENCEWORLD_PLACES if p not in stood] or [p for p in SCIENCEWORLD_PLACES if p != here]
    return (f"{RECORD_PREFIX} No {category} was found in: {', '.join(stood)}. "
            f"Next time: teleport to {random.Random(key).choice(left)}{PLAN_SEPARATOR}look around.")


def _found(task_description: str, target: str, room: str) -> str:
    return f"{RECORD_PREFIX} Next time: {PLAN_SEPARATOR.join(find_plan(task_description, target, room))}."
