"""Shared fixtures. Tests never reach a model hub."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


import pytest  # noqa: E402


@pytest.fixture
def tiny_policy():
    """A fresh tiny random-initialised Llama policy (real SmolLM2 tokenizer, LoRA, constrained
    decoding, seed 0); ~1 s once the tokenizer is cached. Fresh per test so training can mutate it."""
    import torch

    from empo2_studio.policy import build_tiny_policy

    torch.set_num_threads(1)
    return build_tiny_policy(decoding="constrained", seed=0)
