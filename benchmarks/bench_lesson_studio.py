"""The Lesson timed as a class sees it: ▶ Play the lesson with its defaults, the page open in headless Chromium.

Starts `empo2-studio app` on a fresh sessions folder (2 threads unless `--threads`), opens the page on its
Lesson tab, reads the tab's *Expected time* line, clicks ▶ Play the lesson and reads the status line every
second until "[done]" (or `--timeout`). Prints and records the wall seconds from the click, when each
stage first showed on the status line, the CPU of the studio and of Chromium, and each stage's success
and seconds from the lesson session's `metrics.jsonl` (`kind: lesson` rows). This is the README's first
run, so its time is the one a newcomer meets; compare only runs made on the same machine.

Run: PYTHONPATH=. .venv/bin/python benchmarks/bench_lesson_studio.py [--result NAME]
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

PHASES = {"1 · naive": r"1 · naive", "3 · with tips": r"3 · with tips", "4 · distill": r"4 · distill",
          "5 · naive after distillation": r"5 · naive after"}  # fmt: skip
"""Stage → a pattern of the status line; the first second it matches is recorded."""


def stage_rows(sessions: Path) -> dict[str, dict[str, float]]:
    """Stage → {"success_rate", "episodes", "seconds"} from the lesson sessions' `kind: lesson` rows (the
    last row of each stage; "seconds": `time/stage` when recorded)."""
    out: dict[str, dict[str, float]] = {}
    for metrics in sorted(sessions.glob("lesson-*/metrics.jsonl")):
        for line in metrics.read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else {}
            if row.get("kind") != "lesson" or "lesson/stage" not in row:
                continue
            keep = {k.split("/", 1)[1]: float(v) for k, v in row.items()
                    if k in ("lesson/success_rate", "lesson/episodes", "time/stage") and isinstance(v, (int, float))}  # fmt: skip
            out[str(row["lesson/stage"])] = keep
    return out


def lesson_in_the_page(url: str, timeout: float) -> dict:
    """Open `url` on the Lesson tab, read its expected time, play the lesson and follow it to its closing line."""
    with opened_page(url, "Lesson") as page:
        page.locator("#ls-session").get_by_text("Expected time").wait_for()
        page.wait_for_function("document.querySelector('#ls-tip-0 textarea').value !== ''")  # the pre-filled tips are in
        expected = page.locator("#ls-session").inner_text()
        cpu0 = chromium_cpu()
        page.locator("#ls-play").click()
        lesson = follow(page, "ls-status", timeout, PHASES)
        chromium = round(chromium_cpu() - cpu0, 1)
        page.screenshot(path=str(Path(tempfile.gettempdir()) / "bench-lesson-studio.png"), full_page=True)
    return {"expected": expected, **lesson, "chromium_cpu_s": chromium}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_studio_options(ap, "lesson")
    add_result_option(ap)
    args = ap.parse_args(argv)
    check_studio_options(ap, args)
    started = time.perf_counter()
    lesson = played_in_studio(args.threads, lambda url: lesson_in_the_page(url, args.timeout), "stages", stage_rows)
    print(f"expected: {lesson['expected']}")
    print(f"▶ Play → closing line: {lesson['wall_s']:.0f} s ({lesson['wall_s'] / 60:.1f} min); first progress after "
          f"{lesson['first_progress_s']} s; stages began at {lesson['phases_s']}")  # fmt: skip
    print(f"CPU over the lesson: studio {lesson['studio_cpu_s']:.0f} s, Chromium {lesson['chromium_cpu_s']:.0f} s")
    print("\n| stage | episodes | success | seconds |\n|---|---|---|---|")
    for stage, row in lesson["stages"].items():
        print(f"| {stage} | {row.get('episodes', 0):.0f} | {row.get('success_rate', 0):.2f} | {row.get('stage', 0):.0f} |")
    print(f"\nstatus: {lesson['status']}")
    if not lesson["status"].startswith("[done]"):  # stopped, failed or past --timeout: its time is no result
        print(f"not finished: {lesson['status'][:200]!r}; no result written", file=sys.stderr)
        return 1
    path = write_result(args.result, __file__, argv, started, [], lesson, threads=args.threads)
    if path:
        print(f"result written to {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
