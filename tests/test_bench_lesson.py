"""bench_lesson.py --save-adapter (issue 48 item 3): the distilled adapter is a PEFT directory a run can
start from, and its warmstart.json says what it saw — its warm start's tasks plus the distill task —
and the naive success the benchmark measured."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from scripts import load_bench

from empo2_studio.config import DEFAULT_WARM_START, WARM_START_DIR


def test_the_saved_adapter_loads_back_and_names_what_it_saw(tmp_path, tiny_policy):
    bench = load_bench("bench_lesson")
    args = SimpleNamespace(save_adapter=tmp_path / "starts", warm_start="auto", distill_task="trap-light-bulb-fixed",
                           distill_steps=2, episodes=8, distill_lr=6e-4, temperature=1.0,
                           command="benchmarks/bench_lesson.py --parts distill")  # fmt: skip
    with torch.no_grad():
        for p in tiny_policy.trainable_parameters():
            p.add_(0.01)  # weights that differ from a fresh tiny policy's
    saved = [p.detach().clone() for p in tiny_policy.trainable_parameters()]
    out = bench.save_distilled(args, tiny_policy, 3, [0, 1, 2, 3, 4], {"train_before": 0.0, "train_after": 0.125})

    assert out == tmp_path / "starts" / "seed3"
    assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()
    meta = json.loads((out / "warmstart.json").read_text())
    shipped = json.loads((WARM_START_DIR / DEFAULT_WARM_START / "warmstart.json").read_text())
    assert meta["tasks"] == sorted({*shipped["tasks"], "trap-light-bulb-fixed"})
    assert meta["init"] == str(WARM_START_DIR / DEFAULT_WARM_START)
    assert meta["distill"] == {"task": "trap-light-bulb-fixed", "variations": [0, 1, 2, 3, 4], "steps": 2,
                               "episodes": 8, "lr": 6e-4, "temperature": 1.0, "seed": 3}  # fmt: skip
    assert meta["naive_success"] == {"train_before": 0.0, "train_after": 0.125}
    assert meta["command"] == "benchmarks/bench_lesson.py --parts distill"
    assert meta["trained_on"].endswith("then 2 Distill-now steps on trap-light-bulb-fixed variations [0, 1, 2, 3, 4] "
                                       "(the pre-filled tips, 8 memory episodes each, lr 0.0006)")  # fmt: skip

    with torch.no_grad():
        for p in tiny_policy.trainable_parameters():
            p.zero_()
    tiny_policy.load_adapter(str(out))
    assert all(torch.equal(a, b) for a, b in zip(tiny_policy.trainable_parameters(), saved))


def test_save_adapter_without_distill_or_onto_an_earlier_start_is_refused(tmp_path, capsys):
    bench = load_bench("bench_lesson")
    for argv, says in (
        (["--parts", "notes", "--save-adapter", str(tmp_path)], "--parts notes has no distill"),
        (["--parts", "distill", "--seeds", "0", "1", "--save-adapter", str(tmp_path)], f"{tmp_path / 'seed1'} already exist"),
    ):
        (tmp_path / "seed1").mkdir(exist_ok=True)
        before = sorted(p.name for p in tmp_path.iterdir())
        try:
            bench.main(argv)
        except SystemExit as e:
            assert e.code == 2
        else:
            raise AssertionError(f"{argv} was not refused")
        assert says in capsys.readouterr().err
        assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_a_bad_adapt_step_limit_is_refused_before_the_model_loads(capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_bench("bench_lesson").main(["--parts", "adapt", "--adapt-step-limit", "0"])
    assert exit_info.value.code == 2
    assert "--adapt-step-limit must be ≥ 1 (or left out: each task's own), got 0" in capsys.readouterr().err
