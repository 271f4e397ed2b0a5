import pytest

from empo2_studio.config import RunConfig


def test_defaults_follow_the_paper():
    cfg = RunConfig().validate()
    assert (cfg.rollout.p_memory, round(cfg.rollout.q_off_policy, 4)) == (0.25, 0.6667)
    assert (cfg.algo.clip_low, cfg.algo.clip_high, cfg.algo.dual_clip) == (0.2, 0.3, 10.0)
    assert cfg.algo.low_prob_threshold == -5.0
    assert (cfg.memory.similarity_threshold, cfg.memory.top_k, cfg.memory.max_tips_per_partition) == (0.5, 10, 1000)
    assert cfg.rollout.group_size == 8 and cfg.policy.max_action_tokens == 32


def test_json_round_trip_keeps_tuples():
    cfg = RunConfig().with_overrides(env={"variations": (0, 3)}, policy={"lora_target_modules": ("q_proj",)})
    back = RunConfig.from_json(cfg.to_json())
    assert back == cfg
    assert back.env.variations == (0, 3)


@pytest.mark.parametrize(
    ("section", "values", "needle"),
    [
        ("rollout", {"p_memory": 1.5}, "rollout.p_memory"),
        ("rollout", {"q_off_policy": -0.1}, "rollout.q_off_policy"),
        ("rollout", {"group_size": 1}, "rollout.group_size"),
        ("algo", {"loss_agg": "sum"}, "algo.loss_agg"),
        ("algo", {"low_prob_threshold": 0.5}, "algo.low_prob_threshold"),
        ("algo", {"dual_clip": 1.0}, "algo.dual_clip"),
        ("policy", {"quantization": "3bit"}, "policy.quantization"),
        ("policy", {"decoding": "beam"}, "policy.decoding"),
        ("env", {"name": "alfworld"}, "env.name"),
        ("algo", {"adv_eps": 0.0}, "algo.adv_eps"),
    ],
)
def test_bad_values_are_named(section, values, needle):
    with pytest.raises(ValueError, match=needle.replace(".", r"\.")):
        RunConfig().with_overrides(**{section: values}).validate()


@pytest.mark.parametrize("eps", [0.0, -1.0, float("inf"), True])
def test_adv_eps_must_be_positive(eps):
    with pytest.raises(ValueError) as err:
        RunConfig().with_overrides(algo={"adv_eps": eps}).validate()
    assert str(err.value) == f"algo.adv_eps is the ε added to the group std and must be a finite number > 0 (paper: 1e-6), got {eps!r}"
    assert RunConfig().with_overrides(algo={"adv_eps": 1e-8}).validate().algo.adv_eps == 1e-8


def test_unknown_keys_are_named():
    with pytest.raises(ValueError, match="clip_lo"):
        RunConfig.from_dict({"algo": {"clip_lo": 0.1}})
    with pytest.raises(ValueError, match="optimiser"):
        RunConfig.from_dict({"optimiser": {}})


def test_importing_the_package_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, empo2_studio, empo2_studio.types, empo2_studio.config; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
