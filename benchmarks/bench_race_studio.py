"""The Race tab's race timed as a class sees it: the studio served, its page open in headless Chromium.

Starts `empo2-studio app` on a fresh sessions folder (the default trap session, 2 threads unless
`--threads`), opens the page, opens the Race tab, clicks a preset (the class race unless `--preset`),
reads the form and the *Expected time* line, clicks ▶ Start and reads the status line every second
until it says "[done]" (or "[stopped]"/"[failed]", or `--timeout` passes). Prints and records:

- the wall seconds from the click to "[done]", and when the first progress line and each phase
  (the evaluation before training, each arm's first iteration, the last evaluation) first appeared;
- CPU seconds of the studio and of Chromium over the race, from /proc (what watching costs);
- each arm's seconds by part (sampling, env, memory, scoring, backward, evaluation), summed from the
  race sessions' `metrics.jsonl` `time/*` rows;
- the verdict line and the closing status line.

The time depends on the machine and its neighbours: the result records the load average; compare only
runs made on the same machine (docs/benchmarks/README.md).

Run: PYTHONPATH=. .venv/bin/python benchmarks/bench_race_studio.py [--preset class] [--result NAME]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import add_result_option, write_result  # noqa: E402
from _studio import (ROOT, add_studio_options, check_studio_options, chromium_cpu, follow, opened_page,  # noqa: E402
                     played_in_studio)

PARTS = ("sampling", "env", "memory", "scoring", "backward")
"""The `time/<part>` keys of a training row summed per arm (the evaluation rows' `time/eval` apart)."""
PHASES = {"evaluation before training": r"evaluation before training", "EMPO² iteration 1": r"iteration 1 of \d+ · EMPO²",
          "GRPO iteration 1": r"iteration 1 of \d+ · GRPO", "an arm's evaluation": r"'s evaluation at iteration"}  # fmt: skip
"""Phase → a pattern of the status line; the first second it matches is recorded."""


def arm_seconds(sessions: Path) -> dict[str, dict[str, float]]:
    """Race session run_id → {part: seconds summed over its training rows, "eval": evaluation seconds,
    "iterations": training rows}."""
    out = {}
    for metrics in sorted(sessions.glob("*-race-*/metrics.jsonl")):
        rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        train = [r for r in rows if r.get("kind") == "train"]
        parts = {p: round(sum(float(r.get(f"time/{p}", 0.0)) for r in train), 1) for p in PARTS}
        parts["iteration"] = round(sum(float(r.get("time/iteration", 0.0)) for r in train), 1)
        parts["eval"] = round(sum(float(r.get("time/eval", 0.0)) for r in rows if r.get("kind") == "eval"), 1)
        parts["iterations"] = len(train)
        out[metrics.parent.name] = parts
    return out


def race_in_the_page(url: str, preset: str, timeout: float, iterations: int | None = None) -> dict:
    """Open `url`, click the Race tab's `preset` (then type `iterations` over its iterations and its
    evaluation interval, when given), start the race and follow it to its closing line."""
    with opened_page(url, "Race (EMPO² vs GRPO)") as page:
        page.wait_for_function("document.querySelector('#rc-iterations input').value !== ''")
        page.wait_for_timeout(3000)  # the page-load refresh sets the form; a preset clicked before it is undone
        page.locator(f"#rc-preset-{preset}").click()
        page.wait_for_timeout(3000)
        for box in ("iterations", "eval-every") if iterations else ():
            page.locator(f"#rc-{box} input").fill(str(iterations))
            page.locator(f"#rc-{box} input").press("Enter")
            page.wait_for_timeout(1500)
        form = {k: page.locator(f"#rc-{k} input").first.input_value()
                for k in ("iterations", "group", "eval-every", "eval-repeats", "seeds")}  # fmt: skip
        expected = page.locator("#rc-expected").inner_text()
        cpu0 = chromium_cpu()
        page.locator("#rc-start").click()
        race = follow(page, "rc-status", timeout, PHASES)
        verdict = page.locator("#rc-verdict").inner_text()
        chromium = round(chromium_cpu() - cpu0, 1)
        page.screenshot(path=str(Path(tempfile.gettempdir()) / f"bench-race-studio-{preset}.png"), full_page=True)
    return {"form": form, "expected": expected, **race, "verdict": verdict.strip(), "chromium_cpu_s": chromium}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=["class", "benchmark"], default="class", help="the Race tab's preset to click")
    ap.add_argument("--iterations", type=int, default=None,
                    help="iterations (and evaluation interval) typed over the preset's (a short check of this script)")
    add_studio_options(ap, "race")
    add_result_option(ap)
    args = ap.parse_args(argv)
    check_studio_options(ap, args)
    if args.iterations is not None and args.iterations < 1:
        ap.error(f"--iterations must be ≥ 1, got {args.iterations}")
    started = time.perf_counter()
    race = played_in_studio(args.threads, lambda url: race_in_the_page(url, args.preset, args.timeout, args.iterations),
                            "arms", arm_seconds)
    print(f"form {race['form']}; expected: {race['expected']}")
    print(f"▶ Start → closing line: {race['wall_s']:.0f} s ({race['wall_s'] / 60:.1f} min); first progress after "
          f"{race['first_progress_s']} s; phases {race['phases_s']}")  # fmt: skip
    print(f"CPU over the race: studio {race['studio_cpu_s']:.0f} s, Chromium {race['chromium_cpu_s']:.0f} s")
    print("\n| arm session | iterations | " + " | ".join(PARTS) + " | evaluation | iterations, in all |")
    print("|---|---|" + "---|" * (len(PARTS) + 2))
    for name, parts in race["arms"].items():
        print(f"| {name} | {parts['iterations']} | " + " | ".join(f"{parts[p]:.0f}" for p in PARTS)
              + f" | {parts['eval']:.0f} | {parts['iteration']:.0f} |")
    print(f"\nverdict: {race['verdict']}\nstatus: {race['status']}")
    if not race["status"].startswith("[done]"):  # stopped, failed or past --timeout: its time is no result
        print(f"not finished: {race['status'][:200]!r}; no result written", file=sys.stderr)
        return 1
    path = write_result(args.result, __file__, argv, started, [0], race, preset=args.preset, iterations=args.iterations,
                        threads=args.threads)
    if path:
        print(f"result written to {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
