"""The trap's chain family: `trap-fetch-two`, a task whose gold path visits three rooms in order.

Issue 49 item 4 (a long-horizon check for the structured tip memory, docs/memory-structure.md): "Your
task is to turn on the red lamp. First, pick up the battery and the red light bulb. Then, focus on the
red lamp. Then, turn it on." The battery lies in one side room, the red light bulb in a second and the
red lamp stands in a third, so the shortest win walks hallway → battery's room → bulb's room → lamp's
room, and a note written while fetching the battery is about another step than one written at the lamp.

Rules (the rest are every trap task's, `envs.trap.TrapEnv`):
- "pick up" takes the battery or any light bulb in the room; a light bulb of another colour gives nothing.
- Focusing on anything but the target lamp sets the score to −100 and ends the episode (the hallway holds
  two lamps of other colours: the focus-first trap). So does focusing on the target lamp *before*
  holding both the battery and the matching bulb: the fetches come first, the act last.
- "turn on" lights the target lamp only while both are held; otherwise the lamp stays off (no change).
- Score (−100 … 100, a function of the state, 25 per milestone like trap-water-plant): +25 holding the
  battery, +25 holding the matching light bulb, +25 focused on the target lamp, +25 once it is on.
  Nothing is ever put down, so "holding" is "has picked up".

Layouts (`envs.trap_world`, with the other families'): the 24 ordered triples of distinct side rooms
(battery, bulb, lamp) × 2 (a light bulb of another colour beside the lamp, or in the fourth side room) =
48, shuffled with a fixed string seed; each layout draws its colours (target, the two hallway lamps,
the decoy bulb) from a generator seeded by its own rooms. Split as every trap task: train 0–23, dev
24–35, test 36–47. No shipped adapter trained on this family (assets/warmstart/*/warmstart.json:
search-family trap layouts and ScienceWorld tasks only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from empo2_studio.envs.trap_world import BATTERY, START_ROOM, Layout, bulb_of, route

if TYPE_CHECKING:
    from collections.abc import Iterable

KIND = "fetch-two"
"""The chain family's `TaskSpec.kind` (the layouts: `trap_world._chain_layout`)."""


def chain_gold_path(lay: Layout) -> list[str]:
    """The winning actions in the description's order: to the battery, to the bulb, to the lamp, focus,
    turn on (8 or 9 actions; the shortest win, except in layouts where fetching the bulb first saves a step)."""
    actions, here = [], START_ROOM
    for item in (BATTERY, bulb_of(lay.target)):
        room = lay.objects[item]
        actions += [f"go to {r}" for r in route(here, room)] + [f"pick up {item}"]
        here = room
    actions += [f"go to {r}" for r in route(here, lay.target_room)]
    return actions + [f"focus on {lay.target}", f"turn on {lay.target}"]


def chain_where(lay: Layout) -> str:
    """Where the parts and the lamp are, as a curated tip opens: "The battery is in the kitchen, …"."""
    bulb = bulb_of(lay.target)
    return (f"The {BATTERY} is in the {lay.objects[BATTERY]}, the {bulb} in the {lay.objects[bulb]} "
            f"and the {lay.target} in the {lay.target_room}")  # fmt: skip


def chain_score(lay: Layout, inventory: Iterable[str], focused: str | None, on: Iterable[str]) -> float:
    """The score of a chain-family state that has not failed (module docstring), 0 … 100."""
    held = set(inventory)
    is_focused = focused == lay.target
    milestones = (BATTERY in held, bulb_of(lay.target) in held, is_focused, is_focused and lay.target in set(on))
    return 25.0 * sum(milestones)


def chain_actions(here: Iterable[str]) -> set[str]:
    """The chain family's own valid actions for the objects in the room: pick up the battery and the
    light bulbs, turn on the lamps (focus, go to and look around are every trap task's)."""
    acts = set()
    for obj in here:
        if obj == BATTERY or obj.endswith(" light bulb"):
            acts.add(f"pick up {obj}")
        if obj.endswith(" lamp"):
            acts.add(f"turn on {obj}")
    return acts


def chain_execute(st: Any, action: str) -> str | None:
    """Play a focus on the target lamp or a "turn on" (module docstring) on `st`, TrapEnv's episode state
    (`layout`, `inventory`, `on`, `focused`, `failed`), and return the observation; None for every other
    action (TrapEnv's own rules play it: moves, pick up, a focus on anything but the target)."""
    lamp = st.layout.target
    ready = BATTERY in st.inventory and bulb_of(lamp) in st.inventory
    if action == f"focus on {lamp}":
        if not ready:
            st.failed = True
            return (f"You focus on the {lamp} before holding the {BATTERY} and the {bulb_of(lamp)}: "
                    "the task has failed.")  # fmt: skip
        st.focused = lamp
        return f"You focus on the {lamp}."
    if action.startswith("turn on "):
        obj = action.removeprefix("turn on ")
        if obj == lamp and ready:
            st.on.add(obj)
            return f"You put the {BATTERY} and the {bulb_of(lamp)} in the {obj}. The {obj} is now on."
        return f"The {obj} stays off: it needs a {BATTERY} and a {bulb_of(obj)}."
    return None
