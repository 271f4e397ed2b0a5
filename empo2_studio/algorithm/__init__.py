"""The learning rule of EMPO² as pure functions (paper §4.2–4.3): group advantages, the clipped
surrogate (on-policy and off-policy distillation), the low-probability mask, the KL term, the
update-mode schedule and the novelty reward. Nothing here touches a model, an optimizer or a file."""

from empo2_studio.algorithm.advantages import discounted_returns, group_advantages, step_advantages
from empo2_studio.algorithm.losses import (
    LOSS_AGGS,
    LOW_PROB_RULES,
    aggregate,
    clipped_surrogate_loss,
    dropped_fraction,
    kl_penalty,
    low_prob_mask,
    tapered_off_policy_loss,
)
from empo2_studio.algorithm.novelty import NoveltyMemory, NoveltyReward
from empo2_studio.algorithm.schedule import draw_update_mode

__all__ = [
    "LOSS_AGGS",
    "LOW_PROB_RULES",
    "NoveltyMemory",
    "NoveltyReward",
    "aggregate",
    "clipped_surrogate_loss",
    "draw_update_mode",
    "discounted_returns",
    "dropped_fraction",
    "group_advantages",
    "kl_penalty",
    "low_prob_mask",
    "step_advantages",
    "tapered_off_policy_loss",
]
