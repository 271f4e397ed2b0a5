"""Evaluation and out-of-distribution adaptation (paper §5 protocol and §6.1; method.md §1.4, §4).

- `evaluate`: the test split (up to `eval_variations` variations, each played `eval_repeats` times in
  one lock-step group), NO memory — tips are never retrieved nor written — at the eval temperature
  (paper 0.4). Returns the mean score (−100 … 100) and success rate per task.
- `adapt`: weights frozen; trial 0 plays without memory, then `trials` trials play with memory on a task
  the policy was not trained on, each trial's episodes writing their tips into that task's partition
  before the next. Returns one row per trial. The paper does not say how many episodes a "step" has,
  nor the temperature; here a trial is one group (`rollout.group_size` episodes) of the task's first
  training variation at the training temperature (exploration, "exactly as in EMPO² training").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from empo2_studio.rollout import play_group, seed_policy, write_group_tips
from empo2_studio.types import Episode, RolloutMode

if TYPE_CHECKING:
    from empo2_studio.trainer import Trainer


def evaluate(trainer: Trainer, *, variations: int | None = None, repeats: int | None = None) -> dict[str, float]:
    """Play the test split without memory and record the result in the session.

    Args:
        trainer: supplies the policy, env pool, config and session (the tip store is never touched).
        variations: test variations to use (default `train.eval_variations`, capped by the split size).
        repeats: episodes per variation (default `train.eval_repeats`).

    Returns:
        {"eval/score_mean", "eval/success_rate", "eval/episodes",
         "eval/<task>/score_mean", "eval/<task>/success_rate"}; scores −100 … 100, rates 0 … 1.

    Raises:
        ValueError: variations or repeats < 1.
    """
    cfg = trainer.cfg
    n_var = cfg.train.eval_variations if variations is None else variations
    n_rep = cfg.train.eval_repeats if repeats is None else repeats
    if n_var < 1 or n_rep < 1:
        raise ValueError(f"evaluate needs variations ≥ 1 and repeats ≥ 1, got {n_var!r} and {n_rep!r}")
    task = cfg.env.task
    envs = trainer.envs(n_rep)
    test_variations = envs[0].variations(task, "test")[:n_var]
    seed_policy(trainer.policy, cfg.seed)  # the same sampling noise at every evaluation of a run
    episodes: list[Episode] = []
    for variation in test_variations:
        episodes += play_group(
            envs, trainer.policy, None, task=task, variation=variation, split="test", rollout_mode="naive",
            update_mode=None, temperature=cfg.rollout.eval_temperature, seed=cfg.seed, group_id="",
        )  # fmt: skip
    score = sum(ep.score for ep in episodes) / len(episodes)
    success = sum(ep.won for ep in episodes) / len(episodes)
    result = {
        "eval/score_mean": score,
        "eval/success_rate": success,
        "eval/episodes": float(len(episodes)),
        f"eval/{task}/score_mean": score,
        f"eval/{task}/success_rate": success,
    }
    trainer.session.append_episodes(episodes)
    trainer.session.append_metrics({"iteration": trainer.iteration, "kind": "eval", **result})
    return result


def adapt(
    trainer: Trainer,
    task: str,
    *,
    trials: int = 10,
    on_trial: Callable[[dict[str, float]], None] | None = None,
) -> list[dict[str, float]]:
    """OOD adaptation: frozen weights, memory only (paper §6.1, Fig. 8).

    Args:
        trainer: supplies the policy (not updated), env pool, tip store and session.
        task: a task of the same env other than the training task.
        trials: memory trials after the memory-free trial 0 (paper: 10).
        on_trial: called with each trial's row as soon as it is done.

    Returns:
        `trials + 1` rows {"adapt/trial", "adapt/score_mean", "adapt/success_rate", "adapt/tips_total"}.

    Raises:
        ValueError: unknown task, the training task itself, or trials < 1.
        RuntimeError: a trainable parameter changed (never expected; the check guards the promise).
    """
    cfg = trainer.cfg
    envs = trainer.envs(cfg.rollout.group_size)
    known = envs[0].task_names()
    if task not in known:
        raise ValueError(f"unknown task {task!r} for env {cfg.env.name!r}; valid: {list(known)}")
    if task == cfg.env.task:
        raise ValueError(f"adapt runs on a task the policy was not trained on; {task!r} is the training task")
    if trials < 1:
        raise ValueError(f"trials must be ≥ 1, got {trials!r}")
    before = [p.detach().clone() for p in trainer.policy.trainable_parameters()]
    variation = envs[0].variations(task, "train")[0]
    rows = []
    for trial in range(trials + 1):
        mode: RolloutMode = "naive" if trial == 0 else "memory"
        seed_policy(trainer.policy, cfg.seed * 1_000_003 + 500_000 + trial)
        episodes = play_group(
            envs, trainer.policy, trainer.store, task=task, variation=variation, split="train",
            rollout_mode=mode, update_mode=None, temperature=cfg.rollout.train_temperature, seed=cfg.seed,
            keep_caches=True,
        )  # fmt: skip
        episodes = write_group_tips(trainer.policy, trainer.store, episodes)
        row = {
            "adapt/trial": float(trial),
            "adapt/score_mean": sum(ep.score for ep in episodes) / len(episodes),
            "adapt/success_rate": sum(ep.won for ep in episodes) / len(episodes),
            "adapt/tips_total": float(trainer.store.count(task=task)),
        }
        trainer.session.append_episodes(episodes)
        trainer.session.append_metrics({"iteration": trainer.iteration, "kind": "adapt", "task": task, **row})
        rows.append(row)
        if on_trial is not None:
            on_trial(row)
    after = trainer.policy.trainable_parameters()
    if any(not torch.equal(a, b.detach()) for a, b in zip(before, after, strict=True)):
        raise RuntimeError("adapt changed trainable parameters; weights must stay frozen")
    return rows
