"""Does a note say what its episode found? A model-free checker against the observations' ground truth.

After each episode the policy writes a free-text note (`memory.reflection`). This module reads such a
note and the episode's own observations (parsed by `envs.room_notes`) to tell whether the note states
where the episode saw the target (and the tool the task names), says where it did not find it, states
something the episode contradicts, or says nothing checkable (filler):

    facts = episode_facts(episode)        # targets, tool, where each was first seen, rooms searched
    verdict = check_note("The blue bulb is in the kitchen.", facts)
    verdict.correct, verdict.false, verdict.claims, verdict.reason

It is a measuring tool (benchmarks/bench_notes.py part "write"): nothing in the studio's loop calls it,
and memory/ and policy/ never import it (knowledge of the observation text stays under envs/).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from empo2_studio.envs.room_notes import episode_steps, walk_steps
from empo2_studio.envs.task_text import focus_items, tool_of
from empo2_studio.types import Episode

Claim = tuple[str, str, bool]
"""(item, room, positive): the note says the item is (True) or is not (False) in the room."""


@dataclass(frozen=True)
class NoteFacts:
    """What an episode's observations showed about the things its task names (`episode_facts`)."""

    targets: tuple[str, ...]
    """The objects the task says to focus on (`task_text.focus_items`)."""
    tool: str | None
    """The tool the task names ("watering can"; `task_text.tool_of`), None when it names none."""
    seen_in: dict[str, str]
    """Target or tool → the first room the episode saw it in (absent: never seen). Read only."""
    searched: tuple[str, ...]
    """Rooms the episode was in (described by an observation), in order, the start room first."""
    objects: tuple[str, ...] = ()
    """Every object the observations listed (decoys, furniture): a note's mention of one of them is
    told apart from a mention of the target ("the red bulb is in the hallway")."""
    rooms: tuple[str, ...] = ()
    """Every room name the observations used (rooms described and rooms behind doors): the words a
    note can name a room by. Empty: the rooms of `searched` and `seen_in`."""


@dataclass(frozen=True)
class NoteVerdict:
    """The checker's answer for one note (`check_note`)."""

    correct: bool
    """No false claim, and the note states what the episode found (see `check_note`)."""
    false: bool
    """At least one claim contradicts the episode."""
    claims: tuple[Claim, ...]
    """The claims about the targets and the tool found in the note, in order, without duplicates."""
    reason: str
    """One readable line: why the note is correct, false or neither."""

    @property
    def filler(self) -> bool:
        """Neither correct nor false: the note states nothing checkable, or not enough."""
        return not (self.correct or self.false)


def episode_facts(episode: Episode) -> NoteFacts:
    """The ground truth a note about `episode` is checked against, read from its task description,
    first observation and step observations ("This room is called the kitchen. In it, you see: …").

    Args:
        episode: a played episode; its `task_description` names the target(s) and the tool.

    Returns:
        `NoteFacts`: the targets, the tool (None when the task names none), the first room each of them
        was seen in, the rooms the episode was in (hallway included), every object and room name seen.

    Raises:
        ValueError: the task description names nothing to focus on (no target to check a note about).
    """
    targets = focus_items(episode.task_description)
    if not targets:
        raise ValueError(f"episode {episode.episode_id!r}: its task description names no focus target: "
                         f"{episode.task_description!r}")  # fmt: skip
    tool = tool_of(episode.task_description) or None
    walk = walk_steps(episode_steps(episode), [*targets, tool] if tool else targets)
    listed = (re.sub(r"\s*\(.*\)$", "", o) for o in walk.objects)  # "blue light bulb (on)"
    objects = dict.fromkeys([*listed, *targets, *([tool] if tool else [])])
    return NoteFacts(
        targets=targets, tool=tool, seen_in=dict(walk.seen_in), searched=tuple(walk.searched),
        objects=tuple(objects), rooms=tuple(dict.fromkeys([*walk.searched, *walk.doors])),
    )  # fmt: skip


def check_note(note: str, facts: NoteFacts) -> NoteVerdict:
    """Check one note against the episode's facts.

    Reading the note:
    - It is split into clauses at sentence ends (".", "!", "?" before a space or the end, not after a
      digit: "1. go to kitchen 2. …" stays one clause), ";" and line breaks.
    - An object is mentioned by its full name ("blue light bulb") or a short form: its first word (the
      colour) with any later word, with "one", or with a synonym ("blue bulb", "blue light", "the blue
      one", "blue lamp"; "red plant"), plurals too; an animal by its name; an object's last word alone
      when no other object shares it, after "the/a/my/this/that/your" or at a clause's start ("the
      can", "can: workshop"). A form two objects share counts for neither. In a clause that says "toy"
      apart from a toy's name, an animal's name is the toy's ("The frog in the hallway is only a toy").
      "it" is the object mentioned last before it, in its clause or an earlier one.
    - A room is named by its name. It is *located* when a locator comes right before it ("in", "inside",
      "at", "from", "within", ":", "=", "(", "->", "→", optionally "the"), or when it continues a list
      after a located room ("in: hallway, kitchen", "in the kitchen or the bedroom").
    - Negation: a cue (not, n't, cannot, no, never, without, nowhere, missing, absent, neither, nor)
      negates the first room after it when no boundary ("," "but" "however" "though" "yet" "instead"
      "rather" "while" "whereas" "and") stands between them, and the list that room heads.
    Claims, per mention of an object:
    - the located rooms after it (before the next mention) are where it is, or is not when negated
      ("The X was not in: hallway, kitchen." → not in either; "It is in the kitchen, not in the hallway.");
    - else, when a presence negation follows or precedes it in its part of the clause with no room after
      the cue ("did not find", "not there", "nowhere", "missing", "no X"), it is not in any room named
      before it in the clause ("I searched the kitchen and bedroom but did not find the X");
    - else the room named last before it is where it is (a walk: "go to kitchen, then focus on X").
    - A clause with objects and no room, after a clause with rooms and no object, uses that clause's
      rooms ("go to kitchen; focus on X", "I went to the kitchen. It was not there.": explicit names, or
      "it" under a presence negation); a clause with rooms and no object that starts with a locator ("In
      the kitchen.") is about the object mentioned last ("Where is the X? In the kitchen.").
    Only claims about the targets and the tool are kept.

    Verdict:
    - false: a positive claim for a room other than the one the episode first saw the item in (seen
      elsewhere, searched without seeing it, or never entered: unsupported), or a negative claim for
      the room it was seen in.
    - correct: not false, and for each target: a positive claim of the room it was seen in, or, when
      never seen, a negative claim for at least one room the episode searched; and, when the task names
      a tool the episode saw, a positive claim of the tool's room.
    - neither (filler): the rest, e.g. a note that names no room or no target.

    Args:
        note: the note's text (the model's sentence, without the record line).
        facts: `episode_facts` of the episode the note is about.

    Returns:
        `NoteVerdict` (correct, false, claims, reason).

    Raises:
        ValueError: `facts` names no target.
    """
    if not facts.targets:
        raise ValueError("check_note needs facts with at least one target")
    claims = tuple(dict.fromkeys(_claims(note, facts)))
    return _verdict(claims, facts)


# ---- reading a note -----------------------------------------------------------------------------------

_CLAUSE = re.compile(r"(?<!\d)[.!?]+(?=\s|$)|[;\n]")
_LOCATOR = re.compile(r"(?:\b(?:in|inside|at|from|within)\b|[:=(→]|->)\s*:?\s*(?:the\s+)?$", re.IGNORECASE)
_LIST_GLUE = re.compile(r"\s*(?:,|&|/)?\s*(?:\b(?:and|or|nor)\b)?\s*(?:the\s+)?", re.IGNORECASE)
_NEG = re.compile(r"\b(?:not|cannot|no|never|without|nowhere|missing|absent|neither|nor)\b|n[’']t\b", re.IGNORECASE)
_BOUNDARY = re.compile(r"[,;]|\b(?:but|however|though|although|yet|instead|rather|while|whereas|and)\b", re.IGNORECASE)
_PRESENCE = re.compile(
    r"^(?:\W*\w+){0,3}?\W*\b(?:find|found|finding|see|saw|seen|seeing|spot|spotted|locate|located|there|here|"
    r"anywhere|present|in sight)\b", re.IGNORECASE,
)  # fmt: skip
_SELF_PRESENCE = frozenset({"nowhere", "missing", "absent"})
_IT = re.compile(r"\bit\b", re.IGNORECASE)
_TOY = re.compile(r"\btoys?\b", re.IGNORECASE)
_DETERMINERS = ("the", "a", "an", "my", "this", "that", "your")
_SYNONYMS = {"bulb": ("lamp",), "flower": ("plant",)}


@dataclass
class _Mention:
    start: int
    end: int
    name: str
    explicit: bool = True


@dataclass
class _Room:
    start: int
    end: int
    name: str
    located: bool = False
    negated: bool = False


@dataclass
class _State:
    last_item: str = ""
    rooms: list[_Room] = field(default_factory=list)
    """The previous clause's rooms when it mentioned no object (a walk step), else []."""


def _claims(note: str, facts: NoteFacts) -> list[Claim]:
    names = (*dict.fromkeys([*facts.objects, *facts.targets, *([facts.tool] if facts.tool else [])]),)
    forms = _form_patterns(names)
    rooms = facts.rooms or tuple(dict.fromkeys([*facts.searched, *facts.seen_in.values()]))
    room_re = re.compile(r"\b(" + "|".join(re.escape(r) for r in sorted(rooms, key=len, reverse=True)) + r")\b",
                         re.IGNORECASE) if rooms else None  # fmt: skip
    wanted = {*facts.targets, *([facts.tool] if facts.tool else [])}
    state, out = _State(), []
    for clause in (c.strip() for c in _CLAUSE.split(note)):
        if clause:
            out += [c for c in _clause_claims(clause, forms, room_re, names, state) if c[0] in wanted]
    return out


def _clause_claims(clause: str, forms, room_re, names, state: _State) -> list[Claim]:
    mentions = _mentions(clause, forms, names, state.last_item)
    rooms = [_Room(m.start(), m.end(), m.group(1).lower()) for m in room_re.finditer(clause)] if room_re else []
    _mark_rooms(clause, rooms, mentions)
    carried = state.rooms if not rooms else []
    if rooms and not mentions and state.last_item and _LOCATOR.match(clause.split()[0] + " "):
        mentions = [_Mention(0, 0, state.last_item, explicit=False)]  # "Where is the X? In the kitchen."
    out: list[Claim] = []
    for j, m in enumerate(mentions):
        seg_start = mentions[j - 1].end if j else 0
        seg_end = mentions[j + 1].start if j + 1 < len(mentions) else len(clause)
        own = [r for r in rooms if m.end <= r.start < seg_end and r.located]
        absent = _absent(clause, seg_start, seg_end, rooms, m.start)
        before = [r for r in rooms if r.end <= m.start] or (carried if m.explicit or absent else [])
        if own:
            out += [(m.name, r.name, not r.negated) for r in own]
        elif before and absent:
            out += [(m.name, r.name, False) for r in before]
        elif before:
            out.append((m.name, before[-1].name, not before[-1].negated))
    if mentions:
        state.last_item = mentions[-1].name
    if rooms or mentions:  # a clause with neither ("Then look around.") keeps the walk's rooms
        state.rooms = rooms if not mentions else []
    return out


def _mentions(clause: str, forms, names, last_item: str) -> list[_Mention]:
    """The object mentions of a clause, longest first where they overlap, then "it" resolved."""
    found = sorted(((m.start(), m.end(), name) for pattern, name in forms for m in pattern.finditer(clause)),
                   key=lambda t: (t[0], t[0] - t[1]))  # fmt: skip
    mentions: list[_Mention] = []
    for start, end, name in found:
        if not mentions or start >= mentions[-1].end:
            mentions.append(_Mention(start, end, name))
    # "toy" said apart from a mention of a toy ("The frog in the hallway is only a toy"): the animal's
    # name there is the toy's
    if any(not any(m.start <= t.start() < m.end for m in mentions) for t in _TOY.finditer(clause)):
        for m in mentions:
            m.name = f"toy {m.name}" if f"toy {m.name}" in names else m.name
    for it in _IT.finditer(clause):
        if any(m.start <= it.start() < m.end for m in mentions):
            continue
        prior = [m for m in mentions if m.end <= it.start()]
        name = prior[-1].name if prior else last_item
        if name:
            mentions.append(_Mention(it.start(), it.end(), name, explicit=False))
            mentions.sort(key=lambda m: m.start)
    return mentions


def _mark_rooms(clause: str, rooms: list[_Room], mentions: list[_Mention]) -> None:
    """Set each room's `located` and `negated` (see `check_note`)."""
    for cue in _NEG.finditer(clause):
        nxt = next((r for r in rooms if r.start >= cue.end()), None)
        if nxt and not _BOUNDARY.search(clause, cue.end(), nxt.start):
            nxt.negated = True
    for i, room in enumerate(rooms):
        room.located = bool(_LOCATOR.search(clause[: room.start]))
        if i and not any(rooms[i - 1].end <= m.start < room.start for m in mentions):
            glue = _LIST_GLUE.fullmatch(clause, rooms[i - 1].end, room.start)
            if glue and (rooms[i - 1].located or rooms[i - 1].negated):
                room.located, room.negated = rooms[i - 1].located, room.negated or rooms[i - 1].negated


def _absent(clause: str, start: int, end: int, rooms: list[_Room], at: int) -> bool:
    """A presence negation in clause[start:end] with no room after its cue in that span: "did not find",
    "not there", "nowhere", "missing", "absent", or "no" up to three words before the mention at `at`."""
    for cue in _NEG.finditer(clause, start, end):
        if any(cue.end() <= r.start < end for r in rooms):
            continue
        word = cue.group(0).lower()
        near = cue.end() <= at and len(clause[cue.end(): at].split()) <= 3
        if word in _SELF_PRESENCE or _PRESENCE.match(clause[cue.end(): end]) or (word == "no" and near):
            return True
    return False


def _form_patterns(names: tuple[str, ...]) -> list[tuple[re.Pattern[str], str]]:
    """(pattern, object) for every unambiguous way a note may name each object (see `check_note`)."""
    by_form: dict[str, set[str]] = {}
    heads: dict[str, set[str]] = {}
    for name in names:
        words = name.lower().split()
        heads.setdefault(words[-1], set()).add(name)
        forms = {" ".join(words)}
        if len(words) >= 2:
            attr, rest = words[0], words[1:]
            forms |= {f"{attr} {w}" for w in rest} | {f"{attr} one"}
            forms |= {f"{attr} {s}" for s in _SYNONYMS.get(rest[-1], ())}
        for form in forms:
            by_form.setdefault(form, set()).add(name)
    patterns = [
        (re.compile(rf"\b{re.escape(form)}(?:s|es)?\b", re.IGNORECASE), next(iter(owners)))
        for form, owners in sorted(by_form.items(), key=lambda kv: -len(kv[0])) if len(owners) == 1
    ]  # fmt: skip
    for head, owners in heads.items():
        name = next(iter(owners)) if len(owners) == 1 else None
        if name and name.lower() != head:  # "the can" for the watering can; a one-word name is its own form
            after = "|".join(rf"(?<=\b{d}\s)" for d in _DETERMINERS)
            patterns.append((re.compile(rf"(?:{after}|^){re.escape(head)}\b(?![’'])", re.IGNORECASE), name))
    return patterns


# ---- the verdict --------------------------------------------------------------------------------------


def _verdict(claims: tuple[Claim, ...], facts: NoteFacts) -> NoteVerdict:
    wrong: list[str] = []
    for item, room, positive in claims:
        seen = facts.seen_in.get(item)
        if positive and room != seen:
            why = (f"the episode saw it in the {seen}" if seen else
                   "the episode searched it without seeing it" if room in facts.searched else
                   "the episode never entered it")  # fmt: skip
            wrong.append(f"says the {item} is in the {room}, but {why}")
        elif not positive and room == seen:
            wrong.append(f"says the {item} is not in the {room}, where the episode saw it")
    if wrong:
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        return NoteVerdict(False, True, claims, f"false: {wrong[0]}{more}")
    missing, stated = [], []
    for target in facts.targets:
        if target in facts.seen_in:
            room = facts.seen_in[target]
            ok = (target, room, True) in claims
            (stated if ok else missing).append(f"the {target} in the {room}")
        else:
            said = [r for t, r, p in claims if t == target and not p and r in facts.searched]
            (stated if said else missing).append(
                f"the {target} not in the {', '.join(said)}" if said else f"a room searched without the {target}"
            )
    tool = facts.tool
    if tool and tool in facts.seen_in:
        ok = (tool, facts.seen_in[tool], True) in claims
        (stated if ok else missing).append(f"the {tool} in the {facts.seen_in[tool]}")
    if not missing:
        return NoteVerdict(True, False, claims, "correct: states " + "; ".join(stated))
    if not claims:
        what = " or ".join(f"the {t}" for t in (*facts.targets, *([tool] if tool else [])))
        return NoteVerdict(False, False, claims, f"neither: no claim about where {what} is")
    return NoteVerdict(False, False, claims, "neither: does not state " + "; ".join(missing))
