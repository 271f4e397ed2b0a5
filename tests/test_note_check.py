"""The note checker (`envs.note_check`): a note's claims about where the target (and the tool) is, checked
against what the episode's own observations showed. Episodes are played in the real `TrapEnv` (gold paths
and hand-chosen wrong walks); every expected verdict below was worked out by hand from the layouts named."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from empo2_studio.envs.note_check import NoteFacts, NoteVerdict, check_note, episode_facts
from empo2_studio.envs.trap import TrapEnv
from empo2_studio.types import ActionSample, Episode, Step

BULB, PLANT, ANIMAL = "trap-light-bulb", "trap-water-plant", "trap-find-animal"


def _episode(task: str, variation: int, actions: list[str] | None = None) -> Episode:
    """Play `actions` (default: the gold path) from a reset into an `Episode`, as the rollout records one."""
    env = TrapEnv()
    obs = env.reset(task, variation)
    steps = []
    for i, action in enumerate(env.gold_path(task, variation) if actions is None else actions):
        res = env.step(action)
        steps.append(Step(
            index=i, user_message="", tips=(), valid_actions=(), sample=ActionSample(action, (1,), (0.0,)),
            action=res.action, corrected=res.corrected, reward=res.reward, score=res.observation.score,
            observation=res.observation.text,
        ))  # fmt: skip
        if res.done:
            break
    return Episode(
        episode_id=f"{task}-{variation}", env="trap", task=task, variation=variation, split="test",
        rollout_mode="naive", update_mode=None, decoding="constrained", temperature=1.0, seed=0,
        steps=tuple(steps), score=steps[-1].score, won=steps[-1].score >= 100,
        task_description=obs.task_description, first_observation=obs.text,
    )  # fmt: skip


def _kind(v: NoteVerdict) -> str:
    return "correct" if v.correct else "false" if v.false else "neither"


@pytest.fixture(scope="module")
def won_bulb() -> NoteFacts:
    # trap-light-bulb 36: the green light bulb is in the greenhouse; the gold path goes straight there
    ep = _episode(BULB, 36)
    assert ep.won and TrapEnv().gold_path(BULB, 36)[0] == "go to greenhouse"
    return episode_facts(ep)


@pytest.fixture(scope="module")
def failed_bulb() -> NoteFacts:
    # the same layout, a wrong walk: kitchen, workshop, back to the hallway, a decoy focused (−100)
    ep = _episode(BULB, 36, ["go to kitchen", "go to workshop", "go to hallway", "focus on blue light bulb"])
    assert not ep.won and ep.score == -100
    return episode_facts(ep)


def test_episode_facts_of_a_won_and_a_failed_episode(won_bulb, failed_bulb):
    assert won_bulb.targets == ("green light bulb",) and won_bulb.tool is None
    assert won_bulb.seen_in == {"green light bulb": "greenhouse"}
    assert won_bulb.searched == ("hallway", "greenhouse")
    assert set(won_bulb.rooms) == {"hallway", "kitchen", "workshop", "greenhouse", "bedroom"}
    assert {"blue light bulb", "yellow light bulb", "coat rack", "bench"} <= set(won_bulb.objects)
    assert failed_bulb.seen_in == {} and failed_bulb.searched == ("hallway", "kitchen", "workshop")


def test_a_winning_episodes_note_is_correct_in_the_right_room_false_elsewhere(won_bulb):
    right = check_note("The green light bulb is in the greenhouse.", won_bulb)
    assert (right.correct, right.false) == (True, False)
    assert right.claims == (("green light bulb", "greenhouse", True),)
    assert right.reason == "correct: states the green light bulb in the greenhouse"
    # the kitchen was never entered: unsupported, so false
    wrong = check_note("The green light bulb is in the kitchen.", won_bulb)
    assert _kind(wrong) == "false" and wrong.reason == (
        "false: says the green light bulb is in the kitchen, but the episode saw it in the greenhouse"
    )
    # denying the room it was seen in is false too
    assert _kind(check_note("The green light bulb was not in the greenhouse.", won_bulb)) == "false"
    # a plan in the actions' words, and the template a teacher writes
    plan = "go to greenhouse, then focus on green light bulb, then turn on green light bulb"
    assert _kind(check_note(plan, won_bulb)) == "correct"
    assert _kind(check_note(TrapEnv().curated_tip(BULB, 36), won_bulb)) == "correct"
    # the decoy's room does not count for the target
    both = check_note("The red light bulb is in the hallway and the green light bulb is in the greenhouse.", won_bulb)
    assert both.claims == (("green light bulb", "greenhouse", True),) and both.correct


def test_a_room_the_episode_never_entered_is_false_even_when_it_holds_the_target(failed_bulb):
    # the green light bulb IS in the greenhouse, but this episode never went there: it did not find that
    v = check_note("The green light bulb is in the greenhouse.", failed_bulb)
    assert v.false and v.reason.endswith("but the episode never entered it")


def test_a_failed_episodes_note_is_correct_when_it_says_where_the_target_was_not(failed_bulb):
    v = check_note("I searched the kitchen and workshop but did not find the green light bulb.", failed_bulb)
    assert v.claims == (("green light bulb", "kitchen", False), ("green light bulb", "workshop", False))
    assert v.correct and v.reason == "correct: states the green light bulb not in the kitchen, workshop"
    record_style = check_note("The green light bulb was not in: hallway, kitchen, workshop.", failed_bulb)
    assert record_style.correct and len(record_style.claims) == 3
    # the bedroom was never searched: saying it is not there claims nothing the episode found
    assert _kind(check_note("The green light bulb is not in the bedroom.", failed_bulb)) == "neither"
    # "it" takes the target named in the sentence before; the kitchen was searched without it
    it = check_note("I looked for the green light bulb. It is in the kitchen.", failed_bulb)
    assert it.claims == (("green light bulb", "kitchen", True),) and it.false
    assert it.reason == (
        "false: says the green light bulb is in the kitchen, but the episode searched it without seeing it"
    )
    walked = check_note("I looked for the green light bulb. I went to the kitchen. It was not there.", failed_bulb)
    assert walked.claims == (("green light bulb", "kitchen", False),) and walked.correct


def test_filler_and_a_note_without_a_room_are_neither(won_bulb, failed_bulb):
    for facts in (won_bulb, failed_bulb):
        for note in ("The path was clear, but the final destination was not yet",
                     "This is a very short answer.", "turn on green light bulb", ""):  # fmt: skip
            v = check_note(note, facts)
            assert _kind(v) == "neither" and v.filler
    v = check_note("It is in the kitchen.", failed_bulb)  # "it" with nothing named before it
    assert v.claims == () and v.reason == "neither: no claim about where the green light bulb is"


def test_short_forms_name_the_target(won_bulb):
    for note in ("The green bulb is in the greenhouse.", "Bulb you want: the green one, in the greenhouse.",
                 "green bulb = greenhouse", "Where is the green light? In the greenhouse."):  # fmt: skip
        assert check_note(note, won_bulb).claims == (("green light bulb", "greenhouse", True),), note
    # "the bulb" alone could be any of the bulbs: no claim
    assert check_note("The bulb is in the greenhouse.", won_bulb).claims == ()


def test_water_plant_needs_the_can_too():
    # trap-water-plant 37: the purple flower is in the bedroom, the watering can in the workshop
    gold = TrapEnv().gold_path(PLANT, 37)
    assert gold[:2] == ["go to workshop", "pick up watering can"] and gold[3] == "go to bedroom"
    facts = episode_facts(_episode(PLANT, 37))
    assert facts.tool == "watering can" and facts.seen_in == {"watering can": "workshop", "purple flower": "bedroom"}
    flower_only = check_note("The purple flower is in the bedroom.", facts)
    assert _kind(flower_only) == "neither"
    assert flower_only.reason == "neither: does not state the watering can in the workshop"
    both = check_note("I picked up the can in the workshop and watered the purple flower in the bedroom.", facts)
    assert both.claims == (("watering can", "workshop", True), ("purple flower", "bedroom", True)) and both.correct
    assert _kind(check_note(", then ".join(gold), facts)) == "correct"  # the walk: each item where it was reached
    assert _kind(check_note("The can is in the bedroom and the purple flower is in the bedroom.", facts)) == "false"
    # a failed walk that never found the can: only the flower is asked of the note
    missed = episode_facts(_episode(PLANT, 37, ["go to kitchen", "go to hallway", "focus on red flower"]))
    assert "watering can" not in missed.seen_in
    assert _kind(check_note("The purple flower was not in the kitchen.", missed)) == "correct"


def test_an_animal_is_told_from_its_toy():
    # trap-find-animal 37: the frog is in the greenhouse, a toy frog in the hallway
    facts = episode_facts(_episode(ANIMAL, 37))
    assert facts.seen_in == {"frog": "greenhouse"} and "toy frog" in facts.objects
    toy = "The frog in the hallway is only a toy. The real frog lives in the greenhouse."
    assert _kind(check_note(toy, facts)) == "correct"
    assert _kind(check_note("The toy frog is in the hallway, the frog is in the greenhouse.", facts)) == "correct"
    assert _kind(check_note("The frog is in the hallway.", facts)) == "false"


def test_episode_facts_needs_a_target():
    ep = _episode(BULB, 36)
    from dataclasses import replace

    with pytest.raises(ValueError, match="names no focus target"):
        episode_facts(replace(ep, task_description="Your task is to boil water."))


def _bench():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_notes.py"
    spec = importlib.util.spec_from_file_location("bench_notes_write_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_write_parts_table_from_hand_made_verdicts():
    bench = _bench()
    rec = lambda won, c, f, note="n": {"task": BULB, "won": won, "note": note, "correct": c, "false": f,  # noqa: E731
                                      "reason": "correct" if c else "false" if f else "neither"}  # fmt: skip
    records = [rec(True, True, False, "a"), rec(True, False, True, "b"), rec(True, False, False, "c"),
               rec(True, True, False, "d"), rec(False, False, False, "e")]  # fmt: skip
    # examples are distinct notes: the same filler twice shows once
    assert bench.write_table([rec(False, False, False, "x"), rec(True, False, False, "x")], [BULB])[-1:] == [
        '- (failed) "x" → neither'
    ]
    lines = bench.write_table(records, [BULB, PLANT])
    assert lines[2] == f"| {BULB} | won | 4 | 0.50 | 0.25 | 0.25 |"
    assert lines[3] == f"| {BULB} | failed | 1 | 0.00 | 0.00 | 1.00 |"
    assert lines[4] == f"| {PLANT} | won | 0 | – | – | – |"
    # one example of each kind first, then none more than 3
    assert lines[-3:] == ['- (won) "a" → correct', '- (won) "b" → false', '- (won) "c" → neither']
    note = ("[no tip written by the model] The episode ended with score 100.0/100 after 2 steps; "
            "last actions: go to greenhouse; focus on green light bulb.")
    fallback = bench.judge_note(note, _episode(BULB, 36))
    assert fallback.filler and fallback.claims == ()


def test_the_room_question_asks_about_each_side_room_and_one_holds_the_target():
    bench, env = _bench(), TrapEnv()
    lay = env.layout(BULB, 36)
    cases = bench.room_questions(BULB, [36])
    assert len(cases) == 4 and sum(present for present, _ in cases) == 1
    (question,) = [q for present, q in cases if present]
    assert f"This room is called the {lay.target_room}." in question and f"a {lay.target}" in question
    assert all(q.endswith(f"Is the {lay.target} in this room? Answer Yes or No.") for _, q in cases)
    assert all(q.startswith(f"Task: {env.task_description(BULB, 36)}") for _, q in cases)


def test_auc_by_hand():
    auc = _bench().auc
    assert auc([2.0, 1.0], [0.0]) == 1.0 and auc([0.0], [1.0]) == 0.0
    assert auc([1.0, 0.0], [0.0, 0.0]) == 0.75  # (1 + 1 + 0.5 + 0.5) / 4
    with pytest.raises(ValueError, match="both classes"):
        auc([1.0], [])


def test_episode_questions_ask_about_the_rooms_the_transcript_shows():
    bench = _bench()
    # layout 36: the green light bulb in the greenhouse; the wrong walk never enters it
    failed = bench.episode_questions(_episode(BULB, 36, ["go to kitchen", "go to workshop", "go to hallway",
                                                          "focus on blue light bulb"]), "transcript")
    asked = {q.rsplit(" in the ", 1)[1].split("?")[0]: present for present, _, q in failed}
    assert asked == {"hallway": False, "kitchen": False, "workshop": False}
    assert all(turns == [] and q.startswith("Task: ") and q.endswith("Answer Yes or No.") for _, turns, q in failed)
    won = bench.episode_questions(_episode(BULB, 36), "transcript")  # the gold path: straight to the greenhouse
    assert {q.rsplit(" in the ", 1)[1].split("?")[0]: present for present, _, q in won} == {"hallway": False, "greenhouse": True}
