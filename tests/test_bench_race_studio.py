"""bench_race_studio.py: the arms' seconds by part are the sums of their sessions' training rows, and bad
settings are refused before a studio starts."""

from __future__ import annotations

import json

import pytest
from scripts import load_bench


def test_arm_seconds_sum_the_training_rows_and_the_evaluations(tmp_path):
    rows = [
        {"iteration": 0, "kind": "eval", "time/eval": 12.5},
        {"iteration": 1, "kind": "train", "time/sampling": 10.0, "time/memory": 2.0, "time/scoring": 3.0,
         "time/backward": 4.0, "time/iteration": 20.0},
        {"iteration": 2, "kind": "train", "time/sampling": 11.5, "time/scoring": 0.0, "time/iteration": 12.0},
        {"iteration": 2, "kind": "eval", "time/eval": 7.5},
    ]  # fmt: skip
    run = tmp_path / "studio-trap-race-empo2"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "studio").mkdir()  # not a race session: left out
    (tmp_path / "studio" / "metrics.jsonl").write_text(json.dumps(rows[1]) + "\n")
    out = load_bench("bench_race_studio").arm_seconds(tmp_path)
    assert list(out) == ["studio-trap-race-empo2"]
    assert out["studio-trap-race-empo2"] == {"sampling": 21.5, "env": 0.0, "memory": 2.0, "scoring": 3.0,
                                             "backward": 4.0, "iteration": 32.0, "eval": 20.0, "iterations": 2}


@pytest.mark.parametrize("argv, message", [(["--threads", "0"], "--threads must be ≥ 1, got 0"),
                                           (["--iterations", "0"], "--iterations must be ≥ 1, got 0"),
                                           (["--timeout", "-5"], "--timeout must be > 0, got -5.0")])
def test_bad_settings_are_refused_before_a_studio_starts(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_bench("bench_race_studio").main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
