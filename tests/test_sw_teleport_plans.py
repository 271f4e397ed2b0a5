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
