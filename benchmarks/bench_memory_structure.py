"""Issue 49 (2): which tip memory helps a frozen agent most? The arms, paired, on one trap task.

Arms (`--arms`): `none` (no memory: every trial naive), and the `memory.structure` values `flat`
(the paper's), `flat-counts`, `groups`, `structured` (the full design) and `structured-random` (the
full design showing a random sample of its group: does the content matter?). docs/memory-structure.md.

Protocol, as `evaluation.adapt` (weights frozen, the model's own notes by the shipped note writer): per
seed, one layout of the task (`--split` layouts, the seed-th one); trial 0 plays `--group` episodes
without memory, ONCE, and its notes are written into every arm's fresh store (the same notes: the
writer decodes greedily); then `--trials` trials per arm, each `--group` episodes with memory at
temperature 1.0, each trial's notes stored before the next. The sampler seed of trial t is the same in
every arm (`sampling_seed(seed, ADAPT_SEED_OFFSET + t)`), so the arms are paired by seed and trial. Every
memory arm shows at most `--budget` tokens of tips per prompt (`memory.tip_token_budget`,
`prompts.budget_cut`), the same rule in every arm.

Per arm, seed and trial: success rate, mean steps per episode, mean steps of the won episodes, live
tips in the store after the trial (memory size), wrong-place tips shown (`rollout.tip_places`: share of
the shown entries with a place, and per memory step), tips cut by the budget. The table gives the mean
over seeds of the mean over memory trials, with a 95 % t-interval over seeds (n = 3: t = 4.303), and the
paired difference against `flat`.

Memory-free success after distillation (`--distill-steps K`, 0 = not measured), memory arms only: after
an arm's last trial, its memory episodes of trials 1…T go through K updates, as the Lesson's *Distill now*
does (paper §4.2, mode (b): scored without their tips, `off-policy`). Their advantages are group-relative
over every episode played on the layout for the arm, trial 0's memory-free ones included as the baseline
(trained on: the memory episodes only), the rule of `Trainer.distill` for episodes outside a training
group: one group per trial would give a trial whose episodes all won no signal at all (a first version
did, and measured exactly that). Then `--group` episodes without memory on the same layout (the sampler
seed of trial T + 1, the same in every arm), and the weights are put back. The no-memory arm has no memory
episodes to distil (five updates on its 18 long naive episodes took over 10 minutes here) and gets "—".

Run:  .venv/bin/python benchmarks/bench_memory_structure.py --threads 1 --result memory-structure-2026-12-06
Any trap task (`--task`), e.g. a long-horizon one added to `envs/trap_world.py`.
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

from empo2_studio.algorithm import group_advantages  # noqa: E402
from empo2_studio.config import AlgoConfig, EnvConfig, MemoryConfig, RunConfig, TrainConfig  # noqa: E402
from empo2_studio.envs import make_env  # noqa: E402
from empo2_studio.envs.trap import TASKS  # noqa: E402
from empo2_studio.evaluation import ADAPT_SEED_OFFSET  # noqa: E402
from empo2_studio.memory import make_embedder, open_tip_store  # noqa: E402
from empo2_studio.policy import load_policy, prompts  # noqa: E402
from empo2_studio.policy.note_writer import load_note_writer  # noqa: E402
from empo2_studio.race import load_lora_state, lora_state  # noqa: E402
from empo2_studio.rollout import play_group, sampling_seed, seed_policy, write_group_tips  # noqa: E402
from empo2_studio.rollout.tip_places import entry_places, wrong_place_counts  # noqa: E402
from empo2_studio.rollout.tip_writing import key_text  # noqa: E402
from empo2_studio.sessions import default_sessions_root, fresh_dir  # noqa: E402
from empo2_studio.update import UpdateSettings, policy_update  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import RESULTS, add_result_option, write_result  # noqa: E402

MEMORY_ARMS = ("flat", "flat-counts", "groups", "structured", "structured-random")
ARMS = ("none", *MEMORY_ARMS)
DISTILL_RULE = "memory episodes of trials 1…T; advantages over the arm's episodes on the layout, trial 0 as baseline"
"""How the distillation column is made, recorded with a result so runs of another rule never merge."""
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
"""Two-sided 95 % Student t quantile by degrees of freedom (n seeds − 1)."""


def ci95(values: list[float]) -> tuple[float, float]:
    """(mean, half-width of the 95 % t-interval) over seeds; half-width 0 for one value.

    >>> ci95([0.0, 0.5, 1.0])
    (0.5, 1.242...)
    """
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / len(values) ** 0.5


def over_seeds(values: list[float]) -> dict:
    """{"per_seed", "mean", "ci95"}: a measure's per-seed values with `ci95`'s mean and half-width."""
    mean, half = ci95(values)
    return {"per_seed": values, "mean": mean, "ci95": half}


def live_tips(store, task: str) -> int:
    """Tips a store can still show for `task` (a structured store's retired tips are not counted)."""
    if callable(getattr(store, "groups", None)):
        return sum(g.tips for g in store.groups(task))
    return store.count(task=task)


def trial_row(episodes, store, task, env, places_from) -> dict:
    """One trial's numbers (module docstring)."""
    won = [e for e in episodes if e.won]
    shown_notes = list(dict.fromkeys(prompts.note_text(t.text) for e in episodes for s in e.steps for t in s.tips))
    cut = sum(1 for e in episodes for s in e.steps for t in s.skipped_tips if "tip token budget" in t.reason)
    row = {
        "success": sum(e.won for e in episodes) / len(episodes),
        "steps": statistics.fmean(len(e.steps) for e in episodes),
        "steps_won": statistics.fmean(len(e.steps) for e in won) if won else None,
        "tips": float(live_tips(store, task)) if store is not None else 0.0,
        "budget_cut": float(cut),
        "notes_shown": shown_notes,
    }
    if store is not None:
        places = entry_places(store, task, places_from, env.place_of)
        row.update(wrong_place_counts(episodes, places, env.place_of))
    return row


def run_seed(args, seed: int, policy, writer, context: str, embedder, env, root: Path) -> dict:
    """Every arm for one seed (module docstring); returns {arm: [row per trial]}."""
    task = args.task
    variation = env.variations(task, args.split)[seed % len(env.variations(task, args.split))]
    envs = [make_env(EnvConfig(name="trap", task=task, step_limit=args.step_limit)) for _ in range(args.group)]
    stores = {}
    for arm in MEMORY_ARMS:
        if arm in args.arms:
            cfg = MemoryConfig(embedder="minilm", structure=arm, tip_token_budget=args.budget)
            stores[arm] = open_tip_store(root / f"seed{seed}-{arm}" / "tips.lance", embedder, cfg, world=env)

    def play(arm: str, trial: int):
        seed_policy(policy, sampling_seed(seed, ADAPT_SEED_OFFSET + trial))
        mode = "memory" if trial > 0 and arm != "none" else "naive"
        return play_group(envs, policy, stores.get(arm), task=task, variation=variation, split=args.split,
                          rollout_mode=mode, update_mode=None, temperature=1.0, seed=seed, keep_caches=True)  # fmt: skip

    def distilled(baseline: list, trials: list) -> dict:
        """`--distill-steps` off-policy updates on the memory episodes of `trials`, advantages over them
        and the memory-free `baseline` (module docstring), then `--group` episodes without memory; the
        weights are put back afterwards. {"success", "loss", "seconds"}."""
        t0, start = time.perf_counter(), lora_state(policy)
        episodes = [e for g in trials for e in g]
        returns = torch.tensor([[e.return_ for e in [*baseline, *episodes]]], dtype=torch.float64)
        advantages = group_advantages(returns, AlgoConfig().adv_eps)[0, len(baseline):].tolist()
        train = TrainConfig(learning_rate=args.distill_lr)
        optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=train.learning_rate, weight_decay=train.weight_decay)
        settings = UpdateSettings.from_config(AlgoConfig(), train)
        try:
            losses = [policy_update(policy, optimizer, episodes, advantages, "off-policy", settings)["loss/policy"]
                      for _ in range(args.distill_steps)]  # fmt: skip
            after = play("none", args.trials + 1)
            for e in after:
                policy.forget(e.episode_id)
        finally:
            load_lora_state(policy, start)
        return {"success": sum(e.won for e in after) / len(after), "loss": losses[-1],
                "seconds": time.perf_counter() - t0}  # fmt: skip

    t0 = time.perf_counter()
    first = play("none", 0)
    if stores:
        arm0 = next(iter(stores))
        first = write_group_tips(policy, stores[arm0], first, writer=writer, note_context=context)
        for arm, store in stores.items():
            if arm != arm0:
                for e in first:
                    if e.tip.strip():
                        store.add_episode_tips(e, e.tip, key_text(e))
    else:
        for e in first:
            policy.forget(e.episode_id)
    out = {arm: [trial_row(first, stores.get(arm), task, env, first)] for arm in args.arms}
    print(f"seed {seed} layout {variation}: trial 0 (no memory) success {out[args.arms[0]][0]['success']:.2f} "
          f"[{time.perf_counter() - t0:.0f} s]", flush=True)  # fmt: skip
    after: dict = {}
    for arm in args.arms:
        history, played = list(first), []
        for trial in range(1, args.trials + 1):
            t0 = time.perf_counter()
            episodes = play(arm, trial)
            if arm in stores:
                episodes = write_group_tips(policy, stores[arm], episodes, writer=writer, note_context=context)
            else:
                for e in episodes:
                    policy.forget(e.episode_id)
            history += episodes
            played.append(episodes)
            row = trial_row(episodes, stores.get(arm), task, env, history)
            out[arm].append(row)
            wrong = f", wrong-place {row['wrong_share']:.2f} of {row['placed']:.0f}" if arm in stores else ""
            print(f"  seed {seed} {arm:17s} trial {trial}: success {row['success']:.2f}, steps {row['steps']:.1f}, "
                  f"tips {row['tips']:.0f}{wrong}, budget cut {row['budget_cut']:.0f} [{time.perf_counter() - t0:.0f} s]", flush=True)  # fmt: skip
        if args.distill_steps and arm in stores:
            after[arm] = distilled(first, played)
            print(f"  seed {seed} {arm:17s} after {args.distill_steps} distill steps: memory-free success "
                  f"{after[arm]['success']:.2f} [{after[arm]['seconds']:.0f} s]", flush=True)  # fmt: skip
    return {"layout": variation, "arms": out, "distilled": after}


def summary(per_seed: dict, arms: list[str], trials: int) -> tuple[dict, str]:
    """Per arm, over seeds: the mean over memory trials (1…trials) of each measure, mean ± 95 % CI, and
    the paired difference in success against flat. Returns (numbers, markdown table)."""
    seeds = sorted(per_seed)

    def per(arm: str, key: str) -> list[float]:
        vals = []
        for s in seeds:
            xs = [r[key] for r in per_seed[s]["arms"][arm][1 : trials + 1] if r.get(key) is not None]
            vals.append(statistics.fmean(xs) if xs else float("nan"))
        return vals

    numbers: dict = {}
    distilled = all(per_seed[s].get("distilled") for s in seeds)
    extra = (" memory-free success after distillation | Δ after distillation vs flat (paired) |", "---|---|") if distilled else ("", "")
    lines = ["| arm | success, trials 1–{0} | Δ success vs flat (paired) | steps per episode | live tips after trial {0} | wrong-place share of shown tips | wrong-place tips per memory step | tips cut by the budget per trial |{1}".format(trials, extra[0]),
             "|---|---|---|---|---|---|---|---|" + extra[1]]  # fmt: skip
    for arm in arms:
        row: dict = {}
        for key in ("success", "steps", "wrong_share", "wrong_per_step", "budget_cut"):
            if arm == "none" and key in ("wrong_share", "wrong_per_step", "budget_cut"):
                continue
            vals = per(arm, key)
            row[key] = over_seeds(vals)
        last = [per_seed[s]["arms"][arm][trials]["tips"] for s in seeds]
        row["tips_last"] = over_seeds(last)
        if "flat" in arms and arm != "flat":
            diff = [a - b for a, b in zip(per(arm, "success"), per("flat", "success"))]
            row["success_minus_flat"] = over_seeds(diff)
        if distilled and arm != "none":
            vals = [per_seed[s]["distilled"][arm]["success"] for s in seeds]
            row["distilled_success"] = over_seeds(vals)
            if "flat" in arms and arm != "flat":
                diff = [a - per_seed[s]["distilled"]["flat"]["success"] for a, s in zip(vals, seeds)]
                row["distilled_minus_flat"] = over_seeds(diff)
        numbers[arm] = row

        def cell(key: str, fmt: str = ".2f") -> str:
            if key not in row:
                return "—"
            return f"{row[key]['mean']:{fmt}} ± {row[key]['ci95']:{fmt}}"

        lines.append(f"| {arm} | {cell('success')} | {cell('success_minus_flat')} | {cell('steps', '.1f')} | "
                     f"{cell('tips_last', '.1f')} | {cell('wrong_share')} | {cell('wrong_per_step')} | {cell('budget_cut', '.1f')} |"
                     + (f" {cell('distilled_success')} | {cell('distilled_minus_flat')} |" if distilled else ""))  # fmt: skip
    return numbers, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="trap-light-bulb", choices=list(TASKS), help="a trap task (the search family by default)")
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--split", default="test", choices=["train", "dev", "test"], help="the layouts played (seed s: the s-th)")
    ap.add_argument("--trials", type=int, default=3, help="memory trials after the memory-free trial 0")
    ap.add_argument("--group", type=int, default=8, help="episodes per trial (evaluation.adapt: a training group, 8)")
    ap.add_argument("--step-limit", type=int, default=None, help="steps per episode (default: the task's)")
    ap.add_argument("--budget", type=int, default=64, help="memory.tip_token_budget of every memory arm (tokens, prompts.tip_tokens)")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (1 when two benchmarks share 2 cores)")
    ap.add_argument("--root", type=Path, default=None, help="sessions root (default: $EMPO2_SESSIONS_DIR or ./sessions)")
    ap.add_argument("--distill-steps", type=int, default=0,
                    help="after each memory arm: this many updates on its memory episodes, then --group episodes "
                         "without memory (0: not measured; the Lesson's Distill now runs 5)")
    ap.add_argument("--distill-lr", type=float, default=2e-3,
                    help="learning rate of those updates (default: the Lesson's, app.lesson_tab.LESSON_LEARNING_RATE)")
    ap.add_argument("--merge", nargs="+", metavar="NAME", default=None,
                    help="runs nothing: one table over the seeds of these benchmarks/results/NAME.json files "
                         "(e.g. two processes with other --seeds), written with --result")
    add_result_option(ap)
    args = ap.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.result, argv)
    for name in ("trials", "group", "threads"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be ≥ 1, got {getattr(args, name)}")
    if args.distill_steps < 0 or args.distill_lr <= 0:
        ap.error(f"--distill-steps must be ≥ 0 and --distill-lr > 0, got {args.distill_steps} and {args.distill_lr}")
    if args.budget < 0:
        ap.error(f"--budget must be ≥ 0 (0: no budget), got {args.budget}")
    args.arms = list(dict.fromkeys(args.arms))
    torch.set_num_threads(min(args.threads, os.cpu_count() or 1))
    started = time.perf_counter()
    _, root = fresh_dir(args.root or default_sessions_root(), time.strftime("bench_memory_structure-%Y%m%d-%H%M%S"))
    env = make_env(EnvConfig(name="trap", task=args.task, step_limit=args.step_limit))
    embedder = make_embedder("minilm")
    policy = load_policy(RunConfig().policy)
    cfg = RunConfig(env=EnvConfig(name="trap", task=args.task), memory=MemoryConfig(embedder="minilm"))
    writer, context = load_note_writer(cfg, policy)
    print(f"model loaded [{time.perf_counter() - started:.0f} s]; note context {context}", flush=True)
    per_seed: dict = {}
    about = dict(task=args.task, arms=args.arms, split=args.split, trials=args.trials, group=args.group,
                 step_limit=args.step_limit or env.step_limit(args.task), budget=args.budget, policy=policy.version,
                 distill_steps=args.distill_steps, distill_lr=args.distill_lr,
                 distill_rule=DISTILL_RULE if args.distill_steps else None)  # fmt: skip
    for seed in args.seeds:
        per_seed[seed] = run_seed(args, seed, policy, writer, context, embedder, env, root)
        numbers, table = summary(per_seed, args.arms, args.trials)
        notes = [n for s in per_seed.values() for rows in s["arms"].values() for r in rows for n in r["notes_shown"]]
        about["tokens_proxy_over_tokenizer"] = proxy_ratio(policy, notes)
        results = {"summary": numbers, "table": table, "per_seed": per_seed}
        (root / "memory_structure.json").write_text(json.dumps({**about, "results": results}, indent=1, default=float))
        write_result(args.result, __file__, argv, started, list(per_seed), results, **about)
        print(table, flush=True)
    print(f"written: {root}/memory_structure.json")
    return 0


SETTINGS = ("task", "arms", "split", "trials", "group", "step_limit", "budget", "policy", "distill_steps", "distill_lr",
            "distill_rule")
"""What runs must share to be merged into one table."""


def merge(names: list[str], result: str | None, argv: list[str] | None) -> int:
    """`--merge`: the per-seed rows of several result files in one summary (their seconds summed).
    Exits with a message naming the file and setting when a file is missing, the runs' settings differ,
    or two runs hold the same seed."""
    runs = []
    for name in names:
        path = RESULTS / f"{name}.json"
        if not path.is_file():
            raise SystemExit(f"--merge: {path} does not exist (a result written by this benchmark with --result)")
        runs.append(json.loads(path.read_text()))
    about = {k: runs[0].get(k) for k in SETTINGS}
    per_seed: dict = {}
    for name, run in zip(names, runs):
        for key in SETTINGS:
            if run.get(key) != about[key]:
                raise SystemExit(f"--merge: {name} has {key} {run.get(key)!r}, {names[0]} has {about[key]!r}")
        for seed, rows in run["results"]["per_seed"].items():
            if int(seed) in per_seed:
                raise SystemExit(f"--merge: seed {seed} is in more than one of {names}")
            per_seed[int(seed)] = rows
    numbers, table = summary(per_seed, about["arms"], about["trials"])
    write_result(result, __file__, argv, 0.0, sorted(per_seed), {"summary": numbers, "table": table, "per_seed": per_seed},
                 seconds=sum(run["seconds"] for run in runs), merged_from=names, **about)  # fmt: skip
    print(table)
    return 0


def proxy_ratio(policy, notes: list[str]) -> float | None:
    """Σ prompts.tip_tokens / Σ tokenizer tokens over the distinct notes shown (None when none was)."""
    notes = list(dict.fromkeys(notes))
    if not notes:
        return None
    real = sum(len(policy.tokenizer.encode(n, add_special_tokens=False)) for n in notes)
    return sum(prompts.tip_tokens(n) for n in notes) / real


if __name__ == "__main__":
    raise SystemExit(main())
