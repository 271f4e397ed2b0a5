"""TipStore curation: edit/delete/enable, filters, JSONL round trip, versions, re-embedding, bad input."""

from __future__ import annotations

import json

import pytest

from empo2_studio.config import MemoryConfig
from empo2_studio.memory import EmbedderMismatchError, HashEmbedder, TipStore
from empo2_studio.memory.records import MAX_TIP_CHARS
from empo2_studio.types import ActionSample, Episode, Step

INJECTION = "x' OR '1'='1"


def _episode(actions, score, task="t", variation=0) -> Episode:
    steps = tuple(
        Step(index=i, user_message=f"obs {i}", tips=(), valid_actions=(a,),
             sample=ActionSample(text=a, token_ids=(1,), logprobs=(0.0,)), action=a, corrected=False,
             reward=0.0, score=0.0, observation="")
        for i, a in enumerate(actions)
    )
    return Episode(episode_id="e1", env="trap", task=task, variation=variation, split="train",
                   rollout_mode="memory", update_mode="off-policy", decoding="constrained",
                   temperature=1.0, seed=0, steps=steps, score=score, won=False)


def _fill(path) -> TipStore:
    s = TipStore.open(path, HashEmbedder(), MemoryConfig(similarity_threshold=0.2))
    s.add_episode_tips(_episode(["open door", "go hallway"], 40.0), "The hallway leads to the workshop", "conv one")
    s.add_tip("t", 0, "Battery is in the workshop drawer", score=80)
    s.add_tip("t", 1, "Focus on the bulb only after wiring", score=-10)
    s.add_tip("u", 2, "Use the thermometer on the substance", score=0)
    return s


@pytest.fixture()
def store(tmp_path):
    return _fill(tmp_path / "tips.lance")


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory):
    """One store for all bad-input cases: none of them may change it, so sharing it is itself a check."""
    return _fill(tmp_path_factory.mktemp("bad") / "tips.lance")


def _snapshot(s: TipStore):
    return s.count(), s.version


def test_filters(store):
    assert store.count() == 5
    assert [t.text for t in store.list_tips(origin="manual", task="t")] == [
        "Battery is in the workshop drawer", "Focus on the bulb only after wiring"]
    assert len(store.list_tips(origin="generated")) == 2
    assert [t.variation for t in store.list_tips(task="t", variation=1)] == [1]
    assert [t.text for t in store.list_tips(text_contains="THERMOMETER")] == ["Use the thermometer on the substance"]
    assert store.list_tips(text_contains="%") == [] and store.list_tips(text_contains="_") == []
    assert len(store.list_tips(limit=2)) == 2


def test_update_edit_marker_and_reembed(store):
    tip = store.list_tips(text_contains="drawer")[0]
    key_before = store.search("Battery is in the workshop drawer", task="t", variation=0, limit=1)
    assert key_before[0][0].tip_id == tip.tip_id and key_before[0][1] == pytest.approx(1.0, abs=1e-5)
    new = store.update_tip(tip.tip_id, text="Thermometer sits on the kitchen table", score=55.5)
    assert (new.text, new.score, new.edited, new.origin) == ("Thermometer sits on the kitchen table", 55.5, True, "manual")
    hit = store.search("Thermometer sits on the kitchen table", task="t", variation=0, limit=1)[0]
    assert hit[0].tip_id == tip.tip_id and hit[1] == pytest.approx(1.0, abs=1e-5)  # the key followed the text
    # a generated tip keeps its key (the episode conversation) when its text is edited
    gen = store.list_tips(origin="generated")[0]
    store.update_tip(gen.tip_id, text="edited generated tip")
    hit = store.search("conv one", task="t", variation=0, limit=1)[0]
    assert hit[1] == pytest.approx(1.0, abs=1e-5) and hit[0].origin == "generated"
    # enabling/disabling is not an edit
    other = store.list_tips(variation=1)[0]
    assert store.update_tip(other.tip_id, enabled=False).edited is False


def test_delete_and_bulk_enable(store):
    ids = [t.tip_id for t in store.list_tips(task="t")]
    assert store.set_enabled(ids[:3], False) == 3
    assert store.count(enabled=False) == 3 and store.count(enabled=True) == 2
    assert store.delete(ids[:2]) == 2
    assert store.count() == 3
    with pytest.raises(KeyError):
        store.get(ids[0])


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.add_tip("t", 0, ""),
        lambda s: s.add_tip("t", 0, "   \n\t"),
        lambda s: s.add_tip("t", 0, "x" * (MAX_TIP_CHARS + 1)),
        lambda s: s.add_tip("t", 0, "fine", score=100.5),
        lambda s: s.add_tip("t", 0, "fine", score=-101),
        lambda s: s.add_tip("t", 0, "fine", score=float("nan")),
        lambda s: s.add_tip("t", 0, "fine", score=True),
        lambda s: s.add_tip("t", -1, "fine"),
        lambda s: s.add_tip("t", "0", "fine"),
        lambda s: s.add_tip("", 0, "fine"),
        lambda s: s.add_tip("t", 0, "Battery is in the workshop drawer"),  # duplicate
        lambda s: s.add_episode_tips(_episode(["a"], 10.0), "  ", "conv"),
        lambda s: s.add_episode_tips(_episode(["a"], 150.0), "tip", "conv"),
        lambda s: s.add_episode_tips(_episode(["a"], 10.0), "tip", ""),
        lambda s: s.update_tip("no-such-id", score=1),
        lambda s: s.update_tip(s.list_tips()[0].tip_id, score=200),
        lambda s: s.update_tip(s.list_tips()[0].tip_id, text=""),
        lambda s: s.update_tip(s.list_tips()[0].tip_id),
        lambda s: s.update_tip(s.list_tips()[0].tip_id, text="Battery is in the workshop drawer"),
        lambda s: s.delete(["no-such-id"]),
        lambda s: s.delete([s.list_tips()[0].tip_id, "no-such-id"]),  # one unknown: nothing deleted
        lambda s: s.delete([]),
        lambda s: s.delete(INJECTION),
        lambda s: s.delete([INJECTION]),
        lambda s: s.set_enabled(["no-such-id"], False),
        lambda s: s.set_enabled([s.list_tips()[0].tip_id], "no"),
        lambda s: s.get(INJECTION),
        lambda s: s.list_tips(origin="bogus"),
        lambda s: s.list_tips(enabled="true"),
        lambda s: s.list_tips(text_contains=""),
        lambda s: s.list_tips(limit=0),
        lambda s: s.restore(999),
        lambda s: s.restore("1"),
        lambda s: s.retrieve("t", 0, " "),
        lambda s: s.search("q", limit=0),
    ],
)
def test_bad_input_raises_and_changes_nothing(shared_store, call):
    store = shared_store
    before = _snapshot(store)
    with pytest.raises((ValueError, KeyError)) as info:
        call(store)
    assert str(info.value)  # a readable message
    assert _snapshot(store) == before


def test_quotes_never_widen_queries_or_deletes(store):
    assert store.list_tips(task=INJECTION) == []
    assert store.list_tips(text_contains=INJECTION) == []
    assert store.count(task=INJECTION) == 0
    assert store.retrieve(INJECTION, 0, "anything") == []
    # a task name that really contains quotes matches exactly itself
    odd = store.add_tip(INJECTION, 0, "tip in an oddly named task", score=1)
    assert [t.tip_id for t in store.list_tips(task=INJECTION)] == [odd.tip_id]
    assert store.count() == 6
    store.delete([odd.tip_id])
    assert store.count() == 5


def test_jsonl_round_trip(store, tmp_path):
    tip = store.list_tips(text_contains="bulb")[0]
    store.update_tip(tip.tip_id, score=12.0, enabled=False)
    path = tmp_path / "tips.jsonl"
    assert store.export_jsonl(path) == 5
    lines = path.read_text().splitlines()
    assert len(lines) == 5 and "vector" not in json.loads(lines[0])
    other = TipStore.open(tmp_path / "other.lance", HashEmbedder(), store.cfg)
    result = other.import_jsonl(path)
    assert (result.added, result.skipped_duplicates) == (5, 0)
    a, b = store.list_tips(), other.list_tips()
    assert [(t.tip_id, t.task, t.variation, t.text, t.action, t.score, t.source_episode_id, t.created_at,
             t.enabled, t.edited) for t in a] == [
        (t.tip_id, t.task, t.variation, t.text, t.action, t.score, t.source_episode_id, t.created_at,
         t.enabled, t.edited) for t in b]
    assert {t.origin for t in b} == {"imported"}
    # the keys were rebuilt from key_text: retrieval agrees
    assert store.retrieve("t", 0, "conv one") == other.retrieve("t", 0, "conv one")
    # importing the same file again: every line is a duplicate, ids stay unique
    again = other.import_jsonl(path)
    assert (again.added, again.skipped_duplicates) == (0, 5) and other.count() == 5


def test_import_bad_lines_reports_line_numbers_and_imports_nothing(store, tmp_path):
    good = {"task": "t", "variation": 0, "text": "fresh tip", "score": 1}
    bad = [
        json.dumps(good),
        json.dumps({"task": "t", "variation": 0, "text": "no score"}),
        json.dumps({**good, "text": "extra", "colour": "red"}),
        json.dumps({**good, "text": "typed", "variation": "0"}),
        "{not json",
        "",
        json.dumps({**good, "text": "range", "score": 101}),
        json.dumps({**good, "text": "x", "enabled": "yes"}),
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(bad) + "\n")
    before = _snapshot(store)
    with pytest.raises(ValueError) as info:
        store.import_jsonl(path)
    msg = str(info.value)
    for n, word in [(2, "missing keys ['score']"), (3, "unknown keys ['colour']"), (4, "variation"),
                    (5, "not valid JSON"), (7, "score"), (8, "enabled")]:
        assert f"line {n}: " in msg and word in msg
    assert "line 1:" not in msg and "line 6:" not in msg
    assert _snapshot(store) == before
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    with pytest.raises(ValueError, match="empty.jsonl holds no tips"):
        store.import_jsonl(empty)
    assert _snapshot(store) == before


def test_versions_and_restore(store):
    versions = store.versions()
    assert [v.version for v in versions] == sorted(v.version for v in versions)
    v_before = store.version
    assert versions[-1].version == v_before and versions[-1].rows == 5
    ids = [t.tip_id for t in store.list_tips(task="t")]
    store.delete(ids)
    assert store.count() == 1
    new_version = store.restore(v_before)
    assert new_version > v_before + 1 and store.count() == 5
    assert sorted(t.tip_id for t in store.list_tips(task="t")) == sorted(ids)
    store.add_tip("t", 5, "after restore", score=3)  # writing continues from the restored state
    assert store.count() == 6


def test_embedder_mismatch_and_reembed(store, tmp_path):
    path = store.path
    small = HashEmbedder(dim=64)  # same name, other dimension
    with pytest.raises(EmbedderMismatchError) as info:
        TipStore.open(path, small, store.cfg)
    msg = str(info.value)
    assert "'hash' (256-d)" in msg and "'hash' (64-d)" in msg and "empo2-studio tips reembed --session" in msg
    v_old = store.version
    loose = TipStore.open(path, small, store.cfg, verify_embedder=False)
    with pytest.raises(EmbedderMismatchError):
        loose.retrieve("t", 0, "conv one")
    assert loose.reembed(small) == 5
    # the generated tip keyed "conv one" matches its own text exactly again (pinned manual tips
    # of the partition come first in the list, whatever their similarity)
    assert max(t.similarity for t in loose.retrieve("t", 0, "conv one")) == pytest.approx(1.0, abs=1e-5)
    reopened = TipStore.open(path, small, store.cfg)
    assert reopened.count() == 5
    with pytest.raises(ValueError, match="vectors from 'hash' \\(256-d\\)"):
        reopened.restore(v_old)
    with pytest.raises(EmbedderMismatchError):
        TipStore.open(path, HashEmbedder(), store.cfg)
