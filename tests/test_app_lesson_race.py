"""The Lesson and Race tabs' handlers as plain functions: trap env, tiny policy, hash embedder, tmp sessions."""

from __future__ import annotations

import copy
import gc
import weakref
from dataclasses import replace

import gradio as gr
import pytest

from empo2_studio.app import lesson_tab as ls
from empo2_studio.app import race_tab as rc
from empo2_studio.app.jobs import Job
from empo2_studio.app.studio import Studio
from empo2_studio.lesson import STAGES, StageResult, VariationRow, curated_tip
from empo2_studio.race import Race, race_verdict

RUN = "studio"
TASK = "trap-light-bulb"


def _value(update):
    value = update["value"] if isinstance(update, dict) else update.value
    return value["data"] if isinstance(value, dict) and "data" in value else value


def test_the_lesson_gets_its_own_trap_session(studio, tmp_path):
    assert ls.current_lesson_id(studio, TASK) == f"lesson-{TASK}"
    session = ls.lesson_session(studio, TASK)
    assert session.dir.name == f"lesson-{TASK}" and session.config.env.task == TASK
    assert session.config.env.step_limit == 3  # the launch session's env settings
    assert ls.lesson_session(studio, TASK, fresh=True).dir.name == f"lesson-{TASK}"  # nothing played yet
    # on a ScienceWorld studio the lesson still gets a trap session (nothing of ScienceWorld starts)
    sw = Studio(tmp_path, env="scienceworld", policy="tiny", embedder="hash")
    cfg = ls.lesson_config(sw, "trap-find-animal", "lesson-trap-find-animal")
    assert (cfg.env.name, cfg.env.task, cfg.memory.embedder) == ("trap", "trap-find-animal", "hash")
    assert cfg.train.learning_rate == ls.LESSON_LEARNING_RATE == 2e-3 and session.config.train.learning_rate == 2e-3
    with pytest.raises(ValueError, match="trap"):
        ls.lesson_session(studio, "power-component")


def test_form_checks_and_tip_boxes():
    assert ls.parse_variations(["0", "3"]) == (0, 3) and ls.parse_variations("1, 2") == (1, 2)
    boxes = ls.tip_boxes(TASK, ["2"])
    assert _value(boxes[0]) == curated_tip(TASK, 2) and boxes[0].visible and not boxes[1].visible
    for args, match in [((["0"], 0, 1), "episodes"), ((["0"], 2, ""), "distill steps"),
                        ([[str(v) for v in range(11)], 2, 1], "at most 10"), (([], 2, 1), "at least one")]:
        with pytest.raises(ValueError, match=match):
            ls.settings_from_form(TASK, *args)


def test_picking_a_task_sets_its_default_lesson():
    variations, episodes = ls.task_defaults("find-animal")
    # ScienceWorld: two variations from each of four animal blocks, 2 episodes each (16 per stage)
    assert variations.value == ["0", "1", "30", "31", "60", "61", "90", "91"] and episodes.value == 2
    assert variations.choices[-1] == ("149", "149") and len(variations.choices) == 150  # the train split
    variations, episodes = ls.task_defaults(TASK)
    assert variations.value == ["0", "1"] and episodes.value == 8 and len(variations.choices) == 24
    assert "8 variations, 2 episodes each" in ls.time_hint({}, "find-animal")
    assert "2 variations, 8 episodes each" in ls.time_hint({})


def test_play_the_lesson_end_to_end(studio):
    with pytest.raises(gr.Error, match="empty"):
        ls.start_lesson(studio, "all", TASK, ["0"], 2, 1, "  ", "", "", "")
    job_id, _, timer, seen, run_id, md = ls.start_lesson(studio, "all", TASK, ["0"], 2, 1, "EDITED lesson tip", "", "", "")
    assert run_id.startswith(f"lesson-{TASK}") and run_id in md and seen == -1
    job = studio.jobs.wait(job_id, 300)
    assert job.status == "done", job.error
    assert list(job.data["results"]) == list(STAGES)
    status, naive, memory, again, distill, fig, md, timer, version = ls.poll_lesson(studio, job_id, -1)
    assert "[done]" in status and version == (job.version, job.data_version) and timer.active is False
    assert "distilled weights of iteration 1" in md
    for table in (naive, memory, again):
        assert [row[:2] for row in _value(table)] == [[0, 2]]
    assert [row[0] for row in _value(distill)] == [1]
    assert [bar.x for bar in fig.data] == [("1 · naive", "3 · with tips", "5 · naive after distillation")]
    session = studio.session(run_id)
    eps = session.episodes()
    assert [e.rollout_mode for e in eps] == ["naive"] * 2 + ["memory"] * 2 + ["naive"] * 2
    store = studio.store(run_id)
    assert [t.text for t in store.list_tips(task=TASK, variation=0)] == ["EDITED lesson tip"]
    assert all("EDITED lesson tip" in {t.text for t in s.tips} for e in eps[2:4] for s in e.steps)
    assert session.latest_checkpoint() is not None
    # a reloaded page shows the session's last stages
    opened = ls.lesson_opened(studio, TASK, ["0"])
    assert run_id in opened[0] and [row[:2] for row in _value(opened[1 + ls.MAX_TIP_BOXES])] == [[0, 2]]

    # Play again: the played session is kept, a new one starts from untrained weights
    # stage 1 again on distilled weights would overwrite the baseline: refused, nothing played
    job_id1, *_ = ls.start_lesson(studio, "naive", TASK, ["0"], 2, 1, curated_tip(TASK, 0), "", "", "")
    job1 = studio.jobs.wait(job_id1, 300)
    assert job1.status == "failed" and "already distilled" in job1.error
    assert len(studio.session(run_id).episodes()) == 6
    job_id2, *_, run_id2, _ = ls.start_lesson(studio, "naive_again", TASK, ["0"], 2, 1, curated_tip(TASK, 0), "", "", "")
    assert run_id2 == run_id  # a single stage continues the current lesson session
    studio.jobs.wait(job_id2, 300)
    assert len(studio.session(run_id).episodes()) == 8
    status, naive, memory, *_ = ls.poll_lesson(studio, job_id2, -1)
    assert _value(memory)  # the stages this job did not play come from the session's metrics
    assert ls.lesson_session(studio, TASK, fresh=True).dir.name == f"lesson-{TASK}-2"


def test_a_stage_without_its_input_fails_with_one_line(studio):
    task = "trap-water-plant"
    job_id, *_ = ls.start_lesson(studio, "distill", task, ["0"], 2, 1, "tip", "", "", "")
    job = studio.jobs.wait(job_id, 120)
    assert job.status == "failed" and job.error == "nothing to distill yet: play the memory stage (3) first"
    job_id, *_ = ls.start_lesson(studio, "tips", task, ["0", "1"], 2, 1, "water it", curated_tip(task, 1), "", "")
    assert studio.jobs.wait(job_id, 120).status == "done"
    texts = {t.variation: t.text for t in studio.store(f"lesson-{task}").list_tips(task=task)}
    assert texts == {0: "water it", 1: curated_tip(task, 1)}


def test_race_runs_both_arms_and_leaves_the_studio_consistent(studio):
    with pytest.raises(gr.Error, match="group size"):
        rc.start_race(studio, RUN, 1, 1, 3)
    trainer = studio.trainer(RUN)
    trainer.step()  # unsaved progress of the session's trainer: the race checkpoints it first
    for bad, match in [((0, 1), "evaluate every must be a whole number ≥ 0, got -1"),
                       ((1, 0), "seeds must be a whole number in 1…10, got 0"),
                       ((1, 11), "seeds must be a whole number in 1…10, got 11")]:  # fmt: skip
        with pytest.raises(gr.Error, match=match):
            rc.start_race(studio, RUN, 1, 2, 2, "open", bad[0] - 1 if bad[0] == 0 else bad[0], bad[1])
    # two seeds, evaluated before the first iteration and after it (every 1)
    job_id, status, timer, seen = rc.start_race(studio, RUN, 1, 2, 2, "open", 1, 2)
    job = studio.jobs.wait(job_id, 600)
    assert job.status == "done", job.error
    assert job.data["sessions"] == {"EMPO2": [f"{RUN}-race-empo2", f"{RUN}-race2-empo2"],
                                    "GRPO": [f"{RUN}-race-grpo", f"{RUN}-race2-grpo"]}
    seed = studio.session(RUN).config.seed
    evals = job.data["evals"]
    assert [(r["seed"], r["iteration"]) for r in evals["GRPO"]] == [(seed, 0), (seed, 1), (seed + 1, 0), (seed + 1, 1)]
    n_eval = 12 * studio.session(RUN).config.train.eval_repeats
    assert all(r["eval/episodes"] == n_eval for r in evals["EMPO2"])
    # every step counted down as its kind: per seed the shared evaluation, then one per arm after iteration 1
    assert job.countdown.done == {"EMPO² iteration": 2, "GRPO iteration": 2, "test episode": 2 * 3 * n_eval}
    assert job.countdown.complete and f"{RUN}-race2-grpo (iteration 1)" in job.message
    status, fig, table, verdict, timer, version = rc.poll_race(studio, job_id, -1)
    assert "[done]" in status and list(table["arm"]) == ["EMPO²", "GRPO"] * 2
    assert list(table["seed"]) == [seed, seed, seed + 1, seed + 1]
    assert verdict == f"**{race_verdict(evals)}**" and "after 1 iterations" in verdict and "mean of 2 seeds" in verdict
    assert job.data["verdict"] in job.message
    # per arm: training success, training score, the seeds' band and the test success
    assert len(fig.data) == 8 and [t.fill for t in fig.data].count("toself") == 2
    assert {e.rollout_mode for e in studio.session(f"{RUN}-race-grpo").episodes()} == {"naive"}
    assert studio.loaded_adapter is None
    assert studio.session(RUN).latest_checkpoint()[0] == 1
    assert studio.trainer(RUN).iteration == 1  # rebuilt from its checkpoint


def test_the_race_table_keeps_each_row_with_its_seed():
    def row(seed, it, success):
        return {"seed": seed, "iteration": it, "rollout/success_rate": success, "rollout/score_mean": 0.0}

    rows = {"EMPO2": [row(0, 1, 0.25), row(0, 2, 0.5), row(1, 1, 0.75), row(1, 2, 1.0)], "GRPO": [row(0, 1, 0.0), row(1, 1, 0.125)]}
    fig, table, verdict = rc.race_view({"rows": rows, "evals": {}})
    assert [list(r[:5]) for r in table.values] == [
        [0, 1, "EMPO²", "?", "25%"], [0, 1, "GRPO", "?", "0%"], [0, 2, "EMPO²", "?", "50%"],
        [1, 1, "EMPO²", "?", "75%"], [1, 1, "GRPO", "?", "12%"], [1, 2, "EMPO²", "?", "100%"],
    ] and verdict == ""
    assert rc.race_view({"rows": {}, "verdict": "EMPO² won: …"})[2] == "**EMPO² won: …**"


class RecordingJob(Job):
    """A job that keeps a copy of its data and message at every update (what a poll could have drawn then)."""

    def __init__(self, kind: str) -> None:
        super().__init__("rec", kind, "recording")
        self.seen: list[dict] = []
        self.messages: list[str] = []

    def update(self, **kw):
        super().update(**kw)
        self.seen.append(copy.deepcopy({k: v for k, v in self.data.items() if k in ("results", "rows")}))
        self.messages.append(self.message)


def test_the_lesson_job_shows_each_distill_step_as_it_ends(studio):
    task = "trap-find-animal"
    run_id = ls.lesson_session(studio, task).dir.name
    assert "rough estimate: nothing measured" in ls.time_hint({}) and "about 14 min" in ls.time_hint({})  # 16 × (2 × 3 + 10 + 5 × 7) s = 816 s
    job = RecordingJob("lesson")
    settings = ls.settings_from_form(task, ["0"], 2, 3)
    ls.run_lesson_job(studio, job, run_id=run_id, settings=settings, stage="all", tips={0: curated_tip(task, 0)})
    steps_seen = [len(d["results"]["distill"]["steps"]) for d in job.seen if "distill" in d.get("results", {})]
    assert sorted(set(steps_seen)) == [1, 2, 3] and steps_seen == sorted(steps_seen)  # one more row at each step
    running = [d["results"]["distill"] for d in job.seen if d.get("results", {}).get("distill", {}).get("running")]
    counts = [len(r["steps"]) for r in running]
    assert [k for i, k in enumerate(counts) if i == 0 or counts[i - 1] != k] == [1, 2, 3]  # running: 1, 2, 3 steps
    *tables, fig = ls.lesson_view({"distill": StageResult.from_dict(running[0])})
    assert [row[0] for row in _value(tables[3])] == [1] and isinstance(_value(tables[3])[0][4], float)
    md = ls.session_markdown(studio, run_id)
    assert "measured on this machine by the last lesson" in md and "Expected time" in md
    rates = ls.measured_rates(studio)  # the newest lesson's: this job's distill stage
    last = [r for r in studio.session(run_id).metrics() if r.get("lesson/stage") == "distill"][-1]
    assert rates["distill_episode"] == pytest.approx(last["time/distill_step"] / 2)
    assert "about 3 minutes" not in ls.INTRO
    two = StageResult("naive", rows=(VariationRow(0, 2, 1, 0.5, 10.0), VariationRow(1, 2, 0, 0.0, -30.0)))
    assert ls.stage_table(two) == [[0, 2, 1, "50%", 10.0], [1, 2, 0, "0%", -30.0], ["all", 4, 1, "25%", -10.0]]
    assert ls.stage_table(None) == [] and "in all" in job.message


def test_race_rows_appear_per_arm_and_a_scienceworld_session_races_a_trap_copy(studio, studio_cfg):
    sw_cfg = studio_cfg.with_overrides(env={"name": "scienceworld", "task": "power-component", "variations": ()})
    sw = studio.create_session(replace(sw_cfg, run_id="sw")).dir.name
    base, cfg = rc.race_target(studio, sw)
    assert (base, cfg.env.name, cfg.env.task, cfg.env.variations, cfg.env.step_limit) == (
        "sw-trap", "trap", "trap-light-bulb-fixed", (0, 1, 2, 3, 4), 8)
    assert (cfg.rollout.group_size, cfg.rollout.variations_per_iteration, cfg.train.learning_rate) == (8, 1, 1e-3)
    assert cfg.algo.skip_flat_groups and not studio.session(sw).config.algo.skip_flat_groups  # the race's, not the session's
    assert rc.race_target(studio, sw, "open") == ("sw", studio.session(sw).config)
    from empo2_studio.config import DEFAULT_WARM_START, SCIENCEWORLD_WARM_START, WARM_START_DIR
    from empo2_studio.sessions import absolute_paths

    assert studio.session(sw).config.policy.warm_start == str(WARM_START_DIR / SCIENCEWORLD_WARM_START)
    assert absolute_paths(cfg).policy.warm_start == str(WARM_START_DIR / DEFAULT_WARM_START)  # the trap copy: the trap's
    # the open trap session plays the search family: "auto" races the fixed-family copy, "open" itself
    assert rc.race_target(studio, RUN)[0] == f"{RUN}-trap" and rc.race_target(studio, RUN)[1].env.task == rc.RACE_TRAP_TASK
    assert rc.race_target(studio, RUN, "open") == (RUN, studio.session(RUN).config)
    fixed_cfg = replace(studio.session(RUN).config.with_overrides(env={"task": "trap-water-plant-fixed"}), run_id="fx")
    fixed = studio.create_session(fixed_cfg).dir.name
    assert rc.race_target(studio, fixed) == (fixed, studio.session(fixed).config)  # a fixed-family session races itself
    assert [v for _, v in rc.target_choices(studio, fixed)] == ["open"]
    assert "updates on flat groups" in rc.race_note(studio, fixed)  # it keeps its own config, and is told
    skipping = studio.create_session(replace(fixed_cfg.with_overrides(algo={"skip_flat_groups": True}), run_id="fs"))
    assert rc.race_note(studio, skipping.dir.name) == ""
    assert "embedded 135M model" in rc.race_note(studio, sw) and "search family" in rc.race_note(studio, RUN)
    assert "erased" in rc.race_note(studio, sw)  # what the ScienceWorld race probes measured (their notebook page)
    assert [v for _, v in rc.target_choices(studio, sw)] == [v for _, v in rc.target_choices(studio, RUN)] == ["trap", "open"]
    with pytest.raises(ValueError, match="unknown race target 'mars'"):
        rc.race_target(studio, sw, "mars")

    job = RecordingJob("race")
    cfg = rc.race_config(studio, sw, 1, 2, 2)
    race_ref: list[weakref.ref] = []
    real_create = Race.create
    Race.create = lambda *a, **k: (lambda r: (race_ref.append(weakref.ref(r)), r)[1])(real_create(*a, **k))
    try:
        result = rc.run_race_job(studio, job, run_id="sw-trap", cfg=cfg, iterations=1)
    finally:
        Race.create = real_create
    messages = job.messages
    counts = [{a: len(r) for a, r in d["rows"].items()} for d in job.seen if "rows" in d]
    assert {"EMPO2": 1, "GRPO": 0} in counts  # EMPO²'s row before GRPO has finished
    assert counts[-1] == {"EMPO2": 1, "GRPO": 1} and set(result["rows"]) == {"EMPO2", "GRPO"}
    assert result["evals"] == {"EMPO2": [], "GRPO": []} and result["verdict"] == ""  # no evaluation asked for
    assert "sw-trap-race-grpo (iteration 1)" in job.message and job.message.startswith("finished in ")
    assert job.countdown.done == {"EMPO² iteration": 1, "GRPO iteration": 1, "test episode": 0}  # each counted down
    assert any("EMPO² finished iteration 1 of 1" in m for m in messages)
    gc.collect()
    assert race_ref and race_ref[0]() is None  # nothing of the race (trainers, optimizers, stores) outlives the job
    assert studio.store("sw-trap-race-grpo").count() == 0  # the GRPO arm wrote no tips


def test_a_stage_leaves_no_episode_in_memory(studio):
    from empo2_studio.types import Episode

    task = "trap-water-plant"
    settings = ls.settings_from_form(task, ["2"], 2, 1)
    run_id = ls.lesson_session(studio, task).dir.name

    def alive() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if isinstance(o, Episode))

    counts = []
    for _ in range(2):
        ls.run_lesson_job(studio, RecordingJob("lesson"), run_id=run_id, settings=settings, stage="naive_again", tips={})
        counts.append(alive())
    assert counts[1] == counts[0]  # the second run keeps nothing more than the first


def test_the_tabs_expected_time_is_the_race_jobs_first_estimate(studio):
    from empo2_studio.app.race_job import expected_text, race_countdown

    p = rc.PRESETS["class"]
    form = (p["iterations"], p["group_size"], 8, "auto", p["eval_every"], p["seeds"], p["eval_repeats"])
    cfg = rc.race_config(studio, RUN, p["iterations"], p["group_size"], 8, "auto", p["eval_repeats"])
    countdown = race_countdown(studio, cfg, p["iterations"], p["eval_every"], p["seeds"])
    # 15 iterations per arm; evaluations before the first (shared) and after the last, 12 layouts × 1
    assert countdown.plan == {"EMPO² iteration": 15, "GRPO iteration": 15, "test episode": (1 + 2) * 12}
    assert rc.race_expected(studio, RUN, *form) == expected_text(countdown)  # what the job starts from
    assert "**Expected time** on this machine: " in rc.race_expected(studio, RUN, *form)
    bad = rc.race_expected(studio, RUN, 0, 8, 8, "auto", 15, 1, 1)
    assert bad == "**Expected time**: — (iterations must be a whole number in 1…10000, got 0)"
    # a new user's finds: seeds past the cap said "about 22.8 h" here; 2.5 iterations were rounded to 2
    assert rc.race_expected(studio, RUN, 15, 8, 8, "auto", 15, 99, 1) == (
        "**Expected time**: — (seeds must be a whole number in 1…10, got 99)")
    assert rc.race_expected(studio, RUN, 2.5, 8, 8, "auto", 15, 1, 1) == (
        "**Expected time**: — (iterations must be a whole number in 1…10000, got 2.5)")


def test_the_expected_time_scales_with_the_step_limit(studio, tmp_path):
    """A walkthrough found the class race's expected time the same at step limits 2, 8 and 30. Each
    unit's time is per episode step: twice the steps, twice each iteration and test episode."""
    from empo2_studio.app.race_job import LESSON_EPISODE_STEPS, earlier_race_rates, race_countdown

    p = rc.PRESETS["class"]
    priors = {}
    for steps in (8, 16):
        cfg = rc.race_config(studio, RUN, p["iterations"], p["group_size"], steps, "auto", p["eval_repeats"])
        priors[steps] = race_countdown(studio, cfg, p["iterations"], p["eval_every"], p["seeds"]).priors
    for unit, (seconds, label) in priors[8].items():
        assert priors[16][unit] == (pytest.approx(2 * seconds), label), unit
    # an earlier race's rows are per step of that race session's own limit
    for name in ("s-race-empo2", "t-race-grpo"):
        (tmp_path / name).mkdir()
    (tmp_path / "s-race-empo2" / "metrics.jsonl").write_text(
        '{"kind": "train", "time/iteration": 48.0, "rollout/episodes": 8}\n{"kind": "eval", "time/eval": 36.0, "eval/episodes": 12}\n')
    (tmp_path / "t-race-grpo" / "metrics.jsonl").write_text('{"kind": "train", "time/iteration": 9.0, "rollout/episodes": 1}\n')
    limits = {"s-race-empo2": 12}  # t-race-grpo: no readable config, so its times say nothing
    rates = earlier_race_rates(tmp_path, lambda run_id: limits[run_id])
    assert rates == {"EMPO² iteration": pytest.approx(6.0 / 12), "test episode": pytest.approx(3.0 / 12)}
    assert LESSON_EPISODE_STEPS == rc.RACE_ENV.step_limit  # the class race's episodes, which the lesson's figures stand for


def test_a_stage_stopped_before_any_episode_ended_draws_no_bar():
    """A Lesson stopped in its first seconds kept a naive stage with no episode: the chart showed a 0 % bar
    "0/0 won", which a class reads as the naive agent failing. Only stages with episodes draw a bar."""
    stopped = StageResult("naive", rows=(), stopped=True)
    *_, fig = ls.lesson_view({"naive": stopped})
    assert list(fig.data[0].x) == []
    played = StageResult("naive", rows=(VariationRow(0, 8, 0, 0.0, -100.0),))
    memory = StageResult("memory", rows=(VariationRow(0, 8, 6, 0.75, 40.0),), running=True)
    *_, fig = ls.lesson_view({"naive": played, "memory": memory})
    assert list(fig.data[0].text) == ["0/8 won · score -100", "6/8 won · score 40"]


def test_the_lessons_expected_time_follows_the_form(studio):
    """A walkthrough set 2 episodes per variation and the line still gave the default lesson's time."""
    task = "trap-light-bulb"
    default = ls.lesson_form_time(studio, task, ["0", "1"], 8, 5)
    smaller = ls.lesson_form_time(studio, task, ["0", "1"], 2, 5)
    assert "the lesson as set (2 variations, 8 episodes each, 5 distill steps)" in default
    assert "the lesson as set (2 variations, 2 episodes each, 5 distill steps)" in smaller
    rates = ls.measured_rates(studio)  # this machine's (rough figures before any lesson ran here)
    assert ls.minutes_text(ls.lesson_seconds(2, 8, 5, rates)) in default
    assert ls.minutes_text(ls.lesson_seconds(2, 2, 5, rates)) in smaller
    bad = ls.lesson_form_time(studio, task, ["0", "1"], 0, 5)
    assert bad.startswith("**Lesson session**") and "**Expected time**: — (episodes per variation" in bad


def test_a_lesson_taking_the_model_adds_no_checkpoint_to_a_session_that_only_played(studio):
    """A walkthrough found `iter_000000` in the open session after a Lesson started: the swap saved a
    trainer that had only played Episodes pairs. It now saves only weights changed since the last save."""
    from empo2_studio.sessions import Session

    played = Session.create(studio.root, replace(studio.session(RUN).config, run_id="only-played")).dir.name
    trainer = studio.trainer(played)  # a new session's trainer, as an Episodes pair makes it: iteration 0
    assert (trainer.iteration, trainer.saved) == (0, (0, None))
    lesson_run = ls.lesson_session(studio, "trap-light-bulb").dir.name
    studio.trainer(lesson_run)  # the Lesson takes the model
    assert studio.session(played).checkpoints() == []  # was [(0, …/iter_000000)]
    assert studio.loaded_adapter is not None and studio.trainer(played).iteration == 0
    trainer = studio.trainer(played)
    trainer.step()  # trained: now a swap must keep it
    studio.trainer(lesson_run)
    assert [i for i, _ in studio.session(played).checkpoints()] == [1]


def test_the_lesson_start_buttons_wait_while_a_pick_refills_the_tips(studio):
    """A task or variations pick greys ▶ Play and the stage buttons until its chain has refilled the tip
    boxes, and gives them back at its end (a Play clicked meanwhile read empty boxes and was refused)."""
    from empo2_studio.app import layout

    demo = layout.build_blocks(studio)
    fns = list(demo.fns.values())
    by_id = {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}
    play = by_id["ls-play"]
    for picked in ("ls-task", "ls-variations"):
        first = next(f for f in fns if (by_id[picked]._id, "input") in f.targets)
        chain = [first]
        while (nxt := next((f for f in fns if f.trigger_after == chain[-1]._id), None)) is not None:
            chain.append(nxt)
        assert play in first.outputs and play in chain[-1].outputs and len(chain) >= 3, picked
        held, released = first.fn(), chain[-1].fn()
        assert len(held) == len(first.outputs) >= 4  # Play, every stage button and the two picks
        assert by_id["ls-task"] in first.outputs and by_id["ls-variations"] in first.outputs
        assert all(u["interactive"] is False for u in held) and all(u["interactive"] is True for u in released)
        assert not any(f.trigger_only_on_success for f in chain[1:])  # they come back even when a refill failed
    demo.close()
