"""Build the policy: resolve device, dtype and quantization, load the base model (optionally
bitsandbytes-quantized) straight onto its device, wrap it in LoRA, start from the warm start or an
adapter; and the tiny random-initialised Llama for fast tests.

Model files: `model_files`; the LoRA wrapper: `lora`; adapter compatibility checks: `adapter_check`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from empo2_studio.config import DEFAULT_WARM_START, DEVICES, EMBEDDED_MODEL, QUANTIZATIONS, WARM_START_DIR, PolicyConfig
from empo2_studio.policy.adapter_check import adapter_last_layers, check_adapter  # noqa: F401  (check_adapter: the CLI's entry)
from empo2_studio.policy.lora import add_lora
from empo2_studio.policy.model_files import embedded_tokenizer_dir, load_tokenizer, resolve_model

# DEFAULT_WARM_START (config), the folder under WARM_START_DIR that "auto" loads, is the route adapter: the
# walk-back adapter fine-tuned with the walk from the can to the flower weighted like the focus, the default
# since 2026-12-05, night (docs/notebook/2026-12-05-route-adapter.md). The adapters before it are not shipped:
# `…-walk-back` (its --init below) and `…-plain-words` (the walk-back's), and the template adapter, are rebuilt by
# the commands in docs/notebook/2026-12-06-only-what-runs-ships.md.
WARM_START_COMMAND = (
    ".venv/bin/python scripts/make_warmstart.py --recipe wordings --per-layout 4 --epochs 1 --focus-weight 3 "
    f"--plan-share 0.2 --init assets/warmstart/{EMBEDDED_MODEL}-walk-back --return-trips --return-weight "
    f"--negation 0.15 --lr 3e-4 --out assets/warmstart/{DEFAULT_WARM_START}"
)
TINY_MODEL_NAME = "tiny-random-llama"


def resolve_device(device: str) -> str:
    import torch

    if device not in DEVICES:
        raise ValueError(f"policy.device must be one of {list(DEVICES)}, got {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("policy.device is 'cuda' but CUDA is not available; use 'cpu' or 'auto'")
    return device


def resolve_quantization(quantization: str, device: str, model: str | None = None) -> str:
    """"auto" → "4bit" on CUDA, "none" on CPU (float32 is 2.1× faster there: bench_policy.py) and for
    the embedded `model` on any device (135M parameters fit anywhere, and its warm start was fitted on
    the float base). ValueError names a bad value."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"policy.quantization must be one of {list(QUANTIZATIONS)}, got {quantization!r}")
    if quantization == "auto":
        return "4bit" if device == "cuda" and model != EMBEDDED_MODEL else "none"
    return quantization


def compute_dtype(device: str, model: str | None = None) -> Any:
    """The torch dtype the base model computes in, which its KV cache and activations inherit:
    bfloat16 on CUDA (tensor cores, half the memory traffic and cache of float32) when the GPU
    supports it, else float32; float32 on CPU and for the embedded `model` everywhere (its warm start
    was fitted on the float32 base, and 135M parameters gain nothing from bf16). LoRA weights stay
    float32 (peft upcasts adapters), and logits are scored in float32 either way."""
    import torch

    if device == "cuda" and model != EMBEDDED_MODEL and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def warm_start_dir(cfg: PolicyConfig) -> Path | None:
    """The adapter directory a run starts from when `cfg.adapter` is None (see PolicyConfig.warm_start).

    Raises FileNotFoundError naming the missing file and the command that builds it; never falls back
    silently to untrained weights.
    """
    if cfg.adapter or cfg.warm_start == "none":
        return None
    if cfg.warm_start == "auto":
        if cfg.model != EMBEDDED_MODEL:
            return None
        folder = WARM_START_DIR / DEFAULT_WARM_START
        hint = (f"build it with `{WARM_START_COMMAND}` (its --init first: docs/notebook/2026-12-06-only-what-runs-"
                "ships.md), or start without it: --policy.warm-start none")
    else:
        hint = "give a PEFT adapter directory, \"auto\" or \"none\""
        if not cfg.warm_start.strip():
            raise FileNotFoundError(f"policy.warm_start is empty ({cfg.warm_start!r}); {hint}")
        folder = Path(cfg.warm_start).expanduser()
        if folder.exists() and not folder.is_dir():
            raise FileNotFoundError(f"policy.warm_start: {folder} is a file, not an adapter directory; {hint}")
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"policy.warm_start: {folder / name} is missing; {hint}")
    return folder


def quantization_config(quantization: str, dtype: Any = None) -> Any:
    """BitsAndBytesConfig for "4bit" (nf4, double quant, computing in `dtype`, default float32) /
    "8bit" (LLM.int8), None for "none" (resolve "auto" with `resolve_quantization` first)."""
    import torch
    from transformers import BitsAndBytesConfig

    if quantization not in QUANTIZATIONS or quantization == "auto":
        raise ValueError(f"policy.quantization must be one of {list(QUANTIZATIONS[1:])}, got {quantization!r}")
    if quantization == "4bit":
        return BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=dtype or torch.float32,
        )
    if quantization == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return None


def load_base_model(location: Path | str, quantization: str, device: str, dtype: Any = None) -> Any:
    """The causal LM at `location` in `dtype` (default float32; see `compute_dtype`), optionally
    bitsandbytes-quantized, in eval mode.

    On CUDA the weights load straight onto this process's current device (`device_map={"": index}`:
    under torchrun / accelerate each rank's own GPU, set by `scale.dist.DistContext`), never built on
    the host first; on CPU they load in place."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = dtype or torch.float32
    qconfig = quantization_config(quantization, dtype)
    # use_kernels=False: transformers>=5.25 with `kernels` installed (a requirement of it) otherwise
    # kernelizes CUDA models from the Hub (kernels-community/rotary, ...), which fails offline.
    kwargs: dict[str, Any] = {"dtype": dtype, "local_files_only": True, "use_kernels": False}
    if qconfig is not None:
        kwargs["quantization_config"] = qconfig
    if device == "cuda":
        kwargs["device_map"] = {"": torch.cuda.current_device()}
    elif qconfig is not None:
        kwargs["device_map"] = device
    model = AutoModelForCausalLM.from_pretrained(str(location), **kwargs)
    if "device_map" not in kwargs:
        model.to(device)
    return model.eval()


EMBEDDED_TIP_TOKENS = 24
"""`PolicyConfig.max_tip_tokens` = None for the embedded model (bench_lesson part speed: the tip-writing
phase of an iteration is a batched greedy decode that runs until every tip ends or hits this cap)."""
OTHER_TIP_TOKENS = 96


def tip_token_limit(cfg: PolicyConfig) -> int:
    """The tip-writing cap: `cfg.max_tip_tokens`, or when it is None the model's default (above)."""
    if cfg.max_tip_tokens is not None:
        return cfg.max_tip_tokens
    return EMBEDDED_TIP_TOKENS if cfg.model == EMBEDDED_MODEL else OTHER_TIP_TOKENS


def load_policy(cfg: PolicyConfig) -> Any:
    """Build the `HFPolicy` described by `cfg` (paper §1: the LLM agent, here with LoRA).

    Raises ValueError (bad quantization / device / LoRA target / an adapter for another base or whose
    tensor shapes do not fit it — `check_adapter` says the same before any weights load),
    FileNotFoundError (model not found offline), ModuleNotFoundError (embedded package missing).
    Nothing is cached on failure except a finished conversion of the embedded model.
    """
    from empo2_studio.policy.choice import ChoiceSettings
    from empo2_studio.policy.hf_policy import HFPolicy

    device = resolve_device(cfg.device)
    quantization = resolve_quantization(cfg.quantization, device, cfg.model)  # validate before any slow work
    warm = warm_start_dir(cfg)
    model_loc, tok_loc = resolve_model(cfg.model)
    tokenizer = load_tokenizer(tok_loc)
    start = cfg.adapter or (str(warm) if warm is not None else None)
    # A run that starts from an adapter takes its layer layout unless the config names one.
    last = cfg.lora_layers if cfg.lora_layers is not None else (adapter_last_layers(start) if start else None)
    model = add_lora(load_base_model(model_loc, quantization, device, compute_dtype(device, cfg.model)), cfg, last)
    policy = HFPolicy(
        model,
        tokenizer,
        decoding=cfg.decoding,
        choice=ChoiceSettings(cfg.choice_norm, cfg.choice_pmi),
        base_model_name=cfg.model,
        max_action_tokens=cfg.max_action_tokens,
        max_tip_tokens=tip_token_limit(cfg),
    )
    if cfg.adapter:
        policy.load_adapter(cfg.adapter)
    elif warm is not None:
        try:
            policy.load_adapter(str(warm))
        except ValueError as exc:
            fix = f"rebuild it with `{WARM_START_COMMAND}`" if warm == WARM_START_DIR / DEFAULT_WARM_START else (
                f"give an adapter built for {cfg.model} with this LoRA layout")
            raise ValueError(
                f"policy.warm_start {str(warm)!r} does not fit this policy ({exc}); {fix}, or start without it: "
                "--policy.warm-start none"
            ) from exc
        policy.version = "warm-start"
    return policy


def build_tiny_policy(
    decoding: str = "constrained",
    seed: int = 0,
    *,
    quantization: str = "none",
    lora_r: int = 4,
    max_action_tokens: int = 32,
    max_tip_tokens: int = 16,
    lora_layers: int | None = None,
    gradient_checkpointing: bool = True,
) -> Any:
    """A small random-initialised Llama (2 layers, hidden 64) with the real SmolLM2 tokenizer and a
    LoRA adapter (on the last `lora_layers` layers; None = both): the same `HFPolicy` as the real
    model, for fast tests (~1 s once the tokenizer is cached). With quantization "4bit"/"8bit" the
    random weights go through a temporary checkpoint so they are quantized by exactly the code path of
    `load_policy`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from empo2_studio.policy.hf_policy import HFPolicy

    tokenizer = load_tokenizer(embedded_tokenizer_dir())
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        initializer_range=0.2,  # sharper random distributions make log-prob tests meaningful
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    if quantization != "none":
        quantization_config(quantization)
        with tempfile.TemporaryDirectory(prefix="empo2-tiny-") as tmp:
            model.save_pretrained(tmp)
            model = load_base_model(tmp, quantization, "cpu")
    cfg = PolicyConfig(model=TINY_MODEL_NAME, quantization=quantization, decoding=decoding, lora_r=lora_r, gradient_checkpointing=gradient_checkpointing)  # type: ignore[arg-type]
    torch.manual_seed(seed)
    model = add_lora(model, cfg, lora_layers)
    return HFPolicy(
        model,
        tokenizer,
        decoding=decoding,
        base_model_name=f"{TINY_MODEL_NAME}-seed{seed}",
        max_action_tokens=max_action_tokens,
        max_tip_tokens=max_tip_tokens,
        seed=seed,
    )
