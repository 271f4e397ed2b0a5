"""The structured tip memory (`memory.structure = "structured"`): its rules with hand-worked numbers, and
`StructuredTipStore` on LanceDB: groups by place, feedback counts, merges, contradictions, caps, bad
input, and the flat → structured → flat round trip."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from empo2_studio.config import MemoryConfig, RunConfig
from empo2_studio.envs.places import SCIENCEWORLD_PLACES, TRAP_PLACES, place_in
from empo2_studio.envs.trap import TrapEnv
from empo2_studio.memory import HashEmbedder, TipStore
from empo2_studio.memory import structure as st
from empo2_studio.memory.grouped_store import StructuredTipStore
from empo2_studio.types import MEMORY_STRUCTURES, ActionSample, Episode, RetrievedTip, Step

TASK = "trap-light-bulb"
HALL = "This room is called the hallway. In it, you see: a coat rack. Doors lead to: the workshop."
SHOP = "You go to the workshop. This room is called the workshop. In it, you see: a red light bulb."


class KeyedEmbedder:
    """Texts containing a listed phrase get that phrase's unit vector; any other text a hashed one (16-d)."""

    name, dim = "keyed", 16

    def __init__(self, table: dict[str, list[float]] | None = None) -> None:
        self.table = {k: np.asarray(v, np.float32) / np.linalg.norm(v) for k, v in (table or {}).items()}
        self.hash = HashEmbedder(16)

    def embed(self, texts):
        out = []
        for t in texts:
            hit = next((v for k, v in self.table.items() if k in t), None)
            out.append(hit if hit is not None else self.hash.embed([t])[0])
        return np.asarray(out, np.float32).reshape(len(out), self.dim)


def _unit(i: int, j: int | None = None, c: float = 1.0) -> list[float]:
    """Unit vector e_i, or (e_i·c + e_j·√(1−c²)): cosine c with e_i."""
    v = np.zeros(16)
    v[i] = c
    if j is not None:
        v[j] = np.sqrt(1 - c * c)
    return v.tolist()


def _episode(eid: str, actions, observations, score: float, *, first=HALL, tips=()) -> Episode:
    steps = tuple(
        Step(index=i, user_message=f"obs {i}", tips=tuple(tips) if i == 0 else (), valid_actions=(a,),
             sample=ActionSample(text=a, token_ids=(1,), logprobs=(0.0,)), action=a, corrected=False,
             reward=0.0, score=0.0, observation=o)
        for i, (a, o) in enumerate(zip(actions, observations))
    )  # fmt: skip
    return Episode(episode_id=eid, env="trap", task=TASK, variation=0, split="train", rollout_mode="memory",
                   update_mode="off-policy", decoding="constrained", temperature=1.0, seed=0, steps=steps,
                   score=score, won=score >= 100, first_observation=first)  # fmt: skip


def _store(tmp_path, embedder=None, rules=None, **cfg) -> StructuredTipStore:  # rules None: those of cfg's structure
    return StructuredTipStore.open(tmp_path / "s.lance", embedder or KeyedEmbedder(), MemoryConfig(**cfg),
                                   world=TrapEnv(), rules=rules)  # fmt: skip


def _shown(tip_id: str) -> RetrievedTip:
    return RetrievedTip(tip_id, "t", 0.0, 0.5)


# ---- the rules, by hand --------------------------------------------------------------------------------------
def test_rank_is_similarity_plus_smoothed_helped_rate():
    assert st.rank(0.9, 0, 0, 0.5) == pytest.approx(0.9 + 0.5 * 1 / 2)  # 1.15: a new tip
    assert st.rank(0.6, 4, 4, 0.5) == pytest.approx(0.6 + 0.5 * 5 / 6)  # 1.0167
    assert st.rank(0.7, 4, 0, 0.5) == pytest.approx(0.7 + 0.5 * 1 / 6)  # 0.7833
    rows = [dict(id=k, enabled=True, retired=r, pinned=p, used=u, helped=h, created_at=c)
            for k, r, p, u, h, c in [("A", False, False, 0, 0, 1), ("B", False, False, 4, 4, 2),
                                     ("C", False, True, 4, 0, 3), ("D", True, False, 9, 9, 4)]]  # fmt: skip
    sims = [0.9, 0.6, 0.7, 0.99]
    order = st.retrieval_order(rows, sims, 0.5, 10)
    assert [rows[i]["id"] for i in order] == ["C", "A", "B"]  # pinned first; retired D never
    assert [rows[i]["id"] for i in st.retrieval_order(rows, sims, 0.5, 2)] == ["C", "A"]  # the shown cap
    rows[0]["created_at"], sims[0] = 0, sims[1]  # A and B at one similarity: B's record wins
    assert [rows[i]["id"] for i in st.retrieval_order(rows, sims, 0.5, 3)] == ["C", "B", "A"]


def test_threshold_and_random_order():
    rows = [dict(id=k, enabled=True, retired=False, pinned=p, used=0, helped=0, created_at=c)
            for k, p, c in [("A", False, 1), ("B", False, 2), ("C", True, 3), ("D", False, 4)]]  # fmt: skip
    sims = [0.9, 0.4, 0.1, 0.6]
    assert [rows[i]["id"] for i in st.retrieval_order(rows, sims, 0.5, 10, threshold=0.5)] == ["C", "A", "D"]  # B ≤ 0.5; pinned C exempt
    picks = [[rows[i]["id"] for i in st.retrieval_order(rows, sims, 0.5, 3, seed=s)] for s in range(20)]
    assert all(p[0] == "C" for p in picks)  # pinned first in every draw
    assert len({tuple(p) for p in picks}) > 1 and picks[3] == [rows[i]["id"] for i in st.retrieval_order(rows, sims, 0.5, 3, seed=3)]


def test_the_experiment_arms():
    assert set(st.ARMS) == {"structured", "groups", "flat-counts", "structured-random", "flat-counts-wins", "flat-rotate",
                            "flat-rotate-source"}
    assert st.ARMS["groups"].count_weight == 0.0 and not st.ARMS["flat-counts"].by_place and st.ARMS["structured-random"].random_order
    assert st.ARMS["flat-counts-wins"] == dataclasses.replace(st.ARMS["flat-counts"], wins_first=True)
    assert st.ARMS["flat-rotate"] == dataclasses.replace(st.ARMS["flat-counts"], score_order=True)
    assert st.ARMS["flat-rotate-source"] == dataclasses.replace(st.ARMS["flat-rotate"], helped_by="source")
    assert set(MEMORY_STRUCTURES) == {"flat", *st.ARMS}  # a name in one and not the other would fall back silently
    with pytest.raises(ValueError, match="helped_by must be 'mean' or 'source', got 'Source'"):
        st.StructureRules(helped_by="Source")


def test_score_order_rotates_notes_that_did_not_help():
    # A: score 25, read by 8, helped 3 (3 < 8/2: unhelpful); B: score 83, read by 8, helped 6 (a found plan
    # that keeps helping); C: score 25, never read, newer than A; D: -100, never read; E: 25, read 2, helped 1
    # (1 = 2/2: not unhelpful). Similarities play no part in the order, only in the threshold.
    rows = [dict(id=k, enabled=True, retired=False, pinned=False, used=u, helped=h, score=sc, created_at=c)
            for k, u, h, sc, c in [("A", 8, 3, 25.0, 1), ("B", 8, 6, 83.0, 2), ("C", 0, 0, 25.0, 3),
                                   ("D", 0, 0, -100.0, 4), ("E", 2, 1, 25.0, 0)]]  # fmt: skip
    sims = [0.99, 0.55, 0.7, 0.9, 0.6]
    order = lambda **kw: [rows[i]["id"] for i in st.retrieval_order(rows, sims, 0.5, 10, score_order=True, **kw)]  # noqa: E731
    # helped or unread first (B 83; C and E at 25, the more similar first; D -100), then the unhelpful A
    assert order() == ["B", "C", "E", "D", "A"]
    sims[4] = 0.7  # E as similar as C: the newer (C) first
    assert order() == ["B", "C", "E", "D", "A"]
    assert order(threshold=0.65) == ["C", "E", "D", "A"]  # B (0.55) is not similar enough
    sims[4] = 0.8
    assert order() == ["B", "E", "C", "D", "A"]
    rows[1]["helped"] = 3  # the found plan stops helping (3 < 8/2): behind every tip still in play
    assert order() == ["E", "C", "D", "B", "A"]
    assert [st.unhelpful(u, h) for u, h in [(0, 0), (1, 0), (2, 1), (3, 1), (8, 4)]] == [False, True, False, True, False]
    with pytest.raises(ValueError, match="a random order"):
        st.retrieval_order(rows, sims, 0.5, 10, seed=1, score_order=True)


def test_wins_first_keeps_a_won_note_in_front():
    # ranks at λ = 0.5: A 0.9 + 0.5·1/2 = 1.15 (source -100, never read); B 0.6 + 0.5·1/8 = 0.6625 (source 100,
    # read 6 times, helped none); C 0.8 + 0.5·5/8 = 1.1125 (source 25); P pinned, similarity 0.1
    rows = [dict(id=k, enabled=True, retired=False, pinned=p, used=u, helped=h, score=sc, created_at=c)
            for k, p, u, h, sc, c in [("A", False, 0, 0, -100.0, 3), ("B", False, 6, 0, 100.0, 1),
                                      ("C", False, 6, 4, 25.0, 2), ("P", True, 0, 0, 0.0, 0)]]  # fmt: skip
    sims = [0.9, 0.6, 0.8, 0.1]
    assert [rows[i]["id"] for i in st.retrieval_order(rows, sims, 0.5, 10)] == ["P", "A", "C", "B"]
    assert [rows[i]["id"] for i in st.retrieval_order(rows, sims, 0.5, 10, wins_first=True)] == ["P", "B", "A", "C"]
    rows[1]["score"] = 99.0  # one short of a win: ranked as any other note
    assert [rows[i]["id"] for i in st.retrieval_order(rows, sims, 0.5, 10, wins_first=True)] == ["P", "A", "C", "B"]
    with pytest.raises(ValueError, match="a random order"):
        st.retrieval_order(rows, sims, 0.5, 10, seed=1, wins_first=True)


def _row(i, text="old", score=100.0, used=0, helped=0, created_at=1.0, retired=False, pinned=False):
    return dict(id=i, text=text, score=score, used=used, helped=helped, created_at=created_at, retired=retired, pinned=pinned)


@pytest.mark.parametrize("sim, new_score, old, expect", [
    (0.3, 50.0, _row("a", text="same"), ("merge", "a", "")),                       # exact text: merged
    (0.96, 50.0, _row("a"), ("merge", "a", "")),                                   # near duplicate, same outcome
    (0.94, 50.0, _row("a"), ("add", "", "")),                                      # below 0.95: a new tip
    # records count the source episode as a first reading: (helped + won + 1) / (used + 3); a new failed tip 1/3
    (0.85, -100.0, _row("a", used=2, helped=2), ("contradiction", "a", "old")),    # old won 4/5 beats 1/3
    (0.85, -100.0, _row("a", used=2, helped=0), ("contradiction", "a", "old")),    # old won 2/5 beats 1/3
    (0.85, -100.0, _row("a", used=3, helped=0), ("contradiction", "a", "new")),    # 2/6 = 1/3: the newer wins
    (0.85, -100.0, _row("a", used=5, helped=0), ("contradiction", "a", "new")),    # old won 2/8 loses to 1/3
    (0.85, 0.0, _row("a"), ("contradiction", "a", "old")),                         # a miss 1/3 against a won 2/3
    (0.85, 50.0, _row("a", score=-100.0), ("contradiction", "a", "new")),          # won 2/3 against a failed 1/3
    (0.79, -100.0, _row("a"), ("add", "", "")),                                    # below 0.80: no contradiction
    (0.99, -100.0, _row("a", retired=True), ("add", "", "")),                      # a retired tip is never matched
])  # fmt: skip
def test_placement(sim, new_score, old, expect):
    p = st.placement("same", new_score, 5.0, [old], [sim], st.StructureRules())
    assert (p.kind, p.target, p.winner) == expect


def test_evict_retires_the_worst_unpinned_records():
    rows = [_row("p", used=9, helped=0, pinned=True), _row("a", used=2, helped=0, created_at=1),
            _row("b", used=2, helped=0, created_at=2), _row("c", used=2, helped=2), _row("x", retired=True)]  # fmt: skip
    assert st.evict(rows, 2) == ["a", "b"]  # records (source won): p 2/12 (pinned), a 2/5 older, b 2/5, c 4/5
    assert st.evict(rows, 4) == []


def test_helped_against_the_running_mean():
    n, mean = 0, 0.0
    assert st.helped_now(25.0, n, mean)  # no earlier episode: above 0
    n, mean = st.updated_mean(n, mean, 25.0)
    assert (n, mean) == (1, 25.0) and not st.helped_now(0.0, n, mean)
    n, mean = st.updated_mean(n, mean, 0.0)
    assert (n, mean) == (2, 12.5) and st.helped_now(100.0, n, mean)
    assert st.updated_mean(n, mean, 100.0) == (3, pytest.approx(125 / 3))


def test_places_read_from_the_observations():
    assert place_in(SHOP, TRAP_PLACES) == "workshop" and place_in("You focus on the bulb.", TRAP_PLACES) is None
    assert place_in("You teleport to the art studio. This room is called the art studio.", SCIENCEWORLD_PLACES) == "art studio"
    assert place_in("You move to the kitchen.", SCIENCEWORLD_PLACES) == "kitchen"
    assert place_in("This outside location is called the outside. Here you see:", SCIENCEWORLD_PLACES) == "outside"
    assert TrapEnv().place_of(HALL + " " + SHOP) == "workshop"  # the last place named is where the agent is
    with pytest.raises(ValueError, match="unknown trap task"):
        TrapEnv().places("no-such-task")


def test_config_option():
    assert MemoryConfig().structure == "flat"
    assert RunConfig().with_overrides(memory={"structure": "structured"}).validate().memory.structure == "structured"
    with pytest.raises(ValueError, match=r"memory.structure must be one of \['flat', 'structured', 'groups', 'flat-counts', "):
        RunConfig().with_overrides(memory={"structure": "graph"}).validate()


# ---- the store -----------------------------------------------------------------------------------------------
def test_episode_tips_go_to_the_group_of_each_steps_place(tmp_path):
    s = _store(tmp_path)
    added = s.add_episode_tips(_episode("e1", ["go to workshop", "focus on red light bulb"], [SHOP, "You focus."], 50.0),
                               "the bulb is in the workshop", "conv")  # fmt: skip
    assert len(added) == 2
    places = {r["action"]: r["place"] for g in ("hallway", "workshop") for r in s.group_rows(TASK, 0, g)}
    assert places == {"go to workshop": "hallway", "focus on red light bulb": "workshop"}
    assert all(r["source_episode_id"] == "e1" for r in s.group_rows(TASK, 0, "hallway"))


def test_the_tips_of_a_stopped_iterations_episodes_are_removed_by_episode(tmp_path):
    s = _store(tmp_path)
    s.add_episode_tips(_episode("kept", ["go to workshop"], [SHOP], 50.0), "the bulb is in the workshop", "conv")
    s.add_episode_tips(_episode("cut", ["go to kitchen", "look around"], ["In the kitchen.", "A table."], 0.0),
                       "the kitchen holds a table", "conv")  # fmt: skip
    s.add_episode_tips(_episode("cut", ["look around"], ["A table."], 0.0), "a pinned note", "conv")
    pinned = next(t.tip_id for t in s.list_tips() if t.text.startswith("a pinned note"))
    s.pin([pinned])  # a teacher pinned one of the cut episode's tips while it ran: it stays
    before = s.count()
    assert s.remove_episode_tips(["cut", "never-played"]) == before - 2 and s.remove_episode_tips([]) == 0
    assert sorted(t.source_episode_id for t in s.list_tips()) == ["cut", "kept"]


def test_retrieval_stays_in_the_group_of_the_place(tmp_path):
    s = _store(tmp_path)
    hall = s.add_tip(TASK, 0, "hall tip", place="hallway")
    shop = s.add_tip(TASK, 0, "shop tip", place="workshop")
    anywhere = s.add_tip(TASK, 0, "task tip")
    [(in_shop, _)] = s.retrieve_explained(TASK, 0, ["some query"], places=["workshop"])
    assert {t.tip_id for t in in_shop} == {shop.tip_id, anywhere.tip_id}
    [(from_text, _)] = s.retrieve_explained(TASK, 0, [HALL])  # no place given: the query's own
    assert {t.tip_id for t in from_text} == {hall.tip_id, anywhere.tip_id}


def test_feedback_counts_used_and_helped_against_the_groups_mean(tmp_path):
    s = _store(tmp_path)
    tip = s.add_tip(TASK, 0, "go to the workshop", place="hallway")
    for eid, score in (("e1", 100.0), ("e2", 50.0), ("e3", 90.0)):
        s.record_episode(_episode(eid, ["look around"], [HALL], score, tips=[_shown(tip.tip_id)]))
    row = s.group_rows(TASK, 0, "hallway")[0]
    # e1: 100 > 0 (no mean yet) helped; mean 100. e2: 50 < 100 not; mean 75. e3: 90 > 75 helped; mean 80.
    assert (row["used"], row["helped"]) == (3, 2)
    [([hit], _)] = s.retrieve_explained(TASK, 0, ["go to the workshop"], places=["hallway"])  # key = its own text
    assert hit.similarity == pytest.approx(1.0, abs=1e-5)
    assert hit.why == "group hallway · a teacher's tip: shown first · rank 1.30 = similarity 1.00 + 0.5·(2+1)/(3+2) · used 3, helped 2"  # 1 + 0.3
    [g] = s.groups()
    assert (g.label, g.tips, g.episodes, g.mean_score) == (f"{TASK} · v0 · hallway", 1, 3, pytest.approx(80.0))
    assert g.best[0]["used"] == 3 and g.best[0]["helped"] == 2


def test_duplicates_merge_with_counts_summed_and_text_kept(tmp_path):
    emb = KeyedEmbedder({"bulb is in the workshop": _unit(0), "bulb sits in the workshop": _unit(0, 1, 0.97)})
    s = _store(tmp_path, emb)
    s.add_episode_tips(_episode("e1", ["go to workshop"], [SHOP], 50.0), "the bulb is in the workshop", "conv")
    s.add_episode_tips(_episode("e2", ["go to workshop"], [SHOP], 75.0), "the bulb is in the workshop", "conv")  # exact
    s.add_episode_tips(_episode("e3", ["go to workshop"], [SHOP], 25.0), "the bulb sits in the workshop", "conv")  # cos .97
    [row] = s.group_rows(TASK, 0, "hallway")
    assert row["text"].startswith("the bulb is in the workshop") and row["source_episode_id"] == "e1"
    assert row["merged_sources"] == "e2 e3"
    # by hand: merge sums the counts into the kept tip
    a = s.add_tip(TASK, 0, "apples grow on trees", place="kitchen")
    b = s.add_tip(TASK, 0, "the key is under the mat", place="kitchen")
    for eid, score in (("x1", 100.0), ("x2", 0.0)):
        s.record_episode(_episode(eid, ["look around"], [HALL], score, tips=[_shown(a.tip_id)]))
    s.record_episode(_episode("x3", ["look around"], [HALL], 100.0, tips=[_shown(b.tip_id)]))
    kept = s.merge(a.tip_id, [b.tip_id])
    [row] = s.group_rows(TASK, 0, "kitchen")
    assert (kept.text, row["used"], row["helped"]) == ("apples grow on trees", 3, 2)  # a: 2 used 1 helped; b: 1 used 1 helped
    with pytest.raises(ValueError, match="not in group"):
        s.merge(a.tip_id, [s.add_tip(TASK, 0, "elsewhere", place="bedroom").tip_id])


@pytest.mark.parametrize("old_counts, winner", [((2, 2), "old"), ((2, 0), "old"), ((5, 0), "new")])
def test_a_contradiction_keeps_the_better_record(tmp_path, old_counts, winner):
    emb = KeyedEmbedder({"the bulb is here": _unit(0), "the bulb is not here": _unit(0, 1, 0.9)})
    s = _store(tmp_path, emb)
    [old] = s.add_episode_tips(_episode("good", ["look around"], [SHOP], 100.0, first=SHOP), "the bulb is here", "conv")
    for k in range(old_counts[0]):
        score = 50.0 + 50.0 * k if k < old_counts[1] else -100.0  # 50 > 0, then 100 > 50: each beats the mean
        s.record_episode(_episode(f"o{k}", ["look around"], [SHOP], score, tips=[_shown(old.tip_id)]))
    s.add_episode_tips(_episode("bad", ["look around", "focus on blue light bulb"], [SHOP, "failed"], -100.0, first=SHOP),
                       "the bulb is not here", "conv")  # fmt: skip
    rows = {r["id"] == old.tip_id: r for r in s.group_rows(TASK, 0, "workshop")}
    loser = rows[winner == "new"]
    assert loser["retired"] and loser["retired_reason"].startswith("contradicted by")
    assert not rows[winner == "old"]["retired"]


def test_a_teachers_tip_is_never_merged_or_retired_by_the_rules(tmp_path):
    emb = KeyedEmbedder({"the bulb is here": _unit(0), "the bulb is not here": _unit(0, 1, 0.9)})
    s = _store(tmp_path, emb)
    teacher = s.add_tip(TASK, 0, "the bulb is here", place="workshop")  # score 0: a "miss" by outcome alone
    s.add_episode_tips(_episode("bad", ["look around"], [SHOP], -100.0, first=SHOP), "the bulb is not here", "conv")
    s.add_episode_tips(_episode("good", ["look around"], [SHOP], 100.0, first=SHOP), "the bulb is here", "conv")
    rows = s.group_rows(TASK, 0, "workshop")
    assert len(rows) == 3 and not next(r for r in rows if r["id"] == teacher.tip_id)["retired"]


def test_caps_on_stored_and_shown(tmp_path):
    s = _store(tmp_path, rules=st.StructureRules(max_stored=2), top_k=1)
    texts = ("apples grow on trees", "the key is under the mat", "zebra 42 qq")
    tips = [s.add_tip(TASK, 0, t, place="kitchen") for t in texts]
    rows = s.group_rows(TASK, 0, "kitchen")
    assert sum(not r["retired"] for r in rows) == 2
    [retired] = [r for r in rows if r["retired"]]
    assert retired["id"] == tips[0].tip_id and retired["retired_reason"] == "over the group cap (2)"  # oldest of equal records
    [(shown, skipped)] = s.retrieve_explained(TASK, 0, ["q"], places=["kitchen"])
    assert len(shown) == 1 and any(k.reason.startswith("retired: over the group cap") for k in skipped)


def test_pin_and_retire(tmp_path):
    s = _store(tmp_path)
    a = s.add_tip(TASK, 0, "aaa first", place="kitchen")
    b = s.add_tip(TASK, 0, "bbb second", place="kitchen")
    s.pin([b.tip_id])
    [(shown, _)] = s.retrieve_explained(TASK, 0, ["aaa first"], places=["kitchen"])
    assert shown[0].tip_id == b.tip_id and shown[0].pinned
    s.retire([b.tip_id])
    [(shown, _)] = s.retrieve_explained(TASK, 0, ["aaa first"], places=["kitchen"])
    assert [t.tip_id for t in shown] == [a.tip_id]


@pytest.mark.parametrize("call", [
    lambda s: s.add_tip(TASK, 0, "tip", place="attic"),
    lambda s: s.add_tip(TASK, 0, "tip", place=""),
    lambda s: s.add_tip("no-task", 0, "tip", place="kitchen"),
])  # fmt: skip
def test_an_unknown_group_is_refused_naming_the_valid_ones(tmp_path, call):
    s = _store(tmp_path)
    s.add_tip(TASK, 0, "existing", place="kitchen")
    before = (s.count(), s.version)
    with pytest.raises(ValueError, match=r"hallway, kitchen, workshop, greenhouse, bedroom, anywhere|unknown trap task"):
        call(s)
    assert (s.count(), s.version) == before


def test_import_refuses_an_unknown_group_and_imports_nothing(tmp_path):
    s = _store(tmp_path)
    f = tmp_path / "bad.jsonl"
    lines = [{"task": TASK, "variation": 0, "text": "ok", "score": 0, "place": "kitchen"},
             {"task": TASK, "variation": 0, "text": "bad", "score": 0, "place": "attic"}]  # fmt: skip
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.raises(ValueError, match=r"tip 2 .*unknown group 'attic'.*anywhere"):
        s.import_jsonl(f)
    assert s.count() == 0


def test_flat_export_imports_into_groups_and_back_with_nothing_lost(tmp_path):
    flat = TipStore.open(tmp_path / "flat.lance", HashEmbedder(), MemoryConfig())
    flat.add_episode_tips(_episode("e1", ["go to workshop", "look around"], [SHOP, SHOP], 50.0),
                          "the bulb is in the workshop", HALL + " user: x " + SHOP)  # fmt: skip
    flat.add_tip(TASK, 0, "a teacher's tip")
    flat.add_tip(TASK, 1, "a tip of variation 1")
    n = flat.export_jsonl(tmp_path / "flat.jsonl")
    s = StructuredTipStore.open(tmp_path / "s.lance", HashEmbedder(), MemoryConfig(), world=TrapEnv())
    result = s.import_jsonl(tmp_path / "flat.jsonl")
    assert (n, result.added, result.skipped_duplicates, s.count()) == (4, 4, 0, 4)
    assert {(g.variation, g.place, g.tips) for g in s.groups()} == {(0, "workshop", 2), (0, "anywhere", 1), (1, "anywhere", 1)}
    assert s.export_jsonl(tmp_path / "back.jsonl", flat=True) == 4
    again = TipStore.open(tmp_path / "again.lance", HashEmbedder(), MemoryConfig())
    assert again.import_jsonl(tmp_path / "back.jsonl").added == 4
    key = lambda t: (t.tip_id, t.task, t.variation, t.text, t.score, t.source_episode_id, t.enabled)  # noqa: E731
    assert sorted(map(key, again.list_tips())) == sorted(map(key, flat.list_tips()))
    # a structured export keeps groups and counts through another structured store
    s.record_episode(_episode("r", ["look around"], [SHOP], 100.0, tips=[_shown(s.group_rows(TASK, 0, "anywhere")[0]["id"])]))
    s.export_jsonl(tmp_path / "structured.jsonl")
    other = StructuredTipStore.open(tmp_path / "o.lance", HashEmbedder(), MemoryConfig(), world=TrapEnv())
    assert other.import_jsonl(tmp_path / "structured.jsonl").added == 4
    assert [(g.place, g.tips, g.best[0]["used"]) for g in other.groups()] == [(g.place, g.tips, g.best[0]["used"]) for g in s.groups()]


# ---- the rollout ---------------------------------------------------------------------------------------------
def test_a_structured_rollout_asks_at_the_start_and_on_entering_a_new_place(tmp_path):
    from empo2_studio.rollout import play_group, seed_policy, write_group_tips
    from fakes import ScriptedPolicy

    env = TrapEnv()
    gold = env.gold_path(TASK, 0)  # go to <room>, focus on the bulb, turn it on
    room = gold[0].removeprefix("go to ")
    s = _store(tmp_path, HashEmbedder())
    hall = s.add_tip(TASK, 0, "a hallway note", place="hallway")
    there = s.add_tip(TASK, 0, f"a {room} note", place=room)
    asked: list[list[str]] = []
    real = s.retrieve_explained
    s.retrieve_explained = lambda *a, **k: asked.append(list(k["places"])) or real(*a, **k)  # type: ignore[method-assign]
    actions = iter(["look around", *gold])
    policy = ScriptedPolicy(lambda request: next(actions))
    seed_policy(policy, 0)
    [ep] = play_group([env], policy, s, task=TASK, variation=0, split="train", rollout_mode="memory",
                      update_mode="off-policy", temperature=1.0, seed=0)  # fmt: skip
    assert asked == [["hallway"], [room]]  # not again after "look around", nor after the focus
    assert [[t.tip_id for t in step.tips] for step in ep.steps] == [[hall.tip_id], [hall.tip_id], [there.tip_id],
                                                                    [there.tip_id]]  # fmt: skip
    assert ep.won
    write_group_tips(policy, s, [ep])  # credits the tips the episode read, then stores its own
    counts = {r["id"]: (r["used"], r["helped"]) for g in ("hallway", room) for r in s.group_rows(TASK, 0, g)}
    assert counts[hall.tip_id] == (1, 1) and counts[there.tip_id] == (1, 1)
    [own] = [r for r in s.group_rows(TASK, 0, room) if r["source_episode_id"] == ep.episode_id]
    # the focus and turn-on entries differ in their action only (text cosine ≥ 0.95): one tip, merged
    assert own["action"] == gold[1] and own["merged_sources"] == ep.episode_id


KITCHEN = "This room is called the kitchen. In it, you see: a table."


def _note(s: StructuredTipStore, eid: str, text: str, score: float) -> None:
    """Store `text` as the one-step episode `eid`'s note (scored `score`), keyed by its own text."""
    s.add_episode_tips(_episode(eid, ["look around"], [KITCHEN], score, first=KITCHEN), text, text)


def _read(s: StructuredTipStore, eid: str, score: float, shown) -> int:
    """Count the one-step episode `eid` (scored `score`) as a reader of the tips `shown`."""
    return s.record_episode(_episode(eid, ["look around"], [KITCHEN], score, first=KITCHEN, tips=shown))


def test_flat_counts_wins_as_a_store(tmp_path):
    # keys: the failed note's key is the query itself (cosine 1.0), the won note's 0.6 from it; both above 0.5
    emb = KeyedEmbedder({"searched the kitchen": _unit(0), "found it outside": _unit(0, 1, 0.6), "query": _unit(0)})
    arms = {}
    for arm in ("flat-counts", "flat-counts-wins"):
        s = _store(tmp_path / arm, emb, structure=arm, top_k=2, similarity_threshold=0.5)
        _note(s, "won", "found it outside", 100.0)
        _note(s, "lost", "searched the kitchen", -100.0)
        [(shown, _)] = s.retrieve_explained(TASK, 0, ["query"], places=["kitchen"])
        arms[arm] = [t.text.split(";")[0] for t in shown]
    # rank: similarity + 0.5·½ for both (never read): 1.25 against 0.85, so flat-counts shows the failed note first
    assert arms == {"flat-counts": ["searched the kitchen", "found it outside"],
                    "flat-counts-wins": ["found it outside", "searched the kitchen"]}
    # the why and why-not say it
    [(shown, _)] = s.retrieve_explained(TASK, 0, ["query"], places=["kitchen"])
    assert "a won episode's: shown first" in shown[0].why and "won episodes' notes go first" not in shown[1].why


def test_flat_rotate_as_a_store(tmp_path):
    # the flat memory's order (score first) until a note's readers mostly fail their group's mean
    emb = KeyedEmbedder({"searched the kitchen": _unit(0), "searched the hallway": _unit(0, 1, 0.6), "query": _unit(0)})
    s = _store(tmp_path, emb, structure="flat-rotate", top_k=1, similarity_threshold=0.5)
    _note(s, "a", "searched the kitchen", 25.0)
    _note(s, "b", "searched the hallway", 10.0)
    [(shown, skipped)] = s.retrieve_explained(TASK, 0, ["query"])
    assert [t.text.split(";")[0] for t in shown] == ["searched the kitchen"]  # 25 before 10, whatever the similarity
    assert shown[0].why == "group anywhere · score 25.0 · similarity 1.00 · used 0, helped 0"
    # two readers of the kitchen note: the first scores -100 (below the group mean 0: no help), the second 5
    # (above the mean -100 by then: helped); 1 of 2 is not below half, so the note keeps its place
    for eid, score in (("r1", -100.0), ("r2", 5.0)):
        _read(s, eid, score, shown)
    [(shown, _)] = s.retrieve_explained(TASK, 0, ["query"])
    assert shown[0].text.startswith("searched the kitchen") and "used 2, helped 1" in shown[0].why
    _read(s, "r3", -100.0, shown)  # mean -47.5 after two: -100 does not beat it
    [(shown, skipped)] = s.retrieve_explained(TASK, 0, ["query"])
    assert [t.text.split(";")[0] for t in shown] == ["searched the hallway"]
    assert skipped[0].reason.endswith("(score 25.0, used 3, helped 1: did not help, behind the rest)")


def test_a_merge_keeps_the_better_source_score(tmp_path):
    # the full design merges a near duplicate of the same outcome (both scored > 0; text cosine 1.0 here)
    emb = KeyedEmbedder({"the bulb is in the workshop": _unit(0)})
    s = _store(tmp_path, emb, structure="structured")
    for eid, score in (("half", 50.0), ("won", 100.0)):
        s.add_episode_tips(_episode(eid, ["look around"], [KITCHEN], score, first=KITCHEN), "the bulb is in the workshop", "k")
    [kept] = s.group_rows(TASK, 0, "kitchen")
    assert (kept["score"], kept["merged_sources"]) == (100.0, "won")  # the older text stays, with the won score


@pytest.mark.parametrize("arm", ["groups", "flat-counts", "structured-random"])
def test_each_arm_as_a_store(tmp_path, arm):
    emb = KeyedEmbedder({"the bulb is in the workshop": _unit(0), "the bulb sits in the workshop": _unit(0, 1, 0.97)})
    s = _store(tmp_path, emb, structure=arm, top_k=2, similarity_threshold=0.5)
    written = [s.add_episode_tips(_episode(f"e{i}", ["look around"], [KITCHEN], 50.0, first=KITCHEN), t, t)
               for i, t in enumerate(("the bulb is in the workshop", "the bulb sits in the workshop", "zebra 42 qq"))]
    a = written[0][0]  # the second repeats it (text cosine 0.97): merged in the full design only
    groups = {(g.place, g.tips) for g in s.groups()}
    if arm == "flat-counts":  # one group per variation, the flat threshold
        assert groups == {("anywhere", 3)}
        [(shown, _)] = s.retrieve_explained(TASK, 0, ["the bulb is in the workshop"], places=["kitchen"])
        assert {t.text.split(";")[0] for t in shown} == {"the bulb is in the workshop", "the bulb sits in the workshop"}  # zebra ≤ 0.5
    elif arm == "groups":  # no near-duplicate merge; rank = similarity
        assert groups == {("kitchen", 3)}
        [(shown, _)] = s.retrieve_explained(TASK, 0, ["the bulb is in the workshop"], places=["kitchen"])
        assert shown[0].tip_id == a.tip_id and "0·(0+1)/(0+2)" in shown[0].why
    else:  # the full design's merge, then a random pick of the group, the same for the same query
        assert groups == {("kitchen", 2)}
        [(one, _)] = s.retrieve_explained(TASK, 0, ["q"], places=["kitchen"])
        [(two, _)] = s.retrieve_explained(TASK, 0, ["q"], places=["kitchen"])
        assert [t.tip_id for t in one] == [t.tip_id for t in two] and "a random pick" in one[0].why


@pytest.mark.scienceworld
def test_scienceworld_observations_name_their_place():
    from empo2_studio.envs.scienceworld import ScienceWorldEnv

    with ScienceWorldEnv() as env:
        first = env.reset("power-component", 0)
        seen = [env.place_of(first.text)]
        for action in ("teleport to art studio", "look around", "teleport to outside", "look around", "wait1"):
            seen.append(env.place_of(env.step(action).observation.text))
    assert seen == ["hallway", "art studio", "art studio", "outside", "outside", None]  # "wait1" names no place


def test_flat_rotate_source_counts_a_reader_helped_when_the_note_held(tmp_path):
    # the stall of docs/notebook/2026-12-07-sw-flat-rotate.md: a 25-point search note whose readers time out
    # at 17. Against the group's mean (pulled down by -100s) they "helped"; against the note's own 25 they did not.
    emb = KeyedEmbedder({"go to the bedroom": _unit(0), "go to the hallway": _unit(0, 1, 0.6), "query": _unit(0)})
    arms = {}
    for arm in ("flat-rotate", "flat-rotate-source"):
        s = _store(tmp_path / arm, emb, structure=arm, top_k=1, similarity_threshold=0.5)
        _note(s, "a", "go to the bedroom", 25.0)
        _note(s, "b", "go to the hallway", 17.0)
        [(shown, _)] = s.retrieve_explained(TASK, 0, ["query"])
        # readers: -100 (mean 0 before it: not helped either way), then 17, 17 (above the mean -100, -41.5:
        # helped by "mean"; below 25: not by "source"), then 25 (helped both ways: the note held)
        for eid, score in (("r1", -100.0), ("r2", 17.0), ("r3", 17.0), ("r4", 25.0)):
            _read(s, eid, score, shown)
        [row] = [r for r in s.group_rows(TASK, 0, "anywhere") if r["text"].startswith("go to the bedroom")]
        [(now, _)] = s.retrieve_explained(TASK, 0, ["query"])
        arms[arm] = (row["used"], row["helped"], now[0].text.split(";")[0])
    assert arms == {"flat-rotate": (4, 3, "go to the bedroom"),            # 3 of 4 helped: it stays in front
                    "flat-rotate-source": (4, 1, "go to the hallway")}     # 1 of 4: behind the hallway note
    assert st.reproduced(100.0, 100.0) and st.reproduced(25.0, 17.0) and not st.reproduced(17.0, 25.0)
    # a failed note (-100) or a teacher's tip (0) helps only a reader that achieved something (above 0)
    assert not st.reproduced(-100.0, -100.0) and not st.reproduced(0.0, 0.0) and st.reproduced(8.0, -100.0)


def test_flat_rotate_source_credits_each_tip_against_its_own_score(tmp_path):
    # one reader (20 points) shown two notes of one group: it beat the 17-point note's record, not the 25-point one's
    emb = KeyedEmbedder({"note a": _unit(0), "note b": _unit(0, 1, 0.9), "query": _unit(0)})
    s = _store(tmp_path, emb, structure="flat-rotate-source", top_k=2, similarity_threshold=0.5)
    _note(s, "a", "note a", 25.0)
    _note(s, "b", "note b", 17.0)
    [(shown, _)] = s.retrieve_explained(TASK, 0, ["query"])
    assert len(shown) == 2
    assert _read(s, "r", 20.0, shown) == 2
    counts = {r["text"].split(";")[0]: (r["used"], r["helped"]) for r in s.group_rows(TASK, 0, "anywhere")}
    assert counts == {"note a": (1, 0), "note b": (1, 1)}
    assert s._group_stats(TASK, 0, "anywhere") == (1, 20.0)  # the group's mean took the reader in once


def test_a_tip_below_the_threshold_says_so(tmp_path):
    emb = KeyedEmbedder({"near": _unit(0), "far": _unit(0, 1, 0.3), "query": _unit(0)})
    s = _store(tmp_path, emb, structure="flat-rotate", top_k=1, similarity_threshold=0.5)
    for eid, note, score in (("n", "near", 10.0), ("f", "far", 90.0), ("n2", "near again", 5.0)):
        _note(s, eid, note, score)
    [(shown, skipped)] = s.retrieve_explained(TASK, 0, ["query"])
    assert shown[0].text.startswith("near;")
    reasons = {t.text.split(";")[0]: t.reason for t in skipped}
    assert reasons["far"] == "similarity 0.30 ≤ threshold 0.50"  # the 90-point note, kept out by its key
    assert reasons["near again"].startswith("outside the top 1 of group anywhere (score 5.0")


def test_a_teachers_tip_is_shown_first_with_pin_curated():
    # pinned, then the teacher's tips (by hand, imported without a source, edited) in score order, then the
    # rest above the threshold; pin_curated off: the teacher's tips meet the threshold like any other
    spec = [("P", True, "generated", False, "ep0", 0.0, 0.1), ("T", False, "manual", False, "", 0.0, 0.2),
            ("E", False, "imported", False, "", 50.0, 0.3), ("I", False, "imported", False, "ep9", 90.0, 0.3),
            ("D", False, "generated", True, "ep1", 10.0, 0.6), ("G", False, "generated", False, "ep2", 100.0, 0.9)]  # fmt: skip
    rows = [dict(id=k, enabled=True, retired=False, pinned=p, origin=o, edited=e, source_episode_id=src, score=sc,
                 used=0, helped=0, created_at=1.0) for k, p, o, e, src, sc, _ in spec]  # fmt: skip
    sims = [s[-1] for s in spec]
    order = lambda pin: [rows[i]["id"] for i in st.retrieval_order(rows, sims, 0.5, 10, threshold=0.5, score_order=True,  # noqa: E731
                                                                    pin_curated=pin)]  # fmt: skip
    assert order(True) == ["P", "E", "D", "T", "G"]  # I: imported with its source episode, 0.3 ≤ 0.5
    assert order(False) == ["P", "G", "D"]
    assert [st.shown_first(r, True) for r in rows] == [True, True, True, False, True, False]


def test_a_teachers_tip_stays_in_front_of_a_rotating_memory(tmp_path):
    # the Lesson's tip (added by hand, keyed by its own text) in a flat-rotate-source store: shown at every
    # step whatever its similarity, and never put behind by readers that failed
    emb = KeyedEmbedder({"Animals live outside": _unit(2), "searched the kitchen": _unit(0), "query": _unit(0)})
    s = _store(tmp_path, emb, structure="flat-rotate-source", top_k=2, similarity_threshold=0.5)
    teacher = s.add_tip(TASK, 0, "Animals live outside: teleport to the outside first.", score=100.0)
    _note(s, "a", "searched the kitchen", 25.0)
    [(shown, _)] = s.retrieve_explained(TASK, 0, ["query"])  # the teacher's key is 0.0 similar to the query
    assert [t.tip_id for t in shown][0] == teacher.tip_id and shown[0].pinned
    assert shown[0].why == "group anywhere · a teacher's tip: shown first · score 100.0 · similarity 0.00 · used 0, helped 0"
    for eid in ("r1", "r2", "r3"):
        _read(s, eid, -100.0, shown)
    [(shown, _)] = s.retrieve_explained(TASK, 0, ["query"])
    assert shown[0].tip_id == teacher.tip_id and shown[0].why.endswith("used 3, helped 0")  # not put behind
    assert shown[1].why.endswith("used 3, helped 0: did not help, behind the rest")
    off = _store(tmp_path / "off", emb, structure="flat-rotate-source", top_k=2, similarity_threshold=0.5, pin_curated=False)
    off.add_tip(TASK, 0, "Animals live outside: teleport to the outside first.", score=100.0)
    [(shown, skipped)] = off.retrieve_explained(TASK, 0, ["query"])
    assert shown == [] and skipped[0].reason == "similarity 0.00 ≤ threshold 0.50"


def test_an_edited_or_imported_teachers_tip_is_never_merged_into(tmp_path):
    # an agent's note whose text is exactly a teacher's tip's (imported without a source episode, in the
    # same group) is added beside it, not merged into it: the teacher's tip keeps its counts and sources
    s = _store(tmp_path)
    [note] = s.add_episode_tips(_episode("first", ["look around"], [HALL], 50.0), "check the hallway", "conv")
    s.delete([note.tip_id])
    path = tmp_path / "teacher.jsonl"
    path.write_text(json.dumps({"task": TASK, "variation": 0, "text": note.text, "score": 0.0, "place": "hallway"}) + "\n")
    s.import_jsonl(path)
    s.add_episode_tips(_episode("agent", ["look around"], [HALL], 50.0), "check the hallway", "conv")
    rows = sorted((r for r in s.group_rows(TASK, 0, "hallway") if r["text"] == note.text), key=lambda r: r["origin"])
    assert [r["origin"] for r in rows] == ["generated", "imported"]
    assert [r["merged_sources"] for r in rows] == ["", ""] and [st.teachers_tip(r) for r in rows] == [False, True]
