"""The trap's chain family (`trap-fetch-two`, issue 49 item 4): a gold path through three rooms in order,
worked by hand on variations 0 (train) and 36 (test); out-of-order play never wins; the split; no
shipped adapter saw it."""

import itertools
import json
from pathlib import Path

import pytest

from empo2_studio.envs.trap import SIDE_ROOMS, START_ROOM, TASKS, TrapEnv

TASK = "trap-fetch-two"
WARM_STARTS = Path(__file__).resolve().parents[1] / "assets" / "warmstart"


@pytest.fixture()
def env():
    e = TrapEnv()
    yield e
    e.close()


def play(env, variation, actions):
    env.reset(TASK, variation)
    return [env.step(a) for a in actions]


def test_variation_0_by_hand(env):
    # Battery in the kitchen, yellow light bulb in the workshop, yellow lamp in the bedroom; the hallway
    # holds a blue and a red lamp (the focus-first trap), the greenhouse a green light bulb.
    obs = env.reset(TASK, 0)
    assert obs.task_description == (
        "Your task is to turn on the yellow lamp. First, pick up the battery and the yellow light bulb. "
        "Then, focus on the yellow lamp. Then, turn it on."
    )
    assert obs.text == (
        "This room is called the hallway. In it, you see: a blue lamp, a coat rack, a red lamp. "
        "Doors lead to: the kitchen, the workshop, the greenhouse, the bedroom."
    )
    assert obs.valid_actions == (
        "focus on blue lamp", "focus on coat rack", "focus on red lamp", "go to bedroom", "go to greenhouse",
        "go to kitchen", "go to workshop", "look around", "turn on blue lamp", "turn on red lamp",
    )
    gold = env.gold_path(TASK, 0)
    assert gold == [
        "go to kitchen", "pick up battery", "go to workshop", "pick up yellow light bulb",
        "go to hallway", "go to bedroom", "focus on yellow lamp", "turn on yellow lamp",
    ]
    results = play(env, 0, gold)
    assert [r.reward for r in results] == [0.0, 25.0, 0.0, 25.0, 0.0, 0.0, 25.0, 25.0]
    assert [r.observation.score for r in results] == [0.0, 25.0, 25.0, 50.0, 50.0, 50.0, 75.0, 100.0]
    assert [r.done for r in results] == [False] * 7 + [True]
    assert results[-1].won and results[-1].observation.valid_actions == ()
    assert results[-1].observation.text == (
        "You put the battery and the yellow light bulb in the yellow lamp. The yellow lamp is now on. "
        "You have completed the task."
    )
    assert results[3].observation.inventory == "In your inventory, you see: a battery, a yellow light bulb."
    assert env.curated_tip(TASK, 0).startswith(
        "The battery is in the kitchen, the yellow light bulb in the workshop and the yellow lamp in the "
        "bedroom: go to kitchen, then pick up battery, then go to workshop, "
    )


def test_place_of_reads_each_observation_of_the_gold_path(env):
    assert env.place_of(env.reset(TASK, 0).text) == "hallway"
    rooms = [env.place_of(r.observation.text) for r in play(env, 0, env.gold_path(TASK, 0))]
    # A pick up, a focus or a turn on names no room: the place before it stands.
    assert rooms == ["kitchen", None, "workshop", None, "hallway", "bedroom", None, None]
    assert env.places(TASK) == (START_ROOM, *SIDE_ROOMS)


def test_every_gold_path_visits_the_three_rooms_in_order(env):
    triples = []
    for v in range(48):
        lay = env.layout(TASK, v)
        want = [lay.objects["battery"], lay.objects[lay.target.replace("lamp", "light bulb")], lay.target_room]
        assert len(set(want)) == 3 and START_ROOM not in want, v
        here, visited = START_ROOM, []
        for result in play(env, v, env.gold_path(TASK, v)):
            here = env.place_of(result.observation.text) or here
            visited.append(here)
        # Each item is picked up in its room, then the lamp is lit in the third: positions increase.
        at = [visited.index(want[0]), visited.index(want[1]), max(i for i, r in enumerate(visited) if r == want[2])]
        assert at == sorted(at) and len(set(at)) == 3, (v, visited)
        assert len(set(visited) - {START_ROOM}) >= 3 and result.won and result.observation.score == 100.0
        triples.append(tuple(want))
    # Every ordered triple of distinct side rooms, twice (the decoy bulb beside the lamp or elsewhere).
    assert sorted(set(triples)) == sorted(itertools.permutations(SIDE_ROOMS, 3))
    assert all(triples.count(t) == 2 for t in set(triples))


def test_acting_before_fetching_never_wins(env):
    # The lamp first: focusing on it before holding both parts fails the task, as a wrong focus does.
    (r,) = play(env, 0, ["go to bedroom"])[-1:]
    res = env.step("focus on yellow lamp")
    assert (r.reward, res.reward, res.observation.score, res.done, res.won) == (0.0, -100.0, -100.0, True, False)
    assert res.observation.text == (
        "You focus on the yellow lamp before holding the battery and the yellow light bulb: the task has failed."
    )
    # One part only: the progress is lost.
    results = play(env, 0, ["go to kitchen", "pick up battery", "go to hallway", "go to bedroom", "focus on yellow lamp"])
    assert [r.reward for r in results] == [0.0, 25.0, 0.0, 0.0, -125.0] and results[-1].done and not results[-1].won
    # Turning it on early changes nothing; with both parts held it lights and the focus completes the task.
    results = play(env, 0, ["go to bedroom", "turn on yellow lamp"])
    assert results[-1].observation.text == "The yellow lamp stays off: it needs a battery and a yellow light bulb."
    assert (results[-1].reward, results[-1].observation.score, results[-1].done) == (0.0, 0.0, False)
    gold = env.gold_path(TASK, 0)
    results = play(env, 0, gold[:6] + ["turn on yellow lamp", "focus on yellow lamp"])
    assert [r.reward for r in results[-2:]] == [0.0, 50.0] and results[-1].won


def test_a_wrong_final_act_fails_as_every_trap_does(env):
    # Test variation 36: battery in the greenhouse, red light bulb in the workshop, the red lamp in the
    # kitchen beside a yellow light bulb.
    gold = env.gold_path(TASK, 36)
    assert gold == [
        "go to greenhouse", "pick up battery", "go to hallway", "go to workshop", "pick up red light bulb",
        "go to kitchen", "focus on red lamp", "turn on red lamp",
    ]
    results = play(env, 36, gold[:6] + ["focus on yellow light bulb"])
    assert (results[-1].reward, results[-1].observation.score, results[-1].done) == (-150.0, -100.0, True)
    # The wrong bulb earns nothing; the focus-first reflex is a hallway lamp.
    results = play(env, 36, ["go to kitchen", "pick up yellow light bulb"])
    assert results[-1].reward == 0.0 and results[-1].observation.score == 0.0
    assert env.focus_first_path(TASK, 36) == ["focus on blue lamp"]
    (trap,) = play(env, 36, ["focus on blue lamp"])
    assert (trap.reward, trap.done, trap.won) == (-100.0, True, False)


def test_split_sizes_family_and_step_limit(env):
    splits = {s: env.variations(TASK, s) for s in ("train", "dev", "test")}
    assert splits == {"train": tuple(range(24)), "dev": tuple(range(24, 36)), "test": tuple(range(36, 48))}
    assert len({tuple(sorted(env.layout(TASK, v).objects.items())) for v in range(48)}) == 48
    assert env.family(TASK) == "chain" and env.step_limit(TASK) == 20
    assert max(len(env.gold_path(TASK, v)) for v in range(48)) == 9
    with pytest.raises(ValueError, match=r"'trap-fetch-2'.*trap-fetch-two"):
        env.reset("trap-fetch-2", 0)
    with pytest.raises(ValueError, match=r"48.*0–47"):
        env.reset(TASK, 48)


def test_no_shipped_adapter_trained_on_the_chain_family():
    # The trap warm starts read search-family layouts only (scripts/make_warmstart.py keeps family
    # "search"); none names this task.
    assert TASKS[TASK].family != "search"
    metas = [json.loads(p.read_text()) for p in WARM_STARTS.glob("*/warmstart.json")]
    assert len(metas) >= 3
    for meta in metas:
        assert TASK not in meta.get("tasks", {}) and "fetch" not in meta["trained_on"]
