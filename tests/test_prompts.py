"""Prompt rendering: exact strings for the agent's chat (method.md §3)."""

import pytest

from empo2_studio.policy import prompts
from empo2_studio.policy.prompts import (
    FINAL_INSTRUCTION,
    conversation_text,
    first_user_message,
    focus_items,
    step_user_message,
    with_tips,
)
from empo2_studio.types import Observation, RetrievedTip

OBS = Observation(
    text="You are in the hallway. You see a door to the kitchen.",
    task="trap-light-bulb",
    variation=0,
    task_description="Your task is to turn on the red light bulb. First, focus on the red light bulb. Then, turn it on.",
    valid_actions=("go to kitchen", "look around"),
    inventory="",
)


def test_focus_items_extracts_objects_in_order_without_duplicates():
    desc = "Your task is to find a(n) animal. First, focus on the thing and then focus on a frog; focus on the thing."
    assert focus_items(desc) == ("thing", "frog")
    assert focus_items("Your task is to boil water.") == ()


@pytest.fixture
def paper_scienceworld(monkeypatch):
    """ScienceWorld in the paper's layout (its default is the compact one since 2026-12-06)."""
    import empo2_studio.envs as envs

    monkeypatch.setitem(envs.PROMPT_STYLES, "scienceworld", "paper")


def test_first_user_message_exact(paper_scienceworld):
    msg = first_user_message("scienceworld", OBS, ("look around\nYou see a lamp.", "go to kitchen"))
    expected = (
        prompts.INTRO
        + "\n\nExample 1:\nlook around\nYou see a lamp.\n\nExample 2:\ngo to kitchen\n\n"
        + "Your task: Your task is to turn on the red light bulb. First, focus on the red light bulb. Then, turn it on.\n"
        + "Allowed action formats (OBJ is an object, LOC a place): "
        + ", ".join(prompts.action_formats("scienceworld")) + ".\n"
        + 'When you arrive in a new place, use "look around" to see what is there.\n'
        + "The only things you may focus on are: red light bulb. Focusing on anything else, such as a "
        + "container, ends the task as failed.\n"
        + "Inventory: (empty)\n"
        + "Observation: You are in the hallway. You see a door to the kitchen.\n\n"
        + FINAL_INSTRUCTION
    )
    assert msg == expected


def test_first_user_message_without_fewshot_starts_with_task(paper_scienceworld):
    assert first_user_message("scienceworld", OBS, ()).startswith("Your task: Your task is to turn on")


def test_step_user_message_exact(paper_scienceworld):
    assert step_user_message(OBS) == step_user_message(OBS, "scienceworld") == (
        "Observation: You are in the hallway. You see a door to the kitchen.\n\n" + FINAL_INSTRUCTION
    )


def test_compact_style_for_the_trap_exact():
    assert prompts.prompt_style("trap") == prompts.prompt_style("scienceworld") == "compact"
    assert prompts.prompt_style("an-env-with-no-style") == "paper"
    # few-shot runs are not shown in the compact style
    assert first_user_message("trap", OBS, ("look around\nYou see a lamp.",)) == (
        "Task: Your task is to turn on the red light bulb. First, focus on the red light bulb. Then, turn it on. "
        "Focusing on anything else fails the task. Reply with one action.\n\n"
        "Observation: You are in the hallway. You see a door to the kitchen."
    )
    held = Observation(**{**{f: getattr(OBS, f) for f in OBS.__slots__}, "inventory": "In your inventory, you see: a watering can."})
    assert step_user_message(held, "trap") == (
        "Observation: You are in the hallway. You see a door to the kitchen.\n"
        "In your inventory, you see: a watering can."
    )


def test_compact_tips_block_shows_each_distinct_tip_once_at_the_end():
    entry = "The bulb is in the kitchen; at that step the action taken was go to kitchen; the episode ended with score 100.0/100"
    tips = [
        RetrievedTip("a", entry, 100.0, 0.9),
        RetrievedTip("b", entry.replace("go to kitchen;", "look around;"), 100.0, 0.8),
        RetrievedTip("c", "Try the workshop.", 0.0, 0.7),
    ]
    assert with_tips("hello", tips, "compact") == (
        "hello\n\nNotes from your earlier attempts:\n- The bulb is in the kitchen\n- Try the workshop."
    )
    assert with_tips("hello", [], "compact") == "hello"


def test_with_tips_appends_block_and_is_identity_without_tips():
    tips = [RetrievedTip("a", "bulb is in the workshop", 80.0, 0.9), RetrievedTip("b", "hallway is empty ", 10.0, 0.7)]
    assert with_tips("hello", tips) == (
        "hello\n\n<tip> Notes you wrote during your earlier attempts at this task:\n"
        "bulb is in the workshop\nhallway is empty\n</tip>\n\n"
    )
    assert with_tips("hello", []) == "hello"


def test_conversation_text():
    assert conversation_text([("hi", "look around"), ("dark room", "")]) == (
        "user: hi assistant: look around user: dark room"
    )


def test_compact_prompt_keeps_the_best_scored_note_and_three_curated_ones():
    def entry(i, note, pinned=False):
        return RetrievedTip(f"t{i}", f"{note}{prompts.ENTRY_SUFFIX}look around (score 0)", 100.0 - i, 0.9, pinned)

    tips = [entry(0, "A"), entry(1, "A"), entry(2, "B"), entry(3, "C"), entry(4, "D"), entry(5, "B"), entry(6, "E")]
    shown, cut = prompts.compact_notes_cut(tips)
    assert [t.tip_id for t in shown] == ["t0", "t1"]  # every entry of the best-scored note, A
    assert [t.tip_id for t in cut] == ["t2", "t3", "t4", "t5", "t6"]
    assert prompts.tips_block(shown, "compact") == "\n\n" + prompts.COMPACT_NOTES_HEADER + "\n- A"
    assert prompts.compact_cut_reason(shown, cut[0]) == "a compact prompt shows the best-scored note only (score 98.0)"
    curated = [entry(i, n, pinned=True) for i, n in enumerate("AABCDBE")]
    shown, cut = prompts.compact_notes_cut(curated)
    assert [t.tip_id for t in shown] == ["t0", "t1", "t2", "t3", "t5"]  # every entry of curated A, B, C
    assert prompts.compact_cut_reason(shown, cut[0]) == "a compact prompt shows the 3 best-scored notes only (score 96.0)"
    assert prompts.compact_notes_cut([]) == ([], [])


PLAN = "The can is in the shed and the fern is in the bedroom: go to shed, then pick up can, then go to hallway, then go to bedroom, then water fern."


def test_remaining_plan_drops_the_steps_already_played_in_order():
    rest = prompts.remaining_plan
    assert rest(PLAN, []) == PLAN
    # detours between plan steps do not matter; the plan resumes at its first unplayed step
    assert rest(PLAN, ["go to kitchen", "go to hallway", "go to shed", "look around", "pick up can"]) == (
        "The can is in the shed and the fern is in the bedroom: go to hallway, then go to bedroom, then water fern."
    )
    # out of order does not count: "pick up can" before "go to shed" matches nothing
    assert rest(PLAN, ["pick up can", "go to hallway"]) == PLAN
    # every step played (the episode went on after the plan) or no plan at all: unchanged
    done = ["go to shed", "pick up can", "go to hallway", "go to bedroom", "water fern"]
    assert rest(PLAN, done) == PLAN
    assert rest("Explore every room before you focus.", ["go to shed"]) == "Explore every room before you focus."
    # a record line's plan follows its last ": ", and a stored entry's note has no final period
    record = "[from the record] The fern was seen in the bedroom. Next time: go to bedroom, then focus on fern"
    assert rest(record, ["go to bedroom"]) == "[from the record] The fern was seen in the bedroom. Next time: focus on fern"


def test_with_plan_progress_keeps_the_entry_suffix_and_the_tip_id():
    suffix = f"{prompts.ENTRY_SUFFIX}go to shed; the episode ended with score 20.0/100"
    tip = RetrievedTip("t1", PLAN.rstrip(".") + suffix, 20.0, 0.7)
    shown = prompts.with_plan_progress(tip, ["go to shed"])
    assert shown.tip_id == "t1" and shown.score == 20.0 and shown.similarity == 0.7
    assert shown.text == (
        "The can is in the shed and the fern is in the bedroom: pick up can, then go to hallway, then go to bedroom, "
        "then water fern" + suffix
    )
    assert prompts.with_plan_progress(tip, ["look around"]) is tip


def test_remaining_plan_finds_the_plan_sentence_and_keeps_what_follows():
    record = (
        "[from the record] The bulb was seen in the workshop. Actions that scored: go to workshop. "
        "Next time: go to workshop, then focus on bulb, then turn on bulb. [the model's note] Note: look first."
    )
    # "Actions that scored: go to workshop" is a one-step sentence, not a plan; the model's note is kept
    assert prompts.remaining_plan(record, ["go to workshop"]) == (
        "[from the record] The bulb was seen in the workshop. Actions that scored: go to workshop. "
        "Next time: focus on bulb, then turn on bulb. [the model's note] Note: look first."
    )
    # a stored tip as `with_record` writes it: the model's sentence (with a one-step "…: …") first
    stored = "[the model's note] Note: go to kitchen. [from the record] Next time: go to workshop, then focus on bulb."
    assert prompts.remaining_plan(stored, ["go to kitchen", "go to workshop"]) == (
        "[the model's note] Note: go to kitchen. [from the record] Next time: focus on bulb."
    )


def test_pinned_curated_tips_are_the_only_notes_a_compact_prompt_shows():
    def entry(i, note, pinned=False):
        return RetrievedTip(f"t{i}", note, 100.0 - i, 0.9, pinned)

    tips = [entry(0, "Curated A.", True), entry(1, "Curated B.", True), entry(2, "Own note."), entry(3, "Curated A.", True)]
    shown, cut = prompts.compact_notes_cut(tips)
    assert [t.tip_id for t in shown] == ["t0", "t1", "t3"] and [t.tip_id for t in cut] == ["t2"]
    assert prompts.compact_cut_reason(shown, cut[0]) == "a curated tip is pinned: only curated tips are shown"
    unpinned = [entry(0, "A"), entry(1, "A")]
    assert prompts.compact_notes_cut(unpinned) == (unpinned, [])
