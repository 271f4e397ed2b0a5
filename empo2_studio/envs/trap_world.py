"""The trap's world as data: rooms, doors, objects, the six tasks of two families and their layouts.

Two families of the same three tasks (light bulb, animal, flower), 48 layouts each, split train 0–23,
dev 24–35, test 36–47 (`SPLIT_START`):

- **search** (`trap-light-bulb`, `trap-find-animal`, `trap-water-plant`): a layout draws the target's
  room (any of the four side rooms), its colour / animal (one of 4) and where the third decoy stands.
  Test layouts hide targets in rooms their training layouts did not, so a memory-free policy has to
  *search* the house.
- **fixed** (`trap-light-bulb-fixed`, `trap-find-animal-fixed`, `trap-water-plant-fixed`): the paper's
  structure (EMPO² §5.1; in ScienceWorld's power-component every variation keeps its parts in the
  workshop). Every layout of a task keeps the target (and the watering can) in the same room; a layout
  draws which target (one of 6 colours / animals), which look-alikes are decoys and where they stand —
  two always in the hallway (the focus-first trap), one beside the target in half the layouts, one in
  another side room in three quarters. What transfers from training to test is "go to the room, focus
  on the object the task names", not a room per layout. No fixed layout repeats a search layout, so the
  shipped warm start (trained on search dev layouts, scripts/make_warmstart.py) never saw one.

- **chain** (`trap-fetch-two`): a long-horizon task (issue 49 item 4): fetch a battery from one side room
  and a light bulb from a second, then turn on the lamp in a third. A layout draws the three rooms (24
  ordered triples of distinct side rooms) × where a light bulb of another colour stands (beside the lamp
  or in the fourth side room) = 48, and its colours; the task's own rules live in `envs.trap_chain`.

Scores are on ScienceWorld's −100…100 scale; the rules live in `envs.trap.TrapEnv`.
"""

from __future__ import annotations

import functools
import itertools
import random
from collections import deque
from dataclasses import dataclass

START_ROOM = "hallway"
SIDE_ROOMS = ("kitchen", "workshop", "greenhouse", "bedroom")
DOORS = {
    "hallway": ("kitchen", "workshop", "greenhouse", "bedroom"),
    "kitchen": ("hallway", "workshop"),
    "workshop": ("hallway", "kitchen"),
    "greenhouse": ("hallway", "bedroom"),
    "bedroom": ("hallway", "greenhouse"),
}
"""Rooms and the doors between them: the hallway reaches every room, side rooms come in pairs."""
FURNITURE = {
    "hallway": "coat rack",
    "kitchen": "table",
    "workshop": "workbench",
    "greenhouse": "bench",
    "bedroom": "bed",
}
CAN = "watering can"
BATTERY = "battery"
"""The chain family's first part to fetch (`envs.trap_chain`)."""
FAMILIES = ("search", "fixed", "chain")

N_PER_SPLIT = {"train": 24, "dev": 12, "test": 12}
SPLIT_START = {"train": 0, "dev": 24, "test": 36}
N_LAYOUTS = 48


@dataclass(frozen=True)
class TaskSpec:
    kind: str
    """"light-bulb", "find-animal" or "water-plant": which rules apply (`TrapEnv`)."""
    family: str
    """"search" (the target's room varies), "fixed" (it never does) or "chain" (three rooms in order);
    see the module docstring."""
    attrs: tuple[str, ...]
    """The values a variation's target is drawn from (colours or animals): 4 (search) or 6 (fixed)."""
    noun: str
    """Object name template, "{}" is the attribute."""
    verb: str
    """The finishing action ("turn on", "pick up", "water")."""
    description: str
    """The task text: "{t}" is the target's name, "{a}" its attribute (colour or animal)."""
    step_limit: int
    target_room: str | None = None
    """fixed family: the room every layout hides the target in (None: search, drawn per layout)."""
    can_room: str | None = None
    """fixed water-plant: the room every layout keeps the watering can in."""


_KINDS = {
    "light-bulb": dict(
        noun="{} light bulb", verb="turn on", step_limit=12,
        description="Your task is to turn on the {t}. First, focus on the {t}. Then, turn it on.",
    ),
    "find-animal": dict(
        noun="{}", verb="pick up", step_limit=12,
        description="Your task is to find the {t}. First, focus on the {t}. Then, pick it up.",
    ),
    "water-plant": dict(
        noun="{} flower", verb="water", step_limit=15,
        description=(
            "Your task is to water the {t}. First, focus on the {t}. "
            "Then, water it with the watering can."
        ),
    ),
}
_ATTRS = {
    "light-bulb": ("red", "blue", "green", "yellow", "orange", "purple"),
    "find-animal": ("frog", "turtle", "rabbit", "parrot", "hamster", "lizard"),
    "water-plant": ("red", "blue", "yellow", "purple", "white", "orange"),
}
_FIXED_ROOMS = {"light-bulb": ("workshop", None), "find-animal": ("greenhouse", None), "water-plant": ("greenhouse", "workshop")}


def _spec(kind: str, family: str) -> TaskSpec:
    attrs = _ATTRS[kind][:4] if family == "search" else _ATTRS[kind]
    room, can = _FIXED_ROOMS[kind] if family == "fixed" else (None, None)
    return TaskSpec(kind=kind, family=family, attrs=attrs, target_room=room, can_room=can, **_KINDS[kind])  # type: ignore[arg-type]


TASKS: dict[str, TaskSpec] = {
    **{f"trap-{kind}" + ("" if family == "search" else "-fixed"): _spec(kind, family)
       for family in ("search", "fixed")
       for kind in _KINDS},
    "trap-fetch-two": TaskSpec(
        kind="fetch-two", family="chain", attrs=("red", "blue", "green", "yellow"), noun="{} lamp",
        verb="turn on", step_limit=20,
        description=(
            "Your task is to turn on the {t}. First, pick up the battery and the {a} light bulb. "
            "Then, focus on the {t}. Then, turn it on."
        ),
    ),
}
"""Every trap task by name: the search family first (the env's default task is its light bulb), then the
fixed family, then the chain family's `trap-fetch-two` (step limit 20: its gold path is 8–9 actions)."""


@dataclass(frozen=True)
class Layout:
    """One variation: where every object starts (object name → room)."""

    task: str
    target: str
    target_room: str
    objects: dict[str, str]


@functools.cache
def layouts(task: str) -> tuple[Layout, ...]:
    """The 48 layouts of `task` in variation order (a fixed shuffle: the same on every machine).
    Computed once per process; treat the layouts' `objects` as read only."""
    spec = TASKS[task]
    if spec.family == "chain":
        triples = list(itertools.product(itertools.permutations(range(4), 3), range(2)))
        random.Random(f"trap:{task}").shuffle(triples)
        return tuple(_chain_layout(task, spec, rooms, variant) for rooms, variant in triples)
    if spec.family == "search":
        combos = list(itertools.product(range(4), range(4), range(3)))
        # A fixed string seed: the same order on every machine and Python version.
        random.Random(f"trap:{task}").shuffle(combos)
        return tuple(_search_layout(task, spec, r, a, k) for r, a, k in combos)
    seen = {_key(lay) for lay in layouts(f"trap-{spec.kind}")}
    pairs = list(itertools.product(range(6), range(8)))
    random.Random(f"trap:{task}").shuffle(pairs)
    return tuple(_fixed_layout(task, spec, a, k, seen) for a, k in pairs)


def _key(lay: Layout) -> tuple:
    return tuple(sorted(lay.objects.items()))


def _search_layout(task: str, spec: TaskSpec, room_i: int, attr_i: int, variant: int) -> Layout:
    target_room = SIDE_ROOMS[room_i]
    target = spec.noun.format(spec.attrs[attr_i])
    decoys = [spec.noun.format(a) for j, a in enumerate(spec.attrs) if j != attr_i]
    # The hallway always holds two look-alikes (the reflex trap); the third goes to the target
    # room (variant 0) or to another side room.
    away = decoys.pop(variant)
    away_room = target_room if variant == 0 else SIDE_ROOMS[(room_i + variant) % 4]
    objects = {FURNITURE[r]: r for r in DOORS}
    objects.update({d: START_ROOM for d in decoys})
    objects[away] = away_room
    objects[target] = target_room
    if spec.kind == "find-animal":
        objects[f"toy {target}"] = START_ROOM
    if spec.kind == "water-plant":
        objects[CAN] = (START_ROOM, target_room, SIDE_ROOMS[(room_i + 2) % 4])[variant]
    return Layout(task, target, target_room, objects)


def _fixed_layout(task: str, spec: TaskSpec, attr_i: int, arrangement: int, seen: set) -> Layout:
    """Target `attrs[attr_i]` in the task's fixed room; `arrangement` (0–7): bit 0 = a decoy beside the
    target, bits 1–2 = none (0) or which other side room holds one more decoy. The decoys' names are
    drawn (seeded per layout) and redrawn while the layout would repeat a search layout (`seen`)."""
    room = spec.target_room
    assert room is not None
    target = spec.noun.format(spec.attrs[attr_i])
    others = [room_ for room_ in SIDE_ROOMS if room_ != room]
    rng = random.Random(f"trap:{task}:{attr_i}:{arrangement}")
    while True:
        pool = [spec.noun.format(a) for j, a in enumerate(spec.attrs) if j != attr_i]
        rng.shuffle(pool)
        objects = {FURNITURE[r]: r for r in DOORS}
        objects.update({d: START_ROOM for d in pool[:2]})
        placed = pool[2:]
        if arrangement & 1:
            objects[placed.pop(0)] = room
        if arrangement >> 1:
            objects[placed.pop(0)] = others[(arrangement >> 1) - 1]
        objects[target] = room
        if spec.kind == "find-animal":
            objects[f"toy {target}"] = START_ROOM
        if spec.kind == "water-plant":
            assert spec.can_room is not None
            objects[CAN] = spec.can_room
        lay = Layout(task, target, room, objects)
        if _key(lay) not in seen:
            return lay


def bulb_of(lamp: str) -> str:
    """The light bulb that fits `lamp` (chain family: "red lamp" → "red light bulb")."""
    return lamp.removesuffix("lamp") + "light bulb"


def _chain_layout(task: str, spec: TaskSpec, rooms: tuple[int, ...], variant: int) -> Layout:
    """`rooms`: the side rooms (indices) of the battery, the bulb and the lamp; `variant` 0 puts a light
    bulb of another colour beside the lamp, 1 in the fourth side room. The colours (target, the two
    hallway lamps of the focus-first trap, the decoy bulb) are drawn by a generator seeded per layout."""
    battery_room, bulb_room, lamp_room = (SIDE_ROOMS[i] for i in rooms)
    fourth = next(r for i, r in enumerate(SIDE_ROOMS) if i not in rooms)
    colours = list(spec.attrs)
    random.Random(f"trap:{task}:{''.join(map(str, rooms))}:{variant}").shuffle(colours)
    target = spec.noun.format(colours[0])
    objects = {FURNITURE[r]: r for r in DOORS}
    objects.update({spec.noun.format(c): START_ROOM for c in colours[1:3]})
    objects[BATTERY] = battery_room
    objects[bulb_of(target)] = bulb_room
    objects[bulb_of(spec.noun.format(colours[3]))] = lamp_room if variant == 0 else fourth
    objects[target] = lamp_room
    return Layout(task, target, lamp_room, objects)


def route(start: str, goal: str) -> list[str]:
    """Shortest list of rooms to walk through from `start` to `goal` (excluding `start`)."""
    prev: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        room = queue.popleft()
        for nxt in DOORS[room]:
            if nxt not in prev:
                prev[nxt] = room
                queue.append(nxt)
    path, room = [], goal
    while room != start:
        path.append(room)
        room = prev[room]  # type: ignore[assignment]
    return path[::-1]
