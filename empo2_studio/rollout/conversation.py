"""The conversation as the policy saw it: one builder for acting, reflecting and learning.

Every turn is a step's user message with that step's tips block appended in the episode's prompt
style (`Episode.prompt_style`, set once when the episode starts, from `envs.PROMPT_STYLES`), answered
by the exact sampled action tokens. The rollout builds each prompt with `user_turn` and records the
answered turn with `step_turn`; reflection (`memory.reflection.write_tips`) and the update
(`update.conversation`) rebuild a finished episode with `conversation`, so all three see the same turns.
The tip-free variant (`with_tips=False`, the off-policy update) is the same turns without the blocks.
"""

from __future__ import annotations

from collections.abc import Sequence

from empo2_studio.policy import Turn, prompts
from empo2_studio.types import Episode, PromptStyle, RetrievedTip, Step


def user_turn(
    user_message: str, tips: Sequence[RetrievedTip], style: PromptStyle, valid_actions: tuple[str, ...],
    action_ids: tuple[int, ...] | None = None,
) -> Turn:  # fmt: skip
    """One turn: `user_message` with its tips block in `style` (unchanged without tips), answered by
    `action_ids` (None: the turn the policy is asked to answer now)."""
    return Turn(prompts.with_tips(user_message, tips, style), action_ids, valid_actions)


def step_turn(step: Step, style: PromptStyle, *, with_tips: bool = True) -> Turn:
    """The recorded `step` as a turn: its user message (with its tips block when `with_tips`) and
    its sampled token ids."""
    tips = step.tips if with_tips else ()
    return user_turn(step.user_message, tips, style, step.valid_actions, tuple(step.sample.token_ids))


def conversation(episode: Episode, *, with_tips: bool = True, n_turns: int | None = None) -> tuple[Turn, ...]:
    """The episode's turns as the policy saw them (`with_tips`) or without the tips blocks.

    Args:
        episode: a played episode; its `prompt_style` lays out the tips blocks.
        with_tips: keep each step's tips block (False: the tip-free prompt of the off-policy update).
        n_turns: keep only the first n turns; None = all.
    """
    steps = episode.steps if n_turns is None else episode.steps[:n_turns]
    return tuple(step_turn(s, episode.prompt_style, with_tips=with_tips) for s in steps)


def with_tips_message(step: Step, style: PromptStyle) -> str:
    """The user message exactly as the policy saw it when sampling `step` (tips block in `style`)."""
    return step_turn(step, style).user_text


def transcript(episode: Episode) -> str:
    """The episode as one text block (`prompts.episode_transcript`): its task, what it saw and what it did."""
    steps = [(s.action or s.sample.text, s.observation) for s in episode.steps]
    return prompts.episode_transcript(episode.task_description, episode.first_observation, steps)
