"""The LoRA adapter around a base model (peft): which linear layers it targets, on which layers, and
activation checkpointing of the adapted layers only.
"""

from __future__ import annotations

from typing import Any

from empo2_studio.config import PolicyConfig

LLAMA_STYLE_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


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
