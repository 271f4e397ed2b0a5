"""Learning-efficiency benchmark: EMPO² vs GRPO on the exploration trap, plus a short ScienceWorld run.

Part 1 (trap env, embedded SmolLM2-135M, 4-bit, LoRA): the same code path and seeds for two arms,
- EMPO²: the defaults (p = 0.25 memory rollouts, q = 2/3 off-policy, novelty bonus × 1.0);
- GRPO:  p = 0 (never memory) and no novelty bonus — the paper's GRPO baseline;
training for the same number of iterations on the paper's first 5 training variations. Per iteration it
prints the mean training-rollout success rate and score (averaged over seeds; EMPO²'s memory iterations
roll out with tips), and before the first and after the last update a memory-free evaluation on
held-out test variations (the paper's protocol: every test variation × 4 repeats, temperature 0.4; the
starting weights are evaluated once per seed, both arms start from them).
A plotly figure and a Markdown table are written into the benchmark folder
(`<sessions root>/bench_learning-<time>/`), next to the sessions of every run.

Part 2 (ScienceWorld, needs Java): a couple of iterations on one task (the second forced off-policy so
retrieval, tips and distillation all run), printing wall time per iteration broken down into sampling,
env, scoring, backward and memory.

Run:  PYTHONPATH=. .venv/bin/python benchmarks/bench_learning.py            (defaults sized for ~20 min
      on a shared 2-core CPU)
      ... --iterations 20 --seeds 0 1 2 --group-size 8                      (a longer run)
      ... --skip-scienceworld / --skip-trap
      ... --arms EMPO2 --p-memory 0.4                                        (one arm, the paper's p ablation)
      ... --step-credit 1                                                    (both arms: GiGPO step-level credit)
      ... --skip-flat-groups                                                 (both arms: no update on novelty alone)
      ... --task trap-light-bulb-fixed --eval-every 10                       (the fixed family; evaluate every 10)
      ... --decoding action --choice-norm word [--choice-pmi]                (whole-action choice, both arms)
      ... --env scienceworld --task find-animal --step-limit 10 --eval-variations 10 --eval-repeats 2
          --skip-scienceworld                                                (the race on ScienceWorld, issue 47 bar 3)
      ... --record-line                                                      (tips end with the record line: envs.sw_search on find tasks)
      ... --arms EMPO2 --threads 1 & ... --arms GRPO --threads 1; --merge DIR DIR  (two processes side by side)
      ... --result NAME                                                      (also benchmarks/results/NAME.json,
                                                                             rewritten every iteration; with --merge too)
Every iteration line prints its time per phase (sampling, env, scoring, backward, memory).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from empo2_studio.config import (  # noqa: E402
    CHOICE_NORMS, DECODINGS, DEFAULT_WARM_START, WARM_START_DIR, EnvConfig, MemoryConfig, PolicyConfig, RolloutConfig, RunConfig, TrainConfig,
)
from empo2_studio.memory import make_embedder  # noqa: E402
from empo2_studio.policy import load_policy  # noqa: E402
from empo2_studio.race import ARMS, race_verdict, reads_tips  # noqa: E402
from empo2_studio.sessions import Session, auto_warm_start, default_sessions_root, fresh_dir  # noqa: E402
from empo2_studio.trainer import Trainer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import add_result_option, write_result  # noqa: E402



def trap_config(arm: str, seed: int, args: argparse.Namespace) -> RunConfig:
    base = RunConfig(
        run_id=f"{arm.lower()}-seed{seed}",
        seed=seed,
        env=EnvConfig(name=args.env, task=args.task, variations=tuple(args.variations), step_limit=args.step_limit,
                      record_line=args.record_line),
        memory=MemoryConfig(embedder="minilm"),
        policy=policy_config(args),
        rollout=RolloutConfig(group_size=args.group_size, variations_per_iteration=args.variations_per_iteration),
        train=TrainConfig(
            iterations=args.iterations, learning_rate=args.lr, checkpoint_every=args.iterations,
            eval_variations=max(1, args.eval_variations), eval_repeats=max(1, args.eval_repeats),
        ),  # fmt: skip
    )
    over = ARMS[arm]
    rollout = dict(over["rollout"])
    if arm == "EMPO2" and args.p_memory is not None:
        rollout["p_memory"] = args.p_memory  # the paper's p ablation (§4.2): 0.1, 0.25, 0.4, 0.7
    algo = dict(over["algo"])
    if args.step_credit:  # both arms: step-level credit (GiGPO's anchor states), an option of this project
        algo["step_advantage_coef"] = args.step_credit
    if args.skip_flat_groups:  # both arms (GRPO, without novelty, is unchanged by it)
        algo["skip_flat_groups"] = True
    return base.with_overrides(rollout=rollout, algo=algo)


def policy_config(args: argparse.Namespace) -> PolicyConfig:
    """The embedded model's config with the benchmark's decoding (both arms, and the loaded policy);
    warm start "auto" is the shipped adapter for `--env` (`sessions.auto_warm_start`)."""
    warm = str(WARM_START_DIR / auto_warm_start(args.env)) if args.warm_start == "auto" else args.warm_start
    return PolicyConfig(decoding=args.decoding, choice_norm=args.choice_norm, choice_pmi=args.choice_pmi,
                        warm_start=warm)


PHASES = ("sampling", "env", "scoring", "backward", "memory")


def run_trap(args: argparse.Namespace, root: Path, embedder, policy, save) -> dict[str, dict[int, dict]]:
    """Train every (arm, seed); returns results[arm][seed] = {"rows": [...], "eval": {...}, "time": s}.

    The model is loaded once; every run starts from the same fresh LoRA weights (copied back in) and
    its own optimizer, so both arms start equal and no run pays the load time. `save(results)` is
    called after every iteration, so a run cut short still leaves its table and figure.
    """
    results: dict[str, dict[int, dict]] = {arm: {} for arm in args.arms}
    initial = [p.detach().clone() for p in policy.trainable_parameters()]
    for seed in args.seeds:
        start_eval: dict = {}
        for arm in args.arms:
            cfg = trap_config(arm, seed, args)
            with torch.no_grad():
                for p, p0 in zip(policy.trainable_parameters(), initial):
                    p.copy_(p0)
            session = Session.create(root, cfg)
            trainer = Trainer(cfg, session, policy=policy, embedder=embedder)
            trainer.write_tips = reads_tips(cfg)  # GRPO spends no compute on tips it never reads
            t0 = time.perf_counter()
            notes0 = (getattr(trainer.writer, "written", 0), getattr(trainer.writer, "remembered", 0))
            rows: list[dict] = []
            results[arm][seed] = {"rows": rows, "eval": {}, "eval_start": start_eval, "time": 0.0, "evals": []}
            if args.eval_variations > 0 and not start_eval:
                # The starting weights are the same for every arm of a seed, and so is the evaluation's
                # sampling noise (seeded by the run seed): evaluate them once, before the first update.
                start_eval.update(trainer.evaluate(split=args.eval_split))
            for _ in range(args.iterations):
                report = trainer.step()
                m = report.metrics
                rows.append(m)
                results[arm][seed]["time"] = time.perf_counter() - t0
                save(results)
                phases = " ".join(f"{p} {m.get(f'time/{p}', 0.0):.0f}" for p in PHASES)
                print(
                    f"  {arm:5s} seed {seed} it {report.iteration:2d} {report.update_mode:20s} "
                    f"success {m['rollout/success_rate']:.2f} score {m['rollout/score_mean']:7.1f} "
                    f"({m['time/iteration']:.0f}s: {phases})",
                    flush=True,
                )
                if args.eval_every and report.iteration % args.eval_every == 0 and report.iteration < args.iterations:
                    ev = trainer.evaluate(split=args.eval_split)
                    results[arm][seed]["evals"].append({"iteration": report.iteration, **ev})
                    print(f"  {arm:5s} seed {seed} eval at {report.iteration}: success {ev['eval/success_rate']:.2f} "
                          f"score {ev['eval/score_mean']:.1f}", flush=True)
            trainer.save_checkpoint()
            results[arm][seed]["time"] = time.perf_counter() - t0  # training only; evaluation is extra
            if trainer.write_tips and hasattr(trainer.writer, "remembered"):  # a frozen writer: notes from its memory
                # the writer is shared by every run of this process: count this run's notes only (a later
                # seed finds the earlier seeds' notes remembered, so its memory phase is shorter)
                notes = {"written": trainer.writer.written - notes0[0], "remembered": trainer.writer.remembered - notes0[1]}
                results[arm][seed]["notes"] = notes
                print(f"  {arm:5s} seed {seed} note writer: {notes['written']} observation notes written, "
                      f"{notes['remembered']} answered from memory", flush=True)
            if args.eval_variations > 0:
                results[arm][seed]["eval"] = trainer.evaluate(split=args.eval_split)
                save(results)
            trainer.close()
    return results


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def eval_points(run: dict) -> list[dict]:
    """A run's memory-free evaluations in order: the start (iteration 0), every --eval-every, the end."""
    points = [{"iteration": 0, **run["eval_start"]}] if run.get("eval_start") else []
    points += run.get("evals", [])
    if run.get("eval"):
        points.append({"iteration": len(run["rows"]), **run["eval"]})
    return points


def verdict(results: dict[str, dict[int, dict]], split: str = "test") -> str:
    """`race.race_verdict` over every arm's and seed's evaluations (played on `split`)."""
    return race_verdict({arm: [{"seed": s, **p} for s, run in runs.items() for p in eval_points(run)]
                         for arm, runs in results.items()}, split=split)  # fmt: skip


def trap_table(results: dict[str, dict[int, dict]], iterations: int, seeds: list[int], split: str = "test") -> str:
    lines = [
        "| iteration | " + " | ".join(f"{a} success | {a} score" for a in results) + " |",
        "|---|" + "---|---|" * len(results),
    ]
    for i in range(iterations):
        cells = []
        for arm in results:
            rows = [r["rows"][i] for s in seeds if (r := results[arm].get(s)) and i < len(r["rows"])]
            cells.append(f"{_mean([r['rollout/success_rate'] for r in rows]):.2f}")
            cells.append(f"{_mean([r['rollout/score_mean'] for r in rows]):.1f}")
        lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
    last = max(1, iterations // 3)
    summary = ["", f"| arm | mean success, last {last} iterations | eval success (no memory), start → end | "
               "eval score, start → end | wall s |", "|---|---|---|---|---|"]  # fmt: skip
    for arm in results:
        runs = [results[arm][s] for s in seeds if s in results[arm]]
        tail = [r["rollout/success_rate"] for run in runs if len(run["rows"]) == iterations for r in run["rows"][-last:]]
        ev = [run["eval"] for run in runs if run["eval"]]
        ev0 = [run["eval_start"] for run in runs if run.get("eval_start")]

        def spread(evals: list[dict], key: str, fmt: str) -> str:
            values = [e[key] for e in evals]
            return f"{_mean(values):{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})" if values else "–"

        summary.append(
            f"| {arm} | {_mean(tail):.3f} | {spread(ev0, 'eval/success_rate', '.2f')} → "
            f"{spread(ev, 'eval/success_rate', '.2f')} | {spread(ev0, 'eval/score_mean', '.1f')} → "
            f"{spread(ev, 'eval/score_mean', '.1f')} | {_mean([run['time'] for run in runs]):.0f} |"
        )
    for arm in results:  # --eval-every: the memory-free test success along the run (mean over seeds)
        runs = [results[arm][s] for s in seeds if s in results[arm]]
        points = sorted({e["iteration"] for run in runs for e in run.get("evals", [])})
        if points:
            cells = [f"it {i}: {_mean([e['eval/success_rate'] for run in runs for e in run['evals'] if e['iteration'] == i]):.2f}"
                     for i in points]
            summary.append(f"\n{arm} eval success along the run: " + ", ".join(cells))
    if text := verdict(results, split):
        summary.append(f"\n**Verdict:** {text}")
    return "\n".join(lines + summary)


def trap_figure(results: dict[str, dict[int, dict]], seeds: list[int], path: Path) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=3, subplot_titles=("success rate (training rollouts)", "mean score",
                                                        "test success without memory"))
    colors = {"EMPO2": "#d62728", "GRPO": "#1f77b4"}
    for arm in results:
        for col, key in ((1, "rollout/success_rate"), (2, "rollout/score_mean")):
            done = [s for s in seeds if results[arm].get(s, {}).get("rows")]
            if not done:
                continue
            per_seed = [[r[key] for r in results[arm][s]["rows"]] for s in done]
            n = min(len(p) for p in per_seed)
            xs = list(range(1, n + 1))
            for s, ys in zip(done, per_seed):
                fig.add_trace(
                    go.Scatter(x=xs, y=ys[:n], mode="lines", line={"color": colors[arm], "width": 1},
                               opacity=0.3, name=f"{arm} seed {s}", showlegend=False),  # fmt: skip
                    row=1, col=col,
                )  # fmt: skip
            mean = [_mean([p[i] for p in per_seed]) for i in range(n)]
            fig.add_trace(
                go.Scatter(x=xs, y=mean, mode="lines+markers", line={"color": colors[arm], "width": 3},
                           name=f"{arm} (mean of {len(done)} seeds)", showlegend=col == 1),  # fmt: skip
                row=1, col=col,
            )  # fmt: skip
        done = [s for s in seeds if eval_points(results[arm].get(s, {}))]
        for s in done:
            pts = eval_points(results[arm][s])
            fig.add_trace(go.Scatter(x=[p["iteration"] for p in pts], y=[p["eval/success_rate"] for p in pts],
                                     mode="lines+markers", line={"color": colors[arm], "width": 1}, opacity=0.4,
                                     name=f"{arm} seed {s}", showlegend=False), row=1, col=3)  # fmt: skip
    fig.update_xaxes(title_text="iteration")
    fig.update_layout(title="EMPO² vs GRPO on the exploration trap (embedded SmolLM2-135M, LoRA)")
    fig.write_html(str(path), include_plotlyjs="cdn")


def run_scienceworld(args: argparse.Namespace, root: Path, embedder, policy) -> tuple[str, list[dict]]:
    cfg = RunConfig(
        run_id="scienceworld-short",
        seed=0,
        env=EnvConfig(name="scienceworld", task=args.sw_task, variations=(0,), step_limit=args.sw_step_limit),
        memory=MemoryConfig(embedder="minilm"),
        rollout=RolloutConfig(group_size=args.sw_group_size),
        train=TrainConfig(learning_rate=args.lr, checkpoint_every=100),
    )
    session = Session.create(root, cfg)
    trainer = Trainer(cfg, session, policy=policy, embedder=embedder)
    modes = (["on-policy", "off-policy"] * args.sw_iterations)[: args.sw_iterations]
    rows: list[dict] = []
    phases = ("sampling", "env", "scoring", "backward", "memory")
    lines = [
        f"ScienceWorld {args.sw_task}, variation 0, {args.sw_group_size} episodes × ≤ {args.sw_step_limit} steps",
        "| iteration | mode | score | success | tips retrieved/step | "
        + " | ".join(f"{p} s" for p in phases) + " | total s |",
        "|---|---|---|---|---|" + "---|" * (len(phases) + 1),
    ]
    try:
        for mode in modes:
            m = trainer.step(forced_mode=mode).metrics
            rows.append({"iteration": trainer.iteration, "mode": mode, **m})
            lines.append(
                f"| {trainer.iteration} | {mode} | {m['rollout/score_mean']:.1f} | {m['rollout/success_rate']:.2f} | "
                f"{m['memory/tips_retrieved_mean']:.1f} | "
                + " | ".join(f"{m[f'time/{p}']:.1f}" for p in phases)
                + f" | {m['time/iteration']:.1f} |"
            )
            print(lines[-1], flush=True)
    finally:
        trainer.close()
    return "\n".join(lines), rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--env", default="trap", choices=("trap", "scienceworld"),
                    help="the race's environment (scienceworld: e.g. --task find-animal --step-limit 10)")
    ap.add_argument("--task", default="trap-light-bulb")
    ap.add_argument("--variations", type=int, nargs="+", default=[0, 1, 2, 3, 4],
                    help="training variations (default: the paper's first 5 of the train split)")
    ap.add_argument("--variations-per-iteration", type=int, default=1,
                    help="groups per iteration, each on a training variation drawn at random (the paper's batch "
                         "covers every training variation each iteration; each variation's memory fills only "
                         "when it is played)")
    ap.add_argument("--step-limit", type=int, default=8)
    ap.add_argument("--lr", type=float, default=TrainConfig().learning_rate)
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS), help="arms to train (default: both)")
    ap.add_argument("--step-credit", type=float, default=0.0, metavar="OMEGA",
                    help="both arms: step-level credit weight ω (algo.step_advantage_coef; GiGPO: 1; default 0 = off)")
    ap.add_argument("--skip-flat-groups", action="store_true",
                    help="both arms: no update from a group whose task returns are all equal (algo.skip_flat_groups)")
    ap.add_argument("--record-line", action="store_true",
                    help="env.record_line: each tip ends with the environment's record of the episode (both arms; GRPO reads none)")
    ap.add_argument("--p-memory", type=float, default=None, help="EMPO²'s memory-rollout probability p (default: the config's)")
    ap.add_argument("--eval-variations", type=int, default=12,
                    help="test variations evaluated, at the start and the end (default: all 12 of the trap's "
                         "test split; the paper: 20; 0 skips evaluation)")
    ap.add_argument("--eval-repeats", type=int, default=4, help="episodes per test variation (paper: 4)")
    ap.add_argument("--eval-split", default="test", choices=["test", "dev"],
                    help="the layouts evaluated: test (what is reported) or dev (what a recipe is chosen on)")
    ap.add_argument("--eval-every", type=int, default=0, metavar="N",
                    help="also evaluate memory-free every N iterations (0: only before the first and after the last)")
    ap.add_argument("--decoding", default="constrained", choices=DECODINGS, help="policy.decoding, both arms")
    ap.add_argument("--choice-norm", default="word", choices=CHOICE_NORMS, help="action decoding's normalisation")
    ap.add_argument("--choice-pmi", action="store_true", help="action decoding: PMI calibration")
    ap.add_argument("--warm-start", default=PolicyConfig().warm_start,
                    help=f"policy.warm_start, both arms: auto (the default adapter, {DEFAULT_WARM_START}) | none | an adapter DIR")
    ap.add_argument("--threads", type=int, default=2,
                    help="torch threads (1 for two processes side by side, e.g. one per arm; see --merge)")
    ap.add_argument("--sw-task", default="find-living-thing")
    ap.add_argument("--sw-iterations", type=int, default=2)
    ap.add_argument("--sw-group-size", type=int, default=2)
    ap.add_argument("--sw-step-limit", type=int, default=6)
    ap.add_argument("--skip-trap", action="store_true")
    ap.add_argument("--skip-scienceworld", action="store_true")
    ap.add_argument("--root", type=Path, default=None, help="sessions root (default: $EMPO2_SESSIONS_DIR or ./sessions)")
    ap.add_argument("--merge", type=Path, nargs="+", metavar="DIR", default=None,
                    help="runs nothing: combine the learning.json of these benchmark folders (e.g. one process "
                         "per arm, --threads 1) into one table and figure, written to the first folder")
    add_result_option(ap)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    if args.merge:
        return merge(args.merge, args.result, argv)
    torch.set_num_threads(max(1, min(args.threads, os.cpu_count() or 1)))
    _, root = fresh_dir(args.root or default_sessions_root(), time.strftime("bench_learning-%Y%m%d-%H%M%S"))
    embedder = make_embedder("minilm")
    t0 = time.perf_counter()
    policy = load_policy(policy_config(args))  # the embedded model with its warm start; loaded once
    print(f"model loaded in {time.perf_counter() - t0:.0f}s", flush=True)
    report = [f"# bench_learning ({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPU cores, torch {torch.__version__})", ""]
    if not args.skip_trap:
        print(f"{args.env} ({args.task}): {args.iterations} iterations × seeds {args.seeds} × arms {args.arms}, group {args.group_size}")
        heading = (f"## {'Trap env' if args.env == 'trap' else 'ScienceWorld'} ({args.task}, variations {args.variations}, {args.variations_per_iteration} "
                   f"group(s) of {args.group_size} per iteration, "
                   f"step limit {args.step_limit}, lr {args.lr}, seeds {args.seeds}"
                   + (f", EMPO² p {args.p_memory}" if args.p_memory is not None else "")
                   + (f", step credit ω {args.step_credit}" if args.step_credit else "")
                   + (", skip flat groups" if args.skip_flat_groups else "")
                   + (", evaluated on the dev split" if args.eval_split == "dev" else "")
                   + (f", warm start {args.warm_start}" if args.warm_start != PolicyConfig().warm_start else "")
                   + f", decoding {args.decoding}" + (f" ({args.choice_norm}{', PMI' if args.choice_pmi else ''})"
                                                      if args.decoding == "action" else "") + ")")  # fmt: skip

        def save(results: dict[str, dict[int, dict]]) -> None:
            (root / "learning.json").write_text(json.dumps(
                {arm: {str(s): v for s, v in r.items()} for arm, r in results.items()}, default=float, indent=1
            ))  # fmt: skip
            trap_figure(results, args.seeds, root / "learning.html")
            table = trap_table(results, args.iterations, args.seeds, args.eval_split)
            (root / "learning.md").write_text("\n".join([*report, heading, "", table, ""]))
            write_result(args.result, __file__, argv, started, args.seeds, {args.env: per_seed(results)},
                         report="\n".join([heading, "", table]), warm_start=args.warm_start)  # fmt: skip

        results = run_trap(args, root, embedder, policy, save)
        report += [heading, "", trap_table(results, args.iterations, args.seeds, args.eval_split), ""]
    data = {} if args.skip_trap else {args.env: per_seed(results)}
    if not args.skip_scienceworld:
        sw_text, data["scienceworld"] = run_scienceworld(args, root, embedder, policy)
        report += ["## ScienceWorld short run", "", sw_text, ""]
    text = "\n".join(report)
    write_result(args.result, __file__, argv, started, args.seeds, data, report=text, warm_start=args.warm_start)
    (root / "learning.md").write_text(text)
    print("\n" + text)
    print(f"\nwritten: {root}/learning.md" + ("" if args.skip_trap else f", {root}/learning.html"))
    return 0


def per_seed(results: dict[str, dict[int, dict]]) -> dict[str, dict[str, dict]]:
    """What a result file keeps of `run_trap`'s results: per arm and seed, the training success and score
    per iteration, how many iterations ran, the evaluations, the seconds and (a frozen note writer) how many
    notes it wrote and remembered (not every metric of every iteration)."""
    keep = ("rollout/success_rate", "rollout/score_mean")
    return {arm: {str(seed): {**{k.split("/")[1]: [row[k] for row in run["rows"]] for k in keep},
                              "iterations": len(run["rows"]),
                              "eval_start": run.get("eval_start", {}), "evals": run.get("evals", []),
                              "eval": run.get("eval", {}), "seconds": run.get("time", 0.0),
                              **({"notes": run["notes"]} if "notes" in run else {})}
                  for seed, run in runs.items()} for arm, runs in results.items()}  # fmt: skip


def merge(folders: list[Path], result: str | None = None, argv: list[str] | None = None) -> int:
    """Combine benchmark folders' learning.json (arms and seeds) into merged.md / merged.html in the first
    (and into benchmarks/results/RESULT.json, its seconds the runs' training seconds)."""
    results: dict[str, dict[int, dict]] = {}
    for folder in folders:
        path = folder / "learning.json"
        if not path.is_file():
            raise SystemExit(f"--merge: {path} does not exist (a folder written by bench_learning.py)")
        for arm, runs in json.loads(path.read_text()).items():
            results.setdefault(arm, {}).update({int(s): run for s, run in runs.items()})
    seeds = sorted({s for runs in results.values() for s in runs})
    iterations = max(len(run["rows"]) for runs in results.values() for run in runs.values())
    text = "\n".join([f"# bench_learning, merged from {', '.join(str(f) for f in folders)}", "",
                      trap_table(results, iterations, seeds), ""])  # fmt: skip
    (folders[0] / "merged.md").write_text(text)
    trap_figure(results, seeds, folders[0] / "merged.html")
    write_result(result, __file__, argv, 0.0, seeds, {"trap": per_seed(results)}, report=text,
                 seconds=sum(run.get("time", 0.0) for runs in results.values() for run in runs.values()))  # fmt: skip
    print(text + f"\nwritten: {folders[0]}/merged.md, {folders[0]}/merged.html")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
