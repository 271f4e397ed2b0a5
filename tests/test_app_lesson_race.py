"""The Lesson and Race tabs' handlers as plain functions: trap env, tiny policy, hash embedder, tmp sessions."""

from __future__ import annotations

import gradio as gr
import pytest

from empo2_studio.app import lesson_tab as ls
from empo2_studio.app import race_tab as rc
from empo2_studio.app.studio import Studio
from empo2_studio.lesson import STAGES, curated_tip

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
                        ((["0", "1", "2", "3", "4"], 2, 1), "at most 4"), (([], 2, 1), "at least one")]:
        with pytest.raises(ValueError, match=match):
            ls.settings_from_form(TASK, *args)


def test_play_the_lesson_end_to_end(studio):
    with pytest.raises(gr.Error, match="empty"):
        ls.start_lesson(studio, "all", TASK, ["0"], 2, 1, "  ", "", "", "")
    job_id, _, timer, seen, run_id, md = ls.start_lesson(studio, "all", TASK, ["0"], 2, 1, "EDITED lesson tip", "", "", "")
    assert run_id.startswith(f"lesson-{TASK}") and run_id in md and seen == -1
    job = studio.jobs.wait(job_id, 300)
    assert job.status == "done", job.error
    assert list(job.data["results"]) == list(STAGES)
    status, naive, memory, again, distill, fig, md, timer, version = ls.poll_lesson(studio, job_id, -1)
    assert "[done]" in status and version == job.version and timer.active is False
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
    assert run_id in opened[0] and [row[:2] for row in _value(opened[5])] == [[0, 2]]

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
    job_id, status, timer, seen = rc.start_race(studio, RUN, 1, 2, 2)
    job = studio.jobs.wait(job_id, 300)
    assert job.status == "done", job.error
    assert job.data["sessions"] == {"EMPO2": f"{RUN}-race-empo2", "GRPO": f"{RUN}-race-grpo"}
    status, fig, table, timer, version = rc.poll_race(studio, job_id, -1)
    assert "[done]" in status and len(fig.data) == 4 and list(table["arm"]) == ["EMPO²", "GRPO"]
    assert {e.rollout_mode for e in studio.session(f"{RUN}-race-grpo").episodes()} == {"naive"}
    assert studio.loaded_adapter is None
    assert studio.session(RUN).latest_checkpoint()[0] == 1
    assert studio.trainer(RUN).iteration == 1  # rebuilt from its checkpoint
