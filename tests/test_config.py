import json

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
        ("algo", {"off_policy_loss": "ppo"}, "algo.off_policy_loss"),
        ("algo", {"low_prob_ref": "current"}, "algo.low_prob_ref"),
        ("policy", {"max_tip_tokens": 0}, "policy.max_tip_tokens"),
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


@pytest.mark.parametrize(
    ("section", "key", "largest", "message"),
    [
        ("rollout", "group_size", 256, "rollout.group_size must be a whole number in 2…256 (a GRPO group), got {v!r}"),
        ("train", "eval_repeats", 100, "train.eval_repeats must be a positive integer ≤ 100, got {v!r}"),
        ("train", "iterations", 10000, "train.iterations must be a positive integer ≤ 10000, got {v!r}"),
    ],
)
def test_sizes_have_an_upper_bound(section, key, largest, message):
    # the largest value passes; one more, or a fraction, is refused with the range in the message
    assert getattr(getattr(RunConfig().with_overrides(**{section: {key: largest}}).validate(), section), key) == largest
    for v in (largest + 1, 2.5):
        with pytest.raises(ValueError) as err:
            RunConfig().with_overrides(**{section: {key: v}}).validate()
        assert str(err.value) == message.format(v=v)


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


def test_every_training_setting_is_in_config_json():
    """The update's micro-batch size and length limit are run settings, recorded in config.json."""
    from empo2_studio.config import TrainConfig
    from empo2_studio.update import MAX_TRAIN_TOKENS, UpdateSettings

    stored = json.loads(RunConfig().to_json())["train"]
    assert stored["micro_batch_episodes"] == 2 and stored["max_train_tokens"] == 4500 == MAX_TRAIN_TOKENS
    cfg = RunConfig().with_overrides(train={"micro_batch_episodes": 1, "max_train_tokens": 900})
    settings = UpdateSettings.from_config(cfg.algo, cfg.train)
    assert (settings.micro_batch_episodes, settings.max_train_tokens) == (1, 900)
    assert RunConfig.from_json(cfg.to_json()) == cfg
    assert RunConfig.from_dict({"train": {"iterations": 3}}).train.max_train_tokens == TrainConfig().max_train_tokens
    for name in ("micro_batch_episodes", "max_train_tokens"):
        with pytest.raises(ValueError, match=f"train.{name} must be a positive integer"):
            RunConfig().with_overrides(train={name: 0}).validate()


def test_choice_sets_are_read_from_their_literal():
    from typing import get_args, get_type_hints

    from empo2_studio import config, types

    for cls, field_name, choices in [
        (config.EnvConfig, "name", types.ENV_NAMES), (config.PolicyConfig, "quantization", config.QUANTIZATIONS),
        (config.PolicyConfig, "decoding", types.DECODINGS), (config.PolicyConfig, "device", config.DEVICES),
        (config.MemoryConfig, "embedder", config.EMBEDDER_NAMES), (config.AlgoConfig, "loss_agg", config.LOSS_AGGS),
        (config.AlgoConfig, "low_prob_mask", config.LOW_PROB_RULES),
        (config.AlgoConfig, "low_prob_ref", config.LOW_PROB_REFS),
    ]:  # fmt: skip
        assert get_args(get_type_hints(cls)[field_name]) == choices
    assert types.UPDATE_MODES == ("on-policy", "on-policy-with-tips", "off-policy")  # metric codes 0, 1, 2


def test_tip_token_cap_defaults_by_model():
    from empo2_studio.config import EMBEDDED_MODEL, PolicyConfig
    from empo2_studio.policy.loading import tip_token_limit

    assert tip_token_limit(PolicyConfig()) == 24 and PolicyConfig().model == EMBEDDED_MODEL
    assert tip_token_limit(PolicyConfig(model="Qwen/Qwen2.5-7B-Instruct")) == 96
    assert tip_token_limit(PolicyConfig(max_tip_tokens=12)) == 12
