"""`make_sw_warmstart.teleport_path`: a walking gold plan rewritten to teleport, replayed on the real simulator."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))


@pytest.mark.scienceworld
def test_a_walking_plan_becomes_teleport_and_look_around_and_still_wins():
    from make_sw_warmstart import teleport_path

    from empo2_studio.envs.scienceworld import ScienceWorldEnv

    with ScienceWorldEnv() as env:
        walk, score = env.valid_gold_path("power-component", 0)
        assert score == 100 and walk[0].startswith("go to ")
        plan = teleport_path(env, "power-component", 0, walk)
        # every "go to …" run became one teleport to its last room, followed by a look around
        assert plan[:2] == ["teleport to workshop", "look around"]
        assert not any(a.startswith("go to ") for a in plan) and len(plan) < len(walk)
        assert plan[2:] == [a for a in walk if not a.startswith("go to ") and a != "look around"][: len(plan) - 2]
        # a plan without moves has nothing to rewrite; a step the simulator does not list is refused
        assert teleport_path(env, "power-component", 0, plan) is None
        assert teleport_path(env, "power-component", 0, ["go to the moon"] + walk[1:]) is None


def test_no_named_room_task_text_is_the_held_out_find_sentence():
    """The named-room turns teach reading a room from a task text; none of their texts may be the held-out
    find-* tasks' own sentence ("… Then, move it to the red box in the bedroom."), or the dev probe would
    measure a copied sentence, not a skill."""
    from make_sw_warmstart import NAMED_ROOM_TASKS

    from empo2_studio.envs.sw_search import _BOX  # the pattern the lesson and the search record read the box with

    held_out = "Your task is to find a(n) animal. First, focus on the thing. Then, move it to the red box in the bedroom."
    assert _BOX.search(held_out)["room"] == "bedroom"  # the pattern does catch the held-out sentence
    for template in NAMED_ROOM_TASKS:
        text = template.format(obj="drawer", box="red box", room="bedroom")
        assert _BOX.search(text) is None, text
        assert "bedroom" in text and "drawer" in text


@pytest.mark.scienceworld
def test_a_named_room_conversation_ends_by_teleporting_to_the_room_its_task_names():
    import random

    from make_sw_warmstart import NOT_PICKED, named_room_turns

    from empo2_studio.envs.scienceworld import ScienceWorldEnv

    rng = random.Random(0)
    with ScienceWorldEnv() as env:
        made = [named_room_turns(env, "power-component", v, rng) for v in (0, 1, 2)]
    assert any(made)
    for turns, first_trained in filter(None, made):
        actions = [a for _, a, _ in turns]
        assert first_trained == 2 and len(actions) == 6
        first_room, obj = actions[0].removeprefix("teleport to "), actions[2].removeprefix("focus on ")
        assert actions[1] == "look around" and actions[3] == f"pick up {obj}" and first_room not in NOT_PICKED
        named = actions[4].removeprefix("teleport to ")
        box = actions[5].removeprefix(f"move {obj} to ")
        task_line = turns[0][0].split("\n", 1)[0]
        assert named != first_room and f"the {named}" in task_line and obj in task_line
        assert f"the {box}" in task_line.lower() and box != named and turns[5][0].startswith(f"Observation: You teleport to the {named}.")
        # the simulator's own states: every trained action is one of its step's valid actions
        assert all(a in valid for _, a, valid in turns)
        assert turns[3][0].startswith(f"Observation: You focus on the {obj}.")
