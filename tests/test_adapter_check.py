"""An adapter whose LoRA tensors do not fit the base model (issue 13): refused before anything is built,
in one line naming the file and the mismatch; `load_adapter` refuses it with the weights unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from empo2_studio.cli import main
from empo2_studio.config import PolicyConfig
from empo2_studio.policy.adapter_check import adapter_shape_mismatches, check_adapter, safetensors_shapes
from empo2_studio.policy.lora import LLAMA_STYLE_TARGETS
from empo2_studio.policy.model_files import embedded_tokenizer_dir

torch.set_num_threads(1)

# The tiny test model: hidden 64, intermediate 128, 2 layers, 4 heads of 16, 2 key-value heads.
TINY = dict(hidden=64, inter=128, layers=2, heads=4, kv=2)
# "Another model": same base name in its config, but hidden 32, intermediate 96, 1 key-value head.
OTHER = dict(hidden=32, inter=96, layers=2, heads=4, kv=1)


def lora_shapes(hidden, inter, layers, heads, kv, r=4):
    """PEFT's saved names → shapes of a LoRA adapter on every Llama projection of such a model."""
    head_dim = hidden // heads
    features = {  # module → (in, out)
        "self_attn.q_proj": (hidden, heads * head_dim), "self_attn.k_proj": (hidden, kv * head_dim),
        "self_attn.v_proj": (hidden, kv * head_dim), "self_attn.o_proj": (heads * head_dim, hidden),
        "mlp.gate_proj": (hidden, inter), "mlp.up_proj": (hidden, inter), "mlp.down_proj": (inter, hidden),
    }  # fmt: skip
    out = {}
    for layer in range(layers):
        for module, (n_in, n_out) in features.items():
            key = f"base_model.model.model.layers.{layer}.{module}"
            out[f"{key}.lora_A.weight"] = (r, n_in)
            out[f"{key}.lora_B.weight"] = (n_out, r)
    return out


def write_adapter(folder: Path, base: str, shapes: dict, r: int = 4) -> Path:
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    config = {"base_model_name_or_path": base, "r": r, "lora_alpha": 8, "target_modules": list(LLAMA_STYLE_TARGETS),
              "peft_type": "LORA", "task_type": "CAUSAL_LM"}  # fmt: skip
    (folder / "adapter_config.json").write_text(json.dumps(config))
    save_file({k: torch.zeros(s) for k, s in shapes.items()}, str(folder / "adapter_model.safetensors"))
    return folder


def tiny_base_dir(folder: Path, *, weights: bool) -> Path:
    """A local model directory of the tiny Llama: its config (and weights + tokenizer when asked)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from empo2_studio.policy.model_files import load_tokenizer

    tok = load_tokenizer(embedded_tokenizer_dir())
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)  # fmt: skip
    if weights:
        torch.manual_seed(0)
        LlamaForCausalLM(cfg).save_pretrained(folder)
        tok.save_pretrained(folder)
    else:
        cfg.save_pretrained(folder)
    return folder


def test_shape_check_by_hand():
    modules = {  # module → (in, out) of the tiny model's layer 0 and 1
        f"model.layers.{i}.{m}": f for i in range(2) for m, f in {
            "self_attn.q_proj": (64, 64), "self_attn.k_proj": (64, 32), "self_attn.v_proj": (64, 32),
            "self_attn.o_proj": (64, 64), "mlp.gate_proj": (64, 128), "mlp.up_proj": (64, 128),
            "mlp.down_proj": (128, 64),
        }.items()
    }  # fmt: skip
    assert adapter_shape_mismatches(lora_shapes(**TINY), modules, 4) == []
    assert adapter_shape_mismatches(lora_shapes(**TINY), modules) == []  # rank read from lora_A
    kv1 = lora_shapes(**{**TINY, "kv": 1})  # one key-value head: k/v out 16 instead of 32
    assert adapter_shape_mismatches(kv1, modules, 4) == [
        f"base_model.model.model.layers.{i}.self_attn.{m}.lora_B.weight has shape [16, 4], the base model's "
        f"model.layers.{i}.self_attn.{m} has 64 in / 32 out features, so it must be [32, 4] (r=4, out features)"
        for i in range(2) for m in ("k_proj", "v_proj")
    ]  # fmt: skip
    deeper = lora_shapes(**{**TINY, "layers": 3})  # a 3-layer model's adapter: layer 2 does not exist
    assert adapter_shape_mismatches(deeper, modules, 4) == [
        f"base_model.model.model.layers.2.{m}.lora_{ab}.weight belongs to 'model.layers.2.{m}', which the base model does not have"
        for m in sorted(k.split(".", 3)[3] for k in modules if k.startswith("model.layers.0.")) for ab in "AB"
    ]  # fmt: skip
    assert len(adapter_shape_mismatches(lora_shapes(**TINY, r=8), modules, 4)) == 28  # every A and B


def test_check_adapter_names_the_file_and_the_first_mismatch(tmp_path):
    base = str(tiny_base_dir(tmp_path / "base", weights=False))
    cfg = PolicyConfig(model=base, lora_r=4)
    good = write_adapter(tmp_path / "good", base, lora_shapes(**TINY))
    check_adapter(good, cfg)  # fits: no error
    bad = write_adapter(tmp_path / "bad", base, lora_shapes(**OTHER))
    with pytest.raises(ValueError) as err:
        check_adapter(bad, cfg)
    weights = bad / "adapter_model.safetensors"
    assert str(err.value) == (
        f"adapter {str(weights)!r} does not fit base model {base!r}: "
        "base_model.model.model.layers.0.mlp.down_proj.lora_A.weight has shape [4, 96], the base model's "
        "model.layers.0.mlp.down_proj has 128 in / 64 out features, so it must be [4, 128] (r=4, in features) "
        "(and 27 more mismatched tensors)"
    )  # 2 layers × 7 modules × A/B = 28 tensors, all of the wrong size
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="not a PEFT adapter directory"):
        check_adapter(tmp_path / "nowhere", cfg)
    with pytest.raises(ValueError, match=r"has r=4 .*this policy has r=16"):
        check_adapter(good, PolicyConfig(model=base, lora_r=16))
    (tmp_path / "junk.safetensors").write_bytes(b"\xff" * 20)
    with pytest.raises(ValueError, match="junk.safetensors' is not a readable safetensors file"):
        safetensors_shapes(tmp_path / "junk.safetensors")


def test_load_adapter_refuses_wrong_shapes_and_keeps_the_weights(tiny_policy, tmp_path):
    bad = write_adapter(tmp_path / "bad", tiny_policy.base_model_name, lora_shapes(**OTHER))
    before = {n: p.detach().clone() for n, p in tiny_policy.model.named_parameters()}
    with pytest.raises(ValueError, match=r"does not fit base model 'tiny-random-llama-seed0': .*down_proj\.lora_A"):
        tiny_policy.load_adapter(str(bad))
    assert all(torch.equal(before[n], p) for n, p in tiny_policy.model.named_parameters())
    assert tiny_policy.version == "base"


def train_tiny_with(flag: str, tmp_path, capsys) -> tuple[int, str, Path, Path]:
    """`train` on the tiny model with `flag` (--policy.adapter or --policy.warm-start) naming an adapter
    of another LoRA rank; returns (exit code, stderr, the adapter folder, the sessions folder)."""
    base = str(tiny_base_dir(tmp_path / "base", weights=True))
    bad = write_adapter(tmp_path / "bad", base, lora_shapes(**OTHER))
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (sessions / "keep.txt").write_text("the user's")
    files = {p.name: p.read_bytes() for p in bad.iterdir()}
    capsys.readouterr()  # drop the setup's progress bars
    code = main([
        "train", "--sessions-dir", str(sessions), "--policy.model", base, flag, str(bad),
        "--policy.quantization", "none", "--policy.lora-r", "4", "--memory.embedder", "hash",
        "--rollout.group-size", "2", "--train.iterations", "1", "--env.step-limit", "2",
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert sorted(p.name for p in sessions.iterdir()) == ["keep.txt"], err  # no session folder was created
    assert {p.name: p.read_bytes() for p in bad.iterdir()} == files  # the adapter is untouched
    return code, err, bad, sessions


def test_train_with_an_adapter_of_another_model_exits_2_in_one_line(tmp_path, capsys):
    """Before the fix: exit 1 with a size-mismatch traceback, after the model loaded, and an empty
    session folder left behind."""
    code, err, bad, _ = train_tiny_with("--policy.adapter", tmp_path, capsys)
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"empo2-studio train: adapter {str(bad / 'adapter_model.safetensors')!r} does not fit")
    assert "must be [4, 128]" in lines[0]


def test_train_with_a_warm_start_of_another_shape_exits_2_before_a_session(tmp_path, capsys):
    """A --policy.warm-start DIR is checked like --policy.adapter before any session exists (it was
    checked only after the model loaded, with advice to rebuild the shipped default)."""
    code, err, bad, _ = train_tiny_with("--policy.warm-start", tmp_path, capsys)
    assert code == 2 and "Traceback" not in err, err
    assert f"--policy.warm-start: adapter {str(bad / 'adapter_model.safetensors')!r} does not fit" in err
    assert "make_warmstart" not in err  # the user's folder: rebuilding the shipped default would not fix it
