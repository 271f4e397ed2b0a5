"""The shipped warm start on the real embedded model: it reads a correct note, and without one it keeps
the base model's trap reflex (measured: benchmarks/bench_lesson.py; scripts/make_warmstart.py trains on
dev layouts only, so the layouts here were never trained on)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from empo2_studio.config import PolicyConfig
from empo2_studio.envs.trap import TrapEnv
from empo2_studio.policy import Turn, load_policy, prompts
from empo2_studio.types import RetrievedTip

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def policy():
    torch.set_num_threads(2)
    return load_policy(PolicyConfig())  # the defaults: embedded model, float32 on CPU, the warm start


def action_probs(policy, task: str, variation: int, with_tip: bool) -> dict[str, float]:
    """P(each valid action) at step 0 under constrained decoding (sums to 1 over the valid actions)."""
    env = TrapEnv()
    obs = env.reset(task, variation)
    user = prompts.first_user_message("trap", obs, ())
    if with_tip:
        user = prompts.with_tips(user, [RetrievedTip("t", env.curated_tip(task, variation), 100.0, 1.0)], "compact")
    fmt = policy.chat_format
    convs = [[Turn(user, fmt.encode(a) + (fmt.eot_id,), obs.valid_actions)] for a in obs.valid_actions]
    with torch.no_grad():
        scored = policy.score(convs)
    return {a: math.exp(float(lp[0].sum())) for a, lp in zip(obs.valid_actions, scored)}


def test_warm_start_adapts_the_last_12_layers(policy):
    layers = {int(n.split("layers.")[1].split(".")[0]) for n, _ in policy.model.named_parameters() if "lora_" in n}
    assert layers == set(range(18, 30)) and policy.version == "warm-start"


@pytest.mark.parametrize("task, variation", [("trap-light-bulb", 37), ("trap-water-plant", 0)])
def test_a_correct_note_is_followed_and_without_it_the_trap_traps(policy, task, variation):
    gold = TrapEnv().gold_path(task, variation)[0]
    with_tip = action_probs(policy, task, variation, True)
    without = action_probs(policy, task, variation, False)
    assert sum(with_tip.values()) == pytest.approx(1.0, abs=1e-3)
    # measured 1.00 / 1.00 with the note, 0.02 / 0.06 without (the route default, 2026-12-05; the walk-back
    # adapter: 1.00 / 1.00 and 0.01 / 0.04); without it the likeliest first action is another
    assert with_tip[gold] >= 0.8
    assert without[gold] <= 0.2 and max(without, key=without.get) != gold


def test_choice_probs_script_both_normalisations_and_the_trap_in_the_target_room(policy):
    """scripts/choice_probs.py: token-level probabilities over the valid actions sum to 1 and leave the
    policy's decoding as it was; every whole-action variant is a categorical over the same actions; in
    the bulb's room the warm start does not focus on it under token-level, summed or per-word scores
    (measured ≤ 0.003 on variation 36: docs/notebook/2026-12-03-race.md)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "choice_probs.py"
    spec = importlib.util.spec_from_file_location("choice_probs", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    env = TrapEnv()
    obs = env.reset("trap-light-bulb", 36)
    fmt = policy.chat_format
    room, focus = env.gold_path("trap-light-bulb", 36)[:2]
    first = prompts.first_user_message("trap", obs, ())
    turns = [Turn(first, fmt.encode(room) + (fmt.eot_id,), obs.valid_actions)]
    obs = env.step(room).observation
    user = prompts.step_user_message(obs, "trap")
    actions = obs.valid_actions
    tok = mod.token_level(policy, turns, user, actions, 0.4)
    assert policy.decoding == "constrained"  # restored
    assert sum(tok) == pytest.approx(1.0, abs=1e-3)
    whole = mod.whole_action(policy, turns, user, actions, 0.4)
    assert set(whole) == set(mod.VARIANTS[1:])
    assert all(len(p) == len(actions) and sum(p) == pytest.approx(1.0, abs=1e-4) for p in whole.values())
    i = actions.index(focus)
    assert tok[i] < 0.05 and whole["sum"][i] < 0.05 and whole["word"][i] < 0.05


ROOT = Path(__file__).resolve().parents[1]


def focus_in_ruled_out_room(policy, task: str, variation: int, room: str) -> float:
    """P(any focus action) standing in `room`, which holds no target, with the note writer's sentences
    ruling the hallway and `room` out: bench_notes part "negation", its "rules the room out" row."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_notes_effect", ROOT / "benchmarks" / "bench_notes.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    note = bench.negation_notes(task, variation, room)["rules the room out"]
    return bench.focus_share(policy, task, variation, room, note)


def test_the_default_leaves_a_room_its_note_rules_out(policy):
    """The route default (ws33, fine-tuned from the walk-back adapter ws30, itself from the plain-words
    adapter: docs/notebook/2026-12-05-fine-tuned-from-the-default.md). Layout 40, standing in the bedroom
    (a yellow look-alike there) with a note ruling it out: measured 0.26 for the default (ws30: 0.20)
    against 0.96 for the plain-words adapter, which reads "not in the bedroom" as "in" it. The two older
    adapters are no longer shipped; `bench_notes.py --parts negation --warm-start DIR` compares a rebuilt
    one (docs/notebook/2026-12-06-only-what-runs-ships.md)."""
    assert focus_in_ruled_out_room(policy, "trap-water-plant", 40, "bedroom") <= 0.4


def walk_back_turn(policy, variation: int) -> float:
    """P(go to the flower's room | back in the hallway, carrying the can) on the gold path of a water-plant
    layout whose can starts in a third room, the note writer's long note shown whole (bench_notes part
    "mixed", its "found in the middle (the writer's order)" row)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_notes_route", ROOT / "benchmarks" / "bench_notes.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    task = "trap-water-plant"
    note = bench.mixed_notes(task, variation)["found in the middle (the writer's order)"]
    gold = TrapEnv().gold_path(task, variation)
    turn = gold.index(f"go to {TrapEnv().layout(task, variation).target_room}")
    with torch.no_grad():
        (scored,) = policy.score([bench.gold_conversation(policy, task, variation, note, False)])
    return float(scored[turn].sum().exp())


def test_the_route_adapter_heads_for_the_flower_with_the_can(policy):
    """The route adapter (the walk back weighted like the focus, docs/notebook/2026-12-05-route-adapter.md).
    Layout 37 (can in the workshop, flower in the bedroom), in the hallway with the can: measured 0.29,
    against 0.05 for the walk-back adapter it was fine-tuned from (no longer shipped; `bench_notes.py
    --parts mixed --warm-start DIR` compares a rebuilt one: docs/notebook/2026-12-06-only-what-runs-ships.md)."""
    assert walk_back_turn(policy, 37) >= 0.2
