"""Shared fixtures. Tests never reach a model hub."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


import pytest  # noqa: E402

from empo2_studio.config import EnvConfig, MemoryConfig, RolloutConfig, RunConfig, TrainConfig  # noqa: E402


@pytest.fixture
def tiny_policy():
    """A fresh tiny random-initialised Llama policy (real SmolLM2 tokenizer, LoRA, constrained
    decoding, seed 0); ~1 s once the tokenizer is cached. Fresh per test so training can mutate it."""
    import torch

    from empo2_studio.policy import build_tiny_policy

    torch.set_num_threads(1)
    return build_tiny_policy(decoding="constrained", seed=0)


@pytest.fixture(scope="session")
def studio_cfg() -> RunConfig:
    """Config of the app tests' sessions: trap light-bulb, variations 0 and 1, 3 steps, groups of 2,
    hash embedder with every tip retrieved (threshold −1), one iteration per run, a checkpoint each."""
    return RunConfig(
        env=EnvConfig(name="trap", task="trap-light-bulb", variations=(0, 1), step_limit=3),
        memory=MemoryConfig(embedder="hash", similarity_threshold=-1.0),
        rollout=RolloutConfig(group_size=2),
        train=TrainConfig(iterations=1, learning_rate=1e-2, checkpoint_every=1),
    )


@pytest.fixture(scope="module")
def studio(tmp_path_factory, studio_cfg):
    """One `Studio` per test module on tmp sessions: trap env, tiny random policy, hash embedder,
    `studio_cfg` (its default session is "studio")."""
    import torch

    from empo2_studio.app.studio import Studio

    torch.set_num_threads(1)
    s = Studio(tmp_path_factory.mktemp("sessions"), env="trap", policy="tiny", embedder="hash", config=studio_cfg)
    yield s
    s.close()
