"""Text environments the agent acts in, behind one small protocol.

Two implementations: `TrapEnv` (pure Python exploration trap, milliseconds per step) and
`ScienceWorldEnv` (the ScienceWorld simulator through py4j; the only module importing `scienceworld`).
"""

from __future__ import annotations

from typing import Protocol

from empo2_studio.types import Observation, Split, StepResult


class TextEnv(Protocol):
    """A text game: reset to a task variation, then step with text actions until done.

    Scores are on ScienceWorld's scale (−100 … 100); reward is the change in score.
    """

    name: str
    """"trap" or "scienceworld"."""

    def task_names(self) -> tuple[str, ...]:
        """All task names this environment offers."""
        ...

    def variations(self, task: str, split: Split) -> tuple[int, ...]:
        """Variation indices of `task` in `split`; raises ValueError for an unknown task or split."""
        ...

    def step_limit(self, task: str) -> int:
        """Steps after which an episode of `task` ends."""
        ...

    def fewshot_examples(self, task: str) -> tuple[str, ...]:
        """Example trajectories (text) of `task` from training variations only, for the prompt."""
        ...

    def reset(self, task: str, variation: int) -> Observation:
        """Start `task` at `variation`; raises ValueError naming valid tasks / variation range."""
        ...

    def step(self, action_text: str) -> StepResult:
        """Map `action_text` to the closest valid action, execute it, return the outcome.

        Raises RuntimeError if the episode has ended (nothing is sent to the simulator)."""
        ...

    def close(self) -> None:
        """Release resources (the JVM for ScienceWorld). Idempotent."""
        ...


def make_env(cfg: "EnvConfig") -> TextEnv:  # noqa: F821  (implemented by the envs package)
    """Build the environment named by `cfg.name` ("trap" or "scienceworld")."""
    raise NotImplementedError
