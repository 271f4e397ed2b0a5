"""The CUDA path checked on a CPU machine (docs/gpu.md): device placement and dtype of the loaded model,
checkpoints written on a GPU resumed on a CPU, the launcher's backend choice, the vLLM request body,
accelerate's mixed precision, and the prepared one-GPU check's skip. What needs a real GPU is marked `gpu`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from empo2_studio.config import EMBEDDED_MODEL
from empo2_studio.policy import loading

ROOT = Path(__file__).resolve().parents[1]


class _FakeModel:
    """What `from_pretrained` returns here: records `.to` calls."""

    def __init__(self) -> None:
        self.moved_to: list = []

    def to(self, *a, **kw):
        self.moved_to.append(a or kw)
        return self

    def eval(self):
        return self


@pytest.fixture
def from_pretrained_kwargs(monkeypatch):
    """Capture the kwargs `load_base_model` passes to `AutoModelForCausalLM.from_pretrained` on a
    machine that claims one CUDA device (index 3: the rank's device under torchrun)."""
    import transformers

    seen: dict = {}

    def fake(location, **kwargs):
        seen.update(kwargs, location=location, model=_FakeModel())
        return seen["model"]

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    return seen


def test_unquantized_cuda_model_loads_in_bf16_straight_onto_the_rank_device(from_pretrained_kwargs):
    model = loading.load_base_model("/models/qwen", "none", "cuda", loading.compute_dtype("cuda", "/models/qwen"))
    kw = from_pretrained_kwargs
    assert kw["device_map"] == {"": 3} and kw["dtype"] is torch.bfloat16
    assert "quantization_config" not in kw
    assert model.moved_to == []  # no CPU build then move


def test_4bit_cuda_model_computes_in_bf16_on_the_rank_device(from_pretrained_kwargs):
    loading.load_base_model("/models/qwen", "4bit", "cuda", torch.bfloat16)
    kw = from_pretrained_kwargs
    assert kw["device_map"] == {"": 3}
    assert kw["quantization_config"].bnb_4bit_compute_dtype is torch.bfloat16


def test_cpu_model_loads_in_float32_in_place(from_pretrained_kwargs):
    model = loading.load_base_model("/models/qwen", "none", "cpu", loading.compute_dtype("cpu", "/models/qwen"))
    kw = from_pretrained_kwargs
    assert kw["dtype"] is torch.float32 and "device_map" not in kw
    assert model.moved_to == [("cpu",)]  # a no-op move: the weights were built on the CPU


def test_dtype_and_quantization_follow_the_device_and_the_model(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert loading.compute_dtype("cuda", "Qwen/Qwen2.5-7B-Instruct") is torch.bfloat16
    assert loading.compute_dtype("cpu", "Qwen/Qwen2.5-7B-Instruct") is torch.float32
    # The embedded 135M model: float32 and unquantized everywhere (its warm start fits the float base).
    assert loading.compute_dtype("cuda", EMBEDDED_MODEL) is torch.float32
    assert loading.resolve_quantization("auto", "cuda", EMBEDDED_MODEL) == "none"
    assert loading.resolve_quantization("auto", "cuda", "Qwen/Qwen2.5-7B-Instruct") == "4bit"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)  # e.g. a V100
    assert loading.compute_dtype("cuda", "Qwen/Qwen2.5-7B-Instruct") is torch.float32


def test_the_kv_cache_and_logits_dtypes_follow_the_model():
    """A bf16 model keeps a bf16 KV cache (half the fp32 bytes per token) and hands float32 logits
    to sampling, so the behaviour log-probs are computed in float32."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from empo2_studio.policy.sampling import CachedSampler

    cfg = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1)  # fmt: skip
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    sampler = CachedSampler(model, fmt=None)  # type: ignore[arg-type]
    state = sampler._fresh()
    sampler.feed(state, [1, 2, 3])
    assert state.cache.layers[0].keys.dtype is torch.bfloat16 and state.cache.layers[0].keys.shape[2] == 3
    assert state.logits.dtype is torch.float32 and state.logits.shape == (32,)


# ---- item 3: a CPU policy under torchrun on a GPU machine -------------------------------------------


def test_the_policy_device_decides_cpu_or_gpu_collectives(monkeypatch):
    from empo2_studio.scale.dist import wants_cpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert (wants_cpu("cpu"), wants_cpu("auto"), wants_cpu("cuda")) == (True, False, False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert wants_cpu("auto") is True


def test_torchrun_with_a_cpu_policy_on_a_cuda_machine_joins_with_gloo_on_cpu(tmp_path):
    from test_scale_grad import torchrun

    worker = ROOT / "tests" / "scale_workers" / "device_worker.py"
    proc = torchrun(2, str(worker), str(tmp_path), "cpu", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks == [{"rank": r, "world": 2, "device": "cpu", "backend": "gloo"} for r in (0, 1)]
