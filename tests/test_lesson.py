"""The Lesson's stages on the trap env with the tiny random policy, the hash embedder and a tmp session."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from empo2_studio.config import EnvConfig, MemoryConfig, RolloutConfig, RunConfig, TrainConfig
from empo2_studio.envs import TrapEnv
from empo2_studio.lesson import STAGES, Lesson, LessonSettings, curated_tip, results_from_metrics
from empo2_studio.memory import make_embedder
from empo2_studio.sessions import Session
from empo2_studio.trainer import Trainer

TASK = "trap-light-bulb"


def lesson_cfg() -> RunConfig:
    # similarity threshold −1: every enabled tip of the partition is retrieved (independent of the embedder)
    return RunConfig(
        run_id="lesson-t",
        env=EnvConfig(name="trap", task=TASK, step_limit=3),
        memory=MemoryConfig(embedder="hash", similarity_threshold=-1.0),
        rollout=RolloutConfig(group_size=2),
        train=TrainConfig(learning_rate=1e-2, checkpoint_every=1),
    )


@pytest.fixture
def trainer(tmp_path, tiny_policy):
    session = Session.create(tmp_path / "sessions", lesson_cfg())
    t = Trainer(session.config, session, policy=tiny_policy, embedder=make_embedder("hash"))
    yield t
    t.close()


def settings(**over) -> LessonSettings:
    base = dict(task=TASK, variations=(0, 1), episodes=2, distill_steps=2)
    return LessonSettings(**{**base, **over})


def test_the_five_stages(trainer):
    lesson = Lesson(trainer, settings())
    session, store = trainer.session, trainer.store
    progress: list[tuple[float, str]] = []

    naive = lesson.naive(threading.Event(), lambda f, m: progress.append((f, m)))
    assert [r.variation for r in naive.rows] == [0, 1] and [r.episodes for r in naive.rows] == [2, 2]
    eps = session.episodes(list(naive.episode_ids))
    assert len(eps) == 4
    assert {(e.rollout_mode, e.update_mode, e.group_id) for e in eps} == {("naive", None, "")}
    assert all(not s.tips for e in eps for s in e.steps)
    assert progress and progress[-1][0] == 1.0 and all(0.0 <= f <= 1.0 for f, _ in progress)
    assert naive.seconds > 0 and 0.0 <= naive.success_rate <= 1.0

    # curated tips: pre-filled from the env; an edited text is what is stored
    assert lesson.settings.task == TASK and curated_tip(TASK, 1) == TrapEnv().curated_tip(TASK, 1)
    tips = lesson.add_tips({0: "EDITED: the bulb is elsewhere, go look"})
    stored = {v: store.get(i) for v, i in tips.tips.items()}
    assert stored[0].text == "EDITED: the bulb is elsewhere, go look"
    assert stored[1].text == curated_tip(TASK, 1)
    assert {(t.origin, t.score) for t in stored.values()} == {("manual", 100.0)}

    before = store.count()
    memory = lesson.memory()
    mem_eps = session.episodes(list(memory.episode_ids))
    assert len(mem_eps) == 4 and {e.rollout_mode for e in mem_eps} == {"memory"}
    for e in mem_eps:  # the stored manual tip is retrieved at every step of its variation
        assert all(tips.tips[e.variation] in {t.tip_id for t in s.tips} for s in e.steps)
    assert store.count() == before  # memory episodes write no tips in the lesson
    assert lesson.memory_episode_ids() == list(memory.episode_ids)

    calls: list[list[str]] = []
    real = trainer.distill
    trainer.distill = lambda ids: (calls.append(list(ids)), real(ids))[1]
    distill = lesson.distill()
    assert calls == [list(memory.episode_ids)] * 2
    assert [s["step"] for s in distill.steps] == [1.0, 2.0]
    assert all("loss/policy" in s and "train/no_signal" in s for s in distill.steps)
    assert distill.checkpoint and trainer.session.latest_checkpoint() is not None

    again = lesson.naive_again()
    assert {e.rollout_mode for e in session.episodes(list(again.episode_ids))} == {"naive"}

    rows = [r for r in session.metrics() if r.get("kind") == "lesson"]
    assert [r["lesson/stage"] for r in rows] == list(STAGES)
    assert rows[0]["lesson/v0/episodes"] == 2.0 and "time/stage" in rows[0]
    rebuilt = results_from_metrics(session.metrics(), TASK)
    assert set(rebuilt) == {"naive", "memory", "distill", "naive_again"}
    assert rebuilt["naive"].rows == naive.rows and rebuilt["naive_again"].rows == again.rows
    assert rebuilt["distill"].steps == distill.steps  # every step, as played (a reload showed the last only)
    with pytest.raises(ValueError, match="already distilled"):  # stage 1 is the baseline: kept
        lesson.naive()
    assert [r["lesson/stage"] for r in session.metrics() if r.get("kind") == "lesson"] == list(STAGES)


def test_tips_replace_the_earlier_lesson_tip_and_keep_duplicates(trainer):
    lesson = Lesson(trainer, settings(variations=(0,)))
    store = trainer.store
    first = lesson.add_tips({0: "first version"}).tips[0]
    assert lesson.add_tips({0: "first version"}).tips[0] == first  # unchanged text: the same tip
    second = lesson.add_tips({0: "second version"}).tips[0]
    texts = [t.text for t in store.list_tips(task=TASK, variation=0)]
    assert second != first and texts == ["second version"]
    # an exact duplicate already in the table (added by hand) is kept, not refused
    manual = store.add_tip(TASK, 0, "typed in the Tips tab", score=50.0)
    assert lesson.add_tips({0: "typed in the Tips tab"}).tips[0] == manual.tip_id
    assert [t.text for t in store.list_tips(task=TASK, variation=0)] == ["typed in the Tips tab"]
    # a Lesson built later (another job) still knows its tips
    assert Lesson(trainer, settings(variations=(0,))).tip_ids() == {0: manual.tip_id}
    with pytest.raises(ValueError, match="empty"):
        lesson.add_tips({0: "   "})
    with pytest.raises(ValueError, match="variations \\[5\\]"):
        lesson.add_tips({5: "not played"})


def test_stop_between_and_within_stages(trainer):
    stop = threading.Event()
    lesson = Lesson(trainer, settings())
    seen: list[str] = []

    def on_stage(result):
        seen.append(result.stage)
        if result.stage == "tips":
            stop.set()

    results = lesson.run_all(stop=stop, on_stage=on_stage)
    assert [r.stage for r in results] == seen == ["naive", "tips"]
    assert not [e for e in trainer.session.episodes() if e.rollout_mode == "memory"]

    stop.set()
    assert lesson.run_all(stop=stop) == []

    # within a stage: a stop during the first variation ends the stage after it
    stop.clear()
    n_before = len(trainer.session.episodes())
    partial = lesson.naive(stop, lambda f, m: stop.set())
    assert partial.stopped and [r.variation for r in partial.rows] == [0]
    assert len(trainer.session.episodes()) == n_before + 2


def test_run_all_reports_overall_progress(trainer):
    progress: list[float] = []
    results = Lesson(trainer, settings(variations=(0,), distill_steps=1)).run_all(
        progress=lambda f, m: progress.append(f))
    assert [r.stage for r in results] == list(STAGES)
    assert progress == sorted(progress) and progress[-1] == 1.0


def test_distill_needs_memory_episodes_and_settings_are_checked(trainer):
    with pytest.raises(ValueError, match="memory stage"):
        Lesson(trainer, settings()).distill()
    for bad, match in [(dict(task="power-component"), "trap"), (dict(variations=()), "at least one"),
                       (dict(variations=(99,)), "not a variation"), (dict(episodes=0), "episodes"),
                       (dict(distill_steps=0), "distill steps"), (dict(variations=(0, 0)), "repeat")]:
        with pytest.raises(ValueError, match=match):
            settings(**bad).validate()
    sw = SimpleNamespace(cfg=SimpleNamespace(env=SimpleNamespace(name="scienceworld")),
                         session=SimpleNamespace(run_id="studio"))
    with pytest.raises(ValueError, match="--env trap"):
        Lesson(sw, settings())


def test_rows_appear_as_they_are_computed(trainer):
    lesson = Lesson(trainer, settings(distill_steps=3))
    partial: list[tuple[str, int, int, int]] = []  # stage, rows, steps, lesson metrics rows recorded so far

    def on_partial(result):
        assert result.running
        recorded = len([r for r in trainer.session.metrics() if r.get("kind") == "lesson"])
        partial.append((result.stage, len(result.rows), len(result.steps), recorded))

    results = lesson.run_all(on_partial=on_partial)
    assert [r.stage for r in results] == list(STAGES) and not any(r.running for r in results)
    assert partial == [
        ("naive", 1, 0, 0), ("naive", 2, 0, 0),  # variation 0's row before variation 1 is played
        ("memory", 1, 0, 2), ("memory", 2, 0, 2),
        ("distill", 0, 1, 3), ("distill", 0, 2, 3), ("distill", 0, 3, 3),  # each step before the stage ends
        ("naive_again", 1, 0, 4), ("naive_again", 2, 0, 4),
    ]
    distill = results[3]
    assert all(s["seconds"] > 0 for s in distill.steps)
    row = [r for r in trainer.session.metrics() if r.get("lesson/stage") == "distill"][-1]
    assert row["time/distill_step"] == pytest.approx(distill.seconds / 3) and "seconds" not in row
    assert row["lesson/step2/seconds"] == distill.steps[1]["seconds"]
    naive_row = [r for r in trainer.session.metrics() if r.get("lesson/stage") == "naive"][-1]
    assert naive_row["time/episode"] == pytest.approx(results[0].seconds / 4)
    assert lesson.rates == {"episode": pytest.approx(results[0].seconds / 4),  # stage 5 is timed apart
                            "memory_episode": pytest.approx(results[2].seconds / 4),
                            "distill_episode": pytest.approx(distill.seconds / 3 / 4),
                            "after_episode": pytest.approx(results[-1].seconds / 4)}
    with pytest.raises(ValueError, match="unknown lesson stage 'warmup'"):
        lesson.run_stage("warmup")


def test_each_finished_group_and_step_is_counted_on_the_lessons_countdown(trainer):
    """The stage feeds its countdown one unit of its own kind per finished group or step (2 variations
    × 2 episodes, 3 distill steps); the countdown, not the messages, carries the times."""
    from empo2_studio.lesson import lesson_countdown

    lesson = Lesson(trainer, settings(), rates={})
    lesson.countdown = cd = lesson_countdown(2, 2, 3, {}, ["naive", "distill"])
    assert cd.plan == {"naive episode": 4, "distill step": 3}
    messages: list[str] = []
    lesson.naive(progress=lambda f, m: messages.append(m))
    assert cd.done == {"naive episode": 4, "distill step": 0} and len(cd.measured["naive episode"]) == 4
    assert not any("elapsed" in m for m in messages)  # the status line adds the countdown at each poll
    from empo2_studio.lesson.timing import FALLBACK

    pace = sum(cd.measured["naive episode"]) / (4 * FALLBACK["episode"])  # this machine against the rough figure
    per, label = cd.per_unit("distill step")  # FALLBACK 7 s × 4 episodes per step, at the measured pace
    assert per == pytest.approx(4 * 7.0 * pace) and label == f"rough estimate × {pace:.2g}, the pace measured so far"
