"""Issue 49 (2)'s two rules for the memory experiment, with hand-counted numbers: the tip token budget
(`memory.tip_token_budget`, `prompts.budget_cut`, applied in `rollout.retrieval`) and wrong-place tips
shown (`rollout.tip_places`), on a flat store and a structured one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from empo2_studio.config import MemoryConfig, RunConfig
from empo2_studio.envs.trap import TrapEnv
from empo2_studio.memory import HashEmbedder, TipStore
from empo2_studio.memory.grouped_store import StructuredTipStore
from empo2_studio.policy import prompts
from empo2_studio.rollout.retrieval import retrieve_tips
from empo2_studio.rollout.episodes import Timings
from empo2_studio.rollout.tip_places import derived_place, entry_places, step_places, wrong_place_counts
from empo2_studio.types import ActionSample, Episode, RetrievedTip, SkippedTip, Step

TASK = "trap-light-bulb"
HALL = "This room is called the hallway. In it, you see: a coat rack. Doors lead to: the kitchen."
KITCHEN = "You go to the kitchen. This room is called the kitchen. In it, you see: a kettle."
NOTHING = "You look around. Nothing new."
BACK = "You go to the hallway. This room is called the hallway."
NOTE_A = "The bulb is in the kitchen."  # The bulb is in the kitchen . → 7 tokens
NOTE_C = "The bulb is not in the hallway."  # 8 tokens
SUFFIX = prompts.ENTRY_SUFFIX


def tip(tip_id: str, text: str) -> RetrievedTip:
    return RetrievedTip(tip_id, text, 0.0, 0.9)


# ---- the budget --------------------------------------------------------------------------------------------
def test_tip_tokens_counts_words_and_punctuation():
    assert prompts.tip_tokens(NOTE_A) == 7
    assert prompts.tip_tokens(NOTE_C) == 8
    assert prompts.tip_tokens("To finish: go to kitchen, then focus on X.") == 12  # 9 words, ':', ',', '.'
    assert prompts.tip_tokens("") == 0


def test_compact_budget_counts_each_note_once_and_cuts_in_rank_order():
    a, b, c = tip("a", NOTE_A + SUFFIX + "go to kitchen"), tip("b", NOTE_A + SUFFIX + "look around"), tip("c", NOTE_C)
    ids = lambda part: [t.tip_id for t in part]  # noqa: E731
    assert [ids(p) for p in prompts.budget_cut([a, b, c], 7, "compact")] == [["a", "b"], ["c"]]  # b's note is shown: 0
    assert [ids(p) for p in prompts.budget_cut([a, b, c], 15, "compact")] == [["a", "b", "c"], []]  # 7 + 0 + 8
    assert [ids(p) for p in prompts.budget_cut([a, b, c], 14, "compact")] == [["a", "b"], ["c"]]
    assert [ids(p) for p in prompts.budget_cut([a, b, c], 6, "compact")] == [[], ["a", "b", "c"]]
    assert [ids(p) for p in prompts.budget_cut([a, b, c], 0, "compact")] == [["a", "b", "c"], []]  # 0: no budget
    # the paper style shows every entry: a costs 7 + 8 (the suffix: ';' and 7 words) + 3 = 18, b 7 + 8 + 2 = 17
    assert prompts.tip_tokens(a.text) == 18 and prompts.tip_tokens(b.text) == 17
    assert [ids(p) for p in prompts.budget_cut([a, b, c], 30, "paper")] == [["a"], ["b", "c"]]
    # a short tip ranked below a long one never jumps it
    assert [ids(p) for p in prompts.budget_cut([c, tip("s", "Go.")], 5, "compact")] == [[], ["c", "s"]]


def test_the_budget_is_a_memory_setting_off_by_default_and_checked():
    assert MemoryConfig().tip_token_budget == 0
    RunConfig(memory=MemoryConfig(tip_token_budget=64)).validate()
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match=rf"memory.tip_token_budget must be an integer ≥ 0 \(0: no budget\), got {bad!r}"):
            RunConfig(memory=MemoryConfig(tip_token_budget=bad)).validate()


class _FakeStore:
    """A flat memory that always finds the same three entries (rank order a, b, c)."""

    def __init__(self, budget: int) -> None:
        self.cfg = MemoryConfig(tip_token_budget=budget)

    def retrieve_explained(self, task, variation, queries):
        found = [tip("a", NOTE_A + SUFFIX + "go to kitchen"), tip("b", NOTE_C + SUFFIX + "look around"), tip("c", NOTE_A)]
        return [(list(found), [SkippedTip("z", "far", 0.0, 0.1, "below the threshold")]) for _ in queries]


def _running(style: str) -> SimpleNamespace:
    return SimpleNamespace(rollout_mode="memory", variation=0, pairs=[], prompt_style=style, held=None, place=None,
                           env=TrapEnv(), obs=SimpleNamespace(text=HALL))  # fmt: skip


@pytest.mark.parametrize("budget, shown, cut", [(0, ["a", "b", "c"], []), (18, ["a"], ["b", "c"]), (17, [], ["a", "b", "c"])])
def test_retrieval_applies_the_budget_after_retrieving_and_says_why(budget, shown, cut):
    found, skipped = retrieve_tips(_FakeStore(budget), [_running("paper")], ["obs"], TASK, Timings())
    assert [t.tip_id for t in found[0]] == shown
    assert [t.tip_id for t in skipped[0]] == cut + ["z"]
    if cut:
        assert skipped[0][0].reason == f"over the tip token budget ({budget} tokens, memory.tip_token_budget)"


def test_a_compact_prompt_keeps_its_one_note_rule_then_the_budget():
    # compact: the first distinct note only (a and c share NOTE_A; b is cut as a second note), 7 tokens
    found, skipped = retrieve_tips(_FakeStore(7), [_running("compact")], ["obs"], TASK, Timings())
    assert [t.tip_id for t in found[0]] == ["a", "c"] and [t.tip_id for t in skipped[0]] == ["b", "z"]
    found, skipped = retrieve_tips(_FakeStore(6), [_running("compact")], ["obs"], TASK, Timings())
    assert found[0] == [] and [t.tip_id for t in skipped[0]][:2] == ["a", "c"]


# ---- wrong-place tips --------------------------------------------------------------------------------------
def _episode(eid: str, actions, observations, *, tips_at=None, score: float = 0.0) -> Episode:
    tips_at = tips_at or {}
    steps = tuple(
        Step(index=i, user_message=f"obs {i}", tips=tuple(tips_at.get(i, ())), valid_actions=(a,),
             sample=ActionSample(text=a, token_ids=(1,), logprobs=(0.0,)), action=a, corrected=False,
             reward=0.0, score=0.0, observation=o)
        for i, (a, o) in enumerate(zip(actions, observations))
    )  # fmt: skip
    return Episode(episode_id=eid, env="trap", task=TASK, variation=0, split="test", rollout_mode="memory",
                   update_mode=None, decoding="constrained", temperature=1.0, seed=0, steps=steps, score=score,
                   won=score >= 100, first_observation=HALL)  # fmt: skip


SOURCE = _episode("src", ["go to kitchen", "look around", "go to hallway"], [KITCHEN, NOTHING, BACK], score=25.0)


def test_the_place_of_each_step_is_where_the_observation_acted_on_put_the_agent():
    place_of = TrapEnv().place_of
    # step 0 acts on the first observation (hallway), step 1 on "You go to the kitchen", step 2 on a
    # text naming no room (the kitchen is kept)
    assert step_places(SOURCE, place_of) == ["hallway", "kitchen", "kitchen"]
    assert derived_place("go to kitchen", SOURCE, place_of) == "hallway"
    assert derived_place("look around", SOURCE, place_of) == "kitchen"
    assert derived_place("go to hallway", SOURCE, place_of) == "kitchen"
    assert derived_place("open door", SOURCE, place_of) is None and derived_place("look around", None, place_of) is None


def test_wrong_place_counts_by_hand():
    place_of = TrapEnv().place_of
    places = {"k": "kitchen", "h": "hallway", "any": "anywhere"}
    shown = _episode("m", ["go to kitchen", "look around", "go to hallway"], [KITCHEN, NOTHING, BACK], tips_at={
        0: [tip("k", "x"), tip("h", "y"), tip("any", "z"), tip("unknown", "w")],  # in the hallway: k wrong, h right
        2: [tip("k", "x")],  # in the kitchen: right
    })  # fmt: skip
    got = wrong_place_counts([shown], places, place_of)
    assert got == {"memory_steps": 2.0, "shown": 5.0, "placed": 3.0, "wrong": 1.0, "wrong_share": pytest.approx(1 / 3),
                   "wrong_per_step": 0.5}  # fmt: skip
    assert wrong_place_counts([SOURCE], places, place_of)["wrong_share"] == 0.0  # nothing shown, no division by 0


def test_entry_places_read_a_structured_store_and_derive_a_flat_one(tmp_path):
    place_of = TrapEnv().place_of
    flat = TipStore.open(tmp_path / "flat.lance", HashEmbedder(16), MemoryConfig(embedder="hash"))
    grouped = StructuredTipStore.open(tmp_path / "s.lance", HashEmbedder(16), MemoryConfig(embedder="hash", structure="structured"),
                                      world=TrapEnv())  # fmt: skip
    for store in (flat, grouped):
        store.add_episode_tips(SOURCE, NOTE_A, "user: key")
    for store in (flat, grouped):
        got = entry_places(store, TASK, [SOURCE], place_of)
        by_action = {store.get(i).action: p for i, p in got.items()}
        assert by_action == {"go to kitchen": "hallway", "look around": "kitchen", "go to hallway": "kitchen"}
    # a flat entry whose source episode is not among those given has no place (left out of the counts)
    assert set(entry_places(flat, TASK, [], place_of).values()) == {None}
