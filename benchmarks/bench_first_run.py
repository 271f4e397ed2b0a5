"""The README's first training run, timed as a newcomer meets it: once cold, then warm.

Runs the README's command (one EMPO² iteration on the trap, a group of 2, 4 steps, the embedded model)
as a fresh process: the first time with an empty model cache (`XDG_CACHE_HOME` pointed at a new temporary
folder, so the GGUF → safetensors conversion of `policy.model_files` runs, as on a fresh machine), then
`--warm` more times with that cache filled. Each run gets a fresh sessions folder. Prints wall seconds
and CPU seconds (user + system of the process and its children) per run; CPU seconds are what the
README quotes, since on a shared machine the wall time depends on the neighbours.

Run: PYTHONPATH=. .venv/bin/python benchmarks/bench_first_run.py [--warm 2] [--result NAME]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import add_result_option, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ["train", "--env.name", "trap", "--env.task", "trap-light-bulb", "--rollout.group-size", "2",
           "--train.iterations", "1", "--env.step-limit", "4"]  # fmt: skip
"""The README's first-run command, after `.venv/bin/empo2-studio` (tests/test_bench_first_run.py checks
that the README still shows it)."""


def children_cpu() -> float:
    """CPU seconds (user + system) of every child process waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_run(cache: Path, sessions: Path, threads: int | None) -> dict[str, float]:
    """One run of `COMMAND` with model cache `cache` and sessions folder `sessions`: {"wall_s", "cpu_s"}.
    Raises RuntimeError with the run's last output lines when it fails."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "EMPO2_SESSIONS_DIR": str(sessions)}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    exe = Path(sys.executable).with_name("empo2-studio")
    cpu0, t0 = children_cpu(), time.perf_counter()
    done = subprocess.run([str(exe), *COMMAND], cwd=ROOT, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise RuntimeError(f"the first-run command exited {done.returncode}:\n{tail}")
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warm", type=int, default=2, help="runs after the cold one, with the model cache filled")
    ap.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of the runs (default: torch's own)")
    add_result_option(ap)
    args = ap.parse_args(argv)
    if args.warm < 0:
        ap.error(f"--warm must be ≥ 0, got {args.warm}")
    if args.threads is not None and args.threads < 1:
        ap.error(f"--threads must be ≥ 1, got {args.threads}")
    started = time.perf_counter()
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="empo2-first-run-") as tmp:
        cache = Path(tmp) / "cache"
        for k in range(1 + args.warm):
            run = {"cold": k == 0, **timed_run(cache, Path(tmp) / f"sessions{k}", args.threads)}
            runs.append(run)
            print(f"{'cold' if run['cold'] else 'warm'} run: {run['wall_s']:.1f} s wall, {run['cpu_s']:.1f} s CPU", flush=True)
    warm = [r["cpu_s"] for r in runs if not r["cold"]]
    print("\n| run | wall s | CPU s |\n|---|---|---|")
    for r in runs:
        print(f"| {'cold (model converted)' if r['cold'] else 'warm'} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} |")
    results = {"cold": runs[0], "warm": runs[1:], "warm_cpu_s_min": min(warm) if warm else None}
    path = write_result(args.result, __file__, argv, started, [], results, threads=args.threads,
                        timed="empo2-studio " + " ".join(COMMAND))
    if path:
        print(f"result written to {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
