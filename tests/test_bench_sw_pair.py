"""benchmarks/bench_sw_pair.py refuses bad arguments before a model loads or a simulator starts, and its
table counts what the pairs did."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


@pytest.mark.parametrize("argv, message", [
    (["--variations", "150"], "--variations [150]: not find-animal train variations (0–149)"),  # a dev one
    (["--temperature", "0"], "--temperature must be in (0, 2], got 0.0"),
    (["--warm-start", "/no/such/adapter"], "no such adapter folder"),
])  # fmt: skip
def test_bad_arguments_are_refused_by_name(argv, message, capsys):
    import bench_sw_pair as bench

    with pytest.raises(SystemExit):
        bench.main(argv)
    assert message in capsys.readouterr().err


def test_the_table_counts_wins_and_first_step_focus():
    import bench_sw_pair as bench

    rows = [
        {"variation": 1, "seed": 0, "naive_score": -100.0, "naive_won": False, "naive_first_action": "focus on battery",
         "naive_focus_at_once": True, "memory_score": 100.0, "memory_won": True, "memory_steps": 6,
         "played_s": 8.0, "total_s": 10.0},
        {"variation": 5, "seed": 1, "naive_score": 8.0, "naive_won": False, "naive_first_action": "look around",
         "naive_focus_at_once": False, "memory_score": 100.0, "memory_won": True, "memory_steps": 6,
         "played_s": 20.0, "total_s": 26.0},
    ]  # fmt: skip
    lines = bench.table(rows)
    assert lines[2] == "| 1 | 0 | -100 | focus on battery | 100 | 6 | 8.0 | 10.0 |"
    assert lines[-1] == ("Memory side won 2 of 2; naive side won 0 of 2 and focused at its first step in 1 of 2. "
                         "Total per pair: median 18.0 s, max 26.0 s.")
