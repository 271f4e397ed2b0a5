"""Does the policy read a note in plain words? Dev or test wordings, test layouts, the embedded model.

Issue 25 bar 1. The notes are hand-written wordings kept apart from the warm start's training wordings
(`scripts/note_wordings.py`), filled per layout, plus two references: the template a teacher's
pre-filled tip uses (`TrapEnv.curated_tip`) and no note at all. Two sets (`--wordings`, issue 48 item 2,
docs/benchmarks/README.md "Choose on dev, report test once"):

- `dev` (the default), `benchmarks/data/dev_notes.json`: the wordings adapters and recipes are chosen on
  (held out until 2026-12-05, when adapters were chosen on them);
- `test`, `benchmarks/data/test_notes.json`: written on 2026-12-06 in other styles, scored for the
  shipped default only; its tables say "test (held out; scored for the shipped default only)".

Part "probs": on each test layout, the task's shortest winning path played with the note pinned in
the compact prompt at every step; the probability the policy gives each gold action under constrained
decoding (token-level, as the studio samples) at temperature 1. Reported per wording: P(first action),
P(focus on the target | in its room), P(finishing action), mean and minimum over the layouts; with the
plan-cutting of `prompts.remaining_plan` off (the note shown whole at every step), and for the template
also on (as the rollout shows it while `remaining_plan` is in use).

Part "play": memory episodes with one note pinned (the wording, filled for the layout), `--episodes`
per layout and seed, success rate per wording and task (mean and min–max over seeds); the "no note" row
is the naive rate.

Part "order": a winning episode's record line alone, and with a sentence the model wrote as its note
after it (the stored tip's order before 2026-12-04) or before it (`memory.reflection.with_record`).

Part "bad": the template with the target's room replaced by a wrong one, played as the rollout shows
notes: does the agent follow the note (goes to the named room) or ignore it?

Part "negation": does the policy read "not"? Standing in a side room the note rules out (the note
writer's own sentences: "The X is not in the hallway. The X is not in the R."), the probability it
gives to focusing on anything there, over the step's valid actions, against no note, the same note with
the target's room added, the same two facts in four other forms ("The R has no X.", "R: no X." …) and two
notes that do not name the room (`negation_notes`). Two such rooms per test layout.

Part "mixed": the note writer's long note of a search that found the flower (the flower's room among the
rooms ruled out, and the can's room), in different orders, shown whole along the gold path of the
water-plant test layouts whose can starts in a third room: P(first action), P(go to the flower's room
carrying the can), P(focus), P(whole path) (`mixed_notes`).

Part "write": does the policy's own note state what its episode found? Episodes played with no note
(mostly failed) and with the template pinned (mostly won), then the note the policy writes after each,
asked as training asks (`memory.reflection`: `TIP_INSTRUCTION` after the episode's conversation,
`clean_tip`; or with `--writer-context observation` one note per observation, `write_observation_notes`),
the model's sentence alone (no record line), checked against the episode's observations
by `envs.note_check` (correct / false / neither), per task for won and failed episodes.

Part "room": can the model tell whether one room holds the target? No episode and no note: the task
sentence, the observation after walking into one side room, and "Is the {target} in this room? Answer
Yes or No."; log P("Yes") − log P("No") of the answer's first token (free decoding), per task: the rate
of right answers with the target in the room and without it, and the AUC of the log-odds between the
two (0.5: no signal). The writer of bar 2 has to make this check over a whole episode
(docs/notebook/2026-12-04-water-plant-and-gpu.md).

Part "observe": the observation note (`memory.reflection.OBSERVATION_NOTE_INSTRUCTION`) the writer
writes about one room's observation (every room of each test layout, on walking in), checked by
`envs.note_check` against that room alone: correct with the target in the room, correct without it, false.

Part "ask": the same check inside a whole episode, as a note writer needs it. Episodes played as in part
write; after each, for every room the writer can see it stood in, "Was the {target} in the {room}?
Answer Yes or No." (`--note-writer` answers, after the conversation or the transcript, `--writer-context`);
per task the right rates with the target in the room and without it, and the AUC of the log-odds.

Run:  .venv/bin/python benchmarks/bench_notes.py --parts room --variations 36 37 38 39 40 41 42 43 44 45 46 47
      .venv/bin/python benchmarks/bench_notes.py --parts probs     (~9 min per task on a busy 2-core machine)
      .venv/bin/python benchmarks/bench_notes.py --parts bad --seeds 0 --threads 1
      .venv/bin/python benchmarks/bench_notes.py --parts mixed negation --threads 1
      .venv/bin/python benchmarks/bench_notes.py --parts order --tasks trap-light-bulb-fixed --variations 0 1 2 3 4
      .venv/bin/python benchmarks/bench_notes.py --parts play --rows 00 02 03 05    (a few wordings; play is the slow part)
      .venv/bin/python benchmarks/bench_notes.py --parts probs play --wordings test --seeds 0 --threads 1
            (the test wordings: the shipped default's report, once; never to choose between adapters)
      .venv/bin/python benchmarks/bench_notes.py --parts observe write --seeds 0 1 2 --episodes 4 --threads 1
            (the shipped note writer's notes, the default: --note-writer auto, one note per observation)
      .venv/bin/python benchmarks/bench_notes.py --parts write --note-writer none   (the acting adapter writes)
      .venv/bin/python benchmarks/bench_notes.py --parts write --note-writer /tmp/writer   (notes by another adapter)
      .venv/bin/python benchmarks/bench_notes.py --warm-start /tmp/ws               (another adapter)
Results go to stdout and `<sessions root>/bench_notes-<time>/notes.md` (+ notes.json); `--result NAME` also
writes the numbers, per seed, to benchmarks/results/NAME.json (rewritten after every part).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from empo2_studio.config import DEFAULT_WARM_START, MemoryConfig, RunConfig  # noqa: E402
from empo2_studio.envs.note_check import NoteFacts, NoteVerdict, check_note, episode_facts  # noqa: E402
from empo2_studio.envs.trap import CAN, START_ROOM, TASKS, TrapEnv  # noqa: E402
from empo2_studio.envs.trap_world import SIDE_ROOMS, route  # noqa: E402
from empo2_studio.memory.reflection import (  # noqa: E402
    FALLBACK_PREFIX,
    OWN_NOTE_PREFIX,
    TIP_INSTRUCTION,
    clean_tip,
    with_record,
    observation_prompt,
    write_observation_notes,
)
from empo2_studio.policy import Turn, load_policy, prompts  # noqa: E402
from empo2_studio.policy.note_writer import load_note_writer  # noqa: E402
from empo2_studio.rollout import conversation, play_group, seed_policy  # noqa: E402
from empo2_studio.rollout.conversation import transcript  # noqa: E402
from empo2_studio.sessions import default_sessions_root, fresh_dir  # noqa: E402
from empo2_studio.types import RetrievedTip  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import add_result_option, write_result  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
WORDING_SETS = {"dev": DATA / "dev_notes.json", "test": DATA / "test_notes.json"}
WORDING_LABELS = {"dev": "dev (the wordings choices are made on)", "test": "test (held out; scored for the shipped default only)"}
SEARCH_TASKS = ("trap-light-bulb", "trap-find-animal", "trap-water-plant")
TEMPLATE, TEMPLATE_CUT, NO_NOTE = "template (curated_tip)", "template, remaining_plan on", "no note"


def load_wordings(which: str | Path = "dev") -> dict[str, list[dict[str, Any]]]:
    """Task → its wordings ({"style", "text" or "by_can"}) in set `which` ("dev", "test") or a JSON file
    of that form; ValueError on a task not in TASKS."""
    path = WORDING_SETS.get(str(which), Path(which))
    data = json.loads(Path(path).read_text())
    out = {k: v for k, v in data.items() if k != "about"}
    bad = sorted(set(out) - set(TASKS))
    if bad:
        raise ValueError(f"{path}: unknown task(s) {bad}; valid: {', '.join(TASKS)}")
    return out


def can_case(task: str, variation: int) -> str:
    """Where the watering can starts relative to the flower: "hallway", "target_room" or "elsewhere"."""
    lay = TrapEnv().layout(task, variation)
    can = lay.objects.get(CAN)
    return "hallway" if can == START_ROOM else "target_room" if can == lay.target_room else "elsewhere"


def fill(wording: dict[str, Any], task: str, variation: int) -> str:
    """The wording's text for one layout, placeholders filled ({target}, {attr}, {room}, {can_room})."""
    lay = TrapEnv().layout(task, variation)
    text = wording["by_can"][can_case(task, variation)] if "by_can" in wording else wording["text"]
    attr = lay.target.replace(" light bulb", "").replace(" flower", "")
    return text.format(target=lay.target, attr=attr, room=lay.target_room, can_room=lay.objects.get(CAN, ""))


def notes_for_layout(task: str, variation: int, wordings: Sequence[dict[str, Any]]) -> dict[str, str | None]:
    """Row label → the note on this layout (None: no note), references first. Every row is shown whole
    at every step except TEMPLATE_CUT, shown as `prompts.remaining_plan` cuts it (the dev and test wordings
    have no "…: a, then b" plan for it to cut)."""
    tip = TrapEnv().curated_tip(task, variation)
    rows: dict[str, str | None] = {TEMPLATE: tip, TEMPLATE_CUT: tip, NO_NOTE: None}
    for i, w in enumerate(wordings):
        rows[f"{i:02d} {w['style']}"] = fill(w, task, variation)
    return rows


def gold_conversation(policy, task: str, variation: int, note: str | None, plan_progress: bool) -> list[Turn]:
    """The shortest winning path as policy turns, `note` pinned at every step (compact prompt)."""
    env = TrapEnv()
    obs = env.reset(task, variation)
    fmt = policy.chat_format
    turns: list[Turn] = []
    played: list[str] = []
    for k, action in enumerate(env.gold_path(task, variation)):
        user = prompts.first_user_message("trap", obs, ()) if k == 0 else prompts.step_user_message(obs, "trap")
        if note is not None:
            tip = RetrievedTip("note", note, 100.0, 1.0, True)
            tip = prompts.with_plan_progress(tip, played) if plan_progress else tip
            user = prompts.with_tips(user, [tip], "compact")
        turns.append(Turn(user, fmt.encode(action) + (fmt.eot_id,), obs.valid_actions))
        obs = env.step(action).observation
        played.append(action)
    return turns


def key_steps(task: str, variation: int) -> dict[str, int]:
    """Index in the gold path of the first action, the focus on the target and the finishing action."""
    gold = TrapEnv().gold_path(task, variation)
    return {"first": 0, "focus": next(i for i, a in enumerate(gold) if a.startswith("focus on")), "finish": len(gold) - 1}


def layout_probs(policy, task: str, variation: int, notes: dict[str, str | None]) -> dict[str, dict[str, float]]:
    """Row → {"first", "focus", "finish"} token-level P(gold action) on one layout (one packed score call)."""
    convs = [gold_conversation(policy, task, variation, n, row == TEMPLATE_CUT) for row, n in notes.items()]
    with torch.no_grad():
        scored = policy.score(convs)
    steps = key_steps(task, variation)
    return {
        row: {k: float(lps[i].sum().exp()) for k, i in steps.items()} for row, lps in zip(notes, scored, strict=True)
    }


def part_probs(args, policy, wordings) -> tuple[list[str], dict]:
    out: dict = {}
    lines = [
        f"### P(gold action), token-level, T = 1, test variations {args.variations}, wordings {WORDING_LABELS[args.wordings]}, "
        "one note pinned, shown whole "
        "(remaining_plan off) except on the row that says so (mean over layouts, min in brackets)",
        "",
        "| task | note | P(first action) | P(focus on target, in its room) | P(finishing action) |",
        "|---|---|---|---|---|",
    ]
    for task in args.tasks:
        per: dict[str, list[dict[str, float]]] = {}
        for v in args.variations:
            for row, p in layout_probs(policy, task, v, notes_for_layout(task, v, wordings[task])).items():
                per.setdefault(row, []).append(p)
        out[task] = per
        lines += prob_rows(task, per)
    return lines, out


class PinnedNote:
    """A tip memory holding one curated note, pinned at every step (what `TipStore` retrieves for a
    partition whose only tip is a teacher's)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def retrieve_explained(self, task: str, variation: int, query_texts: Sequence[str]):
        return [([RetrievedTip("note", self.text, 100.0, 1.0, True)], []) for _ in query_texts]

    def add_episode_tips(self, episode, tip_text: str, key_text: str):  # pragma: no cover - never written
        raise RuntimeError("the benchmark's pinned note is read-only")


def play_with_note(
    policy, task: str, variation: int, note: str | None, args, seed: int, cut: bool, keep_caches: bool = False
) -> list:
    """`args.episodes` episodes with `note` pinned (naive when None); `cut`: the rollout shows the note
    as `prompts.remaining_plan` cuts it, else whole at every step; `keep_caches`: keep each episode's
    sampling cache for the note written right after (`own_notes`), as training does."""
    envs = [TrapEnv(step_limit=args.step_limit) for _ in range(args.episodes)]
    seed_policy(policy, seed)
    saved = prompts.with_plan_progress
    if not cut:
        prompts.with_plan_progress = lambda tip, played: tip
    try:
        eps = play_group(
            envs, policy, PinnedNote(note) if note else None, task=task, variation=variation, split="test",
            rollout_mode="memory" if note else "naive", update_mode=None, temperature=args.temperature, seed=seed,
            keep_caches=keep_caches,
        )  # fmt: skip
    finally:
        prompts.with_plan_progress = saved
    return eps


def part_play(args, policy, wordings) -> tuple[list[str], dict]:
    vs = args.play_variations
    lines = [
        f"### Memory success, one pinned note, wordings {WORDING_LABELS[args.wordings]}, test variations {vs}, "
        f"{args.episodes} episodes × {len(args.seeds)} seeds "
        f"per layout, step limit {args.step_limit}, T = {args.temperature} (mean over seeds, min–max)",
        "",
        "| note | " + " | ".join(args.tasks) + " |",
        "|---|" + "---|" * len(args.tasks),
    ]
    table: dict[str, dict[str, list[float]]] = {}
    for task in args.tasks:
        for seed in args.seeds:
            won: dict[str, list[bool]] = {}
            for v in vs:
                notes = notes_for_layout(task, v, wordings[task])
                for row in [r for r in notes if args.rows is None or r[:2] in args.rows or r in (TEMPLATE, TEMPLATE_CUT, NO_NOTE)]:
                    won.setdefault(row, []).extend(
                        ep.won for ep in play_with_note(policy, task, v, notes[row], args, seed * 1000 + v, row == TEMPLATE_CUT))
            for row, w in won.items():
                table.setdefault(row, {}).setdefault(task, []).append(sum(w) / len(w))
        print(f"  {task}: " + ", ".join(f"{r[:14]} {statistics.fmean(x[task]):.2f}" for r, x in table.items() if task in x), flush=True)
    for row, per in table.items():
        cells = [f"{statistics.fmean(per[t]):.2f} ({min(per[t]):.2f}–{max(per[t]):.2f})" if t in per else "" for t in args.tasks]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return lines, table


def wrong_room_note(task: str, variation: int) -> tuple[str, str]:
    """(note, room): the template tip with the target's room replaced by a side room that does not hold
    the target (the first such room after it, in `SIDE_ROOMS` order)."""
    lay = TrapEnv().layout(task, variation)
    k = SIDE_ROOMS.index(lay.target_room)
    wrong = SIDE_ROOMS[(k + 1) % len(SIDE_ROOMS)]
    return TrapEnv().curated_tip(task, variation).replace(lay.target_room, wrong), wrong


def part_bad(args, policy, wordings) -> tuple[list[str], dict]:
    """A note that names the wrong room, played as the rollout shows notes (remaining_plan on): does the
    agent follow it (goes there first) or ignore it? The right template and no note beside it. (An
    empty note cannot be stored: `records.check_text` refuses it at the tip store's edge.)"""
    vs = args.play_variations
    lines = [
        f"### A note naming the wrong room: test variations {vs}, {args.episodes} episodes × {len(args.seeds)} seeds per "
        f"layout, step limit {args.step_limit}, T = {args.temperature}",
        "",
        "| task | note | first action = go to the named wrong room | ever entered the named wrong room | "
        "first action = go to the target's room | success |",
        "|---|---|---|---|---|---|",
    ]
    out: dict = {}
    for task in args.tasks:
        counts: dict[str, list[list[bool]]] = {}
        for v in vs:
            wrong_note, wrong = wrong_room_note(task, v)
            room = TrapEnv().layout(task, v).target_room
            for row, note in (("names the wrong room", wrong_note), (TEMPLATE_CUT, TrapEnv().curated_tip(task, v)),
                              (NO_NOTE, None)):  # fmt: skip
                for seed in args.seeds:
                    for ep in play_with_note(policy, task, v, note, args, seed * 1000 + v, cut=True):
                        acts = [st.action for st in ep.steps]
                        counts.setdefault(row, []).append([acts[0] == f"go to {wrong}", f"go to {wrong}" in acts,
                                                           acts[0] == f"go to {room}", ep.won])  # fmt: skip
        out[task] = {row: [sum(c[i] for c in cs) / len(cs) for i in range(4)] for row, cs in counts.items()}
        for row, rates in out[task].items():
            lines.append(f"| {task} | {row} | " + " | ".join(f"{r:.2f}" for r in rates) + " |")
            print(lines[-1], flush=True)
    return lines, out


NEGATION_ROWS = (
    "no note",
    "rules the room out",
    "rules it out, names the target's room",
    "room has no X",
    "searched, did not find",
    "room: no X",
    "rules it out, another room",
    "rules out the hallway only",
    "says nothing of the target",
)


def negation_notes(task: str, variation: int, room: str) -> dict[str, str | None]:
    """Row → note for part "negation" while standing in `room` (a side room without the target). The
    second row is the note writer's own sentences (`memory.reflection.write_observation_notes` joins one
    per room); the next four say the same two facts (neither the hallway nor `room` holds the target) in
    forms a writer could be taught instead, to find one the actor does not misread as "in"; the last two
    do not name `room` (does any note at all make the actor focus where it stands?)."""
    lay = TrapEnv().layout(task, variation)
    t, hall = lay.target, START_ROOM
    out = f"The {t} is not in the {hall}. The {t} is not in the {room}."
    return dict(zip(NEGATION_ROWS, (
        None,
        out,
        f"{out} The {t} is in the {lay.target_room}.",
        f"The {hall} has no {t}. The {room} has no {t}.",
        f"I searched the {hall} and the {room} and did not find the {t}.",
        f"{hall.capitalize()}: no {t}. {room.capitalize()}: no {t}.",
        f"{out} It must be in another room.",
        f"The {t} is not in the {hall}.",
        f"The {hall} has doors to the other rooms.",
    ), strict=True))  # fmt: skip


def focus_share(policy, task: str, variation: int, room: str, note: str | None) -> float:
    """P(any "focus on …" action | standing in `room`, the first move taken from the hallway), with
    `note` (None: no note) pinned in the compact prompt at both steps; token-level probabilities at T = 1,
    renormalised over the step's valid actions (0 … 1)."""
    fmt = policy.chat_format
    env = TrapEnv()
    first = env.reset(task, variation)
    obs = env.step(f"go to {room}").observation
    tips = [RetrievedTip("note", note, 0.0, 1.0)] if note else []
    t0 = Turn(prompts.with_tips(prompts.first_user_message("trap", first, ()), tips, "compact"),
              fmt.encode(f"go to {room}") + (fmt.eot_id,), first.valid_actions)  # fmt: skip
    user = prompts.with_tips(prompts.step_user_message(obs, "trap"), tips, "compact")
    convs = [[t0, Turn(user, fmt.encode(a) + (fmt.eot_id,), obs.valid_actions)] for a in obs.valid_actions]
    with torch.no_grad():
        p = [float(lps[1].sum().exp()) for lps in policy.score(convs)]
    return sum(q for a, q in zip(obs.valid_actions, p, strict=True) if a.startswith("focus on")) / sum(p)


def part_negation(args, policy, wordings) -> tuple[list[str], dict]:
    """P(focus on anything | in a room the note rules out) (`focus_share`): a reader of "not" leaves the
    room (no note: the untrained reflex there)."""
    lines = [
        f"### Reading \"not\": P(focus on anything | in a side room the note rules out), test variations "
        f"{args.variations}, two such rooms each, T = 1",
        "",
        "| task | " + " | ".join(NEGATION_ROWS) + " |",
        "|---|" + "---|" * len(NEGATION_ROWS),
    ]
    out: dict = {}
    for task in args.tasks:
        per: dict[str, list[float]] = {row: [] for row in NEGATION_ROWS}
        for v in args.variations:
            lay = TrapEnv().layout(task, v)
            for room in [r for r in SIDE_ROOMS if r != lay.target_room][:2]:
                for row, note in negation_notes(task, v, room).items():
                    per[row].append(focus_share(policy, task, v, room, note))
        out[task] = {row: statistics.mean(ps) for row, ps in per.items()}
        lines.append(f"| {task} | " + " | ".join(f"{out[task][row]:.2f}" for row in NEGATION_ROWS) + " |")
        print(lines[-1], flush=True)
    return lines, out


MIXED_ROWS = (
    "no note",
    "found in the middle (the writer's order)",
    "found last",
    "found first",
    "found and the can only",
    "the can, then found",
)
CAN_ELSEWHERE = (37, 39, 43, 44, 45, 46)
"""The water-plant test layouts whose can starts in a third room (neither the hallway nor the flower's)."""


def mixed_notes(task: str, variation: int) -> dict[str, str | None]:
    """Row → note for part "mixed": what the note writer joins after a search that saw every room
    (`memory.reflection.join_observation_notes`, one sentence per room): the target's room among the
    rooms ruled out, with the can's room, in different orders. The writer's order is the visit order of a
    search that finds the target third (ws30's adaptation, water-plant seed 4, trial 0); the last two rows
    drop what a finding makes redundant. For a layout whose can starts in a third room."""
    lay = TrapEnv().layout(task, variation)
    t, room, can = lay.target, lay.target_room, lay.objects[CAN]
    side = [r for r in SIDE_ROOMS if r not in (room, can)]
    no = [f"The {t} is not in the {r}." for r in (START_ROOM, *side, can)]
    found, can_at = f"The {t} is in the {room}.", f"The {CAN} is in the {can}."
    return dict(zip(MIXED_ROWS, (
        None,
        " ".join([*no[:2], found, *no[2:], can_at]),
        " ".join([*no, can_at, found]),
        " ".join([found, can_at, *no]),
        f"{found} {can_at}",
        f"{can_at} {found}",
    ), strict=True))  # fmt: skip


def part_mixed(args, policy, wordings) -> tuple[list[str], dict]:
    """The note writer's long note of a search that found the target, on water-plant layouts whose can
    starts in a third room (`CAN_ELSEWHERE`; `mixed_notes`), shown whole at every step of the gold path
    (fetch the can, back to the hallway, into the flower's room, focus, water): P(first action), P(go to
    the flower's room | back in the hallway with the can), P(focus | in its room) and P(the whole gold
    path), token-level at T = 1 (mean over layouts, min in brackets)."""
    task = "trap-water-plant"
    cols = ("first", "to the target's room", "focus", "whole path")
    lines = [
        f"### The writer's long note, found sentence placed: {task}, layouts {list(CAN_ELSEWHERE)} (can in a third room), "
        "note shown whole, T = 1 (mean over layouts, min in brackets)",
        "",
        "| note | P(first action) | P(go to the target's room, carrying the can) | P(focus, in its room) | P(whole gold path) |",
        "|---|---|---|---|---|",
    ]
    per: dict[str, dict[str, list[float]]] = {row: {c: [] for c in cols} for row in MIXED_ROWS}
    for v in CAN_ELSEWHERE:
        gold = TrapEnv().gold_path(task, v)
        steps = {"first": 0, "to the target's room": gold.index(f"go to {TrapEnv().layout(task, v).target_room}"),
                 "focus": next(i for i, a in enumerate(gold) if a.startswith("focus on"))}  # fmt: skip
        notes = mixed_notes(task, v)
        with torch.no_grad():
            scored = policy.score([gold_conversation(policy, task, v, n, False) for n in notes.values()])
        for row, lps in zip(notes, scored, strict=True):
            for c, i in steps.items():
                per[row][c].append(float(lps[i].sum().exp()))
            per[row]["whole path"].append(float(sum(lp.sum() for lp in lps).exp()))
    for row, ps in per.items():
        lines.append(f"| {row} | " + " | ".join(f"{statistics.fmean(ps[c]):.2f} ({min(ps[c]):.2f})" for c in cols) + " |")
        print(lines[-1], flush=True)
    return lines, {row: {c: statistics.fmean(x) for c, x in ps.items()} for row, ps in per.items()}


MODEL_SENTENCES = (
    "The path was clear, but the final destination was not yet",
    "This is a very short answer. I will make sure to include a brief explanation of the answer in a single line of",
    "The task is done. The path is completed. The journey is finished.",
    "turn on blue light bulb",
    "go to workshop",
)
"""Replies the embedded model wrote to the reflection prompt during a 60-iteration EMPO² race on
trap-light-bulb-fixed (seed 1, 2026-12-03): chatter, and bare actions copied from the episode."""


def part_order(args, policy, wordings) -> tuple[list[str], dict]:
    """Where the model's own sentence sits in a stored tip: the record line of a winning episode alone,
    with one of `MODEL_SENTENCES` after it (the order before 2026-12-04) and before it (`with_record`
    today), shown as the rollout shows notes (remaining_plan on). Mean over the sentences and layouts,
    min in brackets."""
    lines = [
        f"### The model's sentence before or after the record line: variations {args.variations}, remaining_plan on, "
        f"{len(MODEL_SENTENCES)} sentences the model wrote (mean over sentences and layouts, min in brackets)",
        "",
        "| task | stored tip | P(first action) | P(focus on target, in its room) | P(finishing action) |",
        "|---|---|---|---|---|",
    ]
    out: dict = {}
    for task in args.tasks:
        per: dict[str, list[dict[str, float]]] = {}
        for v in args.variations:
            record = TrapEnv().gold_record(task, v)
            notes = {"record line alone": [record],
                     "model's sentence after the record": [f"{record} {OWN_NOTE_PREFIX} {s}" for s in MODEL_SENTENCES],
                     "model's sentence first (with_record)": [with_record(s, record) for s in MODEL_SENTENCES]}  # fmt: skip
            convs = [gold_conversation(policy, task, v, n, True) for ns in notes.values() for n in ns]
            with torch.no_grad():
                scored = iter(policy.score(convs))
            steps = key_steps(task, v)
            for row, ns in notes.items():
                for _ in ns:
                    lps = next(scored)
                    per.setdefault(row, []).append({k: float(lps[i].sum().exp()) for k, i in steps.items()})
        out[task] = per
        lines += prob_rows(task, per)
    return lines, out


def own_notes(policy, episodes: Sequence, cached: bool = True, context: str = "conversation") -> list[str]:
    """The note the policy writes about each episode, asked exactly as training asks
    (`memory.reflection.write_tips`: `TIP_INSTRUCTION` after the episode's conversation as the policy saw
    it, `rollout.conversation`, one batched greedy call; `cached`: from the episodes' kept sampling caches,
    which only the policy that played them has) and cleaned by `clean_tip`, but without the
    record line `with_record` adds: the model's own sentence, or the `FALLBACK_PREFIX` fallback.
    `context` "transcript": the instruction follows the episode's transcript alone instead
    (`rollout.conversation.transcript`, one user message; for writers built with `--context transcript`);
    "observation": one note per observation, joined (`memory.reflection.write_observation_notes`).
    Raises ValueError when the policy returns another number of replies."""
    if not episodes:
        return []
    if context == "observation":
        return write_observation_notes(policy, episodes)
    if context == "transcript":
        replies = [r for e in episodes for r in policy.write_tips([()], f"{transcript(e)}\n\n{TIP_INSTRUCTION}")]
        if len(replies) != len(episodes):
            raise ValueError(f"policy.write_tips returned {len(replies)} notes for {len(episodes)} episodes")
        return [clean_tip(r, e) for r, e in zip(replies, episodes, strict=True)]
    convs = [conversation(e) for e in episodes]
    replies = policy.write_tips(convs, TIP_INSTRUCTION, keys=[e.episode_id for e in episodes] if cached else None)
    if len(replies) != len(episodes):
        raise ValueError(f"policy.write_tips returned {len(replies)} notes for {len(episodes)} episodes")
    return [clean_tip(r, e) for r, e in zip(replies, episodes, strict=True)]


def judge_note(note: str, episode) -> NoteVerdict:
    """`check_note` of the note against the episode's facts; a fallback (the model wrote nothing usable)
    is filler whatever its summary of the actions says."""
    if note.startswith(FALLBACK_PREFIX):
        return NoteVerdict(False, False, (), "neither: the model wrote nothing usable (fallback)")
    return check_note(note, episode_facts(episode))


def write_table(records: Sequence[dict[str, Any]], tasks: Sequence[str]) -> list[str]:
    """Markdown rows of part write: per task, won and failed episodes apart, n and the rates of correct,
    false and filler (neither) notes; then up to 3 example notes per task, distinct, with their verdict
    (one of each kind first). `records`: {"task", "won", "note", "correct", "false", "reason"} per episode."""
    lines = ["| task | episodes | n | correct | false | filler (neither) |", "|---|---|---|---|---|---|"]
    for task in tasks:
        for label, won in (("won", True), ("failed", False)):
            rs = [r for r in records if r["task"] == task and r["won"] == won]
            if not rs:
                lines.append(f"| {task} | {label} | 0 | – | – | – |")
                continue
            n, c, f = len(rs), sum(r["correct"] for r in rs), sum(r["false"] for r in rs)
            lines.append(f"| {task} | {label} | {n} | {c / n:.2f} | {f / n:.2f} | {(n - c - f) / n:.2f} |")
    for task in tasks:
        firsts: dict[str, dict[str, Any]] = {}  # each note text once, at its first episode
        for r in records:
            if r["task"] == task:
                firsts.setdefault(r["note"], r)
        rs = list(firsts.values())
        kinds = {"correct": [r for r in rs if r["correct"]], "false": [r for r in rs if r["false"]],
                 "filler": [r for r in rs if not r["correct"] and not r["false"]]}  # fmt: skip
        picked = [k[0] for k in kinds.values() if k]
        picked += [r for r in rs if r not in picked][: 3 - len(picked)]
        if picked:
            lines += ["", f"Example notes, {task}:", ""]
            for r in picked[:3]:
                outcome = "won" if r["won"] else "failed"
                lines.append(f"- ({outcome}) \"{r['note']}\" → {r['reason']}")
    return lines


def part_write(args, policy, wordings) -> tuple[list[str], dict]:
    """The policy's own notes checked against its episodes (`envs.note_check`): on each test layout and
    seed, `args.episodes` episodes with no note and as many with the template pinned (remaining_plan on,
    as the rollout shows notes), then the note written after each (`own_notes`)."""
    vs = args.play_variations
    lines = [
        f"### The model's own notes checked against its episodes: test variations {vs}, {args.episodes} episodes × "
        f"{len(args.seeds)} seeds per layout with no note and as many with the template pinned, step limit "
        f"{args.step_limit}, T = {args.temperature}; notes written greedily after TIP_INSTRUCTION, no record line",
        "",
    ]
    records: list[dict[str, Any]] = []
    same = args.writer is policy and args.writer_context == "conversation"  # else the caches are of no use
    for task in args.tasks:
        for v in vs:
            for seed in args.seeds:
                for row, note in ((NO_NOTE, None), (TEMPLATE_CUT, TrapEnv().curated_tip(task, v))):
                    eps = play_with_note(policy, task, v, note, args, seed * 1000 + v, cut=True, keep_caches=same)
                    for ep, text in zip(eps, own_notes(args.writer, eps, cached=same, context=args.writer_context), strict=True):
                        vd = judge_note(text, ep)
                        records.append({"task": task, "variation": v, "seed": seed, "pinned": row, "won": ep.won,
                                        "score": ep.score, "note": text, "correct": vd.correct, "false": vd.false,
                                        "reason": vd.reason, "claims": [list(c) for c in vd.claims]})  # fmt: skip
        done = [r for r in records if r["task"] == task]
        print(f"  {task}: {len(done)} notes, correct {sum(r['correct'] for r in done)}, "
              f"false {sum(r['false'] for r in done)}", flush=True)  # fmt: skip
    lines += write_table(records, args.tasks)
    for line in lines[2:]:
        print(line, flush=True)
    out: dict = {}
    for task in args.tasks:
        rs = [r for r in records if r["task"] == task]
        out[task] = {"won": _rates([r for r in rs if r["won"]]), "failed": _rates([r for r in rs if not r["won"]]),
                     "notes": rs}  # fmt: skip
    return lines, out


def _rates(rs: Sequence[dict[str, Any]]) -> dict[str, float]:
    """n and the rates of correct, false and filler notes among `rs` (0.0 each when there are none)."""
    n, c, f = len(rs), sum(r["correct"] for r in rs), sum(r["false"] for r in rs)
    return {"n": n, **{k: x / n if n else 0.0 for k, x in (("correct", c), ("false", f), ("filler", n - c - f))}}


def prob_rows(task: str, per: dict[str, list[dict[str, float]]]) -> list[str]:
    """One markdown row per note: mean (min) over layouts of P(first action), P(focus), P(finishing action),
    each printed as it is made."""
    rows = []
    for row, ps in per.items():
        cells = [f"{statistics.fmean(p[k] for p in ps):.2f} ({min(p[k] for p in ps):.2f})" for k in ("first", "focus", "finish")]
        rows.append(f"| {task} | {row} | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    return rows


def room_questions(task: str, variations: Sequence[int]) -> list[tuple[bool, str]]:
    """(the target is in the room, the question) for each side room of each layout: the task sentence,
    the observation on walking in from the hallway, and the yes/no question naming the target."""
    env, out = TrapEnv(), []
    for v in variations:
        lay = env.layout(task, v)
        for room in SIDE_ROOMS:
            first = env.reset(task, v)
            for r in route(START_ROOM, room):
                obs = env.step(f"go to {r}").observation
            question = (f"Task: {first.task_description}\n\nObservation: {obs.text.strip()}\n\n"
                        f"Is the {lay.target} in this room? Answer Yes or No.")  # fmt: skip
            out.append((room == lay.target_room, question))
    return out


def room_observations(task: str, variations: Sequence[int]) -> list[tuple[str, str, str, NoteFacts]]:
    """(task description, room, observation, facts) for every room of each layout, the hallway included:
    the observation on walking in from the hallway (the hallway's: the episode's first), and the facts a
    note about that one observation is checked against (`check_note`: the target and the can seen in the
    room when it holds them, the room searched)."""
    env, out = TrapEnv(), []
    for v in variations:
        lay = env.layout(task, v)
        for room in (START_ROOM, *SIDE_ROOMS):
            first = env.reset(task, v)
            obs = first
            for r in route(START_ROOM, room):
                obs = env.step(f"go to {r}").observation
            tool = CAN if task == "trap-water-plant" else None
            seen = {x: room for x in (lay.target, tool) if x and lay.objects.get(x) == room}
            facts = NoteFacts(targets=(lay.target,), tool=tool, seen_in=seen, searched=(room,),
                              objects=tuple(lay.objects), rooms=(START_ROOM, *SIDE_ROOMS))  # fmt: skip
            out.append((first.task_description, room, obs.text, facts))
    return out


def part_observe(args, policy, wordings) -> tuple[list[str], dict]:
    """One room's observation, the writer's observation note about it, checked (module docstring)."""
    writer = args.writer
    lines = [
        f"### The observation note about one room: test variations {args.variations}, every room of each layout",
        "",
        "| task | rooms with / without the target | correct with the target | correct without it | false |",
        "|---|---|---|---|---|",
    ]
    out: dict = {}
    for task in args.tasks:
        cases = room_observations(task, args.variations)
        replies = writer.write_tips([()] * len(cases), [observation_prompt(d, o) for d, _, o, _ in cases])
        rs = []
        for (_, room, _, facts), reply in zip(cases, replies, strict=True):
            vd = check_note(reply, facts)
            rs.append({"room": room, "present": facts.targets[0] in facts.seen_in, "note": reply,
                       "correct": vd.correct, "false": vd.false, "reason": vd.reason})  # fmt: skip
        pos, neg = [r for r in rs if r["present"]], [r for r in rs if not r["present"]]
        out[task] = {"with": sum(r["correct"] for r in pos) / len(pos), "without": sum(r["correct"] for r in neg) / len(neg),
                     "false": sum(r["false"] for r in rs) / len(rs), "n": [len(pos), len(neg)], "notes": rs}  # fmt: skip
        r = out[task]
        lines.append(f"| {task} | {len(pos)} / {len(neg)} | {r['with']:.2f} | {r['without']:.2f} | {r['false']:.2f} |")
        print(lines[-1], flush=True)
        for bad in [x for x in rs if not x["correct"]][:3]:
            print(f"    {bad['room']}: {bad['note']!r} → {bad['reason']}", flush=True)
    return lines, out


def auc(pos: Sequence[float], neg: Sequence[float]) -> float:
    """P(a random positive scores above a random negative), ties counted half; 0.5 = no signal."""
    if not pos or not neg:
        raise ValueError(f"auc needs scores of both classes, got {len(pos)} positive and {len(neg)} negative")
    return sum((a > b) + 0.5 * (a == b) for a in pos for b in neg) / (len(pos) * len(neg))


def part_room(args, policy, wordings) -> tuple[list[str], dict]:
    """Does the model tell, from one room's observation, whether it holds the target? (module docstring)"""
    fmt = policy.chat_format
    answers = [fmt.encode(a) + (fmt.eot_id,) for a in ("Yes", "No")]
    lines = [
        f"### Is the target in this room? One room's observation, test variations {args.variations}, each side room",
        "",
        "| task | rooms with / without the target | right with the target | right without it | AUC of log P(Yes)/P(No) |",
        "|---|---|---|---|---|",
    ]
    out: dict = {}
    decoding, policy.decoding = policy.decoding, "free"  # the answer is free text, not a valid action
    try:
        for task in args.tasks:
            pos, neg = [], []
            for present, question in room_questions(task, args.variations):
                with torch.no_grad():
                    scored = policy.score([[Turn(question, a, ())] for a in answers])
                margin = float(scored[0][0][0] - scored[1][0][0])
                (pos if present else neg).append(margin)
            out[task] = {"with": sum(m > 0 for m in pos) / len(pos), "without": sum(m <= 0 for m in neg) / len(neg),
                         "auc": auc(pos, neg), "n": [len(pos), len(neg)]}  # fmt: skip
            r = out[task]
            lines.append(f"| {task} | {len(pos)} / {len(neg)} | {r['with']:.2f} | {r['without']:.2f} | {r['auc']:.2f} |")
            print(lines[-1], flush=True)
    finally:
        policy.decoding = decoding
    return lines, out


def episode_questions(episode, context: str) -> list[tuple[bool, list[Turn], str]]:
    """(the target is in the room, the turns before the question, the question) for each room the writer
    can see the episode stood in: the rooms whose "This room is called the R." is in the conversation
    (`context` "conversation") or the transcript ("transcript", which also shows the last observation)."""
    lay = TrapEnv().layout(episode.task, episode.variation)
    if context == "transcript":
        turns, lead = [], transcript(episode) + "\n\n"
        shown = lead
    else:
        turns, lead = list(conversation(episode)), ""
        shown = " ".join(t.user_text for t in turns)
    rooms = [r for r in (START_ROOM, *SIDE_ROOMS) if f"This room is called the {r}." in shown]
    return [(r == lay.target_room, turns, f"{lead}Was the {lay.target} in the {r}? Answer Yes or No.") for r in rooms]


def part_ask(args, policy, wordings) -> tuple[list[str], dict]:
    """Is the target in this room, asked after a whole episode? (module docstring, part "ask")"""
    writer, vs = args.writer, args.play_variations
    fmt = writer.chat_format
    answers = [fmt.encode(a) + (fmt.eot_id,) for a in ("Yes", "No")]
    lines = [
        f"### Was the target in room R? Asked after each episode ({args.writer_context}), test variations {vs}, "
        f"{args.episodes} episodes × {len(args.seeds)} seeds per layout with no note and as many with the template pinned",
        "",
        "| task | questions with / without the target | right with the target | right without it | AUC of log P(Yes)/P(No) |",
        "|---|---|---|---|---|",
    ]
    out: dict = {}

    def log_odds(turns: list[Turn], question: str) -> float:  # log P(Yes) − log P(No), first answer token
        decoding, writer.decoding = writer.decoding, "free"  # the answer is free text; `policy` may be `writer`
        try:
            with torch.no_grad():
                scored = writer.score([turns + [Turn(question, a, ())] for a in answers])
        finally:
            writer.decoding = decoding
        return float(scored[0][-1][0] - scored[1][-1][0])

    for task in args.tasks:
        pos, neg = [], []
        for v in vs:
            for seed in args.seeds:
                for note in (None, TrapEnv().curated_tip(task, v)):
                    for ep in play_with_note(policy, task, v, note, args, seed * 1000 + v, cut=True):
                        for present, turns, question in episode_questions(ep, args.writer_context):
                            (pos if present else neg).append(log_odds(turns, question))
        r = out[task] = {"with": sum(m > 0 for m in pos) / max(len(pos), 1), "without": sum(m <= 0 for m in neg) / max(len(neg), 1),
                         "auc": auc(pos, neg) if pos and neg else float("nan"), "n": [len(pos), len(neg)]}  # fmt: skip
        lines.append(f"| {task} | {len(pos)} / {len(neg)} | {r['with']:.2f} | {r['without']:.2f} | {r['auc']:.2f} |")
        print(lines[-1], flush=True)
    return lines, out


PARTS = {"probs": part_probs, "play": part_play, "bad": part_bad, "order": part_order, "write": part_write,
         "room": part_room, "ask": part_ask, "observe": part_observe, "negation": part_negation,
         "mixed": part_mixed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", nargs="+", default=["probs", "play"], choices=list(PARTS))
    ap.add_argument("--tasks", nargs="+", default=list(SEARCH_TASKS), choices=list(TASKS),
                    help="the dev and test wordings cover the search family (parts probs, play); order, bad and write take any")
    ap.add_argument("--variations", type=int, nargs="+", default=[36, 40, 44], help="test layouts scored (36-47)")
    ap.add_argument("--play-variations", type=int, nargs="+", default=[36, 40, 44], help="test layouts played")
    ap.add_argument("--rows", nargs="*", default=None, help="wording numbers played (e.g. 00 03); default all")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--episodes", type=int, default=4, help="episodes per layout, note and seed")
    ap.add_argument("--step-limit", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--warm-start", default=RunConfig().policy.warm_start, help=f"auto (the default adapter, {DEFAULT_WARM_START}) | none | DIR")
    ap.add_argument("--writer-context", choices=["auto", "conversation", "transcript", "observation"], default="auto",
                    help="what the note is written after: the episode as the policy saw it, its transcript alone "
                         "(for writers built with make_warmstart.py --context transcript), or each observation "
                         "alone, the notes joined (--context observation); auto: as the writer was trained")
    ap.add_argument("--note-writer", default=MemoryConfig().note_writer, metavar="auto|none|DIR",
                    help="who writes the notes about the episodes the --warm-start adapter played (memory.note_writer): "
                         "auto (the shipped writer), none (the acting adapter) or another adapter")
    ap.add_argument("--decoding", choices=["constrained", "action"], default="constrained",
                    help="how the acting policy picks among the valid actions: token by token, or one whole action "
                         "from a categorical over them (policy.decoding)")
    ap.add_argument("--wordings", choices=list(WORDING_SETS), default="dev",
                    help="parts probs, play: the note wordings; dev (benchmarks/data/dev_notes.json) for choosing "
                         "between adapters and recipes, test (benchmarks/data/test_notes.json) only for the shipped "
                         "default's report (docs/benchmarks/README.md, \"Choose on dev, report test once\")")
    ap.add_argument("--root", type=Path, default=None, help="sessions root (default: $EMPO2_SESSIONS_DIR or ./sessions)")
    add_result_option(ap)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    if args.note_writer not in ("auto", "none") and not (Path(args.note_writer) / "adapter_config.json").is_file():
        ap.error(f"--note-writer {args.note_writer!r} is not a PEFT adapter directory (no adapter_config.json); "
                 "build one with scripts/make_warmstart.py --reflect-only --out DIR")  # fmt: skip
    if args.wordings == "test" and args.warm_start != RunConfig().policy.warm_start:
        ap.error(f"--wordings test is scored for the shipped default only (--warm-start {RunConfig().policy.warm_start}), "
                 f"not {args.warm_start!r}: compare adapters on --wordings dev")  # fmt: skip
    torch.set_num_threads(max(1, min(args.threads, os.cpu_count() or 1)))
    wordings = load_wordings(args.wordings)
    _, root = fresh_dir(args.root or default_sessions_root(), time.strftime("bench_notes-%Y%m%d-%H%M%S"))
    policy_cfg = dataclasses.replace(RunConfig().policy, warm_start=args.warm_start, decoding=args.decoding)
    policy = load_policy(policy_cfg)
    context = "auto" if args.writer_context == "auto" else "episode"  # only "auto" needs the writer's own
    run = RunConfig(policy=policy_cfg, memory=MemoryConfig(note_writer=args.note_writer, note_context=context))
    args.writer, resolved = load_note_writer(run, policy)
    if args.writer_context == "auto":
        args.writer_context = "observation" if resolved == "observation" else "conversation"
    if "ask" in args.parts and args.writer_context == "observation":
        ap.error("--parts ask asks about a whole episode; an observation writer never sees one "
                 "(use --parts observe, or --note-writer none / --writer-context conversation)")  # fmt: skip
    writer = f", notes written by the {args.note_writer} writer after the {args.writer_context}"
    report = [f"# bench_notes ({time.strftime('%Y-%m-%d %H:%M')}, warm start {args.warm_start}, policy {policy.version}, {args.decoding} decoding{writer})",
              "", f"Wordings: {WORDING_LABELS[args.wordings]}, `{WORDING_SETS[args.wordings].relative_to(DATA.parents[1])}`.", ""]
    results: dict = {}
    for name in args.parts:
        t = time.perf_counter()
        lines, data = PARTS[name](args, policy, wordings)
        results[name] = data
        report += lines + ["", f"({name}: {time.perf_counter() - t:.0f} s)", ""]
        (root / "notes.md").write_text("\n".join(report))
        (root / "notes.json").write_text(json.dumps(results, default=float, indent=1))
        write_result(args.result, __file__, argv, started, args.seeds, results, parts=list(results),
                     warm_start=args.warm_start, note_writer=args.note_writer, wordings=args.wordings,
                     wordings_label=WORDING_LABELS[args.wordings], report="\n".join(report))  # fmt: skip
    print("\n" + "\n".join(report))
    print(f"written: {root}/notes.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
