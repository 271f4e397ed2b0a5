"""benchmarks/bench_sw_lesson.py refuses bad arguments before any model loads or simulator starts, and
defaults to the Lesson tab's ScienceWorld lesson."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


@pytest.mark.parametrize("argv, message", [
    (["--parts", "eval", "--seeds", "0", "--checkpoints", "/no/such/adapter"], "one adapter folder per seed"),
    (["--parts", "eval", "--seeds", "0", "1"], "one adapter folder per seed"),
    (["--parts", "lesson", "--eval-stride", "0"], "--eval-stride must be ≥ 1, got 0"),
    (["--parts", "lesson", "--variations", "150"], "150 is not one"),  # a dev variation: the lesson teaches train ones
    (["--parts", "lesson", "--wording", "99"], "holds wordings 0–11"),
])  # fmt: skip
def test_bad_arguments_are_refused_by_name(argv, message, capsys):
    import bench_sw_lesson as bench

    with pytest.raises(SystemExit):
        bench.main(argv)
    assert message in capsys.readouterr().err


def test_the_default_lesson_is_the_lesson_tabs():
    import bench_sw_lesson as bench

    from empo2_studio.lesson import lesson_defaults

    d = lesson_defaults("find-animal")
    assert d.variations == bench.LESSON_VARIATIONS == (0, 1, 30, 31, 60, 61, 90, 91)
    assert d.episodes == bench.LESSON_EPISODES == 2
