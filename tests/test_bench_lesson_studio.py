"""bench_lesson_studio.py: each stage's row is the lesson session's last `kind: lesson` row of that stage,
and bad settings are refused before a studio starts."""

from __future__ import annotations

import json

import pytest
from scripts import load_bench


def test_stage_rows_keep_each_stages_last_row(tmp_path):
    rows = [
        {"kind": "lesson", "lesson/stage": "naive", "lesson/success_rate": 0.5, "lesson/episodes": 4, "time/stage": 9.0},
        {"kind": "lesson", "lesson/stage": "naive", "lesson/success_rate": 0.0, "lesson/episodes": 16, "time/stage": 40.0},
        {"kind": "lesson", "lesson/stage": "distill", "time/stage": 30.5, "time/distill_step": 6.1},
        {"kind": "train", "rollout/success_rate": 1.0},
    ]  # fmt: skip
    run = tmp_path / "lesson-trap-light-bulb"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert load_bench("bench_lesson_studio").stage_rows(tmp_path) == {
        "naive": {"success_rate": 0.0, "episodes": 16.0, "stage": 40.0}, "distill": {"stage": 30.5}}


@pytest.mark.parametrize("argv, message", [(["--threads", "0"], "--threads must be ≥ 1, got 0"),
                                           (["--timeout", "0"], "--timeout must be > 0, got 0.0")])
def test_bad_settings_are_refused_before_a_studio_starts(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_bench("bench_lesson_studio").main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
