"""benchmarks/bench_sw_search.py refuses bad arguments before a model loads or a simulator starts, and
counts per episode what the search did."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from empo2_studio.types import ActionSample, Episode, RetrievedTip, Step

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


@pytest.mark.parametrize("argv, message", [
    (["--variations", "0"], "--variations [0]: not find-animal dev variations (150–224)"),
    (["--split", "test", "--variations", "150"], "--variations [150]: not find-animal test variations (225–299)"),
    (["--trials", "0"], "--trials must be ≥ 1, got 0"),
    (["--group-size", "1"], "--group-size must be ≥ 2 and --step-limit ≥ 1, got 1 and 10"),
    (["--start-note", "garden"], "argument --start-note: invalid choice: 'garden'"),
    (["--task", "find-plant", "--start-note", "outside"], "--part lines and --start-note are written for find-animal's animals, not find-plant"),
    (["--task", "find-plant", "--variations", "1"], "--variations [1]: not find-plant dev variations"),
    (["--task", "boil"], "argument --task: invalid choice: 'boil'"),
    (["--part", "compare"], "--part compare needs --inputs NAME"),
])  # fmt: skip
def test_bad_arguments_are_refused_by_name(argv, message, capsys):
    import bench_sw_search as bench

    with pytest.raises(SystemExit):
        bench.main(argv)
    assert message in capsys.readouterr().err


def _step(i: int, action: str, reward: float, observation: str, tips: int) -> Step:
    return Step(index=i, user_message="", tips=tuple(RetrievedTip(f"t{k}", "note", 0.0, 0.9) for k in range(tips)),
                valid_actions=(action,), sample=ActionSample(text=action, token_ids=(1,), logprobs=(0.0,)),
                action=action, corrected=False, reward=reward, score=0.0, observation=observation)  # fmt: skip


def test_episode_measures_read_outside_a_scoring_focus_and_tips_per_step():
    import bench_sw_search as bench

    steps = (_step(0, "teleport to outside", 0.0, "You teleport to the outside.", 2),
             _step(1, "focus on dove", 50.0, "You focus on the dove egg.", 1),
             _step(2, "pick up dove", 0.0, "You move the dove egg to the inventory.", 0))  # fmt: skip
    ep = Episode(episode_id="e", env="scienceworld", task="find-animal", variation=150, split="dev",
                 rollout_mode="memory", update_mode=None, decoding="constrained", temperature=1.0, seed=0,
                 steps=steps, score=75.0, won=False, first_observation="This room is called the kitchen.")  # fmt: skip
    assert bench.episode_measures(ep) == {"success": 0.0, "stood outside": 1.0, "focus scored": 1.0,
                                          "tips read per step": 1.0}  # (2 + 1 + 0) / 3  # fmt: skip
    indoors = replace(ep, steps=(_step(0, "focus on picture", -100.0, "You focus on the picture.", 0),))
    assert bench.episode_measures(indoors) == {"success": 0.0, "stood outside": 0.0, "focus scored": 0.0,
                                               "tips read per step": 0.0}  # fmt: skip


def _run(tmp_path, name, structure, seeds, key="focused on an animal", task=None):
    """A trials result file: per seed, per measure, one list per trial of the 2 variations' values (`key`:
    the focus measure's name, old or new)."""
    data = {"variations": [150, 157], "start_note": "", "results": {
        str(s): {"success": success, key: focused} for s, (success, focused) in seeds.items()}}
    if structure:
        data["structure"] = structure
    if task:
        data["task"] = task
    (tmp_path / f"{name}.json").write_text(json.dumps(data))


def test_compare_sets_the_memories_side_by_side(tmp_path):
    import bench_sw_search as bench

    # flat (no "structure" key: a file from before the option), seeds 0 and 1, 2 memory trials
    _run(tmp_path, "f0", None, {0: ([[0, 0], [0.5, 0], [1, 0]], [[0, 0], [0.5, 0], [1, 0]])})
    _run(tmp_path, "f1", None, {1: ([[0, 0], [0, 0], [0, 0.25]], [[0, 0], [0, 0.5], [0, 0.5]])})
    _run(tmp_path, "c0", "flat-counts", {0: ([[0, 0], [0, 0], [0, 0]], [[0, 0], [0, 0], [0, 0]])}, key="focus scored")
    table, arms = bench.compare(["f0", "f1", "c0"], tmp_path)
    flat = arms["find-animal, flat"]
    # seed 0: (0.5 + 0 + 1 + 0) / 4 = 0.375; seed 1: 0.25 / 4 = 0.0625; per trial: (0, 0.25, 0.5) and (0, 0, 0.125)
    assert flat["per_seed_success"] == [0.375, 0.0625] and flat["mean"] == pytest.approx(0.21875)
    assert flat["per_trial"] == [0, 0.125, 0.3125]
    assert (flat["found"], flat["searches"]) == (2, 4)  # seed 0 variation 150, seed 1 variation 157
    assert (arms["find-animal, flat-counts"]["found"], arms["find-animal, flat-counts"]["mean"]) == (0, 0)
    assert "| find-animal, flat | 0, 1 | 0.38 / 0.06 | 0.22 | 0.00 0.12 0.31 | 2 of 4 |" in table
    _run(tmp_path, "p0", "flat", {0: ([[0, 0], [1, 1], [1, 1]], [[0, 0], [1, 1], [1, 1]])}, task="find-plant")
    _, arms = bench.compare(["f0", "p0"], tmp_path)  # another task: its own row, seed 0 again allowed
    assert arms["find-plant, flat"]["mean"] == 1.0 and arms["find-animal, flat"]["per_seed_success"] == [0.375]
    with pytest.raises(ValueError, match=r"--inputs f0: seed 0 of find-animal, flat was already read from \['f0'\]"):
        bench.compare(["f0", "f0"], tmp_path)


@pytest.mark.parametrize("files, message", [
    ({}, "--inputs f0: no f0.json"),
    ({"f0": {"variations": [150], "results": {"0": {"median": 1}}}}, "not a --part trials run from an empty memory"),
    ({"f0": {"variations": [150], "results": {"0": {"success": [[0]]}}}}, "not a --part trials run from an empty memory"),
    ({"f0": {"results": {"0": {"success": [[0]], "focus scored": [[0]]}}}}, "not a --part trials run from an empty memory"),
    ({"f0": {"variations": [150], "start_note": "outside", "results": {"0": {"success": [[0]], "focused on an animal": [[0]]}}}},
     "not a --part trials run from an empty memory"),
])  # fmt: skip
def test_compare_refuses_what_it_cannot_compare(tmp_path, files, message):
    import bench_sw_search as bench

    for name, data in files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        bench.compare(["f0"], tmp_path)
