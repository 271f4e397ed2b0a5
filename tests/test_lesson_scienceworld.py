"""The Lesson on ScienceWorld's find-animal: settings, its session's config, and the pre-filled tip.

Unmarked tests never start Java; the `scienceworld` test plays the real simulator's gold path."""

from __future__ import annotations

import pytest

from empo2_studio.config import WARM_START_DIR, RunConfig, SCIENCEWORLD_WARM_START
from empo2_studio.envs.scienceworld import HELD_OUT_TASKS
from empo2_studio.lesson import LESSON_TASKS, LessonSettings, lesson_env, split_of
from empo2_studio.lesson.run_config import lesson_run_config
from empo2_studio.lesson.scienceworld import LESSON_STEP_LIMIT, TIP_OPENING, curated_tip, tip_plan
from empo2_studio.sessions import absolute_paths

TEXT = ("Your task is to find a(n) animal. First, focus on the thing. Then, move it to the orange box in the "
        "bathroom.")


def test_the_lesson_tasks_and_their_envs():
    assert lesson_env("trap-light-bulb") == "trap" and lesson_env("find-animal") == "scienceworld"
    assert "find-animal" in LESSON_TASKS and "find-animal" in HELD_OUT_TASKS  # no adapter trained on it
    with pytest.raises(ValueError, match="find-plant"):
        lesson_env("find-plant")
    assert split_of("find-animal", 0) == "train" and split_of("find-animal", 149) == "train"
    assert split_of("find-animal", 225) == "test"
    with pytest.raises(ValueError, match="valid: 0…299"):
        LessonSettings(task="find-animal", variations=(100000,)).validate()


def test_the_tip_plan_reads_box_and_room_from_the_task_text():
    gold = ["go to hallway", "go to outside", "focus on baby wolf", "pick up baby wolf", "go to bathroom",
            "move baby wolf to orange box"]
    assert tip_plan(TEXT, gold) == ["teleport to outside", "look around", "focus on baby wolf", "pick up baby wolf",
                                    "teleport to bathroom", "move baby wolf to orange box"]
    with pytest.raises(ValueError, match="not a find-animal"):
        tip_plan("Your task is to boil water.", gold)
    with pytest.raises(ValueError, match="not a scienceworld lesson|runs on"):
        curated_tip("power-component", 0)


def test_a_scienceworld_lesson_session_starts_from_the_scienceworld_adapter():
    base = absolute_paths(RunConfig())  # a trap launch session: the route adapter, made absolute
    cfg = absolute_paths(lesson_run_config(base, "find-animal", "lesson-find-animal", 2e-3))
    assert (cfg.env.name, cfg.env.task, cfg.env.step_limit) == ("scienceworld", "find-animal", LESSON_STEP_LIMIT)
    assert cfg.policy.warm_start == str(WARM_START_DIR / SCIENCEWORLD_WARM_START)
    assert cfg.train.learning_rate == 2e-3
    own = RunConfig(policy=RunConfig().policy.__class__(warm_start="/somewhere/my-adapter"))
    assert lesson_run_config(own, "find-animal", "x", 1e-3).policy.warm_start == "/somewhere/my-adapter"
    trap = absolute_paths(lesson_run_config(base, "trap-find-animal", "y", 1e-3))
    assert trap.env.name == "trap" and trap.policy.warm_start == base.policy.warm_start
    # a trap lesson in a ScienceWorld studio starts from the trap's adapter, not the launch session's
    from_sw = absolute_paths(lesson_run_config(cfg, "trap-find-animal", "z", 1e-3))
    assert from_sw.policy.warm_start == base.policy.warm_start != cfg.policy.warm_start


@pytest.mark.scienceworld
def test_the_pre_filled_tip_wins_when_played_word_for_word():
    from empo2_studio.envs.scienceworld import ScienceWorldEnv

    with ScienceWorldEnv(step_limit=LESSON_STEP_LIMIT) as env:
        tip = curated_tip("find-animal", 1, env)
        assert tip.startswith(TIP_OPENING + "teleport to outside, then look around, then focus on ")
        plan = tip[len(TIP_OPENING):].rstrip(".").split(", then ")
        assert plan[4] == "teleport to kitchen" and plan[5].endswith("to green box")  # the task text's box
        obs = env.reset("find-animal", 1)
        for action in plan:
            assert action in obs.valid_actions
            result = env.step(action)
            obs = result.observation
        assert result.done and result.won and obs.score == 100
        assert curated_tip("find-animal", 1) == tip  # cached: no second JVM
