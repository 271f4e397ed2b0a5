"""LoRA on the last N layers only (`policy.lora_layers`): which modules are adapted, that gradients stop
there, and that an adapter with another layout is refused with the weights unchanged."""

from __future__ import annotations

import json

import pytest
import torch

from empo2_studio.config import PolicyConfig, RunConfig
from empo2_studio.policy import Turn, build_tiny_policy
from empo2_studio.policy.adapter_check import adapter_config_mismatch, adapter_last_layers

torch.set_num_threads(1)

VALID = ("go to kitchen", "go to hallway", "look around")


def _conv(policy):
    fmt = policy.chat_format
    return [Turn(f"Observation {t}.", fmt.encode(VALID[t]) + (fmt.eot_id,), VALID) for t in range(2)]


def _layers_with_lora(policy) -> set[int]:
    return {int(n.split("layers.")[1].split(".")[0]) for n, _ in policy.model.named_parameters() if "lora_" in n}


def test_last_layer_only_is_adapted_and_gradients_stop_there():
    policy = build_tiny_policy(seed=2, lora_layers=1)  # the tiny model has layers 0 and 1
    assert _layers_with_lora(policy) == {1}
    assert _layers_with_lora(build_tiny_policy(seed=2)) == {0, 1}
    # B starts at 0, so only lora_B gets a gradient at step 0 (dL/dA = B^T … = 0); it must reach layer 1
    logp = torch.cat([lp for per in policy.score([_conv(policy)]) for lp in per])
    (-logp.sum()).backward()
    grads = {n: p.grad for n, p in policy.model.named_parameters() if p.requires_grad}
    assert grads and all("layers.1." in n for n in grads)
    assert any(g is not None and float(g.abs().sum()) > 0 for n, g in grads.items() if "lora_B" in n)


def test_adapter_with_another_layout_is_refused_and_weights_stay(tmp_path):
    top = build_tiny_policy(seed=3, lora_layers=1)
    top.save_adapter(str(tmp_path / "top"))
    saved = json.loads((tmp_path / "top" / "adapter_config.json").read_text())
    assert saved["layers_to_transform"] == [1] and adapter_last_layers(tmp_path / "top") == 1
    full = build_tiny_policy(seed=3)
    before = {n: p.detach().clone() for n, p in full.model.named_parameters() if "lora_" in n}
    with pytest.raises(ValueError, match="adapts layers 1–1; this policy adapts every layer"):
        full.load_adapter(str(tmp_path / "top"))
    assert all(torch.equal(p, before[n]) for n, p in full.model.named_parameters() if "lora_" in n)
    # the same layout loads
    build_tiny_policy(seed=3, lora_layers=1).load_adapter(str(tmp_path / "top"))


def test_mismatch_rule_and_config_validation():
    base = {"base_model_name_or_path": "m", "r": 4, "target_modules": ["q_proj"]}
    assert adapter_config_mismatch(base, "m", 4, ["q_proj"], None) is None
    assert adapter_config_mismatch({**base, "layers_to_transform": [28, 29]}, "m", 4, ["q_proj"], [28, 29]) is None
    assert "adapts layers 28–29; this policy adapts layers 29–29" in adapter_config_mismatch(
        {**base, "layers_to_transform": [28, 29]}, "m", 4, ["q_proj"], [29]
    )
    assert adapter_last_layers("/nonexistent") is None
    with pytest.raises(ValueError, match="policy.lora_layers must be a positive integer, got 0"):
        RunConfig(policy=PolicyConfig(lora_layers=0)).validate()
    with pytest.raises(ValueError, match="at most the model's 2 layers, got 3"):
        build_tiny_policy(lora_layers=3)


def test_allowed_logprobs_are_a_distribution_that_contains_the_score():
    policy = build_tiny_policy("constrained", seed=5)
    conv = _conv(policy)
    with torch.no_grad():
        rows = policy.allowed_logprobs(conv)
        scored = torch.cat(policy.score([conv])[0])
    assert len(rows) == len(scored)
    for row in rows:
        assert float(row.exp().sum()) == pytest.approx(1.0, abs=1e-5)
    # the target token's entry is score()'s log-prob: its index in the position's allowed list
    from empo2_studio.policy.tokens import ActionTrie

    masks = [m for turn in conv for m in ActionTrie.build(policy.chat_format, turn.valid_actions).masks(turn.action_ids)]
    targets = [t for turn in conv for t in turn.action_ids]
    picked = torch.stack([row[m.index(t)] for row, m, t in zip(rows, masks, targets)])
    torch.testing.assert_close(picked, scored, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="constrained decoding"):
        build_tiny_policy("free", seed=5).allowed_logprobs(conv)


def test_checkpointing_keeps_less_for_the_backward_and_the_same_gradients():
    plain = build_tiny_policy(seed=4, lora_layers=1, gradient_checkpointing=False)
    ckpt = build_tiny_policy(seed=4, lora_layers=1, gradient_checkpointing=True)
    with torch.no_grad():  # the same non-zero adapter in both (B starts at 0)
        for p, q in zip(plain.trainable_parameters(), ckpt.trainable_parameters()):
            p.add_(0.05)
            q.copy_(p)
        # no-grad scoring is untouched
        torch.testing.assert_close(ckpt.score([_conv(ckpt)])[0][1], plain.score([_conv(plain)])[0][1])
    saved, grads = [], []
    for policy in (plain, ckpt):
        sizes: list[int] = []

        def pack(t, sizes=sizes, vocab=policy.model.config.vocab_size):
            if t.dim() == 0 or t.shape[-1] != vocab:  # the logits the loss needs are kept either way
                sizes.append(t.numel() * t.element_size())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logp = torch.cat([lp for per in policy.score([_conv(policy)]) for lp in per])
        (-logp.sum()).backward()
        saved.append(sum(sizes))
        grads.append([p.grad.clone() for p in policy.trainable_parameters()])
    # the adapted layer's activations are recomputed in the backward instead of kept
    assert saved[1] < saved[0] / 4, saved
    for g_plain, g_ckpt in zip(*grads, strict=True):
        torch.testing.assert_close(g_ckpt, g_plain, rtol=1e-5, atol=1e-7)
    assert not any(m.training for m in ckpt.model.modules())  # the model stays in eval mode
