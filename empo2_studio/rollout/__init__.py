"""Acting: lock-step rollout groups, side-by-side demo episodes, tip writing, the mode schedule.

`play_group` plays the N episodes of one task variation together (one batched sample call per step);
`play_batch` plays naive episodes of several variations together (the evaluation's batches);
`play_side_by_side` plays a naive and a memory episode at once for the studio; `write_group_tips` lets
the policy summarise finished episodes into the tip memory; `summary` defines an episode's return,
the score/success means and the per-iteration sampling seed; `draw_update_mode` (from
`algorithm.schedule`) picks an iteration's update mode with the paper's p and q; `conversation`
rebuilds an episode's turns as the policy saw them (the one builder rollout, reflection and update share).
"""

from empo2_studio.algorithm.schedule import draw_update_mode
from empo2_studio.rollout.conversation import conversation, step_turn, user_turn, with_tips_message
from empo2_studio.rollout.episodes import Timings, play_batch, play_group, play_side_by_side, seed_policy
from empo2_studio.rollout.tip_writing import key_text, write_group_tips
from empo2_studio.rollout.summary import (
    episode_return,
    mean_score,
    sampling_seed,
    state_keys,
    step_rewards,
    success_rate,
)

__all__ = [
    "Timings",
    "conversation",
    "draw_update_mode",
    "episode_return",
    "key_text",
    "mean_score",
    "play_batch",
    "play_group",
    "play_side_by_side",
    "sampling_seed",
    "seed_policy",
    "state_keys",
    "step_rewards",
    "step_turn",
    "success_rate",
    "user_turn",
    "with_tips_message",
    "write_group_tips",
]
