"""Generate ScienceWorld's few-shot examples and variation splits from the simulator.

Writes
- assets/fewshot/scienceworld.json: {task: [example, example]}, two gold trajectories per task from
  TRAINING variations only (never dev/test), compact text capped near --max-chars;
- assets/fewshot/scienceworld_splits.json: {task: {split: [first, last + 1], "fewshot": [v, v]}}, the
  splits as the simulator reports them and the training variations the examples were played on.

Each example is the task description, then `> action` lines, each followed by the observation on
one line (cut at 100 characters); a gold path that does not fit ends with a "> … (N more steps)" line.
Usage: python scripts/make_fewshot.py [--max-chars 1500] [--candidates 2]   (needs Java 17; ~20 min on 2 busy cores)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from empo2_studio.envs.scienceworld import (  # noqa: E402
    FEWSHOT_DIR,
    FEWSHOT_PATH,
    SPLITS_PATH,
    TASK_NAMES,
    ScienceWorldEnv,
    clean_gold_path,
)

OBS_CHARS = 100
"""Observation lines are cut to this many characters: the action format matters, not the prose."""


def simulator_splits(env: ScienceWorldEnv, task: str) -> dict[str, list[int]]:
    """Ask the simulator for the task's train/dev/test variations; they must be contiguous ranges."""
    sim = env._load(task, 0)
    out = {}
    for split, got in (
        ("train", sim.get_variations_train()),
        ("dev", sim.get_variations_dev()),
        ("test", sim.get_variations_test()),
    ):
        got = sorted(got)
        if got != list(range(got[0], got[-1] + 1)):
            raise RuntimeError(f"{task} {split} split is not a contiguous range: {got}")
        out[split] = [got[0], got[-1] + 1]
    return out


def short(text: str) -> str:
    """One line: whitespace (ScienceWorld's newlines and tabs) collapsed, cut at OBS_CHARS."""
    line = " ".join(text.split())
    return line if len(line) <= OBS_CHARS else line[: OBS_CHARS - 1] + "…"


def transcript(env: ScienceWorldEnv, task: str, variation: int, max_chars: int,
               clean: bool = True) -> tuple[str, float]:
    """Play the gold path of one training variation; return (example text, final score).

    `clean` drops the steps "easy" makes no-ops (`clean_gold_path`); in tasks where things grow
    with time (identify-life-stages) those steps also let time pass, so the raw path is the fallback.
    """
    # The raw simulator (the adapter validates variations against the splits file this writes).
    sim = env._load(task, variation, gold=True)
    gold = list(sim.get_gold_action_sequence())
    gold = clean_gold_path(gold, env.simplification) if clean else gold
    text, info = sim.reset()
    desc = info["taskDesc"].removeprefix("Task Description:").strip()
    lines = [f"Task: {desc}", short(text)]
    score = 0.0
    valid, off_list = set(info["valid"]), 0
    for i, action in enumerate(gold):
        off_list += action not in valid
        res = sim.step(action)
        valid = set(res[3]["valid"])
        score = float(res[3]["score"])
        step_text = f"> {action}\n{short(res[0])}"
        # Leave room for the closing "> … (N more steps …)" line.
        if len("\n".join(lines)) + len(step_text) + 60 > max_chars:
            lines.append(f"> … ({len(gold) - i} more steps until the task is complete)")
            break
        lines.append(step_text)
        if res[2]:  # completed (100) or failed (< 0): later gold steps are not needed
            break
    for action in gold[i + 1 :] if lines[-1].startswith("> …") else ():
        off_list += action not in valid
        _, _, completed, info = sim.step(action)
        valid, score = set(info["valid"]), float(info["score"])
        if completed:
            break
    if off_list:
        # The simulator parses these, but an agent restricted to the valid list cannot say them.
        print(f"  note: {task} variation {variation}: {off_list}/{len(gold)} gold actions "
              "are not in the valid-action list", file=sys.stderr)
    return "\n".join(lines), score


def task_examples(env: ScienceWorldEnv, task: str, train: tuple[int, int], candidates: int,
                  max_chars: int) -> tuple[list[int], list[str]]:
    """Two gold trajectories of TRAINING variations that really reach 100, as text.

    The shortest two among the first `candidates` training variations are preferred; a variation
    whose gold path does not reach 100 under the simplification (it happens) is skipped for the
    next training variation."""
    lo, hi = train
    pool = range(lo, min(hi, lo + candidates))
    lengths = {
        v: len(clean_gold_path(env._load(task, v, gold=True).get_gold_action_sequence(),
                               env.simplification))
        for v in pool
    }
    order = sorted(pool, key=lambda v: (lengths[v], v)) + list(range(lo + candidates, hi))
    found: dict[int, str] = {}
    for v in order:
        text, score = transcript(env, task, v, max_chars)
        if score < 100:
            text, score = transcript(env, task, v, max_chars, clean=False)
        if score < 100:
            print(f"  skipped: {task} variation {v} gold path scored {score}", file=sys.stderr)
            continue
        found[v] = text
        if len(found) == 2:
            break
    if len(found) < 2:
        raise RuntimeError(f"{task}: fewer than two training gold paths reach 100")
    chosen = sorted(found)
    return chosen, [found[v] for v in chosen]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-chars", type=int, default=1500)
    ap.add_argument("--candidates", type=int, default=2,
                    help="pick the two shortest gold paths among the first N training variations")
    args = ap.parse_args()
    FEWSHOT_DIR.mkdir(parents=True, exist_ok=True)
    examples: dict[str, list[str]] = {}
    splits: dict[str, dict[str, list[int]]] = {}  # also holds the few-shot variations
    env = ScienceWorldEnv(simplification="easy")
    try:
        for task in TASK_NAMES:
            t0 = time.time()
            splits[task] = simulator_splits(env, task)
            chosen, examples[task] = task_examples(
                env, task, tuple(splits[task]["train"]), args.candidates, args.max_chars)
            splits[task]["fewshot"] = chosen
            print(f"{task}: train variations {chosen}, {time.time() - t0:.1f}s", flush=True)
    finally:
        env.close()
    FEWSHOT_PATH.write_text(json.dumps(examples, indent=1, ensure_ascii=False) + "\n")
    SPLITS_PATH.write_text(json.dumps(splits, indent=1) + "\n")
    print(f"wrote {FEWSHOT_PATH} and {SPLITS_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
