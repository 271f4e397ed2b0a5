"""The Episodes tab's pair on ScienceWorld's find-animal, played with the tab's own functions (issue 47, bar 6).

A ScienceWorld studio session (the embedded SmolLM2 on the ScienceWorld adapter, the real MiniLM
embedder, real JVMs), the Lesson's task find-animal: per (variation, seed) the tab's offered tip
(`pair_memory.tip_offer`) is stored as the button stores it (`store_tip`) and one pair is played
(`workers.side_by_side`: the Lesson's 10 steps, a naive and a memory episode in lock-step, then their
tips written). What a class should see: the naive side does not win (it often focuses on something where
it stands, −100), the memory side reads the tip and wins. Recorded per pair: both scores, whether the
naive side focused at its first step, the memory side's steps, and the seconds from the start to both
episodes ended ("played") and to the tips written ("total", the Run click to `[done]`).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_sw_pair.py --variations 0 1 5 10 --seeds 0 1 --temperature 1.0

Timing depends on the machine and its neighbours (the result records the load average).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from empo2_studio.app.jobs import Job  # noqa: E402
from empo2_studio.app.pair_memory import store_tip, tip_offer  # noqa: E402
from empo2_studio.app.studio import Studio  # noqa: E402
from empo2_studio.app.workers import side_by_side  # noqa: E402
from empo2_studio.config import EnvConfig, RunConfig  # noqa: E402
from empo2_studio.envs.scienceworld import ScienceWorldEnv  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import ROOT, add_result_option, write_result  # noqa: E402

TASK = "find-animal"


def play_pair(studio: Studio, run_id: str, variation: int, seed: int, temperature: float) -> dict:
    """One pair as the Episodes tab plays it after the offered tip is stored; its numbers."""
    tip = tip_offer(studio, run_id, TASK, variation)
    if tip is None:
        raise ValueError(f"no tip offered for {TASK} variation {variation}")
    store_tip(studio, run_id, TASK, variation, tip)
    job = Job(job_id=f"pair-{variation}-{seed}", kind="episodes", label="pair", run_id=run_id)
    t0 = time.perf_counter()
    played_at: list[float] = []
    update = job.update

    def timed_update(**kw):  # the moment both episodes ended: workers.side_by_side sets "played"
        if "played" in kw and not played_at:
            played_at.append(time.perf_counter() - t0)
        update(**kw)

    job.update = timed_update
    naive, memory = side_by_side(studio, job, run_id=run_id, env_name="scienceworld", task=TASK, variation=variation,
                                 split="train", seed=seed, temperature=temperature, checkpoint=None)  # fmt: skip
    total = time.perf_counter() - t0
    first = naive.steps[0].action if naive.steps else ""
    return {"variation": variation, "seed": seed, "naive_score": naive.score, "naive_won": naive.won,
            "naive_steps": len(naive.steps), "naive_first_action": first,
            "naive_focus_at_once": first.startswith("focus on"),
            "memory_score": memory.score, "memory_won": memory.won, "memory_steps": len(memory.steps),
            "memory_actions": [s.action for s in memory.steps],
            "played_s": round(played_at[0] if played_at else total, 1), "total_s": round(total, 1)}  # fmt: skip


def table(rows: list[dict]) -> list[str]:
    lines = ["| variation | seed | naive score | naive first action | memory score | memory steps | played s | total s |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['variation']} | {r['seed']} | {r['naive_score']:g} | {r['naive_first_action']} | "
              f"{r['memory_score']:g} | {r['memory_steps']} | {r['played_s']:.1f} | {r['total_s']:.1f} |" for r in rows]
    n = len(rows)
    lines += ["", f"Memory side won {sum(r['memory_won'] for r in rows)} of {n}; naive side won "
              f"{sum(r['naive_won'] for r in rows)} of {n} and focused at its first step in "
              f"{sum(r['naive_focus_at_once'] for r in rows)} of {n}. Total per pair: median "
              f"{statistics.median(r['total_s'] for r in rows):.1f} s, max {max(r['total_s'] for r in rows):.1f} s."]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variations", type=int, nargs="+", default=[0, 1, 5, 10], help="find-animal train variations")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--temperature", type=float, default=1.0, help="the Lesson's 1.0; the tab's default is 0.4")
    ap.add_argument("--warm-start", default=None, help="an adapter folder (default: the ScienceWorld session's)")
    ap.add_argument("--threads", type=int, default=2)
    add_result_option(ap)
    args = ap.parse_args(argv)
    if not 0.0 < args.temperature <= 2.0:
        ap.error(f"--temperature must be in (0, 2], got {args.temperature}")
    if args.warm_start is not None and not Path(args.warm_start).is_dir():
        ap.error(f"--warm-start {args.warm_start}: no such adapter folder")
    train = set(ScienceWorldEnv().variations(TASK, "train"))  # the catalogue: no JVM
    bad = [v for v in args.variations if v not in train]
    if bad:
        ap.error(f"--variations {bad}: not find-animal train variations (0–{max(train)})")
    torch.set_num_threads(max(1, min(args.threads, os.cpu_count() or 1)))
    config = RunConfig(env=EnvConfig(name="scienceworld", task=TASK))
    if args.warm_start:
        config = dataclasses.replace(config, policy=dataclasses.replace(config.policy, warm_start=args.warm_start))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-sw-pair-") as root:
        studio = Studio(root, env="scienceworld", config=config.validate())
        try:
            run_id = studio.default_run_id
            warm = studio.session(run_id).config.policy.warm_start
            warm = str(Path(warm).resolve().relative_to(ROOT)) if Path(warm).resolve().is_relative_to(ROOT) else warm
            rows = []
            for v in args.variations:
                for seed in args.seeds:
                    rows.append(play_pair(studio, run_id, v, seed, args.temperature))
                    r = rows[-1]
                    print(f"v{v} seed {seed}: naive {r['naive_score']:g} ({r['naive_first_action']}), memory "
                          f"{r['memory_score']:g} in {r['memory_steps']} steps, {r['total_s']:.1f} s", flush=True)
        finally:
            studio.close()
    lines = [f"# bench_sw_pair ({time.strftime('%Y-%m-%d %H:%M')}, warm start {warm}, T = {args.temperature:g})", "",
             *table(rows)]
    print("\n" + "\n".join(lines))
    write_result(args.result, __file__, argv, t0, args.seeds, {"pairs": rows}, warm_start=warm,
                 temperature=args.temperature, variations=args.variations, table="\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
