"""The run config of a lesson's own session, derived from the studio's launch session."""

from __future__ import annotations

from dataclasses import replace

from empo2_studio.config import EnvConfig, RunConfig
from empo2_studio.lesson.results import lesson_env
from empo2_studio.lesson.scienceworld import LESSON_STEP_LIMIT
from empo2_studio.sessions import on_env


def lesson_run_config(base: RunConfig, task: str, run_id: str, learning_rate: float) -> RunConfig:
    """`base` (same model, LoRA shape, embedder, rollout and training settings) on the env of `task`
    (`lesson_env`) with the lesson's distillation `learning_rate`. A trap lesson keeps the launch
    session's trap settings (step limit, record line) when it is a trap session; a ScienceWorld lesson
    plays `LESSON_STEP_LIMIT` steps. A lesson whose `base` starts from a shipped adapter starts from the one
    shipped for the lesson's env (`sessions.on_env`): a trap lesson in a ScienceWorld studio too.

    Raises:
        ValueError: `task` is no lesson task, or the config is invalid (`RunConfig.validate`).
    """
    name = lesson_env(task)
    if name == "scienceworld":
        env = EnvConfig(name=name, task=task, step_limit=LESSON_STEP_LIMIT)
    else:
        env = replace(base.env, task=task, variations=()) if base.env.name == name else EnvConfig(name=name, task=task)
    train = replace(base.train, learning_rate=learning_rate)
    return replace(on_env(base, env), run_id=run_id, train=train).validate()
