"""bench_memory_structure.py's summary (issue 49 item 2): the memory-free-after-distillation column is
the mean over seeds with a 95 % t-interval, worked out by hand here, and is absent when not measured."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def bench():
    import bench_memory_structure

    return bench_memory_structure


def row(success: float, tips: float = 0.0) -> dict:
    return {"success": success, "steps": 8.0, "tips": tips, "budget_cut": 0.0, "wrong_share": 0.0, "wrong_per_step": 0.0}


def per_seed(distilled: bool) -> dict:
    # seed s: flat wins 0.5 in its one memory trial, none 0; after distillation flat 0, 0.5, 1 (none has
    # no memory episodes to distil)
    out = {}
    for s, after in zip((0, 1, 2), (0.0, 0.5, 1.0)):
        out[s] = {"layout": 36 + s, "arms": {"none": [row(0.0), row(0.0)], "flat": [row(0.0), row(0.5, tips=4.0)]},
                  "distilled": {"flat": {"success": after}} if distilled else {}}
    return out


def test_the_distillation_column_is_the_seed_mean_with_its_t_interval():
    numbers, table = bench().summary(per_seed(True), ["none", "flat"], trials=1)
    # flat: mean 0.5, sd 0.5, t(2) = 4.303: half-width 4.303 · 0.5 / √3 = 1.2422
    assert numbers["flat"]["distilled_success"]["per_seed"] == [0.0, 0.5, 1.0]
    assert numbers["flat"]["distilled_success"]["mean"] == pytest.approx(0.5)
    assert numbers["flat"]["distilled_success"]["ci95"] == pytest.approx(4.303 * 0.5 / 3**0.5)
    assert "distilled_success" not in numbers["none"]
    header, _, none_line, flat_line = table.splitlines()
    assert header.endswith("| memory-free success after distillation | Δ after distillation vs flat (paired) |")
    assert none_line.endswith("| — | — |") and flat_line.endswith("| 0.50 ± 1.24 | — |")


def test_the_paired_difference_after_distillation_is_per_seed():
    seeds = per_seed(True)
    for s, after in zip((0, 1, 2), (1.0, 0.5, 1.0)):  # groups after distillation: 1, 0.5, 1 against flat's 0, 0.5, 1
        seeds[s]["arms"]["groups"] = [row(0.0), row(0.5)]
        seeds[s]["distilled"]["groups"] = {"success": after}
    numbers, table = bench().summary(seeds, ["none", "flat", "groups"], trials=1)
    # differences 1, 0, 0: mean 1/3, sd 1/√3, half-width 4.303 · (1/√3) / √3 = 1.4343
    assert numbers["groups"]["distilled_minus_flat"]["per_seed"] == [1.0, 0.0, 0.0]
    assert numbers["groups"]["distilled_minus_flat"]["ci95"] == pytest.approx(4.303 / 3)
    assert table.splitlines()[-1].endswith("| 0.83 ± 0.72 | 0.33 ± 1.43 |")


def test_no_distillation_column_when_it_was_not_measured():
    numbers, table = bench().summary(per_seed(False), ["none", "flat"], trials=1)
    assert "distilled_success" not in numbers["flat"]
    assert "distillation" not in table
    assert numbers["flat"]["success"]["mean"] == 0.5 and numbers["flat"]["tips_last"]["mean"] == 4.0


def write_run(folder: Path, name: str, seeds: dict, **over) -> None:
    import json

    about = {"task": "trap-light-bulb", "arms": ["none", "flat"], "split": "test", "trials": 1, "group": 6,
             "step_limit": 12, "budget": 64, "policy": "p", "distill_steps": 5, "distill_lr": 2e-3, **over}
    (folder / f"{name}.json").write_text(json.dumps({**about, "seconds": 10.0, "results": {"per_seed": seeds}}))


def test_merge_joins_the_seeds_of_two_runs_and_refuses_runs_that_differ(tmp_path, monkeypatch, capsys):
    module = bench()
    monkeypatch.setattr(module, "RESULTS", tmp_path)
    seeds = per_seed(True)
    write_run(tmp_path, "a", {"0": seeds[0], "1": seeds[1]})
    write_run(tmp_path, "b", {"2": seeds[2]})
    assert module.merge(["a", "b"], None, []) == 0
    assert capsys.readouterr().out.splitlines()[3].endswith("| 0.50 ± 1.24 | — |")  # the three seeds' flat row, as above

    write_run(tmp_path, "c", {"2": seeds[2]}, group=8)
    with pytest.raises(SystemExit, match="c has group 8, a has 6"):
        module.merge(["a", "c"], None, [])
    with pytest.raises(SystemExit, match="seed 0 is in more than one"):
        module.merge(["a", "a"], None, [])
    with pytest.raises(SystemExit, match="missing.json does not exist"):
        module.merge(["a", "missing"], None, [])
