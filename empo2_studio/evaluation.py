"""Evaluation and out-of-distribution adaptation (paper §5 protocol and §6.1; method.md §1.4, §4).

- `evaluate`: the test split (up to `eval_variations` variations, each played `eval_repeats` times, in
  lock-step batches as wide as a training group, `rollout.group_size`, or `eval_repeats` if larger),
  NO memory — tips are never retrieved nor written — at the eval temperature (paper 0.4). Returns the
  mean score (−100 … 100) and success rate per task.
- `adapt`: weights frozen; trial 0 plays without memory, then `trials` trials play with memory on a task
  the policy was not trained on, each trial's episodes writing their tips into that task's partition
  before the next. Returns one row per trial. The paper does not say how many episodes a "step" has,
  nor the temperature; here a trial is one group (`rollout.group_size` episodes) of the task's first
  training variation at the training temperature (exploration, "exactly as in EMPO² training").

Both take only what they use — a policy, an env pool, the run config, the session (and, for `adapt`,
the tip store) — so `empo2-studio eval` loads a policy and plays, with no trainer or optimizer built.
`Trainer.evaluate` / `Trainer.adapt` pass the trainer's own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from empo2_studio.envs import EnvPool, check_unseen_task
from empo2_studio.rollout import (
    mean_score, play_batch, play_group, sampling_seed, seed_policy, success_rate, write_group_tips,
)  # fmt: skip
from empo2_studio.types import Episode, RolloutMode, Split

if TYPE_CHECKING:
    from empo2_studio.config import RunConfig
    from empo2_studio.sessions import Session

ADAPT_SEED_OFFSET = 500_000
"""Adaptation trials seed the sampler with salts from here, apart from the training iterations'."""


def evaluate(
    policy,
    envs: EnvPool,
    cfg: RunConfig,
    session: Session,
    *,
    iteration: int,
    variations: int | None = None,
    repeats: int | None = None,
    on_progress: Callable[[int, int, int], None] | None = None,
    width: int | None = None,
    split: Split = "test",
) -> dict[str, float]:
    """Play the test split (or `split`) without memory and record the result in the session.

    Args:
        policy: the policy to evaluate (sampled, never updated).
        envs: the pool the episodes play on (max(`repeats`, `rollout.group_size`) instances are taken).
        cfg: the run config (task, seed, eval temperature, default variations / repeats).
        session: where the episodes and the metrics row go; `iteration` labels the row.
        variations: test variations to use (default `train.eval_variations`, capped by the split size).
        repeats: episodes per variation (default `train.eval_repeats`).
        on_progress: called as `on_progress(played, total, won)` (episode counts) as each episode
            ends, so a page shows an evaluation of minutes filling up.
        width: episodes per lock-step batch (default max(`repeats`, `rollout.group_size`); `repeats`
            plays one layout at a time, benchmarks/bench_eval.py).
        split: "test" (the reported number) or "dev" (the split recipes are chosen on: docs/benchmarks/
            README.md, "choose on dev, report test once"); the session's row names it.

    Returns:
        {"eval/score_mean", "eval/success_rate", "eval/episodes",
         "eval/<task>/score_mean", "eval/<task>/success_rate"}; scores −100 … 100, rates 0 … 1.

    Raises:
        ValueError: variations, repeats or width < 1, or `split` is neither "test" nor "dev".
        StopRequested: the thread's stop event was set (`stopping.stop_scope`): nothing is recorded.
    """
    n_var = cfg.train.eval_variations if variations is None else variations
    n_rep = cfg.train.eval_repeats if repeats is None else repeats
    width = max(n_rep, cfg.rollout.group_size) if width is None else width  # the pool holds a group's envs
    if n_var < 1 or n_rep < 1 or width < 1:
        raise ValueError(f"evaluate needs variations, repeats and width ≥ 1, got {n_var!r}, {n_rep!r} and {width!r}")
    if split not in ("test", "dev"):
        raise ValueError(f"evaluate plays the test or the dev split, got {split!r}")
    task = cfg.env.task
    t0 = time.perf_counter()
    group = envs.take(width)
    test_variations = group[0].variations(task, split)[:n_var]
    planned = [v for v in test_variations for _ in range(n_rep)]
    seed_policy(policy, cfg.seed)  # the same sampling noise at every evaluation of a run
    episodes: list[Episode] = []
    ended: list[bool] = []  # won, per episode ended so far (batches report as they go)

    def count(_index: int, won: bool) -> None:
        ended.append(won)
        if on_progress is not None:
            on_progress(len(ended), len(planned), sum(ended))

    for start in range(0, len(planned), width):
        episodes += play_batch(
            group, policy, task=task, variations=planned[start : start + width], split=split,
            temperature=cfg.rollout.eval_temperature, seed=cfg.seed, on_end=count,
        )  # fmt: skip
    score, success = mean_score(episodes), success_rate(episodes)
    result = {
        "eval/score_mean": score,
        "eval/success_rate": success,
        "eval/episodes": float(len(episodes)),
        f"eval/{task}/score_mean": score,
        f"eval/{task}/success_rate": success,
    }
    session.append_episodes(episodes)
    # the seconds go in the row only (not the result): the studio's race reads them as this machine's test-episode time
    row = {"iteration": iteration, "kind": "eval", **result, "time/eval": time.perf_counter() - t0}
    session.append_metrics(row if split == "test" else {**row, "split": split})
    return result


def adapt(
    policy,
    envs: EnvPool,
    store,
    cfg: RunConfig,
    session: Session,
    task: str,
    *,
    iteration: int,
    trials: int = 10,
    on_trial: Callable[[dict[str, float]], None] | None = None,
    stop: threading.Event | None = None,
    writer: Any | None = None,
    note_context: str = "episode",
) -> list[dict[str, float]]:
    """OOD adaptation: frozen weights, memory only (paper §6.1, Fig. 8).

    Args:
        policy: the policy (sampled and writing tips, never updated).
        envs: the pool the trials play on (`rollout.group_size` instances are taken).
        store: the tip store the trials retrieve from and write to (the task's own partition).
        cfg: the run config (trained task, seed, group size, training temperature).
        session: where episodes and one metrics row per trial go; `iteration` labels the rows.
        task: a task of the same env other than the training task.
        trials: memory trials after the memory-free trial 0 (paper: 10).
        on_trial: called with each trial's row as soon as it is done.
        stop: when set, the run ends after the current trial (the rows so far are returned).
        writer, note_context: who writes the tips and after what (`policy.note_writer.load_note_writer`,
            called by the trainer); None, "episode": `policy`, after the whole episode (paper §2).

    Returns:
        Up to `trials + 1` rows {"adapt/trial", "adapt/score_mean", "adapt/success_rate", "adapt/tips_total"}.

    Raises:
        ValueError: unknown task, the training task itself, or trials < 1.
        RuntimeError: a trainable parameter changed (never expected; the check guards the promise).
    """
    group = envs.take(cfg.rollout.group_size)
    check_unseen_task(task, group[0].task_names(), cfg.env)
    if trials < 1:
        raise ValueError(f"trials must be ≥ 1, got {trials!r}")
    before = [p.detach().clone() for p in policy.trainable_parameters()]
    variation = group[0].variations(task, "train")[0]
    rows = []
    for trial in range(trials + 1):
        mode: RolloutMode = "naive" if trial == 0 else "memory"
        seed_policy(policy, sampling_seed(cfg.seed, ADAPT_SEED_OFFSET + trial))
        episodes = play_group(
            group, policy, store, task=task, variation=variation, split="train",
            rollout_mode=mode, update_mode=None, temperature=cfg.rollout.train_temperature, seed=cfg.seed,
            keep_caches=True,
        )  # fmt: skip
        episodes = write_group_tips(policy, store, episodes, writer=writer, note_context=note_context)
        row = {
            "adapt/trial": float(trial),
            "adapt/score_mean": mean_score(episodes),
            "adapt/success_rate": success_rate(episodes),
            "adapt/tips_total": float(store.count(task=task)),
        }
        session.append_episodes(episodes)
        session.append_metrics({"iteration": iteration, "kind": "adapt", "task": task, **row})
        rows.append(row)
        if on_trial is not None:
            on_trial(row)
        if stop is not None and stop.is_set():
            break
    after = policy.trainable_parameters()
    if any(not torch.equal(a, b.detach()) for a, b in zip(before, after, strict=True)):
        raise RuntimeError("adapt changed trainable parameters; weights must stay frozen")
    return rows
