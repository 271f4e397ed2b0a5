"""Text environments the agent acts in, behind one small protocol.

Two implementations: `TrapEnv` (pure Python exploration trap, milliseconds per step) and
`ScienceWorldEnv` (the ScienceWorld simulator through py4j; the only module importing `scienceworld`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Protocol

from empo2_studio.types import Episode, Observation, PromptStyle, Split, StepResult

if TYPE_CHECKING:
    from empo2_studio.config import EnvConfig

ACTION_FORMATS: dict[str, tuple[str, ...]] = {
    "trap": ("look around", "go to ROOM", "focus on OBJ", "turn on OBJ", "pick up OBJ", "water OBJ"),
    "scienceworld": (
        "look around", "look at OBJ", "look in OBJ", "go to LOC", "teleport to LOC", "open OBJ",
        "close OBJ", "activate OBJ", "deactivate OBJ", "pick up OBJ", "put down OBJ",
        "move OBJ to OBJ", "pour OBJ in OBJ", "dunk OBJ in OBJ", "mix OBJ", "connect OBJ to OBJ",
        "disconnect OBJ", "use OBJ on OBJ", "read OBJ", "eat OBJ", "flush OBJ", "focus on OBJ",
        "wait", "wait1",
    ),
}
"""The action templates each environment accepts, for the prompt (method.md §3 "Action format").
ScienceWorld's are its own simulator templates ("go to", "pour … in"), not the paper's shorthand."""

PROMPT_STYLES: dict[str, PromptStyle] = {"trap": "compact", "scienceworld": "compact"}
"""The prompt style each environment is played in (`policy.prompts`); an environment not listed gets
"paper". The compact prompt drops the few-shot runs and the action list (they were half of every turn's
tokens on a CPU) and puts its notes right before the answer, where the 135M model reads them. ScienceWorld
uses it too (departure, docs/departures.md): its first paper-style message is 781–881 tokens against
150–380 compact, and the warm start that reads notes is trained in it
(docs/notebook/2026-12-06-scienceworld-agent.md)."""


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

    def summarise_episode(self, episode: Episode) -> str | None:
        """What a finished `episode` of this environment found, in one line a later prompt can carry
        (stored with the episode's tip, see `memory.reflection.with_record`), or None when the
        environment has nothing to say. The trap and ScienceWorld give their "[from the record] …"
        line (`envs.room_notes`, `envs.sw_search`), or None when built with `record_line=False` (`EnvConfig.record_line`):
        knowledge of their observation text stays here, not in memory/."""
        ...

    def places(self, task: str) -> tuple[str, ...]:
        """Every place an observation of `task` can put the agent in (the groups of a structured tip
        memory, `envs.places`); raises ValueError for an unknown task."""
        ...

    def place_of(self, observation: str) -> str | None:
        """The place the observation text says the agent is in ("This room is called the kitchen.",
        "You move to the kitchen."), or None when it names none (`envs.places.place_in`)."""
        ...


def make_env(cfg: EnvConfig) -> TextEnv:
    """Build the environment named by `cfg.name` ("trap" or "scienceworld").

    Checks `cfg.name`, `cfg.task`, `cfg.simplification` and `cfg.step_limit` first and raises
    ValueError naming the bad value and the valid ones; the ScienceWorld JVM starts lazily at the
    first `reset`, so a bad config never leaves a JVM behind.
    """
    if cfg.name == "trap":
        from empo2_studio.envs.trap import TrapEnv

        env: TextEnv = TrapEnv(step_limit=cfg.step_limit, record_line=bool(cfg.record_line))  # auto: off
    elif cfg.name == "scienceworld":
        from empo2_studio.envs.scienceworld import ScienceWorldEnv

        record = cfg.record_line is not False  # auto: on (the search record of its find tasks)
        env = ScienceWorldEnv(simplification=cfg.simplification, step_limit=cfg.step_limit, record_line=record)
    else:
        raise ValueError(f"unknown environment {cfg.name!r}; valid: {', '.join(ACTION_FORMATS)}")
    if cfg.task not in env.task_names():
        env.close()
        raise ValueError(
            f"unknown {cfg.name} task {cfg.task!r}; valid tasks: {', '.join(env.task_names())}"
        )
    return env


class EnvPool:
    """Env instances of one `EnvConfig`, made on demand and kept alive (reused across groups) until
    `close`: one per member of a lock-step group. The trainer, evaluation and adaptation share one."""

    def __init__(self, cfg: EnvConfig) -> None:
        self.cfg = cfg
        self._envs: list[TextEnv] = []

    def take(self, n: int) -> list[TextEnv]:
        """The first `n` instances, creating the missing ones."""
        while len(self._envs) < n:
            self._envs.append(make_env(self.cfg))
        return self._envs[:n]

    def close(self) -> None:
        """Release every instance (JVMs for ScienceWorld); a later `take` makes new ones. Idempotent."""
        for env in self._envs:
            env.close()
        self._envs = []


def unseen_tasks(known: Sequence[str], trained: EnvConfig) -> list[str]:
    """The tasks of `known` other than the one a run of `trained` trains on (adaptation targets)."""
    return [t for t in known if t != trained.task]


def check_unseen_task(task: str, known: Sequence[str], trained: EnvConfig) -> None:
    """Raise ValueError unless `task` is one of `known` and not the task a run of `trained` trained on
    (the one check adaptation makes, in the CLI before a model loads and in `evaluation.adapt`)."""
    if task not in known:
        raise ValueError(f"unknown task {task!r} for env {trained.name!r}; valid: {', '.join(known)}")
    if task == trained.task:
        raise ValueError(f"{task!r} is the task the run trained on; adaptation needs a task it was not trained on")


def partition_error(env: TextEnv, task: str, variation: int) -> str | None:
    """Why no episode of `env` can ever read a tip stored under (task, variation), or None when one can:
    the message names the valid tasks or the task's variation range. Reads the catalogue only (no JVM)."""
    if task not in env.task_names():
        return f"unknown {env.name} task {task!r}; valid tasks: {', '.join(env.task_names())}"
    valid = sorted({v for split in ("train", "dev", "test") for v in env.variations(task, split)})  # type: ignore[arg-type]
    return None if variation in valid else f"{task} has no variation {variation}; valid: {valid[0]}–{valid[-1]}"


@contextmanager
def partition_check(cfg: EnvConfig) -> Iterator[Callable[[str, int], str | None]]:
    """`partition_error` for the environment of `cfg`, as a (task, variation) → message-or-None callable,
    its catalogue env closed on exit (no JVM starts): the check every tip entry point shares."""
    env = make_env(cfg)
    try:
        yield partial(partition_error, env)
    finally:
        env.close()


def __getattr__(name: str):
    # Lazy re-exports: `from empo2_studio.envs import TrapEnv` without importing py4j up front.
    if name == "TrapEnv":
        from empo2_studio.envs.trap import TrapEnv

        return TrapEnv
    if name == "ScienceWorldEnv":
        from empo2_studio.envs.scienceworld import ScienceWorldEnv

        return ScienceWorldEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
