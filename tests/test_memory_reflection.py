"""Reflection: one batched tip call, cleaning to one line ≤ 100 words, fallback, the record line in front."""

from __future__ import annotations

from dataclasses import replace

import pytest

from empo2_studio.memory.reflection import FALLBACK_PREFIX, TIP_INSTRUCTION, clean_tip, write_tips
from empo2_studio.rollout import conversation
from empo2_studio.types import ActionSample, Episode, RetrievedTip, Step


def _step(i, action, tips=()):
    return Step(index=i, user_message=f"user {i}", tips=tips, valid_actions=(action, "wait"),
                sample=ActionSample(text=action, token_ids=(10 + i, 20 + i), logprobs=(-0.5, -0.1)),
                action=action, corrected=False, reward=0.0, score=0.0, observation="")


def _episode(score=25.0, tips=True):
    t = (RetrievedTip("a", "tip one", 50.0, 0.9), RetrievedTip("b", "tip two", 10.0, 0.7)) if tips else ()
    steps = (_step(0, "look around"), _step(1, "open door", t), _step(2, "go kitchen"))
    return Episode(episode_id="e", env="trap", task="t", variation=0, split="train", rollout_mode="memory",
                   update_mode="off-policy", decoding="constrained", temperature=1.0, seed=0, steps=steps,
                   score=score, won=False)


class FakeTipWriter:
    """Test double for `Policy.write_tips`: records its inputs, returns canned replies."""

    def __init__(self, replies):
        self.replies, self.calls = replies, []

    def write_tips(self, conversations, instruction, *, keys=None):
        self.calls.append((conversations, instruction))
        self.keys = keys
        return list(self.replies)


def test_write_tips_one_batched_call_and_cleaning():
    policy = FakeTipWriter(["Tip: \"The door is locked; find a key.\"\nextra line", "  \n\n  "])
    episodes = [_episode(), _episode(score=-100.0, tips=False)]
    tips = write_tips(policy, episodes, [conversation(e) for e in episodes])
    assert len(policy.calls) == 1
    conversations, instruction = policy.calls[0]
    assert instruction == TIP_INSTRUCTION and conversations == [conversation(e) for e in episodes]
    assert policy.keys == [_episode().episode_id] * 2  # episode ids name the sampling caches to reuse
    assert tips[0] == "The door is locked; find a key."
    assert tips[1] == (f"{FALLBACK_PREFIX} The episode ended with score -100.0/100 after 3 steps; "
                       "last actions: look around; open door; go kitchen.")


def test_clean_tip_caps_words_and_squeezes_whitespace():
    ep = _episode()
    long = " ".join(f"w{i}" for i in range(150))
    assert clean_tip(long, ep).split() == [f"w{i}" for i in range(100)]
    assert clean_tip("  a \t b   c  ", ep) == "a b c"
    assert clean_tip("...", ep).startswith(FALLBACK_PREFIX)
    assert clean_tip(None, ep).startswith(FALLBACK_PREFIX)


def test_a_looping_reply_becomes_the_fallback():
    ep = _episode()
    # a real reply of the embedded model (greedy), cut at the token limit
    looping = "You did it, you found it, you finished it, " + "you finished it, " * 20
    assert clean_tip(looping, ep).startswith(FALLBACK_PREFIX)
    # 27 words, 11 distinct (0.41 ≥ 0.3): still a tip; a short repetitive reply (< 20 words) is not a loop either
    assert clean_tip("go to the kitchen, then the workshop; " * 3 + "the red bulb is there twice", ep).startswith("go to")
    assert clean_tip("open door, open door, open door", ep) == "open door, open door, open door"


def test_write_tips_count_mismatch_and_empty():
    with pytest.raises(ValueError, match="returned 1 tips for 2 episodes"):
        write_tips(FakeTipWriter(["only one"]), [_episode(), _episode()], [(), ()])
    with pytest.raises(ValueError, match="got 1 conversations for 2 episodes"):
        write_tips(FakeTipWriter(["a", "b"]), [_episode(), _episode()], [()])
    assert write_tips(FakeTipWriter([]), [], []) == []


def test_instruction_asks_for_the_paper_contents():
    text = TIP_INSTRUCTION.lower()
    for word in ("thank", "ended", "summarise", "found out", "how far", "single line", "100 words"):
        assert word in text


def test_a_parroted_instruction_is_not_stored_as_a_tip():
    ep = _episode()
    # What SmolLM2-135M wrote in a real run: its prompt, paraphrased back.
    assert clean_tip("This trajectory has ended. Answer in a single line, with nothing else.", ep).startswith(FALLBACK_PREFIX)
    assert clean_tip(TIP_INSTRUCTION, ep).startswith(FALLBACK_PREFIX)
    # A real tip that shares a few words with the instruction is kept.
    assert clean_tip("The green light bulb is in the kitchen; go there first.", ep) == (
        "The green light bulb is in the kitchen; go there first.")


def test_the_environments_record_ends_the_stored_tip():
    from empo2_studio.memory.reflection import MAX_TIP_WORDS, OWN_NOTE_PREFIX, with_record

    record = "[from the record] The frog was seen in the kitchen."
    assert with_record("I should go back.", record) == f"{OWN_NOTE_PREFIX} I should go back. {record}"
    assert with_record("I should go back.", "") == "I should go back."  # an env with nothing to say
    ep = replace(_episode(), record=record)
    assert write_tips(FakeTipWriter(["I should go back."]), [ep], [()]) == [f"{OWN_NOTE_PREFIX} I should go back. {record}"]
    # A long reply is cut so that the record stays whole: 10 record words + 3 prefix words leave 87.
    long_tip = " ".join(f"w{i}" for i in range(100))
    stored = with_record(long_tip, record)
    assert stored.endswith(record) and len(stored.split()) == MAX_TIP_WORDS
    assert stored.split()[3 + 86] == "w86" and "w87" not in stored.split()
    # A record that fills the cap leaves no room for the model's sentence.
    huge = " ".join(["x"] * MAX_TIP_WORDS)
    assert with_record("I should go back.", huge) == huge
