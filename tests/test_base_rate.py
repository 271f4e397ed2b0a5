"""Issue 48 (3): the Race tab's curve "EMPO²'s gain over GRPO against the naive base rate" is the
committed measurements: every point's base rate is the naive success its start's result file measured,
every memory-free test success is the race result file's number for that arm and seed, and the races ran
from that start with the class race's settings."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from empo2_studio.app import base_rate, race_tab

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def load(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))


def test_every_base_rate_has_a_start_three_seeds_and_both_arms():
    assert sorted(base_rate.RESULTS) == sorted({p["base_rate"] for p in base_rate.POINTS})
    assert len(base_rate.RESULTS) >= 3 and 0.0 in base_rate.RESULTS  # the current family and two rates above it
    for rate in base_rate.RESULTS:
        seeds = sorted(p["seed"] for p in base_rate.POINTS if p["base_rate"] == rate)
        assert seeds == [0, 1, 2], rate


@pytest.mark.parametrize("rate", sorted(base_rate.RESULTS))
def test_the_base_rate_is_what_its_start_measured(rate):
    start, races = base_rate.RESULTS[rate]
    if not start:  # the shipped warm start: its GRPO arm never won a training episode
        assert rate == 0.0
        grpo = [r["results"]["trap"]["GRPO"] for r in map(load, races) if "GRPO" in r["results"]["trap"]]
        assert grpo and all(max(s["success_rate"]) == 0.0 for per_seed in grpo for s in per_seed.values())
        return
    result = load(start)
    assert result["results"]["distill"]["train_before"] == [0.0]  # the shipped warm start, before its Distill steps
    assert result["results"]["distill"]["train_after"] == [rate]
    folder = Path(result["command"].split("--save-adapter ")[1].split()[0]).name
    for race in map(load, races):  # raced from that start's adapter
        assert Path(race["warm_start"]).parts[-2:] == (folder, "seed0"), race["command"]


@pytest.mark.parametrize("rate", sorted(base_rate.RESULTS))
def test_each_point_is_the_race_files_memory_free_test_success(rate):
    _, races = base_rate.RESULTS[rate]
    measured: dict[tuple[str, int], float] = {}
    for race in map(load, races):
        for arm, per_seed in race["results"]["trap"].items():
            for seed, row in per_seed.items():
                measured[(arm, int(seed))] = row["eval"]["eval/success_rate"]
        command = race["command"]  # the class race's settings
        for flag in ("--task trap-light-bulb-fixed", "--variations 0 1 2 3 4", "--iterations 15", "--group-size 8",
                     "--lr 1e-3", "--skip-flat-groups"):
            assert flag in command, (flag, command)
    for p in (p for p in base_rate.POINTS if p["base_rate"] == rate):
        assert p["EMPO2"] == measured[("EMPO2", p["seed"])] and p["GRPO"] == measured[("GRPO", p["seed"])], p


def test_gains_are_the_mean_difference_per_rate(monkeypatch):
    monkeypatch.setattr(base_rate, "POINTS", (
        {"base_rate": 0.0, "seed": 0, "EMPO2": 1.0, "GRPO": 0.0}, {"base_rate": 0.0, "seed": 1, "EMPO2": 0.5, "GRPO": 0.0},
        {"base_rate": 0.25, "seed": 0, "EMPO2": 0.5, "GRPO": 0.75},
    ))  # fmt: skip
    assert base_rate.gains() == {0.0: 0.75, 0.25: -0.25}


def test_the_explanation_states_each_measured_gain_and_the_races_settings():
    text = base_rate.EXPLANATION
    for rate, gain in base_rate.gains().items():
        assert f"{rate:.2f}" in text and f"{gain:+.2f}" in text, (rate, gain)
    assert race_tab.PRESETS["class"]["iterations"] == 15 and "15 iterations" in text


def test_the_readmes_leads_are_the_measured_gains():
    """The README's sentence on the base-rate races states `gains()` (traced to the result files above)."""
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())
    num = r"([+-]?\d\.\d\d)"
    m = re.search(rf"win {num}, {num}, {num} and {num} of the training episodes without a note, EMPO²'s lead in "
                  rf"the class race was {num}, {num}, {num} and {num} \({num} from the warm start that never wins", readme)
    assert m, "the README's base-rate sentence changed; keep its numbers traced here"
    values = [float(v) for v in m.groups()]
    gains = base_rate.gains()
    rates = sorted(r for r in gains if r > 0)
    assert values[:4] == [round(r, 2) for r in rates]
    assert values[4:8] == [round(gains[r], 2) for r in rates]
    assert values[8] == round(gains[0.0], 2)
