"""Does the memory find find-animal's animals with frozen weights? Trials of the record line (issue 47, bar 3).

The race probe (docs/notebook/2026-12-07-sw-race-probe.md) found that on ScienceWorld nothing wrote a tip
a later episode could use. `envs.sw_search` writes one from the episode's own trajectory: the rooms it
searched and a room not yet searched to try, or, once a focus scored, the animal, its room and the whole
plan. This benchmark asks whether memory rollouts reading those tips reach the animals before any
weight changes: per (seed, variation), trial 0 is a naive group, trials 1…K memory groups (the paper's
retrieval, top 10 by score), each group writing its tips after it (the policy's own sentence, then the
record line: `EnvConfig.record_line` on), the weights frozen (checked). The variation's memory
partition starts empty for each seed. `--structure` picks the memory (`memory.structure`): flat is the
paper's (the retrieval above); flat-counts and flat-counts-wins rank by similarity and the tips' used/helped
counts, the latter with won episodes' notes first; flat-rotate keeps the flat score order but puts notes whose
readers mostly did not beat the group's mean behind the rest, flat-rotate-source those whose readers mostly
scored below the note's own episode (docs/memory-structure.md).

Per trial: success, and the share of episodes that stood outside (where every variation keeps its
animals) and whose focus scored (on an animal, or on `--task`'s target). `--task` runs another find task
(find-plant, find-living-thing, find-non-living-thing: held out too, and never looked at while the record
line was written): does the memory's search carry to a task it was not built on?

`--part lines` scores, without playing, what each form of a line makes of the winning plan: per
dev variation, P(each action of the plan) token-level along it (as sampled, T = 1) with the line in view
(`bench_scienceworld.path_turns`, the note cut to its unplayed steps as a memory step shows it).

`--start-note ROOM` asks the second half alone: each variation's memory starts with the line a search
would write once it is ROOM's turn ("No animal was found in: <start room>. Next time: teleport to ROOM,
then look around.", stored as a teacher's tip would be but not pinned, so the notes the trials write rank
beside it by score; the naive trial 0 then writes none, which would outrank it): does a group sent to the
right room find the animal, and does the next one follow?

    PYTHONPATH=. .venv/bin/python benchmarks/bench_sw_search.py --variations 150 157 164 --seeds 0 --trials 5

find-animal is held out from every shipped adapter. `--split dev` (the default) is where choices are made;
test variations are scored once, for the shipped default.
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

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from empo2_studio.config import WARM_START_DIR, EnvConfig, MemoryConfig, RolloutConfig, RunConfig  # noqa: E402
from empo2_studio.envs.places import SCIENCEWORLD_PLACES, place_in  # noqa: E402
from empo2_studio.envs.room_notes import RECORD_PREFIX  # noqa: E402
from empo2_studio.envs.scienceworld import ScienceWorldEnv  # noqa: E402
from empo2_studio.memory import make_embedder  # noqa: E402
from empo2_studio.policy import load_policy  # noqa: E402
from empo2_studio.rollout import play_group, seed_policy, write_group_tips  # noqa: E402
from empo2_studio.sessions import Session, auto_warm_start, default_sessions_root, fresh_dir  # noqa: E402
from empo2_studio.trainer import Trainer  # noqa: E402
from empo2_studio.types import MEMORY_STRUCTURES  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import add_result_option, write_result  # noqa: E402

TASK = "find-animal"
FIND_TASKS = ("find-animal", "find-living-thing", "find-plant", "find-non-living-thing")
"""ScienceWorld's find tasks (all held out from every shipped adapter): the search record writes their tips."""
MEASURES = ("success", "stood outside", "focus scored", "tips read per step")
OLD_FOCUS = "focused on an animal"
"""What "focus scored" was called in result files written before `--task` (find-animal only)."""


def episode_measures(episode) -> dict[str, float]:
    """The per-episode measures of `MEASURES`: won, ever stood outside, a focus that scored, tips per step."""
    texts = [episode.first_observation, *(s.observation for s in episode.steps)]
    outside = any(place_in(t, SCIENCEWORLD_PLACES) == "outside" for t in texts)
    focused = any(s.action.startswith("focus on ") and s.reward > 0 for s in episode.steps)
    tips = statistics.fmean(len(s.tips) for s in episode.steps) if episode.steps else 0.0
    return dict(zip(MEASURES, (float(episode.won), float(outside), float(focused), tips), strict=True))


def trials(trainer: Trainer, variation: int, seed: int, n_trials: int, temperature: float,
           start_note: str = "", split: str = "dev", task: str = TASK) -> list[dict[str, float]]:  # fmt: skip
    """Trial 0 naive, trials 1…n memory, on one variation; each group's tips stored after it (the memory
    first holding the `--start-note` line when `start_note` names a room). One row per trial."""
    rows = []
    if start_note:
        first = trainer.envs(1)[0].reset(task, variation).text
        start = place_in(first, SCIENCEWORLD_PLACES)
        if start in (None, start_note):
            raise ValueError(f"variation {variation} starts in {start!r}: the start note to {start_note!r} would say nothing")
        # keyed by the start's observation, as an episode's own note is keyed by its conversation: a tip keyed
        # by its own text fell below the similarity threshold at most steps (2026-12-07, tips read 0.00–0.50)
        trainer.store.add_tip(task, variation, f"{RECORD_PREFIX} No animal was found in: {start}. Next time: "
                                               f"teleport to {start_note}, then look around.", key_text=first)  # fmt: skip
    for trial in range(n_trials + 1):
        mode = "naive" if trial == 0 else "memory"
        group_seed = seed * 1000 + variation * 10 + trial
        seed_policy(trainer.policy, group_seed)
        envs = trainer.envs(trainer.cfg.rollout.group_size)
        eps = play_group(envs, trainer.policy, trainer.store, task=task, variation=variation, split=split,
                         rollout_mode=mode, update_mode=None, temperature=temperature, seed=group_seed,
                         embedder=trainer.embedder, keep_caches=True)  # fmt: skip
        if trial == 0 and start_note:  # the start note stands for what a search wrote before: trial 0's notes would outrank it
            for e in eps:
                trainer.policy.forget(e.episode_id)
        else:
            eps = write_group_tips(trainer.policy, trainer.store, eps, writer=trainer.writer, note_context=trainer.note_context)
        trainer.session.append_episodes(eps)
        per = [episode_measures(e) for e in eps]
        row = {m: statistics.fmean(p[m] for p in per) for m in MEASURES}
        rows.append(row)
        print(f"seed {seed} variation {variation} trial {trial} ({mode}): "
              + ", ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)  # fmt: skip
    return rows


LINE_FORMS = {
    "none": None,
    "search line, outside next": "{r} No animal was found in: {start}. Next time: teleport to outside, then look around.",
    "found line (colon)": "{r} The animal was the {animal}, in the outside: {plan}.",
    "found line (Next time)": "{r} The animal was the {animal}, in the outside. Next time: {plan}.",
    "found line (plan alone)": "{r} Next time: {plan}.",
    "found line (is outside)": "{r} The animal is outside: {plan}.",
    "found line (the X was outside)": "{r} The {animal} was outside. Next time: {plan}.",
    "the Lesson's tip": "Animals are never indoors: {plan}.",
}
"""The lines `--part lines` scores: {r} the record prefix, {start} the start room, {plan} the winning plan."""


def part_lines(policy, variations: list[int]) -> tuple[str, dict]:
    """P(each action of the winning plan) along it, per line form (`LINE_FORMS`), mean over `variations`."""
    from bench_scienceworld import plan_probabilities

    from empo2_studio.lesson.scienceworld import TIP_OPENING, curated_tip
    from empo2_studio.policy import prompts

    out: dict = {}
    lines = ["| line | " + " | ".join(f"step {k + 1}" for k in range(6)) + " | P(whole plan) |", "|---|" + "---|" * 7]
    with ScienceWorldEnv(step_limit=10) as env:
        plans = {v: curated_tip(TASK, v, env)[len(TIP_OPENING):].rstrip(".").split(prompts.PLAN_SEPARATOR) for v in variations}
        starts = {v: place_in(env.reset(TASK, v).text, SCIENCEWORLD_PLACES) for v in variations}
        for name, form in LINE_FORMS.items():
            notes = {v: None if form is None else form.format(r=RECORD_PREFIX, start=starts[v], animal=plans[v][2][len("focus on "):],
                                                              plan=prompts.PLAN_SEPARATOR.join(plans[v]))
                     for v in variations}  # fmt: skip
            out[name] = plan_probabilities(env, policy, TASK, [(v, plans[v], notes[v]) for v in variations])
            lines.append(f"| {name} | " + " | ".join(f"{p:.2f}" for p in out[name]["mean"]) + f" | {out[name]['whole']:.2f} |")
            print(lines[-1], flush=True)
    return "\n".join(lines), out


def compare(names: list[str], results_dir: Path | None = None) -> tuple[str, dict]:
    """--part compare: per (task, memory) — `structure`, flat when a file predates the option; the task
    find-animal when it predates `--task` — per seed, the mean success over the memory trials and
    variations, and the searches (seed × variation) in which some memory trial's focus scored. Raises
    ValueError on a missing file, a file of another part or benchmark, a seed read twice, or files of one
    (task, memory) that disagree on trials or variations."""
    from _results import RESULTS

    results_dir = results_dir or RESULTS
    arms: dict[str, dict] = {}
    for name in names:
        path = results_dir / f"{name}.json"
        if not path.is_file():
            raise ValueError(f"--inputs {name}: no {path.name} in {results_dir}")
        data = json.loads(path.read_text(encoding="utf-8"))
        per_seed = data.get("results")
        if (data.get("start_note") or not isinstance(per_seed, dict) or not per_seed or "variations" not in data
                or any("success" not in m or ("focus scored" not in m and OLD_FOCUS not in m) for m in per_seed.values())):  # fmt: skip
            raise ValueError(f"--inputs {name}: not a --part trials run from an empty memory")
        label = f"{data.get('task', TASK)}, {data.get('structure', 'flat')}"
        arm = arms.setdefault(label, {"files": [], "seeds": [], "per_seed_success": [], "per_seed_trials": [],
                                      "found": 0, "searches": 0, "variations": data["variations"]})  # fmt: skip
        if arm["variations"] != data["variations"]:
            raise ValueError(f"--inputs {name}: variations {data['variations']}, another run of {label} {arm['variations']}")
        arm["files"].append(name)
        for seed, m in per_seed.items():
            success, focused = m["success"], m.get("focus scored", m.get(OLD_FOCUS))
            if int(seed) in arm["seeds"]:
                raise ValueError(f"--inputs {name}: seed {seed} of {label} was already read from {arm['files'][:-1]}")
            if arm["per_seed_trials"] and len(success) != len(arm["per_seed_trials"][0]):
                raise ValueError(f"--inputs {name}: {len(success) - 1} trials, another run of {label} {len(arm['per_seed_trials'][0]) - 1}")
            arm["seeds"].append(int(seed))
            arm["per_seed_success"].append(statistics.fmean(x for t in success[1:] for x in t))
            arm["per_seed_trials"].append([statistics.fmean(t) for t in success])
            arm["found"] += sum(any(t[v] > 0 for t in focused[1:]) for v in range(len(data["variations"])))
            arm["searches"] += len(data["variations"])
    lines = ["| task, memory | seeds | success over the memory trials, per seed | mean | success per trial (mean over seeds) | searches whose focus scored |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for label, a in arms.items():
        a["per_trial"] = [statistics.fmean(col) for col in zip(*a["per_seed_trials"], strict=True)]
        a["mean"] = statistics.fmean(a["per_seed_success"])
        lines.append(f"| {label} | {', '.join(map(str, a['seeds']))} | {' / '.join(f'{x:.2f}' for x in a['per_seed_success'])} | "
                     f"{a['mean']:.2f} | {' '.join(f'{x:.2f}' for x in a['per_trial'])} | {a['found']} of {a['searches']} |")  # fmt: skip
    return "\n".join(lines), arms


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", default="trials", choices=["trials", "lines", "compare"])
    ap.add_argument("--inputs", nargs="+", default=[], metavar="NAME",
                    help="--part compare: result files of trial runs (benchmarks/results/NAME.json) to set side by side")
    ap.add_argument("--task", default=TASK, choices=FIND_TASKS, help="a find task (the search record's); lines and start notes: find-animal")
    ap.add_argument("--variations", type=int, nargs="+", default=[150, 157, 164], help="variations of --task in --split")
    ap.add_argument("--split", default="dev", choices=["train", "dev", "test"], help="choose on dev; test is scored once")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--trials", type=int, default=5, help="memory trials after the naive trial 0")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--step-limit", type=int, default=10)
    ap.add_argument("--temperature", type=float, default=1.0, help="the training rollouts' (paper: 1.0)")
    ap.add_argument("--start-note", default="", choices=["", *SCIENCEWORLD_PLACES], metavar="ROOM",
                    help="each variation's memory starts with the search line that sends the agent to ROOM")
    ap.add_argument("--structure", default="flat", choices=MEMORY_STRUCTURES,
                    help="memory.structure: flat is the paper's (best score first); docs/memory-structure.md for the others")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warm-start", default=str(WARM_START_DIR / auto_warm_start("scienceworld")))
    ap.add_argument("--root", type=Path, default=None)
    add_result_option(ap)
    args = ap.parse_args(argv)
    if args.part == "compare":
        if not args.inputs:
            ap.error("--part compare needs --inputs NAME ... (result files of trial runs)")
        t0 = time.perf_counter()
        try:
            table, results = compare(args.inputs)
        except ValueError as e:
            ap.error(str(e))
        print(table)
        write_result(args.result, __file__, argv, t0, sorted({s for r in results.values() for s in r["seeds"]}), results,
                     inputs=args.inputs, table=table)  # fmt: skip
        return 0
    if args.trials < 1:
        ap.error(f"--trials must be ≥ 1, got {args.trials}")
    if args.group_size < 2 or args.step_limit < 1:
        ap.error(f"--group-size must be ≥ 2 and --step-limit ≥ 1, got {args.group_size} and {args.step_limit}")
    if args.task != TASK and (args.part == "lines" or args.start_note):
        ap.error(f"--part lines and --start-note are written for {TASK}'s animals, not {args.task}")
    split = ScienceWorldEnv().variations(args.task, args.split)  # the catalogue: no JVM starts
    if bad := [v for v in args.variations if v not in split]:
        ap.error(f"--variations {bad}: not {args.task} {args.split} variations ({split[0]}–{split[-1]})")
    torch.set_num_threads(max(1, min(args.threads, os.cpu_count() or 1)))
    _, root = fresh_dir(args.root or default_sessions_root(), time.strftime("bench_sw_search-%Y%m%d-%H%M%S"))
    policy = load_policy(dataclasses.replace(RunConfig().policy, warm_start=args.warm_start))
    frozen = [p.detach().clone() for p in policy.trainable_parameters()]
    if args.part == "lines":
        t0 = time.perf_counter()
        table, results = part_lines(policy, args.variations)
        print(f"\n### P(each action of the winning plan) with each line in view, {args.split} variations "
              f"{args.variations}\n\n{table}")  # fmt: skip
        write_result(args.result, __file__, argv, t0, [], results, variations=args.variations,
                     warm_start=args.warm_start, table=table)  # fmt: skip
        return 0
    embedder = make_embedder("minilm")
    t0 = time.perf_counter()
    per_seed: dict[str, dict[str, list[list[float]]]] = {}
    for seed in args.seeds:
        cfg = RunConfig(run_id=f"sw-search-{seed}", seed=seed,
                        env=EnvConfig(name="scienceworld", task=args.task, variations=tuple(args.variations),
                                      step_limit=args.step_limit, record_line=True),
                        memory=MemoryConfig(embedder="minilm", pin_curated=False, structure=args.structure), rollout=RolloutConfig(group_size=args.group_size))  # fmt: skip
        trainer = Trainer(cfg, Session.create(root, cfg), policy=policy, embedder=embedder)
        try:
            rows = {v: trials(trainer, v, seed, args.trials, args.temperature, args.start_note, args.split, args.task)
                    for v in args.variations}  # fmt: skip
        finally:
            trainer.close()
        # per measure: one list per trial, the variations' values in order
        per_seed[str(seed)] = {m: [[rows[v][t][m] for v in args.variations] for t in range(args.trials + 1)]
                               for m in MEASURES}  # fmt: skip
    if any(not torch.equal(a, b) for a, b in zip(frozen, policy.trainable_parameters(), strict=True)):
        raise RuntimeError("the weights changed; the trials must run frozen")
    lines = [f"### Memory trials on {args.task}, frozen weights ({args.warm_start}), {args.split} variations {args.variations}, "
             f"seeds {args.seeds}, memory {args.structure}, start note {args.start_note or 'none'}, group {args.group_size}, step limit {args.step_limit}, T = {args.temperature} "
             "(mean over seeds and variations)", "",
             "| trial | " + " | ".join(MEASURES) + " |", "|---|" + "---|" * len(MEASURES)]  # fmt: skip
    for t in range(args.trials + 1):
        cells = [statistics.fmean(x for s in per_seed.values() for x in s[m][t]) for m in MEASURES]
        lines.append(f"| {t} ({'naive' if t == 0 else 'memory'}) | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    table = "\n".join(lines)
    print("\n" + table + f"\n\n({time.perf_counter() - t0:.0f} s; sessions under {root})")
    write_result(args.result, __file__, argv, t0, args.seeds, per_seed, task=args.task, variations=args.variations,
                 warm_start=args.warm_start, start_note=args.start_note, structure=args.structure, table=table)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
