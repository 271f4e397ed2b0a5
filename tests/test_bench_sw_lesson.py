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


def test_part_room_is_offered():
    import bench_sw_lesson as bench

    assert "room" in bench.PARTS


@pytest.mark.scienceworld
def test_the_room_probes_variations_keep_their_boxes_in_five_rooms():
    from _sw_room import ROOM_VARIATIONS, TELEPORT, TELEPORT_STEP

    from empo2_studio.envs.scienceworld import ScienceWorldEnv
    from empo2_studio.lesson.scienceworld import LESSON_STEP_LIMIT, TIP_OPENING, curated_tip

    with ScienceWorldEnv(step_limit=LESSON_STEP_LIMIT) as env:
        plans = [curated_tip("find-animal", v, env)[len(TIP_OPENING):].split(", then ") for v in ROOM_VARIATIONS]
    rooms = [p[TELEPORT_STEP].removeprefix(TELEPORT) for p in plans]
    assert rooms == ["kitchen", "bathroom", "living room", "bedroom", "workshop"]  # the morning page's table
    assert all(p[0] == "teleport to outside" and p[3].startswith("pick up ") for p in plans)
