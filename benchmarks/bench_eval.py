"""The memory-free evaluation: one test layout at a time against layouts batched as wide as a group.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_eval.py [--env trap|scienceworld] [--repeats 1 4] [--result NAME]

`evaluation.evaluate` plays the test layouts in lock-step batches of `width` episodes (default: the
training group's size, 8). Before, it played each layout's `repeats` episodes as one small group, one
layout after another (`width = repeats` here). Both ways play the same episodes with the same policy
(the embedded model and the environment's shipped warm start), so the ratio of their wall times is what
batching buys; rounds alternate the two ways so a change in the machine's load hits both. The
success rates differ only by sampling noise (a batch draws its noise in another order).
Defaults: the trap's fixed family (12 test layouts, step limit 8); `--env scienceworld`: find-animal,
10 test variations, step limit 10 (the pool's simulators are started before the clock runs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from empo2_studio.config import EnvConfig, MemoryConfig, RolloutConfig, RunConfig, TrainConfig  # noqa: E402
from empo2_studio.memory import make_embedder  # noqa: E402
from empo2_studio.sessions import Session  # noqa: E402
from empo2_studio.trainer import Trainer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import add_result_option, write_result  # noqa: E402

SETUPS = {  # env: (task, test variations, step limit)
    "trap": ("trap-light-bulb-fixed", 12, 8),
    "scienceworld": ("find-animal", 10, 10),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", choices=list(SETUPS), default="trap")
    ap.add_argument("--repeats", type=int, nargs="+", default=[1, 4], help="episodes per test layout (paper: 4)")
    ap.add_argument("--group-size", type=int, default=8, help="the batch width (a training group)")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of the two ways")
    ap.add_argument("--threads", type=int, default=2)
    add_result_option(ap)
    args = ap.parse_args(argv)
    for name, value in (("--repeats", min(args.repeats)), ("--group-size", args.group_size), ("--rounds", args.rounds),
                        ("--threads", args.threads)):  # fmt: skip
        if value < 1:
            ap.error(f"{name} must be ≥ 1, got {value}")
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    task, n_test, limit = SETUPS[args.env]
    cfg = RunConfig(
        run_id="bench-eval", seed=0,
        env=EnvConfig(name=args.env, task=task, variations=(0,), step_limit=limit),
        memory=MemoryConfig(embedder="minilm"),
        rollout=RolloutConfig(group_size=args.group_size),
        train=TrainConfig(eval_variations=n_test),
    )  # fmt: skip
    root = Path(tempfile.mkdtemp(prefix="bench_eval-"))
    session = Session.create(root, cfg)
    trainer = Trainer(session.config, session, embedder=make_embedder("minilm"))
    trainer.pool.take(args.group_size)  # simulators started before any clock runs
    print(f"# bench_eval ({args.env}, {task}, {n_test} test layouts, step limit {limit}, "
          f"{torch.get_num_threads()} threads, warm start {session.config.policy.warm_start})\n", flush=True)
    rows = []
    try:
        for repeats in args.repeats:
            ways = {"one layout at a time": repeats, f"batches of {max(repeats, args.group_size)}": None}
            times: dict[str, list[float]] = {w: [] for w in ways}
            success: dict[str, list[float]] = {w: [] for w in ways}
            for _ in range(args.rounds):
                for way, width in ways.items():
                    t0 = time.perf_counter()
                    result = trainer.evaluate(repeats=repeats, width=width)
                    times[way].append(time.perf_counter() - t0)
                    success[way].append(result["eval/success_rate"])
                    print(f"  repeats {repeats}, {way}: {times[way][-1]:.1f} s, success {success[way][-1]:.2f}", flush=True)
            one, batched = (statistics.median(times[w]) for w in ways)
            for way in ways:
                s = statistics.median(times[way])
                rows.append({"env": args.env, "repeats": repeats, "episodes": n_test * repeats, "way": way,
                             "seconds": s, "per_episode": s / (n_test * repeats), "speedup": one / s,
                             "success": statistics.fmean(success[way])})  # fmt: skip
            print(f"  repeats {repeats}: batched is {one / batched:.2f}× faster", flush=True)
            write_result(args.result, __file__, argv, started, [0], rows, threads=torch.get_num_threads())
    finally:
        trainer.close()
    print("\n| repeats | episodes | way | s (median) | s per episode | speed-up | success (mean) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['repeats']} | {r['episodes']} | {r['way']} | {r['seconds']:.1f} | {r['per_episode']:.2f} | "
              f"{r['speedup']:.2f}× | {r['success']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
