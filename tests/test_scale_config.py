"""Scale options in the run config and the launcher checks (fast: no process group, no model)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from empo2_studio import cli
from empo2_studio.config import RolloutConfig, RunConfig, ScaleConfig
from empo2_studio.scale import check_launch, needs_scale_path


def test_scale_section_round_trips_through_config_json_and_old_configs_still_load():
    cfg = RunConfig(scale=ScaleConfig(processes=2, sampler="vllm", vllm_urls=("http://127.0.0.1:8000",)))
    assert RunConfig.from_json(cfg.to_json()) == cfg
    old = json.loads(RunConfig().to_json())
    del old["scale"]  # a config.json written before this section existed
    assert RunConfig.from_dict(old).scale == ScaleConfig()


@pytest.mark.parametrize(
    ("scale", "match"),
    [
        (ScaleConfig(processes=0), "scale.processes must be a positive integer, got 0"),
        (ScaleConfig(sampler="sglang"), "scale.sampler must be one of \\['hf', 'vllm'\\], got 'sglang'"),
        (ScaleConfig(sampler="vllm"), "needs at least one server in scale.vllm_urls"),
        (ScaleConfig(sampler="vllm", vllm_urls=("localhost:8000",)), "http\\(s\\):// URLs, got 'localhost:8000'"),
        (ScaleConfig(env_pool="dask"), "scale.env_pool must be one of \\['local', 'ray'\\], got 'dask'"),
        (ScaleConfig(strategy="zero3"), "scale.strategy must be one of \\['ddp', 'fsdp'\\], got 'zero3'"),
    ],
)
def test_bad_scale_values_are_named(scale, match):
    with pytest.raises(ValueError, match=match):
        RunConfig(scale=scale).validate()


def test_strategy_is_recorded_and_fsdp_is_refused_with_the_reason(tmp_path, capsys, monkeypatch):
    from empo2_studio.config import SCALE_STRATEGIES

    assert SCALE_STRATEGIES == ("ddp", "fsdp") and ScaleConfig().strategy == "ddp"
    fsdp = RunConfig(rollout=RolloutConfig(variations_per_iteration=2), scale=ScaleConfig(processes=2, strategy="fsdp"))
    assert json.loads(fsdp.to_json())["scale"]["strategy"] == "fsdp"  # recorded in config.json
    assert RunConfig.from_json(fsdp.to_json()).scale.strategy == "fsdp"
    for world in (1, 2):
        with pytest.raises(ValueError, match="scale.strategy 'fsdp' is not supported yet: FSDP all-gathers"):
            check_launch(replace(fsdp, scale=replace(fsdp.scale, processes=world)), world, resuming=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    code = cli.main(["train", "--env.name", "trap", "--scale.strategy", "fsdp", "--sessions-dir", str(tmp_path)])
    assert code == cli.USAGE
    err = capsys.readouterr().err
    assert "scale.strategy 'fsdp' is not supported yet" in err and "Use --scale.strategy 'ddp'" in err
    assert not any(tmp_path.iterdir())


def test_launch_checks_name_the_mismatch(monkeypatch):
    two = RunConfig(rollout=RolloutConfig(variations_per_iteration=2), scale=ScaleConfig(processes=2))
    check_launch(two, 2, resuming=True)
    check_launch(RunConfig(rollout=RolloutConfig(variations_per_iteration=2)), 2, resuming=False)  # 1 = as launched
    with pytest.raises(ValueError, match="trained with 2 process\\(es\\) but 1 were launched; run `torchrun --nproc_per_node 2"):
        check_launch(two, 1, resuming=True)
    with pytest.raises(ValueError, match="config asks for 2 process\\(es\\) but 4 were launched"):
        check_launch(two, 4, resuming=False)
    with pytest.raises(ValueError, match="variations_per_iteration must be ≥ the 2 processes .*got 1"):
        check_launch(RunConfig(), 2, resuming=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not needs_scale_path(RunConfig())  # the default stays the single-process path
    assert needs_scale_path(RunConfig(scale=ScaleConfig(env_pool="ray")))
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert needs_scale_path(RunConfig())
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="WORLD_SIZE must be a positive integer, got 'two'"):
        needs_scale_path(RunConfig())


def test_cli_refuses_processes_without_a_launcher(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    code = cli.main(["train", "--env.name", "trap", "--scale.processes", "2", "--sessions-dir", str(tmp_path)])
    assert code == cli.USAGE
    assert "config asks for 2 process(es) but 1 were launched" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing was created
