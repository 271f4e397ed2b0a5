"""The studio's handlers as plain functions: trap env, tiny random policy, hash embedder, tmp sessions."""

from __future__ import annotations

import re
import threading
import time

import gradio as gr
import pytest

from empo2_studio.app import adapt_tab as at, episodes_tab as et, figures, handlers as h, job_panel as jp, layout
from empo2_studio.app import pair_memory as pm, race_tab as rc, render, sessions_tab as st, tips_tab as th, train_tab as tt
from empo2_studio.app.jobs import JobRegistry, readable_error
from empo2_studio.app.studio import Studio
from empo2_studio.types import ActionSample, RetrievedTip, Step

RUN = "studio"
TASK = "trap-light-bulb"


def _step(i: int, *, corrected: bool = False, tips=()) -> Step:
    return Step(index=i, user_message="u", tips=tuple(tips), valid_actions=("look",),
                sample=ActionSample("lok <b>", (1,), (-0.1,)), action="look", corrected=corrected,
                reward=5.0, score=5.0 * (i + 1), observation="You see <a lamp>.")  # fmt: skip


# ---- jobs ------------------------------------------------------------------------------------------
def test_job_reports_progress_and_result():
    reg = JobRegistry()
    job = reg.start("demo", lambda j: (j.update(progress=0.5, message="half"), 42)[1], uses_model=False)
    reg.wait(job.job_id, 5)
    assert (job.status, job.result, job.progress) == ("done", 42, 1.0)


def test_job_failure_is_one_readable_line():
    reg = JobRegistry()

    def boom(j):
        raise ValueError("variation 99 not in train split; valid: 0…23")

    job = reg.wait(reg.start("demo", boom).job_id, 5)
    assert job.status == "failed"
    assert job.error == "variation 99 not in train split; valid: 0…23"
    assert "Traceback" not in jp.job_status_html(job)
    assert readable_error(ZeroDivisionError("division by zero")) == "ZeroDivisionError: division by zero"
    # whole messages: quoted values kept, every line of a multi-line message joined
    assert readable_error(ValueError("tip text must not be empty, got ''")) == "tip text must not be empty, got ''"
    assert readable_error(KeyError("no session 'x'; existing: ['a']")) == "no session 'x'; existing: ['a']"
    assert readable_error(ValueError("2 bad line(s), nothing imported:\n  line 3: not valid JSON\n  line 5: unknown keys ['c']")) == (
        "2 bad line(s), nothing imported: line 3: not valid JSON; line 5: unknown keys ['c']")


def test_stop_takes_effect_between_steps():
    reg = JobRegistry()
    steps = []

    def loop(j):
        for i in range(1000):
            if j.stop_requested:
                return i
            steps.append(i)
            time.sleep(0.01)

    job = reg.start("demo", loop)
    time.sleep(0.05)
    assert reg.stop(job.job_id)
    reg.wait(job.job_id, 5)
    assert job.status == "stopped"
    assert job.result == len(steps) < 1000
    assert not reg.stop(job.job_id)  # already finished


def test_model_jobs_are_serialised():
    reg = JobRegistry()
    inside, overlap = [0], []
    lock = threading.Lock()

    def work(j):
        with lock:
            inside[0] += 1
            overlap.append(inside[0])
        time.sleep(0.05)
        with lock:
            inside[0] -= 1

    jobs = [reg.start("demo", work) for _ in range(3)]
    for j in jobs:
        reg.wait(j.job_id, 5)
    assert overlap == [1, 1, 1]


def test_a_reloaded_page_attaches_to_the_newest_running_job_of_its_session():
    class FakeStudio:
        jobs = JobRegistry()

    release = threading.Event()
    studio = FakeStudio()
    old = studio.jobs.start("train", lambda j: release.wait(5), uses_model=False, run_id="a")
    new = studio.jobs.start("distill", lambda j: release.wait(5), uses_model=False, run_id="a")
    other = studio.jobs.start("train", lambda j: release.wait(5), uses_model=False, run_id="b")
    try:
        job_id, timer, seen = jp.attach(studio.jobs, None, ("train", "distill"), run_id="a")
        assert (job_id, seen) == (new.job_id, -1) and timer.active
        assert jp.attach(studio.jobs, None, ("train",), run_id="b")[0] == other.job_id
        assert jp.attach(studio.jobs, None, ("train",))[0] == other.job_id  # any session: the newest
        assert jp.attach(studio.jobs, None, ("adapt",), run_id="a") == (gr.skip(),) * 3  # none running
        # the tab already follows a job it started (its click beat this load event): left alone
        assert jp.attach(studio.jobs, "train-9", ("train",), run_id="a") == (gr.skip(),) * 3
    finally:
        release.set()
    for job in (old, new, other):
        studio.jobs.wait(job.job_id, 5)
    assert jp.attach(studio.jobs, None, ("train", "distill"), run_id="a") == (gr.skip(),) * 3  # finished: not picked up


def test_a_job_finishing_while_a_poll_renders_is_polled_once_more(monkeypatch):
    """Seen in CI: the status stayed "[running]" after the job ended because the poll that rendered
    it had switched the timer off (the job finished while the charts were being drawn)."""

    class FakeStudio:
        jobs = JobRegistry()

    studio, release = FakeStudio(), threading.Event()
    job = studio.jobs.start("train", lambda j: release.wait(5), uses_model=False, run_id="a")
    while job.status != "running":
        time.sleep(0.01)

    def charts_while_the_job_ends(_studio, _run_id):
        release.set()
        studio.jobs.wait(job.job_id, 5)  # the job is done before this poll returns
        return [gr.skip()] * 5

    monkeypatch.setattr(tt, "train_charts", charts_while_the_job_ends)
    status, *_, timer, seen = tt.poll_training(studio, job.job_id, -1, "a")
    assert "[running]" in status and timer.active  # what it drew is stale, so it must poll again
    status, *_, timer, seen = tt.poll_training(studio, job.job_id, seen, "a")
    assert "[done]" in status and not timer.active


def test_an_update_without_signal_says_so():
    from empo2_studio.app.workers import _no_signal_note

    assert _no_signal_note({"train/no_signal": 1.0, "loss/policy": 0.0}, "its group") == (
        " · no learning signal: every episode's return equals the mean of its group; weights unchanged")
    assert _no_signal_note({"loss/policy": 0.1}, "its group") == ""


# ---- charts and rendering --------------------------------------------------------------------------
def test_episode_chart_has_one_line_per_side():
    fig = figures.episode_scores_figure({"naive": [0, 10], "memory": [5, 25, 50]})
    assert [(t.name, list(t.x), list(t.y)) for t in fig.data] == [
        ("naive", [1, 2], [0, 10]), ("memory", [1, 2, 3], [5, 25, 50])]


def test_score_chart_groups_by_update_mode_code_and_skips_adapt_rows():
    rows = [
        {"iteration": 1, "kind": "train", "rollout/score_mean": 10.0, "rollout/update_mode": 0.0, "loss/policy": 0.5},
        {"iteration": 2, "kind": "train", "rollout/score_mean": 30.0, "rollout/update_mode": 2.0, "loss/policy": 0.2},
        {"iteration": 2, "kind": "adapt", "adapt/score_mean": 99.0, "rollout/score_mean": 99.0},
    ]
    score, losses, clip, mask, tips = figures.train_figures(rows)
    assert {t.name: (list(t.x), list(t.y)) for t in score.data} == {
        "on-policy": ([1.0], [10.0]), "off-policy": ([2.0], [30.0])}
    assert [(t.name, list(t.y)) for t in losses.data] == [("loss/policy", [0.5, 0.2])]


def test_adapt_chart_draws_trial0_baseline():
    fig = figures.adapt_figure([{"adapt/score_mean": -20.0}, {"adapt/score_mean": 10.0}, {"adapt/score_mean": 30.0}])
    assert list(fig.data[0].y) == [-20.0, 10.0, 30.0]
    assert list(fig.data[1].y) == [-20.0, -20.0]


def test_step_card_escapes_text_and_marks_correction():
    tip = RetrievedTip("t1", "open <door>", 50.0, 0.8123)
    html = render.step_html(_step(0, corrected=True, tips=[tip]), "memory")
    assert "corrected" in html and "<code>lok &lt;b&gt;</code>" in html and "You see &lt;a lamp&gt;." in html
    assert "0.81" in html and "open &lt;door&gt;" in html
    assert "corrected" not in render.step_html(_step(1), "naive")


# ---- episodes tab ----------------------------------------------------------------------------------
def test_page_load_during_model_preparation_does_not_deadlock(tmp_path, studio_cfg):
    """The model job holds the loader's lock and opens a session; a page load meanwhile opens the tip
    store (the session, then the embedder, then the slot). Seen as a hang with the real model on a
    loaded CPU when the studio had two locks taken in either order."""
    from empo2_studio.policy import build_tiny_policy

    s = Studio(tmp_path, env="trap", policy="tiny", embedder="hash", config=studio_cfg)
    in_load = threading.Event()
    policy = build_tiny_policy()  # built up front: the threads below only wait on each other

    def slow_load():
        in_load.set()
        time.sleep(0.5)  # the page load arrives while the model is still loading
        s.session(s.default_run_id)
        return policy

    s.model._load_policy = slow_load
    model = threading.Thread(target=s.policy, daemon=True)
    model.start()
    in_load.wait(5)
    page = threading.Thread(target=s.store, args=(s.default_run_id,), daemon=True)
    page.start()
    model.join(120), page.join(120)  # a deadlock never ends; a loaded CI box can be slow
    assert not model.is_alive() and not page.is_alive(), "studio locks deadlocked"
    s.close()


def test_env_change_preselects_the_session_task(studio):
    tasks, variations = et.env_changed(studio, "trap", "train", RUN)
    assert tasks.value == TASK and variations.value == studio.meta_env("trap").variations(TASK, "train")[0]


def test_variations_are_labelled_with_their_split(studio):
    update = et.task_changed(studio, "trap", TASK, "test")
    variations = studio.meta_env("trap").variations(TASK, "test")
    assert update.choices[0] == (f"{variations[0]} · test", variations[0])
    with pytest.raises(gr.Error, match="split must be one of"):
        et.task_changed(studio, "trap", TASK, "holdout")


def test_bad_episode_input_is_a_readable_error(studio):
    with pytest.raises(gr.Error, match="pick a variation"):
        et.start_side_by_side(studio, RUN, "trap", TASK, None, "train", 0, 0.4, "current")
    with pytest.raises(gr.Error, match="temperature must be in"):
        et.start_side_by_side(studio, RUN, "trap", TASK, 0, "train", 0, 0.0, "current")


def test_side_by_side_streams_both_columns_and_is_saved(studio):
    job_id, _, _, seen = et.start_side_by_side(studio, RUN, "trap", TASK, 0, "train", 0, 1.0, "current")
    job = studio.jobs.wait(job_id, 120)
    assert job.status == "done", job.error
    status, naive_html, memory_html, fig, timer, seen = et.poll_side_by_side(studio, job_id, seen)
    naive, memory = job.result
    assert naive_html.count('class="e2-step"') == len(naive.steps) >= 1
    assert memory_html.count('class="e2-step"') == len(memory.steps) >= 1
    assert [list(t.y) for t in fig.data] == [[s.score for s in naive.steps], [s.score for s in memory.steps]]
    # nothing changed since: the next tick skips re-rendering
    assert et.poll_side_by_side(studio, job_id, seen)[:4] == (gr.skip(),) * 4
    pairs = et.saved_pairs(studio, RUN)
    assert naive.group_id in [gid for _, gid in pairs]
    reopened = et.open_pair(studio, RUN, naive.group_id)
    assert reopened[0].count('class="e2-step"') == len(naive.steps)


def test_a_session_switch_refreshes_every_tab_by_component(studio):
    """The page's refresh is one {component: value} dict: each value is found by its component, so a
    tab that adds a field cannot shift another tab's values (as the positional list could)."""
    with gr.Blocks():
        run_id, session_md = gr.State(RUN), gr.Markdown()
        ep, tr, ad = (et.build_episodes_tab(studio, run_id), tt.build_train_tab(studio, run_id),
                      at.build_adapt_tab(studio, run_id))  # fmt: skip
        tips, race = th.build_tips_tab(studio, run_id), rc.build_race_tab(studio, run_id)
    refresh, outputs = layout.page_refresh([layout.banner_refresh(studio, session_md), ep["refresh"], tr["refresh"],
                                            ad["refresh"], tips["refresh"], race["refresh"]])  # fmt: skip
    update = refresh(RUN)
    # banner; episodes: env, task, split, variation, session line, note, tip box, store button, memory line,
    # 2 dropdowns; 10 form fields, 5 charts, distill ids; 2 adapt dropdowns; 7 tips and 5 of their groups view;
    # race: group, step limit, note, target, iterations, evaluate every, seeds, test episodes per layout, expected time
    assert len(outputs) == 1 + 9 + 2 + 10 + 5 + 1 + 2 + 7 + 5 + 9 and set(update) == set(outputs)
    form = dict(zip(tt.TRAIN_FIELDS, tr["form"]))
    assert (update[form[("rollout", "group_size")]], update[form[("train", "learning_rate")]],
            update[form[("train", "iterations")]], update[form[("rollout", "p_memory")]]) == (2, 0.01, 1, 0.25)  # fmt: skip
    assert f"`{RUN}`" in update[session_md] and update[ep["checkpoint"]].value == "current"
    assert update[ad["task"]].value == at.task_choices(studio, RUN)[0][1]
    group, limit, _note, _target, iterations, _every, _seeds, _repeats, expected = race["refresh"][1]
    # the session plays the search family: the race's default is the fixed-family copy (group 8, 8 steps)
    assert (update[group].value, update[limit].value) == (rc.RACE_FORM["group_size"], rc.RACE_ENV.step_limit) == (8, 8)
    assert update[iterations].value == rc.RACE_FORM["iterations"]  # the class race, and its expected time
    assert update[expected].value == rc.race_expected(studio, RUN, 15, 8, 8, "trap", 15, 1, 1)
    assert update[tips["refresh"][1][-1]] == TASK  # the Add form's task: the session's
    # what Gradio 6 does with a returned dict: one value per declared output, placed by component
    from gradio.blocks import convert_component_dict_to_list

    placed = convert_component_dict_to_list(outputs, update)
    assert placed[outputs.index(group)] is update[group] and placed[0] is update[session_md]
    # a part returning another set of components than it declared is refused, naming the part
    with pytest.raises(ValueError, match="returned 1 component"):
        layout.page_refresh([(lambda rid: {group: 1}, [group, limit])])[0](RUN)


def test_opening_a_scienceworld_session_from_the_page_lists_it_in_the_sessions_tab(studio):
    """The start panel's button creates `studio-scienceworld`; the switch that follows it renews the
    Sessions tab's list and picker (they showed the old list until a reload)."""
    demo = layout.build_blocks(studio)
    fns = list(demo.fns.values())
    button = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "start-scienceworld")
    click = next(f for f in fns if (button._id, "click") in f.targets)
    after = next(f for f in fns if f.trigger_after == click._id)
    pick = next(o for o in after.outputs if o.elem_id == "ses-pick")
    run_id = layout.open_env_session(studio, "scienceworld")
    update = after.fn(run_id)
    assert (run_id, run_id) in update[pick].choices and update[pick].value == run_id
    demo.close()


def test_every_element_id_of_the_page_is_used_once(studio):
    """Issue 50's memory line first took `ep-memory`, the memory column's id: a page script or browser
    test addressing one of them got both."""
    from collections import Counter

    demo = layout.build_blocks(studio)
    ids = Counter(b.elem_id for b in demo.blocks.values() if getattr(b, "elem_id", None))
    demo.close()
    assert [i for i, n in ids.items() if n > 1] == []
    assert {"ep-memory", "ep-memory-line", "ep-tip", "ep-store-tip"} <= set(ids)


def test_no_number_box_rounds_what_the_user_typed(studio):
    """A gr.Number with a precision rounds 2.5 to 2 before any handler sees it (Add a tip stored a tip
    typed for variation 2.5 under variation 2): every box passes the value on, and its handler refuses
    a fraction where a whole number is meant (`whole_number`, the Train form's `config_from_form`)."""
    import gradio as gr

    demo = layout.build_blocks(studio)
    boxes = {b.elem_id: b.precision for b in demo.blocks.values() if isinstance(b, gr.Number)}
    demo.close()
    assert {"tips-add-variation", "ep-seed", "ls-episodes", "tr-group", "rc-group"} <= set(boxes)
    assert {i: p for i, p in boxes.items() if p is not None} == {}


def test_whole_number_reads_form_values_and_names_every_bad_one():
    assert [h.whole_number(v, "x") for v in (3, 3.0, "4", " 5 ", "6.0")] == [3, 3, 4, 5, 6]
    assert h.whole_number(0, "x", 0) == 0
    for value, message in [(None, "x is empty; enter a whole number ≥ 1"), ("  ", "x is empty; enter a whole number ≥ 1"),
                           ("abc", "x must be a whole number ≥ 1, got 'abc'"), (1.5, "x must be a whole number ≥ 1, got 1.5"),
                           (0, "x must be a whole number ≥ 1, got 0"), ("nan", "x must be a whole number ≥ 1, got 'nan'"),
                           (float("inf"), "x must be a whole number ≥ 1, got inf")]:  # fmt: skip
        with pytest.raises(ValueError) as err:
            h.whole_number(value, "x", 1)
        assert str(err.value) == message
    assert h.whole_number(10, "x", 1, 10) == 10
    for value, message in [(11, "x must be a whole number in 1…10, got 11"), (None, "x is empty; enter a whole number in 1…10")]:
        with pytest.raises(ValueError, match=message):
            h.whole_number(value, "x", 1, 10)


# ---- tips tab --------------------------------------------------------------------------------------
def test_add_tip_refuses_a_partition_no_episode_can_retrieve_and_stores_nothing(studio):
    """Unknown task, a variation outside the task's 48 (trap: 0–47), a fractional or negative one:
    each refused with the bad value and the valid ones named; nothing stored. A bad variation filter
    gets a message, not Python's int() text."""
    before = len(studio.store(RUN).list_tips())
    cases = [
        ("no-such-task", 0, "unknown trap task 'no-such-task'; valid tasks: trap-light-bulb, trap-find-animal, trap-water-plant"),
        (TASK, 99999, "trap-light-bulb has no variation 99999; valid: 0–47"),
        (TASK, 1.5, "the variation must be a whole number ≥ 0, got 1.5"),
        (TASK, -1, "the variation must be a whole number ≥ 0, got -1"),
    ]
    for task, variation, message in cases:
        with pytest.raises(gr.Error) as err:
            th.add_tip(studio, RUN, task, variation, "a tip that must not be stored", 10)
        assert message in str(err.value.message)
    assert len(studio.store(RUN).list_tips()) == before
    assert "added tip" in th.add_tip(studio, RUN, TASK, 47.0, "the last variation is fine", 10)
    with pytest.raises(gr.Error, match="the Variation filter must be a whole number ≥ 0, got 'abc'"):
        th.list_tips(studio, RUN, TASK, "abc", th.ALL, th.ALL, "")
    studio.store(RUN).delete([t.tip_id for t in studio.store(RUN).list_tips(variation=47)])


def test_a_refused_tips_filter_leaves_the_table_as_it_was(studio, monkeypatch):
    """Variation "abc": a toast titled "Refused" naming the value, and every output skipped (the table
    and the selection keep what they showed instead of red error badges); a good filter redraws them."""
    toasts = []
    monkeypatch.setattr(gr, "Warning", lambda message, title="Warning", **kw: toasts.append((title, message)))
    assert th.filter_table(studio, RUN, TASK, "abc", th.ALL, th.ALL, "") == (gr.skip(),) * 5
    assert toasts == [("Refused", "the Variation filter must be a whole number ≥ 0, got 'abc'")]
    assert th.search_table(studio, RUN, "  ", th.ALL) == (gr.skip(),) * 4
    assert toasts[-1] == ("Refused", "type something to search for")
    table, shown, selection, versions, status = th.filter_table(studio, RUN, TASK, "3", th.ALL, th.ALL, "")
    assert table is shown and status.startswith(f"{len(table)} tip(s) shown")


def test_tips_table_headers_fit_their_columns():
    """Every column but the text has a pixel width of at least 8 px per header letter plus 24 px for
    the padding and the sort icon ("variation": 9 × 8 + 24 = 96 ≤ 100), so no header wraps."""
    assert len(th.COLUMN_WIDTHS) == len(th.COLUMNS)
    for name, width in zip(th.COLUMNS, th.COLUMN_WIDTHS):
        if name != "text":
            assert width.endswith("px") and int(width[:-2]) >= 8 * len(name) + 24, (name, width)


def test_the_restore_list_marks_the_current_version_and_preselects_the_one_before_the_last_change(studio):
    th.add_tip(studio, RUN, TASK, 5, "first note for the version list", 10)
    th.add_tip(studio, RUN, TASK, 5, "second note for the version list", 10)
    versions = list(reversed(studio.store(RUN).versions()))
    dropdown = th.version_choices(studio, RUN)
    labels = [label for label, _ in dropdown.choices]
    assert [v for _, v in dropdown.choices] == [v.version for v in versions]
    assert labels[0].endswith(" · current") and labels[1].endswith(" · before the last change")
    assert f"{versions[0].rows} rows" in labels[0] and versions[0].rows == versions[1].rows + 1
    assert dropdown.value == versions[1].version and not any(label.endswith(th.VERSION_MARKS) for label in labels[2:])


def test_tip_curation_round_trip(studio, tmp_path):
    assert "added tip" in th.add_tip(studio, RUN, TASK, 7, "press the switch before looking", 40)
    frame, _, status = th.list_tips(studio, RUN, TASK, "7", th.ALL, th.ALL, "")
    assert list(frame["text"]) == ["press the switch before looking"] and "1 tip(s) shown" in status
    tip_id = frame["id"][0]

    edited = frame.copy()
    edited.loc[0, "text"], edited.loc[0, "score"], edited.loc[0, "enabled"] = "flip the switch first", 80, False
    shown, msg = th.apply_table_edits(studio, RUN, frame, edited)
    assert msg == "saved 1 edit(s)"
    tip = studio.store(RUN).get(tip_id)
    assert (tip.text, tip.score, tip.enabled, tip.edited) == ("flip the switch first", 80.0, False, True)
    assert shown.loc[0, "text"] == "flip the switch first"

    bad = shown.astype(object)
    bad.loc[0, "score"] = "lots"
    kept, msg = th.apply_table_edits(studio, RUN, shown, bad)
    assert msg.startswith("not saved") and studio.store(RUN).get(tip_id).score == 80.0

    assert th.set_enabled(studio, RUN, [tip_id], True) == "enabled 1 tip(s)"
    found, _, _ = th.search_tips(studio, RUN, "flip the switch first", th.ALL)
    assert found["id"][0] == tip_id and float(found["similarity"][0]) == pytest.approx(1.0, abs=1e-3)

    path, msg = th.export_tips(studio, RUN)
    assert "exported" in msg
    before_delete = studio.store(RUN).version
    th.confirm_delete(studio, RUN, [tip_id])
    with pytest.raises(KeyError):
        studio.store(RUN).get(tip_id)
    assert th.restore_version(studio, RUN, before_delete).startswith(f"restored version {before_delete}")
    assert studio.store(RUN).get(tip_id).text == "flip the switch first"
    with pytest.raises(gr.Error, match="select tips"):
        th.set_enabled(studio, RUN, [], False)


def test_edited_tip_is_retrieved_by_the_next_memory_episode(studio):
    th.add_tip(studio, RUN, TASK, 1, "curated: the bulb needs power", 100)
    job_id, *_ = et.start_side_by_side(studio, RUN, "trap", TASK, 1, "train", 3, 1.0, "current")
    job = studio.jobs.wait(job_id, 120)
    assert job.status == "done", job.error
    naive, memory = job.result
    retrieved = {t.text for s in memory.steps for t in s.tips}
    assert "curated: the bulb needs power" in retrieved
    assert all(not s.tips for s in naive.steps)


# ---- train tab -------------------------------------------------------------------------------------
def test_config_form_round_trip_and_validation(studio):
    cfg = studio.session(RUN).config
    values = tt.config_form_values(studio, RUN)
    assert tt.config_from_form(cfg, values) == cfg
    values[tt.TRAIN_FIELDS.index(("rollout", "group_size"))] = 1
    with pytest.raises(ValueError, match="group_size must be a whole number in 2…256"):
        tt.config_from_form(cfg, values)
    values = tt.config_form_values(studio, RUN)
    values[tt.TRAIN_FIELDS.index(("train", "learning_rate"))] = None  # a cleared number box
    with pytest.raises(ValueError, match=r"train.learning_rate is empty; enter a value \(the session has 0.01\)"):
        tt.config_from_form(cfg, values)


def test_one_training_iteration_then_distill_update_the_charts(studio):
    values = tt.config_form_values(studio, RUN)
    job_id, _, _, seen, run_id = tt.start_training(studio, RUN, *values)
    assert run_id == RUN  # unchanged form: same session
    job = studio.jobs.wait(job_id, 180)
    assert job.status == "done", job.error
    status, score, *_rest, timer, seen = tt.poll_training(studio, job_id, seen, RUN)
    assert len(job.data["reports"]) == 1
    assert sum(len(t.x) for t in score.data) == 1
    assert studio.session(RUN).latest_checkpoint() is not None

    ids = [eid for _, eid in tt.distill_choices(studio, RUN)][:2]
    job = studio.jobs.wait(tt.start_distill(studio, RUN, ids)[0], 120)
    assert job.status == "done", job.error
    kinds = [r["kind"] for r in studio.session(RUN).metrics()]
    assert kinds[-2:] == ["train", "distill"]
    with pytest.raises(gr.Error, match="at least one"):
        tt.start_distill(studio, RUN, [])


def test_the_train_tab_runs_on_the_scripted_policy(tmp_path, studio_cfg):
    """Start → job → poll on a studio whose policy is `ScriptedPolicy` (no tokenizer, no model): the
    group of `test_trainer`'s worked example (gold path 100, decoy −100, 62 and 23 action tokens)."""
    import json

    from empo2_studio.envs.trap import TrapEnv
    from fakes import ScriptedPolicy

    plans = [TrapEnv().gold_path(TASK, 0), TrapEnv().focus_first_path(TASK, 0)]
    roles: dict[str, int] = {}
    policy = ScriptedPolicy(lambda r: plans[roles.setdefault(r.key, len(roles))][len(r.turns) - 1])
    cfg = studio_cfg.with_overrides(env={"variations": (0,)}, rollout={"p_memory": 0.0}, algo={"intrinsic_coef": 0.0})
    s = Studio(tmp_path, env="trap", policy=policy, embedder="hash", config=cfg)
    try:
        job_id, _, timer, seen, run_id = tt.start_training(s, RUN, *tt.config_form_values(s, RUN))
        assert (run_id, seen) == (RUN, -1) and timer.active
        job = s.jobs.wait(job_id, 120)
        assert job.status == "done", job.error
        status, score, losses, *_, timer, seen = tt.poll_training(s, job_id, -1, RUN)
        assert "[done]" in status and not timer.active and seen == (job.version, job.data_version)
        assert [(t.name, list(t.x), list(t.y)) for t in score.data] == [("on-policy", [1.0], [0.0])]  # (100 − 100)/2
        loss = {t.name: list(t.y) for t in losses.data}["loss/policy"]
        assert loss == [pytest.approx(-39 / (85 * 2**0.5), rel=1e-5)]
        iteration, path = s.session(RUN).latest_checkpoint()
        assert iteration == 1 and json.loads((path / "adapter_config.json").read_text())["shift"] == pytest.approx(0.01)
    finally:
        s.close()


def test_changed_form_trains_a_new_session(studio):
    values = tt.config_form_values(studio, RUN)
    values[tt.TRAIN_FIELDS.index(("rollout", "p_memory"))] = 0.9
    values[tt.TRAIN_FIELDS.index(("train", "iterations"))] = 50
    job_id, *_, run_id = tt.start_training(studio, RUN, *values)
    assert run_id != RUN and studio.session(run_id).config.rollout.p_memory == 0.9
    job = studio.jobs.get(job_id)
    deadline = time.monotonic() + 180
    while not job.data.get("reports") and not job.finished and time.monotonic() < deadline:
        time.sleep(0.05)  # one iteration finished: the stop then cuts a later one
    jp.stop(studio.jobs, job_id)
    job = studio.jobs.wait(job_id, 180)
    n = len(job.data.get("reports", []))
    assert job.status == "stopped" and 1 <= n < 50, job.message
    assert studio.session(run_id).latest_checkpoint()[0] == n  # the last finished iteration, saved on stop
    assert job.message.startswith(f"stopped during iteration {n + 1}: {n} iteration(s) done · checkpoint iter_")
    assert job.countdown.done == {"iteration": n} and job.countdown.plan == {"iteration": 50}  # each one counted
    lora = list(values)
    lora[tt.TRAIN_FIELDS.index(("policy", "lora_r"))] = 4
    with pytest.raises(gr.Error, match="lora"):
        tt.start_training(studio, RUN, *lora)


# ---- adapt and sessions ----------------------------------------------------------------------------
def test_the_task_list_puts_tasks_no_shipped_adapter_trained_on_first(studio):
    """The shipped adapters trained on the trap's search family only (their warmstart.json `seen`), so on a
    trap session the fixed family comes first, labelled, then the search family's tasks unlabelled."""
    trained = at.adapter_trained_tasks()
    assert {"trap-light-bulb", "trap-find-animal", "trap-water-plant"} <= trained
    assert not trained & {"trap-light-bulb-fixed", "trap-find-animal-fixed", "trap-water-plant-fixed", "trap-fetch-two"}
    choices = at.task_choices(studio, RUN)
    assert sorted(t for _, t in choices) == sorted(at.unseen_tasks(studio, RUN))
    fresh = [t for label, t in choices if label.endswith(at.NO_ADAPTER_SAW)]
    assert fresh and fresh == [t for _, t in choices][: len(fresh)]
    assert set(fresh) == set(at.unseen_tasks(studio, RUN)) - trained
    assert all(label == t for label, t in choices[len(fresh):])


def test_adapt_keeps_weights_and_draws_trials(studio):
    task = at.unseen_tasks(studio, RUN)[0]
    job = studio.jobs.wait(at.start_adapt(studio, RUN, "current", task, 1)[0], 180)
    assert job.status == "done", job.error
    fig, md = at.adapt_view(job.snapshot())
    assert len(fig.data[0].y) == 2  # trial 0 (baseline) + 1 memory trial
    assert job.data["checksum_before"] == job.data["checksum_after"] and "untouched" in md


def test_sessions_list_compare_and_export(studio, monkeypatch):
    frame = st.sessions_frame(studio)
    assert RUN in list(frame["run_id"])
    assert studio.session(RUN).config.train.learning_rate == 0.01
    assert frame.set_index("run_id").loc[RUN, "lr"] == "1e-2"  # short enough for its column (0.0001 wrapped)
    fig, key = st.compare(studio, list(frame["run_id"]), "rollout/score_mean")
    assert {t.name for t in fig.data} == set(frame["run_id"])
    toasts = []
    monkeypatch.setattr(gr, "Warning", lambda message, title="Warning", **kw: toasts.append((title, message)))
    assert st.compare(studio, [], "rollout/score_mean") == (gr.skip(),) * 2  # the plot keeps its curves
    assert toasts == [("Refused", "pick the runs to compare")]
    archive, msg = st.export_adapter(studio, RUN)
    assert archive.endswith(".zip") and "adapter of iteration" in msg
    assert st.open_session(studio, RUN)[0] == RUN
    with pytest.raises(gr.Error, match="no session"):
        st.open_session(studio, "nope")


def test_stop_during_side_by_side_saves_nothing_of_the_cut_pair(studio):
    before_tips = studio.store(RUN).count()
    before_eps = len(studio.session(RUN).episodes())
    job_id, *_ = et.start_side_by_side(studio, RUN, "trap", TASK, 2, "train", 5, 1.0, "current")
    job = studio.jobs.get(job_id)
    deadline = time.monotonic() + 120
    while not job.data.get("naive") and not job.finished and time.monotonic() < deadline:
        time.sleep(0.01)  # the first lock-step has been played
    jp.stop(studio.jobs, job_id)
    job = studio.jobs.wait(job_id, 120)
    # the trap episode needs more than one step: the stop lands inside the pair, which is dropped whole
    assert job.status == "stopped" and "nothing of the pair saved" in job.message, job.message
    assert len(studio.session(RUN).episodes()) == before_eps
    assert studio.store(RUN).count() == before_tips


# ---- the session decides the env; the first screen --------------------------------------------------
def test_a_pair_never_plays_another_env_than_its_sessions(studio):
    """The server takes the env from the session: a client sending another env is refused (one line,
    titled "Refused", no traceback printed), and a task of another env too."""
    with pytest.raises(gr.Error) as err:
        et.start_side_by_side(studio, RUN, "scienceworld", "power-component", 0, "train", 0, 0.4, "current")
    assert err.value.message == ("session 'studio' plays trap, not scienceworld; open a scienceworld session in "
                                 "the Sessions tab to play it")  # fmt: skip
    assert (err.value.title, err.value.print_exception) == ("Refused", False)
    with pytest.raises(gr.Error, match="unknown trap task 'power-component'"):
        et.start_side_by_side(studio, RUN, None, "power-component", 0, "train", 0, 0.4, "current")
    with pytest.raises(gr.Error, match="no variation 24 in the train split; valid: 0…23"):
        et.start_side_by_side(studio, RUN, "trap", TASK, 24, "train", 0, 0.4, "current")


def test_a_fractional_or_non_numeric_variation_is_refused_not_rounded(studio):
    """1.5 was played as variation 1; "abc" got Python's int() message. Both are refused with one line
    naming the value and the split's valid variations, and no job starts."""
    before = len(studio.jobs.jobs())
    for bad in (1.5, "abc"):
        with pytest.raises(gr.Error) as err:
            et.start_side_by_side(studio, RUN, "trap", TASK, bad, "train", 0, 0.4, "current")
        assert err.value.message == (f"variation must be a whole number, got {bad!r}; valid in the train split "
                                     f"of {TASK}: 0…23")  # fmt: skip
        assert err.value.title == "Refused"
    with pytest.raises(gr.Error, match="seed must be a whole number ≥ 0, got 0.5"):
        et.start_side_by_side(studio, RUN, "trap", TASK, 0, "train", 0.5, 0.4, "current")
    assert len(studio.jobs.jobs()) == before


def test_sizes_past_the_caps_are_refused_before_a_job_starts(studio):
    """/race's step limit, group size, test episodes per layout and /train's iterations have upper bounds
    (1000 steps, a group of 256, 100 episodes per layout, 10000 iterations)."""
    before = len(studio.jobs.jobs())
    with pytest.raises(gr.Error, match="group size must be a whole number in 2…256, got 257"):
        rc.start_race(studio, RUN, 1, 257, 3)
    with pytest.raises(gr.Error, match="test episodes per layout must be a whole number in 1…100, got 101"):
        rc.start_race(studio, RUN, 1, 2, 3, eval_repeats=101)
    with pytest.raises(gr.Error, match="step limit must be a whole number in 1…1000, got 1000000000"):
        rc.start_race(studio, RUN, 1, 2, 10**9)  # the form's name for it, whatever the environment
    with pytest.raises(gr.Error, match="iterations must be a whole number in 1…10000, got 1000000000"):
        rc.start_race(studio, RUN, 10**9, 2, 3)
    values = tt.config_form_values(studio, RUN)
    values[tt.TRAIN_FIELDS.index(("train", "iterations"))] = 10**9
    with pytest.raises(gr.Error, match="train.iterations must be a positive integer ≤ 10000, got 1000000000"):
        tt.start_training(studio, RUN, *values)
    assert len(studio.jobs.jobs()) == before


def test_an_unknown_checkpoint_or_episode_id_is_refused_before_a_job_starts(studio, capfd):
    """A checkpoint outside the session, an unknown episode id to distill: refused in one line naming the
    value and the valid ones, no job started, no traceback logged (they used to fail inside the job)."""
    before = len(studio.jobs.jobs())
    capfd.readouterr()
    with pytest.raises(gr.Error) as err:
        et.start_side_by_side(studio, RUN, "trap", TASK, 0, "train", 0, 0.4, "../../etc")
    assert err.value.message.startswith("unknown checkpoint '../../etc' of session 'studio'; valid: current")
    with pytest.raises(gr.Error, match="unknown checkpoint '../../etc' of session 'studio'"):
        at.start_adapt(studio, RUN, "../../etc", "trap-find-animal", 1)
    for trials in (0, -3, "", 21, 1.5):  # the Trials box used to be a slider that clamped these silently
        with pytest.raises(gr.Error, match=r"trials K .*1…20"):
            at.start_adapt(studio, RUN, "current", "trap-find-animal", trials)
    with pytest.raises(gr.Error) as err:
        at.start_adapt(studio, RUN, "current", "water-plant", 1)  # a ScienceWorld name on a trap session
    assert err.value.message.startswith("'water-plant' is not a trap task; the unseen tasks of session 'studio': trap-")
    with pytest.raises(gr.Error) as err:
        at.start_adapt(studio, RUN, "current", TASK, 1)
    assert err.value.message.startswith(f"'{TASK}' is the task session 'studio' trains on; the unseen tasks")
    with pytest.raises(gr.Error) as err:
        tt.start_distill(studio, RUN, ["nope"])
    assert err.value.message.startswith("not a memory episode of session 'studio': 'nope'; valid: ")
    assert err.value.title == "Refused"
    assert len(studio.jobs.jobs()) == before
    assert "Traceback" not in "".join(capfd.readouterr())


def test_the_episodes_form_offers_the_sessions_training_variations(studio):
    assert et.variation_choices(studio, "trap", TASK, "train", RUN) == [0, 1]  # studio_cfg: variations (0, 1)
    assert et.variation_choices(studio, "trap", "trap-find-animal", "train", RUN)[:3] == [0, 1, 2]  # another task
    assert et.session_line(studio, RUN).endswith("training variations 0, 1 · step limit 3")


def test_the_session_line_names_the_variations_the_dropdown_offers(studio):
    """A session without configured variations: the dropdown offers the whole train split (trap 0–23),
    the line says so, and that training uses the first 5."""
    cfg = studio.session(RUN).config
    from dataclasses import replace

    other = studio.create_session(replace(cfg.with_overrides(env={"variations": ()}), run_id="studio-all-variations"))
    rid = other.dir.name
    assert et.variation_choices(studio, "trap", TASK, "train", rid) == list(range(24))
    assert et.session_line(studio, rid).endswith(
        "variations 0–23 of the train split (training uses 0–4) · step limit 3")


def test_the_info_line_follows_the_chosen_task_and_variation(studio):
    """Issue 50: the line kept naming the session's task after another task was picked."""
    assert et.pick_line(studio, RUN, TASK, 1, "train") == (
        "Plays session `studio`'s env **trap** · its task `trap-light-bulb` · training variations 0, 1 · "
        "step limit 3 · **this pair**: `trap-light-bulb` variation 1 (train)")
    assert et.pick_line(studio, RUN, "trap-find-animal", 5, "train") == (
        "Plays session `studio`'s env **trap** · task `trap-find-animal` (the session trains on "
        "`trap-light-bulb`) · step limit 3 · **this pair**: `trap-find-animal` variation 5 (train)")
    assert et.pick_line(studio, RUN, TASK, 40, "test").endswith(
        "its task `trap-light-bulb` · step limit 3 · **this pair**: `trap-light-bulb` variation 40 (test)")
    from dataclasses import replace

    cfg = studio.session(RUN).config
    free = studio.create_session(replace(cfg.with_overrides(env={"step_limit": None}), run_id="studio-task-limit"))
    # without a session step limit, the chosen task's own (TrapEnv: 12 for find-animal)
    assert et.pick_line(studio, free.dir.name, "trap-find-animal", 0, "dev").endswith(
        "step limit the task's (12) · **this pair**: `trap-find-animal` variation 0 (dev)")
    assert et.pick_line(studio, RUN, None, None, "train") == et.session_line(studio, RUN)


def test_the_episodes_tab_offers_the_lessons_tip_and_stores_it_only_when_asked(studio):
    """Issue 50: the first pair of a session with no tip showed no difference; the tab offers the
    Lesson's curated tip for the chosen variation, editable, and stores it only on the button."""
    from dataclasses import replace

    rid = studio.create_session(replace(studio.session(RUN).config, run_id="studio-offer")).dir.name
    studio.policy(), studio.embedder()  # the memory line counts tips once the model is ready
    store = studio.store(rid)
    box, button, line = pm.offer_updates(studio, rid, TASK, 0)
    assert box.visible and button.visible and box.value == (
        "The green light bulb is in the kitchen: go to kitchen, then focus on green light bulb, then turn on "
        "green light bulb.")
    assert line.endswith("Store a tip first (the curated one below, or your own in the Tips tab).")
    assert "**no tip**, so the memory episode retrieves nothing" in line and store.count(TASK, 0) == 0
    assert pm.tip_offer(studio, rid, "trap-find-animal", 5) == (
        "The turtle is in the bedroom: go to bedroom, then focus on turtle, then pick up turtle.")

    status = pm.store_tip(studio, rid, TASK, 0, "  The bulb is in the kitchen: go to kitchen.  ")
    (tip,) = store.list_tips(task=TASK, variation=0)
    assert (tip.text, tip.score, tip.origin, tip.enabled) == ("The bulb is in the kitchen: go to kitchen.", 100.0, "manual", True)
    assert status == (f"Stored tip {tip.tip_id[:8]}. **Memory** of `trap-light-bulb` variation 0: 1 enabled tip(s), "
                      "1 curated (added by hand or imported): what the memory episode retrieves from.")
    store.set_enabled([tip.tip_id], False)
    assert pm.store_tip(studio, rid, TASK, 0, tip.text).startswith("This tip was already stored (enabled).")
    assert store.count(TASK, 0) == 1 and store.get(tip.tip_id).enabled
    for args, message in [(("trap-nope", 0, "x"), "unknown trap task 'trap-nope'; valid: trap-light-bulb, "),
                          ((TASK, 48, "x"), "trap-light-bulb has no variation 48; valid: 0…47"),
                          ((TASK, 0.5, "x"), "variation must be a whole number ≥ 0, got 0.5"),
                          ((TASK, 1, "   "), "the tip is empty")]:  # fmt: skip
        with pytest.raises(gr.Error, match=re.escape(message)):
            pm.store_tip(studio, rid, *args)
    assert store.count() == 1  # nothing stored by a refusal or by the offer itself

    sw = studio.env_session("scienceworld").dir.name  # no lesson on power-component: nothing offered
    box, button, line = pm.offer_updates(studio, sw, "power-component", 3)
    assert (box.visible, button.visible, pm.tip_offer(studio, sw, "power-component", 3)) == (False, False, None)
    assert line == ("**Memory** of `power-component` variation 3: **no tip**, so the memory episode retrieves "
                    "nothing and plays like the naive one. Store a tip first (write one in the Tips tab).")
    assert pm.tip_offer(studio, sw, "trap-light-bulb", 0) is None  # a trap lesson's tip is not ScienceWorld's
    assert pm.tip_offer(studio, rid, "find-animal", 0) is None  # nor ScienceWorld's a trap session's


def test_a_scienceworld_find_animal_pair_plays_the_lessons_step_limit(studio):
    """Bar 6: a naive find-animal episode wanders to the step limit; 30 steps took a pair up to 102 s
    under load. Without a session step limit, the pair plays the Lesson's 10 and the line says so."""
    from dataclasses import replace

    from empo2_studio.app.pair_memory import lesson_step_limit
    from empo2_studio.lesson.scienceworld import LESSON_STEP_LIMIT

    sw = studio.env_session("scienceworld")
    assert sw.config.env.step_limit is None and LESSON_STEP_LIMIT == 10
    assert lesson_step_limit(sw.config.env, "find-animal") == 10
    assert lesson_step_limit(sw.config.env, "power-component") is None  # the task's own (30)
    assert lesson_step_limit(replace(sw.config.env, step_limit=20), "find-animal") is None  # the session's
    assert lesson_step_limit(studio.session(RUN).config.env, "trap-find-animal") is None  # the trap's own
    assert et.pick_line(studio, sw.dir.name, "find-animal", 1, "train") == (
        "Plays session `studio-scienceworld`'s env **scienceworld** · task `find-animal` (the session trains "
        "on `power-component`) · step limit 10 (the Lesson's, as on the Lesson tab; the task's own is 30) · "
        "**this pair**: `find-animal` variation 1 (train)")
    assert et.pick_line(studio, sw.dir.name, "power-component", 0, "train").endswith(
        "step limit the task's (30) · **this pair**: `power-component` variation 0 (train)")


def test_the_scienceworld_note_shows_only_for_the_embedded_model_on_scienceworld(studio, monkeypatch):
    sw = studio.env_session("scienceworld")
    assert (sw.dir.name, sw.config.env.task) == ("studio-scienceworld", "power-component")
    assert studio.env_session("scienceworld").dir.name == "studio-scienceworld" and studio.env_session("trap").dir.name == RUN
    assert not et.model_note(studio, sw.dir.name).visible  # the tiny test model
    monkeypatch.setattr(type(studio.model), "policy_spec", property(lambda self: "real"))
    assert et.model_note(studio, sw.dir.name).visible and not et.model_note(studio, RUN).visible
    assert "rarely scores" in et.model_note(studio, sw.dir.name).value
    assert "It plays valid actions (its sampling is restricted" in et.model_note(studio, sw.dir.name).value


def test_both_column_headers_say_finished_once_both_episodes_ended(studio, monkeypatch):
    """While the model writes the pair's tips (minutes with the embedded model) and after the job, both
    column headers say "finished · score …", not "playing"."""
    import empo2_studio.rollout as rollout

    seen_while_writing = []
    real = rollout.write_group_tips

    def write_and_look(policy, store, episodes, *args, **kwargs):
        job = studio.jobs.jobs()[-1]
        seen_while_writing.append((et.side_by_side_view(job.snapshot())[:2], [e.score for e in episodes]))
        return real(policy, store, episodes, *args, **kwargs)

    monkeypatch.setattr(rollout, "write_group_tips", write_and_look)
    job = studio.jobs.wait(et.start_side_by_side(studio, RUN, "trap", TASK, 1, "train", 2, 1.0, "current")[0], 120)
    assert job.status == "done", job.error
    (columns, scores), = seen_while_writing
    for html, score in zip(columns, scores):
        assert f"finished · score {score:g}" in html and "playing" not in html
    naive_html, memory_html, _ = et.side_by_side_view(job.snapshot())
    assert f"finished · score {job.result[0].score:g}" in naive_html and "playing" not in naive_html + memory_html


def test_the_scienceworld_note_says_free_decoding_plays_invalid_actions(studio, monkeypatch):
    """Free decoding writes actions ScienceWorld does not know: the note must not claim valid actions."""
    from dataclasses import replace

    sw = studio.env_session("scienceworld")
    monkeypatch.setattr(type(studio.model), "policy_spec", property(lambda self: "real"))
    free = replace(studio.model.policy_config, decoding="free")
    monkeypatch.setattr(type(studio.model), "policy_config", property(lambda self: free))
    note = et.model_note(studio, sw.dir.name).value
    assert "plays valid actions" not in note and "No known action matches that input." in note


def test_the_studio_opens_a_trap_session_unless_asked_otherwise(tmp_path, studio_cfg):
    from empo2_studio.config import EnvConfig

    s = Studio(tmp_path, policy="tiny", embedder="hash")
    assert (s.default_run_id, s.session(RUN).config.env.name) == (RUN, "trap")
    s.close()
    # an older "studio" session of another env is kept; the studio opens studio-<env> instead
    sw = Studio(tmp_path / "b", env="scienceworld", policy="tiny", embedder="hash")
    sw.close()
    s = Studio(tmp_path / "b", policy="tiny", embedder="hash", config=studio_cfg)
    assert s.default_run_id == "studio-trap" and s.session("studio-trap").config.env == studio_cfg.env
    assert s.session(RUN).config.env == EnvConfig(name="scienceworld", task="power-component")
    s.close()


def test_a_finished_column_header_is_green_when_won_red_at_minus_100_else_grey(_played):
    """A naive find-animal episode that focused on the wrong thing ends at −100: its header says so in
    red, not in the green of the memory column that won."""
    from dataclasses import replace

    from empo2_studio.app.render import column_html

    naive, _ = _played
    won, failed, unwon = (replace(naive, won=True, score=100.0), replace(naive, won=False, score=-100.0),
                          replace(naive, won=False, score=8.0))  # fmt: skip
    assert '<span class="e2-done">finished · score 100 · won</span>' in column_html("memory", [], finished=won)
    assert '<span class="e2-done e2-failed">finished · score -100</span>' in column_html("naive", [], finished=failed)
    assert '<span class="e2-done e2-unwon">finished · score 8</span>' in column_html("naive", [], finished=unwon)


def test_the_sessions_table_fills_last_score_from_metrics_or_episodes(studio, _played):
    """"last score": the newest metrics row with a mean score (a lesson stage: the mean over its
    variations), else the newest saved episode; empty for a session that has played nothing."""
    from dataclasses import replace

    base = studio.session(RUN).config
    fresh = studio.create_session(replace(base, run_id="nothing-played"))
    eps = studio.create_session(replace(base, run_id="episodes-only"))
    naive, memory = _played
    eps.append_episodes([replace(naive, score=-100.0, created_at=1.0), replace(memory, score=40.0, created_at=2.0)])
    lesson = studio.create_session(replace(base, run_id="lesson-only"))
    lesson.append_metrics({"kind": "lesson", "lesson/v0/score_mean": 100.0, "lesson/v1/score_mean": -50.0})
    trained = studio.create_session(replace(base, run_id="trained"))
    trained.append_metrics({"kind": "train", "iteration": 1, "rollout/score_mean": 12.5})
    trained.append_metrics({"kind": "eval", "iteration": 1, "eval/score_mean": -7.25})
    frame = st.sessions_frame(studio).set_index("run_id")["last score"]
    assert (frame["nothing-played"], frame["episodes-only"], frame["lesson-only"], frame["trained"]) == (
        "", "40.0", "25.0", "-7.2")


@pytest.fixture
def _played(studio):
    """A naive and a memory episode of the default session (played by earlier tests, or now)."""
    by = {e.rollout_mode: e for e in studio.session(RUN).episodes()}
    if not {"naive", "memory"} <= set(by):
        job = studio.jobs.wait(et.start_side_by_side(studio, RUN, "trap", TASK, 0, "train", 0, 1.0, "current")[0], 120)
        by = dict(zip(("naive", "memory"), job.result))
    return by["naive"], by["memory"]
