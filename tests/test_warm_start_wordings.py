"""The warm start's training wordings and the benchmark's dev wordings are kept apart: the training
script never reads the wording files, and no sentence of one is a sentence of the other. (The dev set,
benchmarks/data/dev_notes.json, was the held-out set until adapters were chosen on it; the fresh test set
and its own checks are in tests/test_note_wording_sets.py.)"""

from __future__ import annotations

import argparse
import importlib.util
import random
import re
import sys
from pathlib import Path

import pytest

from empo2_studio.envs.trap import CAN, TASKS, TrapEnv

SEARCH = [t for t in TASKS if TASKS[t].family == "search"]  # the warm start's family; the dev and test notes' tasks

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "benchmarks" / "data" / "dev_notes.json"  # the dev set, held out from training


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench():
    return _load(ROOT / "benchmarks" / "bench_notes.py", "bench_notes_under_test")


@pytest.fixture(scope="module")
def wordings_mod():
    sys.path.insert(0, str(ROOT / "scripts"))
    return _load(ROOT / "scripts" / "note_wordings.py", "note_wordings")


def sentences(text: str) -> set[str]:
    return {s.strip().lower() for s in re.split(r"(?<=[.?!])\s+|\n", text) if s.strip()}


def heldout_sentences(bench, env: TrapEnv) -> set[str]:
    """Every sentence of the dev wordings (`HELDOUT`), filled for every test layout of their tasks."""
    return {s for task, ws in bench.load_wordings(HELDOUT).items() for v in env.variations(task, "test")
            for w in ws for s in sentences(bench.fill(w, task, v))}


def test_the_training_script_never_names_the_heldout_file():
    # the script and every project file it loads by path (its scripts/ neighbour) or imports from the
    # package: none mentions a wording file (dev_notes.json, once heldout_notes.json; test_notes.json)
    # or the benchmarks' data folder
    sources = [ROOT / "scripts" / "make_warmstart.py", ROOT / "scripts" / "note_wordings.py"]
    sources += list((ROOT / "empo2_studio").rglob("*.py"))
    for path in sources:
        text = path.read_text()
        assert "heldout" not in text.lower() and "benchmarks/data" not in text, path
        assert "dev_notes" not in text and "test_notes" not in text, path
    script = sources[0].read_text()
    assert "import note_wordings" in script or "from note_wordings import" in script
    assert "bench_notes" not in script


def test_heldout_file_has_twelve_fillable_wordings_per_trap_task(bench):
    wordings = bench.load_wordings(HELDOUT)
    assert set(wordings) == set(SEARCH)
    env = TrapEnv()
    for task, ws in wordings.items():
        assert len(ws) >= 12 and len({w["style"] for w in ws}) == len(ws)
        for v in env.variations(task, "test"):
            for w in ws:
                note = bench.fill(w, task, v)
                assert "{" not in note and env.layout(task, v).target_room in note


def test_fill_by_hand(bench):
    # trap-light-bulb 40: the yellow light bulb in the greenhouse; trap-water-plant 37: purple flower in
    # the bedroom, the can in the workshop (neither the hallway nor the flower's room)
    assert bench.fill({"style": "s", "text": "The {target} ({attr}) is in the {room}."}, "trap-light-bulb", 40) == (
        "The yellow light bulb (yellow) is in the greenhouse."
    )
    w = {"style": "s", "by_can": {"hallway": "h", "target_room": "t", "elsewhere": "{can_room} then {room}"}}
    assert bench.fill(w, "trap-water-plant", 37) == "workshop then bedroom"
    assert bench.fill(w, "trap-water-plant", 36) == "h" and bench.fill(w, "trap-water-plant", 38) == "t"
    # water-plant 37: go to workshop, pick up can, go to hallway, go to bedroom, focus, water
    assert bench.key_steps("trap-water-plant", 37) == {"first": 0, "focus": 4, "finish": 5}
    assert bench.key_steps("trap-light-bulb", 40) == {"first": 0, "focus": 1, "finish": 2}
    (tips, skipped), = bench.PinnedNote("n").retrieve_explained("trap-light-bulb", 40, ["q"])
    assert [(t.text, t.pinned) for t in tips] == [("n", True)] and skipped == []


def test_order_part_scores_the_record_of_a_winning_episode(bench):
    # trap-light-bulb-fixed 0: the red light bulb in the workshop; the record line of its gold path
    assert TrapEnv().gold_record("trap-light-bulb-fixed", 0) == (
        "[from the record] The red light bulb was seen in the workshop. "
        "Next time: go to workshop, then focus on red light bulb, then turn on red light bulb."
    )
    # the default tasks are the ones the dev wordings cover
    assert set(bench.SEARCH_TASKS) == set(bench.load_wordings(HELDOUT))


def test_training_wordings_share_no_sentence_with_the_heldout_set(bench, wordings_mod):
    env = TrapEnv()
    heldout = heldout_sentences(bench, env)
    rng = random.Random(0)
    trained: set[str] = set()
    for task in SEARCH:
        for v in env.variations(task, "test"):  # the same layouts, so equal wordings would give equal text
            for _ in range(40):
                trained |= sentences(wordings_mod.training_note(env.layout(task, v), rng))
    assert len(trained) > 500  # many distinct sentences
    assert not trained & heldout, sorted(trained & heldout)[:5]


def test_training_notes_state_the_facts_of_their_layout(wordings_mod):
    env = TrapEnv()
    rng = random.Random(1)
    for task in SEARCH:
        for v in env.variations(task, "dev"):
            lay = env.layout(task, v)
            for _ in range(10):
                note = wordings_mod.training_note(lay, rng)
                assert lay.target_room in note
                if task == "trap-water-plant":
                    assert "can" in note
    assert wordings_mod.gold_actions(env.layout("trap-water-plant", 37)) == env.gold_path("trap-water-plant", 37)


def test_training_conversations_learn_a_valid_next_action_and_never_see_test_layouts():
    mw = _load(ROOT / "scripts" / "make_warmstart.py", "make_warmstart_under_test")
    rng = random.Random(2)
    for task, recipe in ((t, r) for t in SEARCH for r in ("shipped", "wordings")):
        for v in (0, 24, 35):
            turns, learn = mw.conversation(task, v, rng, recipe=recipe)
            assert learn and all(turns[i][1] in turns[i][2] for i in learn)
            assert "Notes from your earlier attempts:" in turns[0][0]
    turns, learn = mw.conversation("trap-light-bulb", 30, random.Random(0))  # detours or not, it ends so
    assert [turns[i][1] for i in learn][-2:] == TrapEnv().gold_path("trap-light-bulb", 30)[-2:]
    with pytest.raises(SystemExit):  # argparse refuses the test layouts
        mw.main(["--splits", "test", "--out", "/nonexistent"])
    with pytest.raises(SystemExit):  # and a negative share of reflection conversations
        mw.main(["--reflect", "-1", "--out", "/nonexistent"])


def test_the_notes_benchmark_refuses_a_writer_that_is_not_an_adapter(bench, tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--parts", "write", "--note-writer", str(tmp_path), "--root", str(tmp_path)])
    assert "is not a PEFT adapter directory" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_reflection_answers_say_what_the_episode_saw_and_share_no_sentence_with_the_heldout_set(bench, wordings_mod):
    lay = TrapEnv().layout("trap-light-bulb", 24)  # the red light bulb, in the greenhouse
    assert (lay.target, lay.target_room) == ("red light bulb", "greenhouse")
    rng = random.Random(0)
    for _ in range(30):
        found = wordings_mod.reflection_answer(lay, ["hallway", "greenhouse"], None, rng)
        assert "greenhouse" in found and "red" in found and " not " not in f" {found} "
        missed = wordings_mod.reflection_answer(lay, ["hallway", "kitchen", "kitchen"], None, rng)
        assert "kitchen" in missed and "greenhouse" not in missed and re.search(r"\b(not|No)\b", missed)
        assert missed.count("kitchen") == 1  # a room searched twice is named once
    can = TrapEnv().layout("trap-water-plant", 24)
    assert "watering can stood in the hallway" in " ".join(
        wordings_mod.reflection_answer(can, ["hallway", "kitchen"], "hallway", random.Random(s)) for s in range(10))
    env, written = TrapEnv(), set()
    heldout = heldout_sentences(bench, env)
    for task in bench.load_wordings(HELDOUT):
        for v in env.variations(task, "test"):
            for rooms in (["hallway"], ["hallway", env.layout(task, v).target_room], ["hallway", "kitchen", "bedroom"]):
                written |= sentences(wordings_mod.reflection_answer(env.layout(task, v), rooms, "hallway", rng))
    assert not written & heldout, sorted(written & heldout)[:5]


def test_observation_form_notes_give_each_room_entered_its_verdict_and_share_no_sentence_with_the_heldout_set(bench, wordings_mod):
    env = TrapEnv()
    lay = env.layout("trap-water-plant", 24)  # the red flower in the bedroom, the can in the hallway
    assert (lay.target, lay.target_room, lay.objects[CAN]) == ("red flower", "bedroom", "hallway")
    rng = random.Random(0)
    for _ in range(50):
        note = wordings_mod.observation_note(lay, rng)
        parts = re.split(r"(?<=\.) ", note)
        assert parts[0] == "The red flower is not in the hallway."  # every walk starts there
        assert "hallway" in parts[1] and "can" in parts[1]  # and sees the can there
        flower = [i for i, p in enumerate(parts) if "bedroom" in p]
        assert len(flower) == 1 and "not" not in parts[flower[0]] and "red flower" in parts[flower[0]].lower()
        searched = re.findall(r"The red flower is not in the (\w+)\.", note)
        assert len(searched) == len(set(searched)) and "bedroom" not in searched  # each room once, all true
    # Past the flower's room (the last one needed here) a walk enters one room more with probability
    # 0.3 × 0.3 = 0.09 when a side room is left, and the bedroom is the last of the shuffled four in a
    # quarter of the walks: 0.75 × 0.09 = 0.0675.
    past = [wordings_mod.observation_note(lay, rng) for _ in range(2000)]
    share = sum("not in the" in re.split(r"bedroom", n, maxsplit=1)[1] for n in past) / len(past)
    assert share == pytest.approx(0.0675, abs=0.02)
    heldout, written = heldout_sentences(bench, env), set()
    for task in bench.load_wordings(HELDOUT):
        for v in env.variations(task, "test"):
            for _ in range(10):
                written |= sentences(wordings_mod.observation_note(env.layout(task, v), rng))
    assert not written & heldout, sorted(written & heldout)[:5]


def test_the_observed_share_is_refused_beyond_what_the_template_and_record_lines_leave(capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    mw = _load(ROOT / "scripts" / "make_warmstart.py", "make_warmstart_observed")
    with pytest.raises(SystemExit):
        mw.main(["--recipe", "wordings", "--template", "0.25", "--observed", "0.7"])
    assert "--observed must be a share in [0, 0.65]" in capsys.readouterr().err


def test_a_reflection_conversation_ends_in_a_true_note_about_what_its_turns_showed():
    mw = _load(ROOT / "scripts" / "make_warmstart.py", "make_warmstart_under_test")
    rng = random.Random(4)
    for task in SEARCH:
        for v in (24, 30, 35):
            turns, answer = mw.reflection_conversation(task, v, rng)
            lay = TrapEnv().layout(task, v)
            shown = " ".join(u for u, _, _ in turns)  # the room a turn is played in is in its user text
            assert (lay.target_room in answer) == (f"This room is called the {lay.target_room}." in shown)
    # pass-by episodes: the target's room is entered (and said), the target never acted on
    passed = 0
    for _ in range(40):
        turns, answer = mw.reflection_conversation("trap-light-bulb", 30, rng, pass_by_share=1.0)
        lay = TrapEnv().layout("trap-light-bulb", 30)
        shown = " ".join(u for u, _, _ in turns)
        assert (lay.target_room in answer) == (f"This room is called the {lay.target_room}." in shown)
        if lay.target_room in answer and all(lay.target not in a for _, a, _ in turns):
            passed += 1
    assert passed >= 10  # about half the episodes are meant to see the target; those all pass it by
    with pytest.raises(SystemExit):
        mw.main(["--pass-by", "2", "--out", "/nonexistent"])


def test_room_by_room_answers_give_each_room_its_verdict_and_stop_at_the_target(wordings_mod):
    lay = TrapEnv().layout("trap-light-bulb", 24)  # the red light bulb, in the greenhouse
    answer = wordings_mod.rooms_answer
    assert answer(lay, ["hallway", "kitchen", "kitchen", "greenhouse", "hallway", "bedroom"], None) == (
        "Kitchen: no red light bulb. Greenhouse: the red light bulb.")
    assert answer(lay, ["hallway", "bedroom", "workshop"], None) == "Bedroom: no red light bulb. Workshop: no red light bulb."
    assert answer(lay, ["hallway"], None) == "Hallway: no red light bulb."  # no other room: the hallway is said
    can = TrapEnv().layout("trap-water-plant", 24)  # the red flower in the bedroom, the can in the hallway
    assert answer(can, ["hallway", "kitchen"], "hallway") == "Hallway: the watering can. Kitchen: no red flower."
    assert wordings_mod.reflection_answer(lay, ["hallway", "greenhouse"], None, random.Random(0), "rooms") == (
        "Greenhouse: the red light bulb.")
    with pytest.raises(ValueError, match="'paragraph'"):
        wordings_mod.reflection_answer(lay, ["hallway"], None, random.Random(0), "paragraph")


def test_the_focus_weight_counts_focus_tokens_more_and_bad_shares_are_refused():
    import torch

    mw = _load(ROOT / "scripts" / "make_warmstart.py", "make_warmstart_under_test")
    go, focus = torch.tensor([-1.0, -1.0]), torch.tensor([-4.0])  # a 2-token "go to" turn, a 1-token focus
    assert float(mw.weighted_nll([go, focus], [False, True])) == pytest.approx(2.0)  # (1 + 1 + 4) / 3
    assert float(mw.weighted_nll([go, focus], [False, True], 3.0)) == pytest.approx(2.8)  # (1 + 1 + 12) / 5
    with pytest.raises(SystemExit):
        mw.main(["--focus-weight", "0", "--out", "/nonexistent"])
    with pytest.raises(SystemExit):
        mw.main(["--plan-share", "1.5", "--out", "/nonexistent"])


def test_the_plan_share_sets_how_many_training_notes_say_what_to_do(wordings_mod):
    lay = TrapEnv().layout("trap-light-bulb", 24)

    def says_what_to_do(share):  # every plan has a focus step; "Do not focus on …" is a warning, not a plan
        rng = random.Random(1)
        notes = [wordings_mod.training_note(lay, rng, share) for _ in range(400)]
        return sum(bool(re.search(r"(?<!not )focus on", n, re.IGNORECASE)) for n in notes) / len(notes)

    # A note states the fact 85 % of the time and adds a plan with probability `share`; without the
    # fact it always has a plan: 0.15 + 0.85 × share.
    for share in (0.0, 0.2, 0.55, 1.0):
        assert says_what_to_do(share) == pytest.approx(0.15 + 0.85 * share, abs=0.06), share


def test_the_lesson_bench_can_prefill_its_tips_in_a_teachers_words():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # bench_lesson imports bench_notes by name
    lesson = _load(ROOT / "benchmarks" / "bench_lesson.py", "bench_lesson_under_test")
    assert lesson.lesson_tip("trap-light-bulb", 0) == TrapEnv().curated_tip("trap-light-bulb", 0)
    assert lesson.lesson_tip("trap-light-bulb", 0, 0) == "The green light bulb is in the kitchen."  # facts, variation 0
    with pytest.raises(IndexError, match="wordings 0-12"):
        lesson.lesson_tip("trap-light-bulb", 0, 13)


def test_the_lesson_bench_refuses_a_wording_number_before_anything_is_written(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    lesson = _load(ROOT / "benchmarks" / "bench_lesson.py", "bench_lesson_under_test")
    with pytest.raises(SystemExit):
        lesson.main(["--parts", "distill", "--tip-wording", "13", "--root", str(tmp_path)])
    assert "has dev wordings 0-12" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SystemExit):
        lesson.main(["--parts", "adapt", "--threads", "0", "--root", str(tmp_path)])
    assert "--threads must be ≥ 1, got 0" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_focus_first_focuses_in_the_flowers_room_then_fetches_the_can_and_still_wins():
    mw = _load(ROOT / "scripts" / "make_warmstart.py", "make_warmstart_under_test")
    # Layout 31: the red flower in the kitchen, the can in the greenhouse; both side rooms open on the hallway.
    env = TrapEnv()
    env.reset("trap-water-plant", 31)
    env.step("go to kitchen")  # a detour into the flower's room before the can
    assert mw.next_action(env) == "go to hallway"  # the shortest plan: the can first
    played = []
    while not env._state.done:
        played.append(mw.next_action(env, focus_first=True))
        result = env.step(played[-1])
    assert played == ["focus on red flower", "go to hallway", "go to greenhouse", f"pick up {CAN}",
                      "go to hallway", "go to kitchen", "water red flower"]
    assert result.reward > 0 and result.observation.score == 100
    with pytest.raises(SystemExit):
        mw.main(["--focus-first", "2", "--out", "/nonexistent"])
    with pytest.raises(SystemExit):
        mw.main(["--plant-per-layout", "0", "--out", "/nonexistent"])


class _WordFormat:
    """A chat format whose tokens are whitespace-separated words (the prefix property of the real one)."""

    eot_id = -1

    def __init__(self) -> None:
        self.words: list[str] = []

    def encode(self, text: str) -> tuple[int, ...]:
        for w in text.split():
            if w not in self.words:
                self.words.append(w)
        return tuple(self.words.index(w) for w in text.split())


def test_room_questions_ask_about_rooms_the_episode_stood_in_and_answer_from_the_layout():
    mw = _load(ROOT / "scripts" / "make_warmstart.py", "make_warmstart_under_test")

    def asked(rooms: list[str], seed: int) -> dict[str, str]:  # room asked about -> answer
        qs = mw.room_questions("trap-light-bulb", 24, rooms, random.Random(seed))  # the red light bulb, in the greenhouse
        assert all(re.fullmatch(r"Was the red light bulb in the \w+\? Answer Yes or No\.", q) for q, _ in qs)
        return {re.search(r"in the (\w+)\?", q).group(1): a for q, a in qs}

    for seed in range(6):
        got = asked(["hallway", "kitchen", "greenhouse", "kitchen"], seed)
        assert got.pop("greenhouse") == "Yes" and len(got) == 1 and set(got.items()) <= {("hallway", "No"), ("kitchen", "No")}
    assert asked(["hallway", "bedroom", "hallway"], 0) == {"hallway": "No", "bedroom": "No"}
    assert asked(["hallway"], 0) == {"hallway": "No"}


def test_verdict_tokens_are_the_first_after_each_room_and_carry_the_verdict_weight():
    mw = _load(ROOT / "scripts" / "make_warmstart.py", "make_warmstart_under_test")
    fmt = _WordFormat()
    # words: Kitchen:(0) no(1) red(2) light(3) bulb.(4) Greenhouse:(5) the(6) red(7) light(8) bulb.(9)
    assert mw.verdict_positions(fmt, "Kitchen: no red light bulb. Greenhouse: the red light bulb.") == [1, 6]
    assert mw.verdict_positions(fmt, "The red light bulb was in the greenhouse.") == []
    args = argparse.Namespace(recipe="wordings", template=0.1, pass_by=0.0, room_questions=0.0, verdict_weight=3.0,
                              answer_form="rooms", context="conversation")
    conv, learned = mw.reflection_item(fmt, "trap-light-bulb", 24, random.Random(1), args)
    (last, weights), = learned.items()
    assert last == len(conv) - 1 and conv[last].user_text == mw.TIP_INSTRUCTION
    words = [fmt.words[i] for i in conv[last].action_ids[:-1]]  # the eot id closes the answer
    assert words[0].endswith(":") and words[-1].endswith(".")
    expected = [3.0 if i and words[i - 1].endswith(":") else 1.0 for i in range(len(words))] + [1.0]
    assert weights.tolist() == expected and expected.count(3.0) >= 1
    args.room_questions = 1.0
    conv, learned = mw.reflection_item(fmt, "trap-light-bulb", 24, random.Random(1), args)
    assert all(conv[i].user_text.startswith("Was the red light bulb in the ") for i in learned)
    assert all(w.tolist() == [3.0, 3.0] for w in learned.values())  # "Yes"/"No" and the eot id
    with pytest.raises(SystemExit):
        mw.main(["--room-questions", "1.5", "--out", "/nonexistent"])
    with pytest.raises(SystemExit):
        mw.main(["--verdict-weight", "0", "--out", "/nonexistent"])


def test_a_transcript_reflection_is_one_message_and_counts_the_room_the_last_action_enters():
    mw = _load(ROOT / "scripts" / "make_warmstart.py", "make_warmstart_under_test")
    # Layout 24: the red light bulb in the greenhouse; the last action walks in, so only a transcript shows it.
    rooms, can, text = mw.replay_rooms("trap-light-bulb", 24, ["go to kitchen", "go to hallway", "go to greenhouse"], final=True)
    assert rooms == ["hallway", "kitchen", "hallway", "greenhouse"] and can is None
    assert mw.replay_rooms("trap-light-bulb", 24, ["go to kitchen"], final=False)[0] == ["hallway"]
    lines = text.splitlines()
    assert lines[0].startswith("Task: Your task is to turn on the red light bulb.") and lines[-2] == "> go to greenhouse"
    assert "This room is called the greenhouse." in lines[-1] and "a red light bulb" in lines[-1]
    args = argparse.Namespace(recipe="wordings", template=0.1, pass_by=0.0, room_questions=0.0, verdict_weight=1.0,
                              answer_form="sentence", context="transcript")
    conv, learned = mw.reflection_item(_WordFormat(), "trap-light-bulb", 24, random.Random(2), args)
    assert len(conv) == 1 and list(learned) == [0]
    assert conv[0].user_text.startswith("Task: ") and conv[0].user_text.endswith(mw.TIP_INSTRUCTION)
    assert "Notes from your earlier attempts" not in conv[0].user_text


def test_return_trips_are_train_layouts_whose_can_sits_in_a_third_room_never_the_adapted_one(capsys):
    mw = _load(ROOT / "scripts" / "make_warmstart.py", "make_warmstart_under_test")
    env, task = TrapEnv(), "trap-water-plant"

    def third_room(v: int) -> bool:
        lay = env.layout(task, v)
        return lay.objects[CAN] not in ("hallway", lay.target_room)

    got = mw.return_trip_layouts(env)
    assert len(got) == 7 and all(v in env.variations(task, "train") and third_room(v) for v in got)
    first = env.variations(task, "train")[0]  # evaluation.adapt's layout: a third-room layout, left out
    assert third_room(first) and first not in got
    assert sum(map(third_room, env.variations(task, "dev"))) == 2  # why the option exists (docstring)
    for v in got:  # each one's gold path walks back through the hallway after the pick-up
        gold = env.gold_path(task, v)
        assert len(gold) == 6 and gold[1:3] == [f"pick up {CAN}", "go to hallway"]
    with pytest.raises(SystemExit):
        mw.main(["--return-trips", "--splits", "dev", "train", "--out", "/nonexistent"])
    assert "--return-trips adds train layouts" in capsys.readouterr().err


def test_stay_trips_are_train_layouts_whose_can_sits_in_the_flowers_room(capsys):
    """`--stay-trips`: the 7 train layouts (the adapted first one aside) where the pick-up is followed by
    the focus, not a walk back; none of them is a return trip."""
    mw = _load(ROOT / "scripts" / "make_warmstart.py", "make_warmstart_under_test")
    env, task = TrapEnv(), "trap-water-plant"
    got = mw.stay_layouts(env)
    assert got == [6, 12, 13, 14, 16, 18, 23] and not set(got) & set(mw.return_trip_layouts(env))
    for v in got:  # the room reached first holds both: pick up, then focus where it stands
        gold = env.gold_path(task, v)
        flower = env.layout(task, v).target
        assert gold[0] == f"go to {env.layout(task, v).target_room}"
        assert gold[1:] == [f"pick up {CAN}", f"focus on {flower}", f"water {flower}"]
    with pytest.raises(SystemExit):
        mw.main(["--stay-trips", "--splits", "train", "--out", "/nonexistent"])
    assert "--stay-trips adds train layouts" in capsys.readouterr().err


def test_anchor_walks_cover_every_batch_only_when_spread():
    mw = _load(ROOT / "scripts" / "make_warmstart.py", "make_warmstart_under_test")
    # The shipped route adapter's build by hand: 36 dev layouts × 4 walks = 144 anchors; 43 batches of 4.
    plain = mw.anchor_slices(144, 43, 4, spread=False)
    assert [len(r) for r in plain[:36]] == [4] * 36 and [len(r) for r in plain[36:]] == [0] * 7
    # --plant-per-layout 8: 62 batches; spread, each gets 2 or 3 walks (144 / 62 = 2.32).
    spread = mw.anchor_slices(144, 62, 4, spread=True)
    assert {len(r) for r in spread} == {2, 3} and sum(len(r) == 3 for r in spread) == 144 - 2 * 62
    assert [i for r in spread for i in r] == list(range(144))  # every walk exactly once, in order
    assert [len(r) for r in mw.anchor_slices(144, 144, 4, spread=True)] == [1] * 144
    assert [len(r) for r in mw.anchor_slices(10, 4, 4, spread=True)] == [2, 3, 2, 3]


@pytest.mark.parametrize("argv", [["--anchor-ref", "init"], ["--anchor-ref", "init", "--init", "x", "--epochs", "2"]])
def test_anchoring_to_the_init_adapter_needs_one_epoch_from_an_init(argv, capsys, tmp_path):
    mw = _load(ROOT / "scripts" / "make_warmstart.py", "make_warmstart_under_test")
    with pytest.raises(SystemExit):
        mw.main([*argv, "--out", str(tmp_path / "out")])
    assert "--anchor-ref init needs --init and --epochs 1" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before a model loads or a folder is written


def test_the_walk_back_counts_as_a_key_step_only_between_the_pick_up_and_the_focus():
    mw = _load(ROOT / "scripts" / "make_warmstart.py", "make_warmstart_under_test")
    # Layout 31 by hand: a detour, the can in the greenhouse, the red flower in the kitchen.
    actions = ["look around", "go to greenhouse", f"pick up {CAN}", "go to hallway", "go to kitchen",
               "focus on red flower", "water red flower"]
    turns, learn = [("u", a, ()) for a in actions], [1, 2, 3, 4, 5, 6]  # the detour (turn 0) is not learned
    assert mw.key_turns(turns, learn, ("focus on",)) == [False, False, False, False, True, False]
    assert mw.key_turns(turns, learn, ("focus on",), walk_back=True) == [False, False, True, True, True, False]
    can = ("focus on", f"pick up {CAN}")
    assert mw.key_turns(turns, learn, can, walk_back=True) == [False, True, True, True, True, False]
    # No pick-up (light bulb): the flag changes nothing.
    bulb = [("u", a, ()) for a in ("go to hallway", "go to kitchen", "focus on red light bulb")]
    assert mw.key_turns(bulb, [0, 1, 2], ("focus on",), walk_back=True) == [False, False, True]


def test_the_negation_probe_rules_out_the_room_it_stands_in_in_the_writers_own_sentences(bench):
    # Layout 36 of trap-light-bulb by hand: the green light bulb, in the greenhouse.
    notes = bench.negation_notes("trap-light-bulb", 36, "kitchen")
    out = "The green light bulb is not in the hallway. The green light bulb is not in the kitchen."
    assert notes == {"no note": None, "rules the room out": out,
                     "rules it out, names the target's room": out + " The green light bulb is in the greenhouse.",
                     "room has no X": "The hallway has no green light bulb. The kitchen has no green light bulb.",
                     "searched, did not find": "I searched the hallway and the kitchen and did not find the green light bulb.",
                     "room: no X": "Hallway: no green light bulb. Kitchen: no green light bulb.",
                     "rules it out, another room": out + " It must be in another room.",
                     "rules out the hallway only": "The green light bulb is not in the hallway.",
                     "says nothing of the target": "The hallway has doors to the other rooms."}
    assert "negation" in bench.PARTS


def test_negation_conversations_enter_a_ruled_out_room_first_and_learn_to_leave_it(bench, wordings_mod):
    mw = _load(ROOT / "scripts" / "make_warmstart.py", "make_warmstart_under_test")
    env = TrapEnv()
    for task in SEARCH:
        for v in (24, 30, 35):
            lay = env.layout(task, v)
            turns, learn = mw.conversation(task, v, random.Random(v), recipe="wordings", negation=True)
            note = turns[0][0].split("Notes from your earlier attempts:\n- ")[1]
            ruled = re.findall(rf"The {lay.target} is not in the (\w+)\.", note)
            assert ruled[0] == "hallway" and lay.target_room not in ruled and 2 <= len(ruled) <= 3
            entered = turns[0][1].removeprefix("go to ")
            assert entered in ruled[1:] and learn[0] == 1  # the first move enters a ruled-out room, not learned
            env.reset(task, v)
            env.step(turns[0][1])
            assert turns[1][1] == mw.next_action(env)  # from there, the teacher's way on
            assert not turns[1][1].startswith("focus on")  # never a focus in a room the note rules out
    heldout, written, rng = heldout_sentences(bench, env), set(), random.Random(0)
    for task in bench.load_wordings(HELDOUT):
        for v in env.variations(task, "test"):
            for _ in range(10):
                written |= sentences(wordings_mod.negation_note(env.layout(task, v), rng)[0])
    assert not written & heldout, sorted(written & heldout)[:5]
    with pytest.raises(SystemExit):
        mw.main(["--negation", "1.5", "--out", "/nonexistent"])


def test_init_refuses_a_folder_that_is_not_an_adapter_before_loading_anything(tmp_path, capsys):
    mw = _load(ROOT / "scripts" / "make_warmstart.py", "make_warmstart_under_test")
    (tmp_path / "notes.txt").write_text("not an adapter")
    with pytest.raises(SystemExit):
        mw.main(["--init", str(tmp_path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert f"--init {str(tmp_path)!r} is not an adapter directory" in err
    assert not (tmp_path / "out").exists()


def test_the_mixed_probe_places_the_writers_found_sentence_among_the_rooms_ruled_out(bench):
    # Layout 37 of trap-water-plant by hand: the purple flower in the bedroom, the can in the workshop.
    notes = bench.mixed_notes("trap-water-plant", 37)
    h, k, g, w = (f"The purple flower is not in the {r}." for r in ("hallway", "kitchen", "greenhouse", "workshop"))
    found, can = "The purple flower is in the bedroom.", "The watering can is in the workshop."
    assert notes == {"no note": None,
                     "found in the middle (the writer's order)": f"{h} {k} {found} {g} {w} {can}",
                     "found last": f"{h} {k} {g} {w} {can} {found}",
                     "found first": f"{found} {can} {h} {k} {g} {w}",
                     "found and the can only": f"{found} {can}",
                     "the can, then found": f"{can} {found}"}
    assert all(bench.can_case("trap-water-plant", v) == "elsewhere" for v in bench.CAN_ELSEWHERE)
    assert "mixed" in bench.PARTS


def test_distractors_state_a_true_room_for_another_object_and_share_no_sentence_with_the_heldout_set(bench, wordings_mod, capsys):
    env = TrapEnv()
    heldout = heldout_sentences(bench, env)
    rng = random.Random(0)
    said: set[str] = set()
    for task in SEARCH:
        for v in env.variations(task, "test"):
            lay = env.layout(task, v)
            for _ in range(30):
                s = wordings_mod.distractor(lay, rng)
                said.add(s.lower())
                thing = next(o for o in sorted(lay.objects, key=len, reverse=True) if o in s)
                assert thing not in (lay.target, CAN) and lay.target not in thing
                assert f"the {lay.objects[thing]}" in s.lower()  # the room it names is where that object stands
    assert len(said) > 100 and not said & heldout, sorted(said & heldout)[:5]
    # trap-water-plant 37, by hand: the purple flower in the bedroom, the can in the workshop; the note
    # keeps its text whole, with the distractor before or after it
    lay, note = env.layout("trap-water-plant", 37), "The purple flower is in the bedroom."
    both = {wordings_mod.with_distractor(note, lay, random.Random(i)).index(note) == 0 for i in range(20)}
    assert both == {True, False}
    mw = _load(ROOT / "scripts" / "make_warmstart.py", "make_warmstart_under_test")
    with pytest.raises(SystemExit):
        mw.main(["--distract", "1.5", "--out", "/nonexistent"])
    assert "--distract must be a share in [0, 1], got 1.5" in capsys.readouterr().err
