"""What played episodes add up to, defined once for training, evaluation, adaptation and the lesson.

- `episode_return`: the R that GRPO advantages compare, extrinsic return plus the scaled novelty bonus
  (paper §4.3; the recipe's merged code drops the bonus, this project keeps it);
- `step_rewards` / `state_keys`: the same reward per step, and the environment state each action was
  taken in, for step-level credit (`algorithm.step_advantages`);
- `mean_score` / `success_rate`: the `*/score_mean` and `*/success_rate` metrics;
- `sampling_seed`: the sampler seed of one iteration or trial of a run.
"""

from __future__ import annotations

from collections.abc import Sequence

from empo2_studio.types import Episode


def episode_return(episode: Episode, intrinsic_coef: float) -> float:
    """R = extrinsic return + intrinsic_coef × Σ per-step novelty bonuses."""
    return episode.return_ + intrinsic_coef * sum(s.intrinsic_reward for s in episode.steps)


def step_rewards(episode: Episode, intrinsic_coef: float) -> list[float]:
    """Per step: extrinsic reward + intrinsic_coef × novelty bonus (they sum to `episode_return`)."""
    return [s.reward + intrinsic_coef * s.intrinsic_reward for s in episode.steps]


def state_keys(episode: Episode) -> list[tuple[str, tuple[str, ...]]]:
    """Per step, the environment state its action was taken in: (the observation text that led to it,
    the valid actions there). Step 0's text is "" — every episode of a group starts from the same reset
    state. The valid actions tell apart states whose text alone is the same (e.g. "The green light
    bulb is now on." in two rooms)."""
    texts = [""] + [s.observation for s in episode.steps[:-1]]
    return [(text, tuple(s.valid_actions)) for text, s in zip(texts, episode.steps)]


def mean_score(episodes: Sequence[Episode]) -> float:
    """Mean final score (−100 … 100) of `episodes` (non-empty)."""
    return sum(ep.score for ep in episodes) / len(episodes)


def success_rate(episodes: Sequence[Episode]) -> float:
    """Fraction of `episodes` (non-empty) that reached 100."""
    return sum(ep.won for ep in episodes) / len(episodes)


def sampling_seed(run_seed: int, salt: int) -> int:
    """The sampler seed of one iteration / trial / variation `salt` of a run seeded `run_seed`: distinct
    per (run seed, salt) for salts below 1,000,003, so a resumed run replays an iteration."""
    return run_seed * 1_000_003 + salt
