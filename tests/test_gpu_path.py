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
    # Found on the first H200 run: transformers ≥5.25 otherwise fetches Hub kernels on CUDA, which fails offline.
    assert kw["use_kernels"] is False and kw["local_files_only"] is True


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


# ---- item 2: a checkpoint written on a GPU resumes on a CPU -----------------------------------------


def _as_if_saved_on_cuda(monkeypatch):
    """torch.save records each storage's device as a location tag; tag every one "cuda:0", as a
    GPU-trained run writes them. Loading such a file without map_location fails on a CPU machine."""
    import torch.serialization as ser

    monkeypatch.setattr(ser, "location_tag", lambda storage: "cuda:0")


def test_a_checkpoint_saved_on_cuda_resumes_on_cpu(tmp_path, tiny_policy, monkeypatch):
    from test_trainer import make_trainer

    from empo2_studio.memory import make_embedder
    from empo2_studio.policy import build_tiny_policy
    from empo2_studio.sessions import Session
    from empo2_studio.trainer import STATE_FILE, Trainer

    trainer = make_trainer(tmp_path, tiny_policy)
    trainer.step()
    with monkeypatch.context() as m:
        _as_if_saved_on_cuda(m)
        path = trainer.save_checkpoint()
    if not torch.cuda.is_available():  # the file really names a CUDA device (loadable only where one is)
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(path / STATE_FILE, weights_only=False)
    saved = {k: v["exp_avg"].clone() for k, v in trainer.optimizer.state_dict()["state"].items()}
    resumed = Trainer.resume(Session.open(tmp_path / "sessions", "t"), policy=build_tiny_policy(seed=0),
                             embedder=make_embedder("hash"))  # fmt: skip
    state = resumed.optimizer.state_dict()["state"]
    assert resumed.iteration == 1 and state.keys() == saved.keys()
    assert all(state[k]["exp_avg"].device.type == "cpu" and torch.equal(state[k]["exp_avg"], saved[k]) for k in saved)


def test_a_distributed_checkpoint_saved_on_cuda_resumes_on_cpu(tmp_path, tiny_policy, monkeypatch):
    from test_trainer import small_cfg

    from empo2_studio.memory import make_embedder
    from empo2_studio.policy import build_tiny_policy
    from empo2_studio.scale.dist import DistContext
    from empo2_studio.scale.trainer import DistributedTrainer
    from empo2_studio.sessions import Session

    ctx = DistContext(rank=0, world_size=1, device=torch.device("cpu"), backend="none")
    session = Session.create(tmp_path / "sessions", small_cfg())
    trainer = DistributedTrainer(session.config, session, ctx=ctx, policy=tiny_policy, embedder=make_embedder("hash"))
    trainer.step()
    with monkeypatch.context() as m:
        _as_if_saved_on_cuda(m)
        trainer.save_checkpoint()
    resumed = DistributedTrainer.resume(Session.open(tmp_path / "sessions", "t"), ctx=ctx,
                                        policy=build_tiny_policy(seed=0), embedder=make_embedder("hash"))  # fmt: skip
    assert resumed.iteration == 1 and len(resumed.optimizer.state) > 0


def test_the_distributed_trainer_runs_the_one_process_loop_and_checkpoints_like_it(tmp_path, tiny_policy, monkeypatch):
    """`DistributedTrainer.train` runs `Trainer.train`'s loop (checkpoint every iteration here) with a
    stop the ranks agree on: a set stop event runs no step; two iterations leave checkpoints 1 and 2."""
    import threading

    from test_trainer import small_cfg

    from empo2_studio.memory import make_embedder
    from empo2_studio.scale.dist import DistContext
    from empo2_studio.scale.trainer import DistributedTrainer
    from empo2_studio.sessions import Session
    from empo2_studio.trainer import Trainer

    loops = []
    real_train = Trainer.train

    def spy(self, iterations, **kw):
        loops.append(iterations)
        return real_train(self, iterations, **kw)

    monkeypatch.setattr(Trainer, "train", spy)
    ctx = DistContext(rank=0, world_size=1, device=torch.device("cpu"), backend="none")
    session = Session.create(tmp_path / "sessions", small_cfg())
    trainer = DistributedTrainer(session.config, session, ctx=ctx, policy=tiny_policy, embedder=make_embedder("hash"))
    stop = threading.Event()
    stop.set()
    assert trainer.train(2, stop=stop) == [] and session.checkpoints() == []
    assert [r.iteration for r in trainer.train(2)] == [1, 2]
    assert [i for i, _ in session.checkpoints()] == [1, 2] and loops == [2, 2]


# ---- item 10: accelerate launch keeps the model's own precision -------------------------------------


def test_the_ddp_accelerator_ignores_a_mixed_precision_config(monkeypatch):
    from accelerate.state import AcceleratorState

    from empo2_studio.scale.sync import make_accelerator

    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")  # what `accelerate config` may export
    try:
        acc = make_accelerator(cpu=True, kwargs_handlers=[])
        assert acc.mixed_precision == "no" and acc.native_amp is False
    finally:
        AcceleratorState._reset_state(True)


# ---- item 4: host <-> device transfers of the decoding loop --------------------------------------------


class TransferCounter:
    """Counts, in the sampling code only, what would move data between the host and a GPU: reads of
    tensor values into Python (`item`, `tolist`, `int(t)`, …: each a device sync on CUDA) and uploads
    (`batch_cache.upload`, `Tensor.to`, `torch.tensor(..., device=...)`). On a CPU they cost nothing,
    which is how a per-token sync crept in unnoticed."""

    FILES = ("policy/sampling.py", "policy/batch_cache.py")
    READS = ("item", "tolist", "cpu", "numpy", "__int__", "__float__", "__bool__", "__index__", "nonzero")

    def __init__(self, monkeypatch):
        import empo2_studio.policy.batch_cache as batch_cache
        import empo2_studio.policy.sampling as sampling

        self.reads = self.uploads = 0
        for name in self.READS:
            monkeypatch.setattr(torch.Tensor, name, self._counted(getattr(torch.Tensor, name), "reads"))
        monkeypatch.setattr(torch.Tensor, "to", self._counted(torch.Tensor.to, "uploads"))
        real_tensor = torch.tensor

        def tensor(*a, **kw):
            if kw.get("device") is not None and self._ours():
                self.uploads += 1
            return real_tensor(*a, **kw)

        monkeypatch.setattr(torch, "tensor", tensor)
        counted_upload = self._counted(batch_cache.upload, "uploads", depth=2)
        monkeypatch.setattr(batch_cache, "upload", counted_upload)
        monkeypatch.setattr(sampling, "upload", counted_upload)

    def _ours(self, depth: int = 2) -> bool:
        return sys._getframe(depth).f_code.co_filename.replace(os.sep, "/").endswith(self.FILES)

    def _counted(self, fn, counter: str, depth: int = 2):
        def wrapper(*a, **kw):
            if self._ours(depth):
                setattr(self, counter, getattr(self, counter) + 1)
            return fn(*a, **kw)

        return wrapper


def _requests(n: int):
    from empo2_studio.policy import ActionRequest, Turn

    valid = ("go to kitchen", "go to hallway", "look around", "open door", "pick up red bulb")
    return [ActionRequest(f"ep{i}", (Turn(f"Task: turn on the bulb. You are in room {i}.", None, valid),)) for i in range(n)]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_decoding_reads_the_device_once_per_position_whatever_the_batch(monkeypatch, temperature):
    """Free decoding with no stop token: every one of B = 5 episodes decodes all M = 7 positions. One
    read per position (the drawn tokens and log-probs together), uploads bounded by two per position
    plus one per episode for the batch set-up and finish — not per episode and token."""
    from empo2_studio.policy import build_tiny_policy

    policy = build_tiny_policy("free", seed=2, max_action_tokens=7)
    reqs = _requests(5)
    prompts = [policy.prompt_ids(r.turns) for r in reqs]
    counter = TransferCounter(monkeypatch)
    out = policy.sampler.sample_batch(
        [r.key for r in reqs], prompts, [None] * 5, temperature=temperature, max_tokens=7,
        stop_ids=frozenset(), newline_ids=frozenset(), blank_ids=frozenset(), generator=policy.generator,
    )  # fmt: skip
    assert [len(toks) for toks, _ in out] == [7] * 5
    assert counter.reads == 7
    assert counter.uploads <= 2 * 7 + 5 + 2


def test_constrained_decoding_reads_at_most_once_per_position(monkeypatch):
    from empo2_studio.policy import build_tiny_policy

    policy = build_tiny_policy("constrained", seed=3, max_action_tokens=32)
    counter = TransferCounter(monkeypatch)
    samples = policy.sample(_requests(6), temperature=1.0)
    longest = max(len(s.token_ids) for s in samples)
    assert 0 < counter.reads <= longest  # forced positions (one allowed token) read nothing
    assert counter.uploads <= 2 * longest + 6 + 2


# ---- item 13: the model call matches the transformers the project requires ------------------------------


def test_the_installed_transformers_takes_the_cache_keyword_and_meets_the_pin():
    import inspect
    import re

    import transformers
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM

    for cls in (LlamaForCausalLM, Qwen2ForCausalLM):
        assert "cache" in inspect.signature(cls.forward).parameters, cls.__name__
    pin = re.search(r'"transformers>=([\d.]+),', (ROOT / "pyproject.toml").read_text()).group(1)
    have = tuple(int(x) for x in re.findall(r"\d+", transformers.__version__)[:2])
    assert have >= tuple(int(x) for x in pin.split(".")[:2])


# ---- the prepared one-GPU check ----------------------------------------------------------------------


def test_the_gpu_check_skips_cleanly_without_a_gpu(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "no CUDA device: skipped (scripts/gpu_check.sh needs one GPU; see docs/gpu.md)"


# ---- on a GPU (scripts/gpu_check.sh runs these) ------------------------------------------------------

cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _tiny_on_cuda(decoding: str, seed: int, **kw):
    from empo2_studio.policy import build_tiny_policy

    policy = build_tiny_policy(decoding, seed=seed, **kw)
    policy.model.to("cuda")
    return policy


@pytest.mark.gpu
@cuda_only
@pytest.mark.parametrize("decoding", ["constrained", "free"])
def test_cuda_behaviour_logprobs_equal_the_rescore(decoding):
    from empo2_studio.policy import Turn

    policy = _tiny_on_cuda(decoding, seed=4, max_action_tokens=6)
    reqs = _requests(4)
    samples = policy.sample(reqs, temperature=1.0)
    convs = [[Turn(r.turns[-1].user_text, s.token_ids, r.turns[-1].valid_actions)] for r, s in zip(reqs, samples)]
    with torch.no_grad():
        scored = policy.score(convs)
    for s, per_turn in zip(samples, scored):
        assert per_turn[0].device.type == "cuda"
        torch.testing.assert_close(per_turn[0].cpu().double(), torch.tensor(s.logprobs, dtype=torch.float64), atol=1e-4, rtol=0)


@pytest.mark.gpu
@cuda_only
def test_cuda_sampling_is_reproducible_and_batched_equals_single():
    a, b = _tiny_on_cuda("constrained", seed=9), _tiny_on_cuda("constrained", seed=9)
    b.sampler.batched = False
    greedy_a, greedy_b = a.sample(_requests(5), temperature=0), b.sample(_requests(5), temperature=0)
    assert [s.token_ids for s in greedy_a] == [s.token_ids for s in greedy_b]
    first, second = _tiny_on_cuda("free", seed=1), _tiny_on_cuda("free", seed=1)
    first.generator.manual_seed(5)
    second.generator.manual_seed(5)
    assert [s.token_ids for s in first.sample(_requests(4), temperature=1.0)] == [
        s.token_ids for s in second.sample(_requests(4), temperature=1.0)]


@pytest.mark.gpu
@cuda_only
def test_cuda_decoding_syncs_once_per_position():
    """torch's sync debug mode warns at every host-device synchronisation: one per position at most
    (plus a few for setting up the batch and cutting finished episodes out)."""
    import warnings

    policy = _tiny_on_cuda("free", seed=2, max_action_tokens=8)
    reqs = _requests(6)
    prompts = [policy.prompt_ids(r.turns) for r in reqs]
    policy.sample(reqs, temperature=1.0)  # warm-up (kernels, allocator)
    policy.clear_cache()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            policy.sampler.sample_batch([r.key for r in reqs], prompts, [None] * 6, temperature=1.0, max_tokens=8,
                                        stop_ids=frozenset(), newline_ids=frozenset(), blank_ids=frozenset(),
                                        generator=policy.generator)  # fmt: skip
        finally:
            torch.cuda.set_sync_debug_mode(0)
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    assert len(syncs) <= 8 + 6 + 4, [str(w.message)[:120] for w in syncs[:20]]


@pytest.mark.gpu
@cuda_only
def test_cuda_load_puts_bf16_weights_on_the_current_device(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1)  # fmt: skip
    LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    model = loading.load_base_model(tmp_path, "none", "cuda", loading.compute_dtype("cuda", str(tmp_path)))
    devices = {p.device for p in model.parameters()}
    assert devices == {torch.device("cuda", torch.cuda.current_device())}
    if torch.cuda.is_bf16_supported():
        assert {p.dtype for p in model.parameters()} == {torch.bfloat16}

