"""Part "room" of bench_sw_lesson: does the agent read the box's room from find-animal's task text?

With no note, the lesson's mapped plan (teleport outside, look, focus, pick up, teleport to the box's
room, move into the box) is scored step by step (token-level, T = 1), and at the teleport after the
pick-up every "teleport to <room>" the step offers is scored: P(teleport to the named room), and the
most likely room. The dev variations 150, 157, 164, 171, 178 keep their boxes in five different rooms.
"""

from __future__ import annotations

import dataclasses
import statistics

import torch

from empo2_studio.envs.scienceworld import ScienceWorldEnv
from empo2_studio.lesson.scienceworld import TIP_OPENING, curated_tip
from empo2_studio.policy import prompts

ROOM_VARIATIONS = (150, 157, 164, 171, 178)
TELEPORT_STEP = 4
"""The plan's fifth action, "teleport to <the box's room>" (after "pick up <animal>")."""
TELEPORT = "teleport to "


def room_probe(policy, env: ScienceWorldEnv, variation: int, path_turns) -> dict:
    """P per plan step with no note, P(teleport to the named room) at `TELEPORT_STEP`, the likeliest
    room and its P, for one find-animal variation. `path_turns` is bench_scienceworld's."""
    plan = curated_tip("find-animal", variation, env)[len(TIP_OPENING):].rstrip(".").split(prompts.PLAN_SEPARATOR)
    room = plan[TELEPORT_STEP][len(TELEPORT):]
    turns = path_turns(env, policy, "find-animal", variation, plan, None)
    fmt = policy.chat_format
    targets = [a for a in turns[TELEPORT_STEP].valid_actions if a.startswith(TELEPORT)]
    convs = [turns[:TELEPORT_STEP] + [dataclasses.replace(turns[TELEPORT_STEP], action_ids=fmt.encode(a) + (fmt.eot_id,))]
             for a in targets]
    with torch.no_grad():
        steps = [float(lp.sum().exp()) for lp in policy.score([turns])[0]]
        p_room = {a[len(TELEPORT):]: float(s[TELEPORT_STEP].sum().exp()) for a, s in zip(targets, policy.score(convs))}
    best = max(p_room, key=p_room.get)
    return {"variation": variation, "room": room, "p_steps": steps, "p_named": p_room.get(room, 0.0),
            "best": best, "p_best": p_room[best]}


def part_room(policy, env: ScienceWorldEnv, path_turns) -> tuple[list[str], dict]:
    """The probe on `ROOM_VARIATIONS`: a table and {"rows", "mean_p_named", "named_first"}."""
    rows = [room_probe(policy, env, v, path_turns) for v in ROOM_VARIATIONS]
    mean = statistics.fmean(r["p_named"] for r in rows)
    first = sum(r["best"] == r["room"] for r in rows)
    lines = ["## The box's room, read from the task text (no note, dev)", "",
             "| dev variation (box's room) | P per plan step | P(named room) | most likely teleport |",
             "|---|---|---|---|"]
    lines += [f"| {r['variation']} ({r['room']}) | {' '.join(f'{p:.2f}' for p in r['p_steps'])} | "
              f"{r['p_named']:.2f} | {r['best']} |" for r in rows]
    lines += ["", f"Mean P(named room) {mean:.2f}; the named room the most likely teleport in {first} of {len(rows)}."]
    return lines, {"rows": rows, "mean_p_named": round(mean, 4), "named_first": first}
