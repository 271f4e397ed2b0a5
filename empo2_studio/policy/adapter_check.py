"""Adapter compatibility, checked before any weights load: an adapter directory's config and its
safetensors header (tensor shapes) against a policy config and the base model's module shapes.
`check_adapter` refuses an adapter `load_policy` could not load; `HFPolicy.load_adapter` reuses the
config and shape checks on a built model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from empo2_studio.config import PolicyConfig
from empo2_studio.policy.lora import default_lora_targets, lora_layer_indices
from empo2_studio.policy.model_files import base_model_config

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_PEFT_PREFIX = "base_model.model."
_LORA_PARTS = {"lora_A": "A", "lora_B": "B", "lora_embedding_A": "A", "lora_embedding_B": "B"}


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
