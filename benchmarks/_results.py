"""What a benchmark run leaves in git: `benchmarks/results/NAME.json` (`--result NAME` on every bench_*.py).

A result is small and committed: the command that produced it, the commit it started at (and whether
the tree had uncommitted changes then), the date, the machine, the seconds it took, the seeds, and the numbers the
run measured, per seed where the benchmark has seeds. Episodes, tips and checkpoints stay in the run's
folder under sessions/ (not in git). A table in docs/benchmarks/*.md marked `<!-- result: NAME -->` is
checked against the file by tests/test_benchmark_results.py (docs/benchmarks/README.md, "Traced numbers").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def result_name(text: str) -> str:
    """argparse type of `--result`: a plain file stem (letters, digits, '.', '_', '-')."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", text) or text.endswith(".json"):
        raise argparse.ArgumentTypeError(f"--result takes a name such as gemm-2026-12-06, not {text!r}")
    return text


def add_result_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--result", type=result_name, default=None, metavar="NAME",
                    help="also write benchmarks/results/NAME.json: command, commit, seconds, seeds and the numbers")  # fmt: skip


def commit() -> tuple[str, bool]:
    """(HEAD's short hash, whether tracked files differ from it); ("unknown", False) outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False
    return head, bool(dirty)


STARTED_AT = commit()
"""The commit (and dirty flag) when the benchmark started: what a result records, since its code is
loaded at the start and later commits made while a long run goes on did not run in it."""


def machine() -> dict:
    """The CPU, its cores and the load average when the run ended (the numbers depend on all three)."""
    cpu = platform.processor() or platform.machine()
    try:
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]  # fmt: skip
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 2)}


def _plain(value):
    """json.dumps' fallback: numbers (numpy, torch scalars) as floats, anything else as its string."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def command_line(script: str, argv: list[str] | None) -> str:
    """The command that ran `script` (its `__file__`) with `argv` (None: sys.argv[1:]), repo-relative, quoted."""
    args = list(sys.argv[1:] if argv is None else argv)
    return shlex.join([str(Path(script).resolve().relative_to(ROOT)), *args])


def write_result(name: str | None, script: str, argv: list[str] | None, started: float, seeds, results,
                 seconds: float | None = None, **about) -> Path | None:
    """Write benchmarks/results/NAME.json (nothing when `name` is None) and return its path.

    `script` is the benchmark's `__file__`, `argv` its arguments (None: sys.argv[1:]), `started` the
    time.perf_counter() at its start (or `seconds`, when the time was spent elsewhere: runs merged from
    folders), `seeds` the seeds it ran (empty when it has none), `results` the measured numbers (per seed
    where it has seeds) and `about` any setting worth keeping beside them. A benchmark may call it after
    every part, so that a run stopped early still leaves what it measured."""
    if name is None:
        return None
    head, dirty = STARTED_AT
    data = {
        "command": command_line(script, argv),
        "commit": head,
        "dirty": dirty,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "seconds": round(time.perf_counter() - started if seconds is None else seconds, 1),
        "seeds": list(seeds),
        **about,
        "results": results,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=1, default=_plain) + "\n")
    return path
