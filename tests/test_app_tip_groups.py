"""The Tips tab's groups view (app/tip_groups.py) as plain functions, on a structured and a flat session."""

from __future__ import annotations

from dataclasses import replace

import gradio as gr
import pytest

from empo2_studio.app import tip_groups as tg
from empo2_studio.app import tips_tab as th

TASK = "trap-light-bulb"


@pytest.fixture(scope="module")
def structured(studio, studio_cfg):
    cfg = replace(studio_cfg.with_overrides(memory={"structure": "structured"}), run_id="grouped")
    studio.create_session(cfg)
    return "grouped"


def test_a_flat_session_says_it_has_no_groups(studio):
    frame, picker, status = tg.groups_view(studio, "studio")
    assert frame.empty and "flat" in status
    with pytest.raises(gr.Error, match="flat"):
        tg.act(studio, "studio", ["x"], "pin")


def test_groups_pin_merge_retire_and_export_keep_the_structure(studio, structured, tmp_path):
    store = studio.store(structured)
    a = store.add_tip(TASK, 0, "apples grow on trees", place="kitchen")
    b = store.add_tip(TASK, 0, "the key is under the mat", place="kitchen")
    store.add_tip(TASK, 0, "a note for anywhere")
    frame, picker, status = tg.groups_view(studio, structured)
    assert list(frame["group"]) == [f"{TASK} · v0 · anywhere", f"{TASK} · v0 · kitchen"]
    assert list(frame["tips"]) == [1, 2] and status == "2 group(s), 3 live tip(s), 0 retired"
    assert "(0/0)" in frame["best tips (used/helped)"][1]
    label = f"{TASK} · v0 · kitchen"
    tips, sel = tg.group_tips(studio, structured, label)
    assert set(tips["id"]) == {a.tip_id, b.tip_id}
    assert tg.act(studio, structured, [b.tip_id], "pin") == "pinned 1 tip(s)"
    assert tg.group_tips(studio, structured, label)[0]["id"][0] == b.tip_id  # pinned first
    assert tg.act(studio, structured, [b.tip_id], "retire") == "retired 1 tip(s)"
    assert tg.groups_view(studio, structured)[0]["retired"][1] == 1
    assert tg.act(studio, structured, [b.tip_id], "unretire") == "unretired 1 tip(s)"
    assert tg.act(studio, structured, [a.tip_id, b.tip_id], "merge").startswith("merged 1 tip(s) into")
    assert list(tg.group_tips(studio, structured, label)[0]["text"]) == ["apples grow on trees"]
    # export / import through the Tips tab keeps the groups
    path, _ = th.export_tips(studio, structured)
    store.delete([t.tip_id for t in store.list_tips()])
    assert th.import_tips(studio, structured, path) == "imported 2 tip(s), skipped 0 duplicate(s)"
    assert list(tg.groups_view(studio, structured)[0]["group"]) == [f"{TASK} · v0 · anywhere", label]


def test_an_import_naming_a_task_or_variation_the_session_lacks_stores_nothing(studio, tmp_path):
    """As *Add a tip* refuses them: a tip under a misspelt task would never be read by any episode."""
    path = tmp_path / "typo.jsonl"
    path.write_text(f'{{"task": "{TASK}", "variation": 0, "text": "fine", "score": 5}}\n\n'
                    '{"task": "ghost-task", "variation": 7, "text": "lost", "score": 5}\n'
                    f'{{"task": "{TASK}", "variation": 99999, "text": "lost too", "score": 5}}\n')  # fmt: skip
    before = studio.store("studio").count()
    with pytest.raises(gr.Error, match=r"2 tip\(s\) name a task or variation.*nothing imported: "
                                       r"line 3: unknown trap task 'ghost-task'; valid tasks: trap-light-bulb.*; "
                                       r"line 4: trap-light-bulb has no variation 99999; valid: 0–47"):  # fmt: skip
        th.import_tips(studio, "studio", str(path))
    assert studio.store("studio").count() == before


def test_adding_to_a_group_the_environment_does_not_know_is_refused(studio, structured):
    before = studio.store(structured).count()
    with pytest.raises(gr.Error, match="unknown group 'attic'.*hallway, kitchen, workshop, greenhouse, bedroom, anywhere"):
        tg.add_to_group(studio, structured, f"{TASK} · v0 · kitchen", "attic", "a tip", 0)
    with pytest.raises(gr.Error, match="pick a group first"):
        tg.add_to_group(studio, structured, None, "", "a tip", 0)
    assert studio.store(structured).count() == before
    assert tg.add_to_group(studio, structured, f"{TASK} · v0 · kitchen", "", "bulbs are bright", 0).endswith("kitchen")


def test_the_tips_tab_holds_the_groups_panel_and_a_session_switch_fills_it(studio, structured):
    from empo2_studio.app import layout

    demo = layout.build_blocks(studio)
    ids = {getattr(b, "elem_id", None) for b in demo.blocks.values()}
    assert {"tips-groups-panel", "tips-groups", "tips-group-pick", "tips-group-merge", "tips-group-add"} <= ids
    demo.close()
    with gr.Blocks():
        parts = th.build_tips_tab(studio, gr.State("studio"))
    refresh, outputs = parts["refresh"]
    for rid, flat in (("studio", True), (structured, False)):
        update = refresh(rid)
        assert set(update) == set(outputs)
        status = next(v for c, v in update.items() if getattr(c, "elem_id", None) == "tips-groups-status")
        assert ("flat" in status) == flat


def test_the_episodes_view_says_why_a_structured_memory_chose_a_tip():
    from empo2_studio.app import render
    from empo2_studio.types import ActionSample, RetrievedTip, Step

    why = "group hallway · rank 1.30 = similarity 1.00 + 0.5·(2+1)/(3+2) · used 3, helped 2"
    tips = (RetrievedTip("a", "go to the workshop", 0.0, 1.0, why=why), RetrievedTip("b", "a flat tip", 0.0, 0.7))
    step = Step(index=0, user_message="m", tips=tips, valid_actions=("look around",),
                sample=ActionSample("look around", (1,), (0.0,)), action="look around", corrected=False,
                reward=0.0, score=0.0, observation="o")  # fmt: skip
    html = render.step_html(step, "memory")
    assert f'<span class="e2-why">({why})</span>' in html and html.count('class="e2-why"') == 1


def test_merged_sources_read_as_episodes_with_their_counts():
    """An episode stores one entry per step, so its entries merge into one tip several times; the
    column said the same ids over and over (a new user's find)."""
    assert tg.merged_text("ep-0 ep-1 ep-0 ep-1 ep-1 ep-0 ep-1") == "ep-0 ×3, ep-1 ×4"
    assert tg.merged_text("ep-7") == "ep-7" and tg.merged_text("") == ""
