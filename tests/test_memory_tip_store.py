"""TipStore: the retrieval rule on hand-built vectors, per-step writing, dedupe and FIFO eviction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from empo2_studio.config import MemoryConfig
from empo2_studio.memory import TipStore, entry_text
from empo2_studio.types import ActionSample, Episode, Step


class DictEmbedder:
    """Test fake mapping known texts to hand-built 4-d vectors (normalised), for exact similarities."""

    name = "dict"
    dim = 4

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def embed(self, texts):
        out = np.array([self.table[t] for t in texts], dtype=np.float32).reshape(-1, self.dim)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def at_cos(c: float) -> list[float]:
    """A unit vector whose cosine with [1, 0, 0, 0] is c."""
    return [c, math.sqrt(1 - c * c), 0.0, 0.0]


def make_episode(actions, score, *, task="t", variation=0, episode_id="ep") -> Episode:
    steps = tuple(
        Step(
            index=i, user_message=f"obs {i}", tips=(), valid_actions=(a,),
            sample=ActionSample(text=a, token_ids=(i, i + 1), logprobs=(-0.1, -0.2)),
            action=a, corrected=False, reward=0.0, score=0.0, observation=f"after {a}",
        )
        for i, a in enumerate(actions)
    )
    return Episode(
        episode_id=episode_id, env="trap", task=task, variation=variation, split="train",
        rollout_mode="naive", update_mode="on-policy", decoding="constrained", temperature=1.0,
        seed=0, steps=steps, score=score, won=score >= 100,
    )


QUERY = [1.0, 0.0, 0.0, 0.0]


@pytest.fixture()
def rule_store(tmp_path):
    """Partition (t, 0) with keys at known cosines to QUERY, plus decoys in other partitions."""
    vectors = {
        "q": QUERY, "kA": at_cos(1.0), "kB": at_cos(0.8), "kC": at_cos(0.49), "kD": at_cos(0.51),
        "kE": at_cos(0.9), "kF": at_cos(0.95), "kG": at_cos(0.7),
    }
    # The similarity rule itself: curated (manual) tips are not pinned here (see test_curated_tips_*).
    store = TipStore.open(tmp_path / "tips.lance", DictEmbedder(vectors), MemoryConfig(top_k=10, pin_curated=False))
    ids = {
        "A": store.add_tip("t", 0, "A", score=10, key_text="kA").tip_id,
        "B": store.add_tip("t", 0, "B", score=50, key_text="kB").tip_id,
        "C": store.add_tip("t", 0, "C", score=100, key_text="kC").tip_id,  # below threshold
        "D": store.add_tip("t", 0, "D", score=-20, key_text="kD").tip_id,
        "F": store.add_tip("t", 0, "F", score=99, key_text="kF", enabled=False).tip_id,  # disabled
        "G": store.add_tip("t", 0, "G", score=10, key_text="kG").tip_id,  # ties A on score, lower sim
        "E1": store.add_tip("t", 1, "E1", score=90, key_text="kE").tip_id,  # other variation
        "E2": store.add_tip("u", 0, "E2", score=90, key_text="kE").tip_id,  # other task
    }
    return store, ids


@pytest.mark.parametrize("engine", ["numpy", "lancedb"])
def test_retrieval_rule_threshold_score_order_partition_disabled(rule_store, engine):
    store, _ = rule_store
    got = store.retrieve_vector("t", 0, store.embedder.embed(["q"])[0], engine=engine)
    # sim > 0.5 keeps A(1.0) B(.8) D(.51) G(.7); C(.49) is out; F disabled; E* other partitions.
    # Order by score desc: B 50, then A and G tie at 10 (A more similar), then D −20.
    assert [t.text for t in got] == ["B", "A", "G", "D"]
    assert [t.score for t in got] == [50.0, 10.0, 10.0, -20.0]
    assert [round(t.similarity, 4) for t in got] == [0.8, 1.0, 0.7, 0.51]


def test_retrieval_top_k_and_threshold_override(rule_store):
    store, _ = rule_store
    store.cfg = MemoryConfig(top_k=2, pin_curated=False)
    assert [t.text for t in store.retrieve("t", 0, "q")] == ["B", "A"]
    got = store.retrieve_vector("t", 0, np.array(QUERY, np.float32), threshold=0.75, top_k=10)
    assert [t.text for t in got] == ["B", "A"]  # G (0.7) and D (0.51) drop out at 0.75


def test_engines_agree_and_batch_matches_single(rule_store):
    store, _ = rule_store
    for task, var in [("t", 0), ("t", 1), ("u", 0), ("t", 9)]:
        for thr in (-1.0, 0.0, 0.5, 0.75):
            args = (task, var, np.array(at_cos(0.9), np.float32))
            a = store.retrieve_vector(*args, threshold=thr, top_k=3, engine="numpy")
            b = store.retrieve_vector(*args, threshold=thr, top_k=3, engine="lancedb")
            assert [(t.tip_id, t.score) for t in a] == [(t.tip_id, t.score) for t in b]
            assert [t.similarity for t in a] == pytest.approx([t.similarity for t in b], abs=1e-5)
    assert store.retrieve_batch("t", 0, ["q", "kD"]) == [store.retrieve("t", 0, "q"), store.retrieve("t", 0, "kD")]
    with pytest.raises(ValueError, match="shape"):
        store.retrieve_vector("t", 0, np.ones(3, np.float32))
    with pytest.raises(ValueError, match="engine"):
        store.retrieve_vector("t", 0, np.ones(4, np.float32), engine="faiss")


def test_curated_tips_are_pinned_first_at_every_step_whatever_their_similarity(rule_store):
    store, ids = rule_store
    store.cfg = MemoryConfig(top_k=3, pin_curated=True)
    ep = make_episode(["go kitchen"], 100.0, episode_id="gen")  # a generated tip: not pinned
    emb = store.embedder
    emb.table["kgen"] = at_cos(0.95)
    store.add_episode_tips(ep, "generated tip", "kgen")
    # every manual tip of the partition that is enabled (A B C D G; F is disabled) comes first,
    # ordered by score (C 100 although its similarity 0.49 is below the threshold), cut at top_k.
    got = store.retrieve("t", 0, "q")
    assert [t.text for t in got] == ["C", "B", "A"]
    store.cfg = MemoryConfig(top_k=10, pin_curated=True)
    texts = [t.text for t in store.retrieve("t", 0, "q")]
    assert texts[:5] == ["C", "B", "A", "G", "D"] and texts[5].startswith("generated tip")
    # a query unlike every key (similarity 0 to all) still gets the curated tips, and only them;
    # A and G tie on score and similarity now, so the newer (G) comes first
    emb.table["far"] = [0.0, 0.0, 0.0, 1.0]
    assert [t.text for t in store.retrieve("t", 0, "far")] == ["C", "B", "G", "A", "D"]


def test_retrieve_explained_says_why_the_nearest_other_tips_were_not_shown(rule_store):
    store, ids = rule_store
    store.cfg = MemoryConfig(top_k=2, pin_curated=False)
    [(hits, skipped)] = store.retrieve_explained("t", 0, ["q"])
    assert [t.text for t in hits] == ["B", "A"]
    # nearest first: F (0.95, disabled), G (0.7, outside top 2), D (0.51, outside), C (0.49, below)
    assert [(t.text, t.reason) for t in skipped] == [
        ("F", "disabled"),
        ("G", "outside the top 2 (score 10.0)"),
        ("D", "outside the top 2 (score -20.0)"),
        ("C", "similarity 0.49 ≤ threshold 0.50"),
    ]
    assert [round(t.similarity, 2) for t in skipped] == [0.95, 0.7, 0.51, 0.49]


def test_cached_keys_follow_writes_from_another_handle(rule_store):
    store, ids = rule_store
    assert [t.text for t in store.retrieve("t", 0, "q")] == ["B", "A", "G", "D"]  # fills the cache
    other = TipStore.open(store.path, store.embedder, store.cfg)  # e.g. the CLI in another process
    other.add_tip("t", 0, "H", score=75, key_text="kE")
    other.set_enabled([ids["B"]], False)
    assert [t.text for t in store.retrieve("t", 0, "q")] == ["H", "A", "G", "D"]


def test_retrieval_other_partitions_and_reenabled(rule_store):
    store, ids = rule_store
    assert [t.text for t in store.retrieve("t", 1, "q")] == ["E1"]
    assert [t.text for t in store.retrieve("u", 0, "q")] == ["E2"]
    assert store.retrieve("t", 7, "q") == []
    store.set_enabled([ids["F"]], True)
    assert [t.text for t in store.retrieve("t", 0, "q")][:2] == ["F", "B"]


def test_add_episode_tips_one_entry_per_step_shared_key(tmp_path):
    emb = DictEmbedder({"conv": at_cos(1.0), "q": QUERY})
    store = TipStore.open(tmp_path / "s", emb, MemoryConfig())
    ep = make_episode(["go kitchen", "open door"], 12.5, episode_id="ep1")
    tips = store.add_episode_tips(ep, "Door is in the kitchen.", "conv")
    assert [t.text for t in tips] == [
        "Door is in the kitchen; at that step the action taken was go kitchen; the episode ended with score 12.5/100",
        "Door is in the kitchen; at that step the action taken was open door; the episode ended with score 12.5/100",
    ]
    assert all(t.score == 12.5 and t.source_episode_id == "ep1" and t.origin == "generated" for t in tips)
    assert [t.action for t in tips] == ["go kitchen", "open door"]
    got = store.retrieve("t", 0, "q")
    assert {round(t.similarity, 5) for t in got} == {1.0}  # both entries carry the same key
    assert store.count() == 2 and store.count("t", 0) == 2 and store.count("t", 1) == 0


def test_dedupe_exact_texts(tmp_path):
    store = TipStore.open(tmp_path / "s", DictEmbedder({"k": QUERY}), MemoryConfig())
    ep = make_episode(["look", "look", "wait"], 0.0)  # a repeated action gives the same entry text
    assert len(store.add_episode_tips(ep, "tip", "k")) == 2
    assert store.add_episode_tips(ep, "tip", "k") == []  # the whole episode again: all duplicates
    assert store.count() == 2
    # the same text in another partition is not a duplicate
    assert len(store.add_episode_tips(make_episode(["look"], 0.0, variation=3), "tip", "k")) == 1


def test_fifo_eviction_per_partition(tmp_path):
    store = TipStore.open(tmp_path / "s", DictEmbedder({"k": QUERY}), MemoryConfig(max_tips_per_partition=3))
    store.add_episode_tips(make_episode(["a1", "a2"], 1.0), "first", "k")
    store.add_episode_tips(make_episode(["b1"], 1.0, variation=1), "other", "k")
    store.add_episode_tips(make_episode(["c1", "c2"], 2.0), "second", "k")
    assert [t.action for t in store.list_tips(task="t", variation=0)] == ["a2", "c1", "c2"]
    assert store.count("t", 1) == 1  # the other partition is untouched
    # more new entries than the cap: only the newest `cap` are kept
    store.add_episode_tips(make_episode(["d1", "d2", "d3", "d4"], 3.0), "third", "k")
    assert [t.action for t in store.list_tips(task="t", variation=0)] == ["d2", "d3", "d4"]


def test_entry_text_wording():
    assert entry_text("Battery first.", "connect battery", -100) == (
        "Battery first; at that step the action taken was connect battery; the episode ended with score -100.0/100"
    )


def test_hash_embedder_store_end_to_end(tmp_path):
    from empo2_studio.memory import make_embedder

    store = TipStore.open(tmp_path / "s", make_embedder("hash"), MemoryConfig(similarity_threshold=0.3, pin_curated=False))
    store.add_tip("t", 0, "connect the red wire to the battery anode", score=5)
    store.add_tip("t", 0, "the bathroom has a bathtub and a sink", score=90)
    got = store.retrieve("t", 0, "connect red wire to battery")
    assert [t.text for t in got] == ["connect the red wire to the battery anode"]
