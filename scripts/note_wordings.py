"""Training wordings for the warm start: a correct trap note in many forms, built at random from parts.

`scripts/make_warmstart.py` trains the embedded model to act on notes written like these, so that a
teacher's own words work as well as the template `TrapEnv.curated_tip` writes. A note is a few parts,
shuffled: where the target is (and, for trap-water-plant, the watering can), sometimes what to do
(exact valid-action wording joined by one of several separators, or paraphrased verbs, or nothing, so
the model must infer the action from the facts), sometimes a warning about the look-alikes, sometimes a
sentence that says nothing useful. The target may be named in full, by its colour/animal or by a
partial name ("the green bulb").

The benchmark's wordings were written apart and are never read here; tests/test_warm_start_wordings.py
checks that no sentence of one appears in the other.

>>> import random
>>> from empo2_studio.envs.trap import TrapEnv
>>> note = training_note(TrapEnv().layout("trap-light-bulb", 24), random.Random(0))
>>> isinstance(note, str) and len(note) > 10
True
"""

from __future__ import annotations

import random

from empo2_studio.envs.trap import CAN, SIDE_ROOMS, START_ROOM, TASKS, Layout, _route

FACT = (
    "I saw the {name} in the {room}.",
    "The {name} can be found in the {room}.",
    "The {room} is where the {name} is.",
    "The {room} holds the {name}.",
    "The {name} was in the {room}.",
    "{Name} location: the {room}.",
    "Look for the {name} in the {room}.",
    "The {name} is located in the {room}.",
    "You can find the {name} in the {room}.",
    "The {name} you need is in the {room}.",
    "Target: {name}, room: {room}.",
    "The {name}? It's in the {room}.",
    "The {name} stays in the {room}.",
    "In the {room} there is the {name}.",
)
CAN_FACT = (
    "The watering can was in the {can_room}.",
    "I saw the watering can in the {can_room}.",
    "The {can_room} holds the watering can.",
    "Watering can location: the {can_room}.",
    "You can find the can in the {can_room}.",
    "The can for watering is in the {can_room}.",
    "Grab the watering can in the {can_room}.",
    "The watering can sits in the {can_room}.",
)
NOT_HERE = (
    "It is not in the hallway.",
    "The ones in the hallway are decoys.",
    "Ignore the look-alikes in the hallway.",
    "Do not focus on the things in the hallway.",
    "Anything else you focus on fails the task.",
    "The hallway only has look-alikes.",
)
FILLER = (
    "The greenhouse is warm.",
    "There is a bed in the bedroom.",
    "The workbench is in the workshop.",
    "The kitchen has a table.",
    "Take your time.",
    "This took me a few tries.",
    "The doors connect the hallway to every room.",
    "Last time I ran out of steps.",
    "Good luck!",
    "The coat rack is in the hallway.",
)
VERB_WORDS = {
    "trap-light-bulb": ("turn it on", "switch it on", "light it up", "turn on the {name}", "switch on the {name}"),
    "trap-find-animal": ("pick it up", "take it", "grab it", "pick up the {name}", "collect the {name}"),
    "trap-water-plant": ("water it", "give it water", "water the {name}", "pour water on it"),
}
SEPARATORS = (", then ", ". Then ", " and then ", ", ", " > ", " then ", " => ")


def names(layout: Layout, rng: random.Random) -> str:
    """The target named in full, or by a partial name (its colour/animal and a short noun)."""
    target = layout.target
    if layout.task == "trap-find-animal" or rng.random() < 0.6:
        return target
    attr = target.split()[0]
    short = {"trap-light-bulb": ("bulb", "lamp", "light", "light bulb"), "trap-water-plant": ("flower", "plant", "bloom")}
    return f"{attr} {rng.choice(short[layout.task])}"


def gold_actions(layout: Layout) -> list[str]:
    """The shortest winning plan in valid-action wording (as `TrapEnv.gold_path`, from the layout)."""
    acts, room = [], START_ROOM
    if layout.task == "trap-water-plant":
        acts += [f"go to {r}" for r in _route(room, layout.objects[CAN])] + [f"pick up {CAN}"]
        room = layout.objects[CAN]
    acts += [f"go to {r}" for r in _route(room, layout.target_room)]
    return acts + [f"focus on {layout.target}", f"{TASKS[layout.task].verb} {layout.target}"]


def _paraphrased_plan(layout: Layout, name: str, rng: random.Random) -> list[str]:
    steps = []
    if layout.task == "trap-water-plant":
        can_room = layout.objects[CAN]
        get = rng.choice(("get the watering can", "pick up the can", "fetch the watering can", "take the can"))
        steps.append(get if can_room == START_ROOM else f"{get} from the {can_room}")
    steps.append(rng.choice(("go to the {room}", "walk to the {room}", "head to the {room}", "enter the {room}")).format(room=layout.target_room))
    steps.append(rng.choice(("focus on it", "focus on the {name}", "focus on the {name} there")).format(name=name))
    steps.append(rng.choice(VERB_WORDS[layout.task]).format(name=name))
    return steps


def action_part(layout: Layout, name: str, rng: random.Random) -> str:
    """What to do: the exact plan, a paraphrased plan, or the last steps only."""
    r = rng.random()
    steps = gold_actions(layout) if r < 0.4 else _paraphrased_plan(layout, name, rng)
    if rng.random() < 0.15:
        steps = [f"({i}) {s}" for i, s in enumerate(steps, 1)]
        text = " ".join(steps)
    else:
        text = rng.choice(SEPARATORS).join(steps)
    lead = rng.choice(("", "", "Plan: ", "Do this: ", "Steps: ", "Next time: ", "To win: "))
    text = lead + text
    return text[0].upper() + text[1:] + ("" if text.endswith(".") else ".")


def training_note(layout: Layout, rng: random.Random, plan: float = 0.55) -> str:
    """One correct note for `layout` in a random wording (see the module docstring). `plan`: the share
    of notes that say what to do; the rest state facts only (a water-plant note missing a room always
    says what to do)."""
    name = names(layout, rng)
    fill = {"name": name, "Name": name[0].upper() + name[1:], "room": layout.target_room, "can_room": layout.objects.get(CAN, "")}
    parts = []
    if rng.random() < 0.85:
        parts.append(rng.choice(FACT).format(**fill))
    if layout.task == "trap-water-plant" and rng.random() < 0.85:
        parts.append(rng.choice(CAN_FACT).format(**fill))
    incomplete = layout.task == "trap-water-plant" and len(parts) < 2  # the can's or the flower's room unsaid
    if incomplete or not parts or rng.random() < plan:
        parts.append(action_part(layout, name, rng))
    if rng.random() < 0.25:
        parts.append(rng.choice(NOT_HERE))
    rng.shuffle(parts)
    if rng.random() < 0.3:
        parts.insert(rng.randint(0, len(parts)), rng.choice(FILLER))
    return " ".join(parts)


# ---- the model's own notes: a true one-line summary of an episode (reflection answers) -----------

FOUND = (
    "I found the {name} in the {room}.",
    "The {name} turned up in the {room}.",
    "The {name} was in the {room}.",
    "I saw the {name} in the {room}.",
    "The {room} has the {name}.",
    "Found it: the {name} is in the {room}.",
    "The {name} I need is in the {room}.",
)
NOT_FOUND = (
    "The {name} was not in the {rooms}.",
    "I searched the {rooms} but did not find the {name}.",
    "No {name} in the {rooms}.",
    "I looked in the {rooms}; the {name} is not there.",
    "The {name} is not in the {rooms}.",
    "I did not find the {name} in the {rooms}.",
)
CAN_FOUND = (
    "The watering can stood in the {can_room}.",
    "I saw the watering can in the {can_room}.",
    "The can was in the {can_room}.",
)
AFTER_FOUND = ("", "", "", " Focus on it there.", " Go there and focus on it.")


def room_list(rooms: list[str], rng: random.Random) -> str:
    """'kitchen', 'kitchen and bedroom', 'hallway, kitchen and the bedroom', 'kitchen or bedroom'."""
    if len(rooms) == 1:
        return rooms[0]
    joint = rng.choice((" and ", " and the ", " or "))
    return ", ".join(rooms[:-1]) + joint + rooms[-1]


def reflection_answer(layout: Layout, rooms_seen: list[str], can_room: str | None, rng: random.Random,
                      form: str = "sentence") -> str:  # fmt: skip
    """A true one-line note about an episode of `layout` that was in `rooms_seen` (in order) and saw the
    watering can in `can_room` (None: not seen or not a water-plant task), short enough for the embedded
    model's 24-token tip cap.

    form "sentence": where the target was seen, or the rooms searched without it, in a random wording.
    form "rooms": one clause per room, room first, in the order the episode entered them (`rooms_answer`).

    Raises:
        ValueError: `form` is neither.
    """
    if form == "rooms":
        return rooms_answer(layout, rooms_seen, can_room)
    if form != "sentence":
        raise ValueError(f"reflection answer form {form!r}: expected 'sentence' or 'rooms'")
    name = layout.target if layout.task == "trap-find-animal" or rng.random() < 0.7 else names(layout, rng)
    parts = []
    if layout.target_room in rooms_seen:
        then = "" if can_room else rng.choice(AFTER_FOUND)  # two facts already fill the 24-token cap
        parts.append(rng.choice(FOUND).format(name=name, room=layout.target_room) + then)
    else:
        searched = list(dict.fromkeys(rooms_seen))
        if len(searched) > 1 and START_ROOM in searched and rng.random() < 0.5:
            searched.remove(START_ROOM)  # the hallway is where every episode starts: often left unsaid
        parts.append(rng.choice(NOT_FOUND).format(name=name, rooms=room_list(searched, rng)))
    # The can, when seen, is the other fact a water-plant note needs (the checker asks for it too).
    if can_room:
        parts.insert(rng.randint(0, len(parts)), rng.choice(CAN_FOUND).format(can_room=can_room))
    return " ".join(parts)


def rooms_answer(layout: Layout, rooms_seen: list[str], can_room: str | None) -> str:
    """The episode room by room, each clause starting with the room: "Kitchen: no red light bulb.
    Greenhouse: the red light bulb." It stops at the target's room. The hallway gets a clause
    only when the can was seen there or no other room was entered.

    Why room first: in a sentence such as "The X was not in …" the writer must decide "was" or "was
    not" before it names any room, so it has to look over the whole episode at once. The 135M writers
    trained that way named the rooms right and got the verdict wrong on most failed episodes
    (docs/notebook/2026-12-04-own-notes.md). Here each verdict comes right after its room's name. To
    choose it, the writer looks back at one observation ("This room is called the kitchen. In it, you
    see: …").
    """
    rooms = list(dict.fromkeys(rooms_seen))
    if len(rooms) > 1 and START_ROOM in rooms and can_room != START_ROOM:
        rooms.remove(START_ROOM)
    clauses = []
    for room in rooms:
        here = [f"the {CAN}"] if room == can_room else []
        if room == layout.target_room:
            here.append(f"the {layout.target}")
        if here:
            clauses.append(f"{room.capitalize()}: {' and '.join(here)}.")
        else:
            clauses.append(f"{room.capitalize()}: no {layout.target}.")
        if room == layout.target_room:
            break
    return " ".join(clauses)


def observation_answer(layout: Layout, room: str | None, here: set[str]) -> str:
    """The true observation note (`memory.reflection.OBSERVATION_NOTE_INSTRUCTION`) about one observation
    of `layout`: standing in `room` (None: the observation shows no room) where the objects `here` are
    listed. "The red flower is not in the kitchen." / "The red flower is in the bedroom." and, when the
    task names the watering can and it is listed, " The watering can is in the kitchen."; "Nothing new."
    for an observation that shows no room.

    One wording on purpose: the writer's one decision is the verdict ("is" or "is not"), and the note is
    for the policy to read (bar 1 of issue 25 measures it reading facts-only sentences)."""
    if room is None:
        return "Nothing new."
    verdict = "is in" if layout.target in here else "is not in"
    note = f"The {layout.target} {verdict} the {room}."
    if layout.task == "trap-water-plant" and CAN in here:
        note += f" The {CAN} is in the {room}."
    return note


def target_fact(layout: Layout, rng: random.Random) -> str:
    """Where the target is, in a random training wording (`FACT`), under its full name."""
    name = layout.target
    return rng.choice(FACT).format(name=name, Name=name[0].upper() + name[1:], room=layout.target_room)


def observation_note(layout: Layout, rng: random.Random) -> str:
    """A correct note in the form the shipped note writer's tips take: a sentence per room an episode stood
    in, in the order it entered them, joined as `memory.reflection.join_observation_notes` joins them.
    Rooms without the target get the writer's own sentence ("The X is not in the R."); the target's room
    and the can's get a training wording (`FACT`, `CAN_FACT`), because the writer's "The X is in the R."
    is, word for word, the held-out benchmark's facts wording, which no training note may contain.

    The walk starts in the hallway and enters side rooms in a random order. Once it has seen the target
    (and, on trap-water-plant, the watering can) it stops with probability 0.7 at each chance: right after
    that room, else before the next one, else after it, and so on (one room more in 9 % of walks that have
    one left, two rooms more in under 1 %).

    Why: the writer's notes state "is not in" for every room searched ("The blue flower is not in the
    bedroom. The watering can is in the bedroom."), a form the other training wordings never show. An
    actor that reads only "where it is" can take a "not in" sentence for the place to focus
    (docs/notebook/2026-12-05-actor-reads-writer-notes.md).

    >>> from empo2_studio.envs.trap import TrapEnv
    >>> observation_note(TrapEnv().layout("trap-light-bulb", 24), random.Random(0)).split(". ")[0]
    'The red light bulb is not in the hallway'
    """
    need = {layout.target_room} | ({layout.objects[CAN]} if layout.task == "trap-water-plant" else set())
    sides = list(SIDE_ROOMS)
    rng.shuffle(sides)
    rooms = [START_ROOM]
    for room in sides:
        if need <= set(rooms) and rng.random() < 0.7:
            break
        rooms.append(room)
        if need <= set(rooms) and rng.random() < 0.7:
            break
    notes = []
    for room in rooms:
        if room != layout.target_room:
            notes.append(f"The {layout.target} is not in the {room}.")
        else:  # a training wording: the writer's own "The X is in the R." is the held-out set's facts wording
            notes.append(target_fact(layout, rng))
        if layout.task == "trap-water-plant" and layout.objects[CAN] == room:
            notes.append(rng.choice(CAN_FACT).format(can_room=room))
    return " ".join(notes)


def negation_note(layout: Layout, rng: random.Random) -> tuple[str, list[str]]:
    """A note that rules rooms out in the note writer's own sentences, and the side rooms it rules out.

    "The X is not in the hallway." and the same for one or two side rooms without the target; half the
    time the target's room follows in a training wording (`FACT`), and on trap-water-plant half the
    time the can's room (`CAN_FACT`, when it is not the hallway). The other half states no room for the
    target: the agent has to search the rooms not ruled out.

    Why: the plain-words actor gives a ruled-out room the focus it should give the target's room (P(focus
    on anything | in a room the note rules out) 0.94-0.95 against 0.00 without a note; bench_notes
    --parts negation): it reads "The X is not in the R." as where X is.

    >>> from empo2_studio.envs.trap import TrapEnv
    >>> note, out = negation_note(TrapEnv().layout("trap-light-bulb", 24), random.Random(1))
    >>> note.split(". ")[0], all(f"not in the {r}" in note for r in out)
    ('The red light bulb is not in the hallway', True)
    """
    others = [r for r in SIDE_ROOMS if r != layout.target_room]
    ruled = rng.sample(others, rng.choice((1, 2)))
    notes = [f"The {layout.target} is not in the {room}." for room in (START_ROOM, *ruled)]
    if rng.random() < 0.5:
        notes.append(target_fact(layout, rng))
    if layout.task == "trap-water-plant" and layout.objects[CAN] != START_ROOM and rng.random() < 0.5:
        notes.append(rng.choice(CAN_FACT).format(can_room=layout.objects[CAN]))
    return " ".join(notes), ruled


# ---- distractors: a true sentence about something else in the house -------------------------------

DISTRACTOR = (
    "There is a {thing} in the {room} too.",
    "I walked past the {thing} in the {room}.",
    "The {room} also has a {thing}.",
    "A {thing} stands in the {room}.",
    "The {thing} in the {room} looks old.",
    "I noticed a {thing} in the {room}.",
    "The {room}: a {thing}, nothing more.",
    "Someone left a {thing} in the {room}.",
)


def distractor(layout: Layout, rng: random.Random) -> str:
    """A true sentence naming another object of the layout and its room: a piece of furniture or a
    look-alike, never the target or the watering can ("I walked past the yellow flower in the bedroom.").

    Why it was tried (`make_warmstart.py --distract`, off by default): a held-out note that opens with a
    sentence about the bedroom sent the water-plant actor into the bedroom to focus on the bed, and
    `FILLER` names a room in 6 of its 10 sentences but never a look-alike. It did not fix that and cost
    adaptation (docs/notebook/2026-12-05-distractors.md).

    >>> from empo2_studio.envs.trap import TrapEnv
    >>> lay = TrapEnv().layout("trap-water-plant", 24)
    >>> s = distractor(lay, random.Random(0))
    >>> lay.target not in s and CAN not in s
    True
    """
    things = sorted(o for o in layout.objects if o not in (layout.target, CAN) and layout.target not in o)
    thing = rng.choice(things)
    return rng.choice(DISTRACTOR).format(thing=thing, room=layout.objects[thing])


def with_distractor(note: str, layout: Layout, rng: random.Random) -> str:
    """`note` with a `distractor` sentence before it or after it, half and half."""
    extra = distractor(layout, rng)
    return f"{extra} {note}" if rng.random() < 0.5 else f"{note} {extra}"
