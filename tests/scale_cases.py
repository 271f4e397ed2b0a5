"""Shared by the scale tests and their torchrun workers: a fixed batch with off-policy turns."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch

from empo2_studio.config import AlgoConfig, EnvConfig
from empo2_studio.envs import make_env
from empo2_studio.rollout import play_group, seed_policy
from empo2_studio.types import Episode, RetrievedTip
from empo2_studio.update import UpdateSettings, conversation, policy_update

ADVANTAGES = (1.0, -0.5, 0.8, -1.3)
SHARDS = ((0,), (1, 2, 3))
"""Rank 0 trains episode 0, rank 1 episodes 1–3: unequal token counts, so the normaliser matters."""
TIP = RetrievedTip(tip_id="tip-1", text="The green bulb is in the workshop.", score=50.0, similarity=0.9)


def perturb_lora(policy, seed: int = 7) -> None:
    """Move the LoRA weights off their zero-B start (same values in every process)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.trainable_parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))


def make_batch(policy) -> list[Episode]:
    """4 trap episodes (≤ 3 steps) whose every step shows a tip; the behaviour log-probs are the
    policy's own on the with-tips conversation, so off-policy (tip-free) ratios are ≠ 1."""
    envs = [make_env(EnvConfig(name="trap", step_limit=3)) for _ in range(4)]
    seed_policy(policy, 0)
    played = play_group(envs, policy, None, task="trap-light-bulb", variation=0, split="train",
                        rollout_mode="naive", update_mode="off-policy", temperature=1.0, seed=0)  # fmt: skip
    out = []
    for ep in played:
        tipped = replace(ep, rollout_mode="memory", steps=tuple(replace(s, tips=(TIP,)) for s in ep.steps))
        with torch.no_grad():
            per_turn = policy.score([conversation(tipped, "on-policy-with-tips")], temperature=1.0)[0]
        steps = tuple(
            replace(s, sample=replace(s.sample, logprobs=tuple(float(x) for x in lp)))
            for s, lp in zip(tipped.steps, per_turn, strict=True)
        )
        out.append(replace(tipped, steps=steps))
    return out


def save_batch(episodes: list[Episode], path: Path) -> None:
    path.write_text("\n".join(json.dumps(ep.to_dict()) for ep in episodes))


def load_batch(path: Path) -> list[Episode]:
    return [Episode.from_dict(json.loads(line)) for line in path.read_text().splitlines()]


class RecordingOptimizer:
    """Stands in for AdamW: `step()` records each parameter's final gradient and changes nothing."""

    def __init__(self, params):
        self.params = list(params)
        self.grads: list[torch.Tensor] = []

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        self.grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in self.params]


def update_gradient(policy, episodes, advantages, sync=None, *, micro_batch_episodes: int = 2) -> tuple[list[torch.Tensor], dict]:
    """The gradient one off-policy `policy_update` applies (no clipping, no step)."""
    opt = RecordingOptimizer(policy.trainable_parameters())
    settings = UpdateSettings(algo=AlgoConfig(), grad_clip=1e9, sync=sync, micro_batch_episodes=micro_batch_episodes)
    metrics = policy_update(policy, opt, episodes, list(advantages), "off-policy", settings)
    return opt.grads, metrics
