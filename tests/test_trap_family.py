"""The trap's fixed family (paper structure): one target room per task, what varies, the trap still traps,
and no layout the shipped warm start trained on (search dev layouts) reappears."""

import pytest

from empo2_studio.config import EnvConfig
from empo2_studio.envs import make_env
from empo2_studio.envs.trap import CAN, START_ROOM, TASKS, TrapEnv

FIXED = ("trap-light-bulb-fixed", "trap-find-animal-fixed", "trap-water-plant-fixed")


@pytest.fixture()
def env():
    e = TrapEnv()
    yield e
    e.close()


def test_fixed_tasks_keep_one_room_per_task(env):
    rooms = {"trap-light-bulb-fixed": "workshop", "trap-find-animal-fixed": "greenhouse", "trap-water-plant-fixed": "greenhouse"}
    for task in FIXED:
        lays = [env.layout(task, v) for v in range(48)]
        assert {lay.target_room for lay in lays} == {rooms[task]}
        assert len({tuple(sorted(lay.objects.items())) for lay in lays}) == 48
        # What varies across variations: the target (6 values), the decoys and where they stand.
        assert len({lay.target for lay in lays}) == 6
        decoy_rooms = {tuple(sorted(r for o, r in lay.objects.items() if o in _lookalikes(task, lay))) for lay in lays}
        assert len(decoy_rooms) >= 4
        for lay in lays:
            assert sum(r == START_ROOM for o, r in lay.objects.items() if o in _lookalikes(task, lay)) == 2
    assert {env.layout("trap-water-plant-fixed", v).objects[CAN] for v in range(48)} == {"workshop"}


def _lookalikes(task, lay):
    noun = TASKS[task].noun
    return {noun.format(a) for a in TASKS[task].attrs} - {lay.target}


def test_no_fixed_layout_repeats_a_search_layout(env):
    # The shipped warm start trained on search dev layouts only (scripts/make_warmstart.py): none of
    # them, nor any other search layout, is a fixed-family layout.
    for task in FIXED:
        search = task.removesuffix("-fixed")
        seen = {tuple(sorted(env.layout(search, v).objects.items())) for v in range(48)}
        assert not seen & {tuple(sorted(env.layout(task, v).objects.items())) for v in range(48)}


def test_light_bulb_fixed_variation_0_by_hand(env):
    obs = env.reset("trap-light-bulb-fixed", 0)
    assert obs.task_description.startswith("Your task is to turn on the red light bulb.")
    assert obs.text == (
        "This room is called the hallway. In it, you see: a coat rack, a green light bulb, "
        "a yellow light bulb. Doors lead to: the kitchen, the workshop, the greenhouse, the bedroom."
    )
    gold = env.gold_path("trap-light-bulb-fixed", 0)
    assert gold == ["go to workshop", "focus on red light bulb", "turn on red light bulb"]
    res = env.step("go to workshop")
    assert res.observation.text == (
        "You go to the workshop. This room is called the workshop. In it, you see: a purple light bulb, "
        "a red light bulb, a workbench. Doors lead to: the hallway, the kitchen."
    )
    # The decoy beside the target fails the task like a hallway decoy.
    wrong = env.step("focus on purple light bulb")
    assert (wrong.reward, wrong.observation.score, wrong.done) == (-125.0, -100.0, True)
    results = [env.step(a) for a in gold] if env.reset("trap-light-bulb-fixed", 0) else []
    assert [r.reward for r in results] == [25.0, 25.0, 50.0] and results[-1].won


def test_an_before_a_vowel(env):
    assert "a coat rack, an orange light bulb, a red light bulb." in env.reset("trap-light-bulb-fixed", 36).text


def test_family_by_task_name():
    env = make_env(EnvConfig(name="trap", task="trap-find-animal-fixed"))
    assert env.family("trap-find-animal-fixed") == "fixed" and env.family("trap-find-animal") == "search"
    assert env.variations("trap-find-animal-fixed", "test") == tuple(range(36, 48))
    with pytest.raises(ValueError, match=r"'trap-fixed'.*trap-light-bulb-fixed"):
        env.family("trap-fixed")
