"""The exploration-trap env: splits, determinism, scoring by hand, the focus-first trap, bad input."""

import pytest

from empo2_studio.config import EnvConfig
from empo2_studio.envs import ACTION_FORMATS, make_env
from empo2_studio.envs.trap import TASKS, TrapEnv


@pytest.fixture()
def env():
    e = TrapEnv()
    yield e
    e.close()


def play(env, task, variation, actions):
    env.reset(task, variation)
    return [env.step(a) for a in actions]


def test_seven_tasks_in_three_families_and_disjoint_splits(env):
    assert env.task_names() == (
        "trap-light-bulb", "trap-find-animal", "trap-water-plant",
        "trap-light-bulb-fixed", "trap-find-animal-fixed", "trap-water-plant-fixed",
        "trap-fetch-two",
    )
    assert [env.family(t) for t in env.task_names()] == ["search"] * 3 + ["fixed"] * 3 + ["chain"]
    for task in env.task_names():
        train, dev, test = (set(env.variations(task, s)) for s in ("train", "dev", "test"))
        assert (len(train), len(dev), len(test)) == (24, 12, 12)
        assert not (train & dev or train & test or dev & test)
        assert train | dev | test == set(range(48))
        # Every variation is a distinct layout, so test layouts never appear in training.
        layouts = {(l.target, l.target_room, tuple(sorted(l.objects.items())))
                   for l in (env.layout(task, v) for v in range(48))}
        assert len(layouts) == 48


def test_reset_is_deterministic():
    a, b = TrapEnv(), TrapEnv()
    for task in a.task_names():
        first = a.reset(task, 7)
        a.step("go to kitchen")
        assert a.reset(task, 7) == first == b.reset(task, 7)


def test_light_bulb_variation_0_by_hand(env):
    obs = env.reset("trap-light-bulb", 0)
    assert obs.task_description == (
        "Your task is to turn on the green light bulb. First, focus on the green light bulb. "
        "Then, turn it on."
    )
    assert obs.text == (
        "This room is called the hallway. In it, you see: a coat rack, a red light bulb, "
        "a yellow light bulb. Doors lead to: the kitchen, the workshop, the greenhouse, the bedroom."
    )
    assert obs.valid_actions == (
        "focus on coat rack", "focus on red light bulb", "focus on yellow light bulb",
        "go to bedroom", "go to greenhouse", "go to kitchen", "go to workshop", "look around",
        "turn on red light bulb", "turn on yellow light bulb",
    )
    assert env.gold_path("trap-light-bulb", 0) == [
        "go to kitchen", "focus on green light bulb", "turn on green light bulb",
    ]
    results = play(env, "trap-light-bulb", 0, env.gold_path("trap-light-bulb", 0))
    assert [r.reward for r in results] == [25.0, 25.0, 50.0]
    assert [r.observation.score for r in results] == [25.0, 50.0, 100.0]
    assert [r.done for r in results] == [False, False, True]
    assert results[-1].won and results[-1].observation.valid_actions == ()


def test_water_plant_variation_0_by_hand(env):
    # The can is in the bedroom, the blue flower in the workshop (via the hallway).
    gold = env.gold_path("trap-water-plant", 0)
    assert gold == ["go to bedroom", "pick up watering can", "go to hallway", "go to workshop",
                    "focus on blue flower", "water blue flower"]
    results = play(env, "trap-water-plant", 0, gold)
    assert [r.reward for r in results] == [0.0, 25.0, 0.0, 25.0, 25.0, 25.0]
    assert results[-1].won and results[-1].observation.score == 100.0


def test_every_gold_path_wins_and_focus_first_fails(env):
    for task in env.task_names():
        for v in range(48):
            results = play(env, task, v, env.gold_path(task, v))
            assert results[-1].won and results[-1].observation.score == 100.0, (task, v)
            assert sum(r.reward for r in results) == 100.0
            assert len(results) <= env.step_limit(task)
            (trap,) = play(env, task, v, env.focus_first_path(task, v))
            assert trap.done and not trap.won, (task, v)
            assert trap.observation.score == -100.0 and trap.reward == -100.0


def test_focus_first_is_the_hallway_lookalike(env):
    assert env.focus_first_path("trap-light-bulb", 0) == ["focus on red light bulb"]
    env.reset("trap-find-animal", 0)
    # The reflex for "find the rabbit" picks one of the hallway's animals or the toy rabbit.
    assert env.focus_first_path("trap-find-animal", 0) == ["focus on frog"]


def test_wrong_focus_after_progress_loses_everything(env):
    env.reset("trap-light-bulb", 0)
    assert env.step("go to kitchen").reward == 25.0
    res = env.step("focus on table")
    assert (res.reward, res.observation.score, res.done, res.won) == (-125.0, -100.0, True, False)
    with pytest.raises(RuntimeError, match="ended"):
        env.step("look around")


def test_finishing_before_focusing_completes_on_focus(env):
    play(env, "trap-light-bulb", 0, ["go to kitchen", "turn on green light bulb"])
    assert env.step("look around").observation.score == 25.0
    res = env.step("focus on green light bulb")
    assert (res.reward, res.won) == (75.0, True)


def test_step_limit_ends_unsolved(env):
    results = play(env, "trap-light-bulb", 0, ["look around"] * 12)
    assert [r.done for r in results] == [False] * 11 + [True]
    assert results[-1].observation.score == 0.0 and not results[-1].won
    short = TrapEnv(step_limit=2)
    assert short.step_limit("trap-water-plant") == 2
    short.reset("trap-water-plant", 0)
    assert not short.step("look around").done and short.step("look around").done


def test_free_text_is_corrected_and_empty_is_invalid(env):
    env.reset("trap-light-bulb", 0)
    res = env.step("Go to the kitchen.")
    assert (res.action_text, res.action, res.corrected, res.invalid) == (
        "Go to the kitchen.", "go to kitchen", True, False)
    res = env.step("   ")
    assert (res.action, res.invalid, res.reward, res.done) == ("", True, 0.0, False)
    assert res.observation.text == "No action was given."
    assert res.observation.score == 25.0  # unchanged


def test_valid_actions_short_sorted_distinct(env):
    for task in env.task_names():
        for v in range(48):
            obs = env.reset(task, v)
            for action in env.gold_path(task, v):
                acts = obs.valid_actions
                assert 5 <= len(acts) <= 20 and list(acts) == sorted(set(acts)), (task, v)
                assert action in acts
                obs = env.step(action).observation


def test_fewshot_examples_come_from_training_variations(env):
    for task in env.task_names():
        examples = env.fewshot_examples(task)
        assert len(examples) == 2
        for example, v in zip(examples, (0, 1)):
            assert v in env.variations(task, "train")
            assert example.startswith(f"Task: {env.task_description(task, v)}\n")
            assert all(f"> {a}" in example for a in env.gold_path(task, v))
            assert len(example) < 1500


def test_bad_input_names_valid_values(env):
    with pytest.raises(ValueError, match=r"'trap-light'.*trap-light-bulb, trap-find-animal"):
        env.reset("trap-light", 0)
    with pytest.raises(ValueError, match=r"48.*0–47"):
        env.reset("trap-light-bulb", 48)
    with pytest.raises(ValueError, match=r"-1"):
        env.reset("trap-light-bulb", -1)
    with pytest.raises(ValueError, match="valid splits: train, dev, test"):
        env.variations("trap-light-bulb", "validation")
    with pytest.raises(RuntimeError, match="reset"):
        TrapEnv().step("look around")
    with pytest.raises(ValueError, match="step_limit"):
        TrapEnv(step_limit=0)


@pytest.mark.parametrize("variation", [True, False, 1.0, "3", None])
def test_variation_must_be_an_int_not_a_bool(env, variation):
    with pytest.raises(ValueError) as err:
        env.reset("trap-light-bulb", variation)
    assert str(err.value) == (
        "variation must be an int in 0–47 (train 0–23, dev 24–35, test 36–47), "
        f"got {variation!r} ({type(variation).__name__})"
    )
    with pytest.raises(ValueError, match=r"must be an int in 0–47"):
        env.layout("trap-light-bulb", variation)


def test_numpy_integer_variation_is_an_int():
    import numpy as np

    obs = TrapEnv().reset("trap-light-bulb", np.int64(3))
    assert obs.variation == 3 and type(obs.variation) is int


def test_make_env_and_action_formats():
    env = make_env(EnvConfig(name="trap", task="trap-water-plant", step_limit=5))
    assert isinstance(env, TrapEnv) and env.step_limit("trap-water-plant") == 5
    with pytest.raises(ValueError, match=r"'boil'.*trap-light-bulb"):
        make_env(EnvConfig(name="trap", task="boil"))
    with pytest.raises(ValueError, match=r"'toy'.*trap, scienceworld"):
        make_env(EnvConfig(name="toy"))  # type: ignore[arg-type]
    # Every trap action is an instance of one of its advertised formats.
    verbs = {f.rsplit(" ", 1)[0] for f in ACTION_FORMATS["trap"] if f != "look around"}
    obs = TrapEnv().reset("trap-find-animal", 3)
    assert all(a == "look around" or any(a.startswith(v + " ") for v in verbs)
               for a in obs.valid_actions)
    assert set(TASKS) == set(env.task_names())
