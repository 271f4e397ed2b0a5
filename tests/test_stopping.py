"""Stop inside a step: the per-thread scope, a group cut within one lock-step, and a race that keeps
exactly its finished iterations (the tiny policy: real sampling and updates, no timing)."""

from __future__ import annotations

import threading

import pytest

from empo2_studio.app.race_job import closing_line
from empo2_studio.config import EnvConfig, MemoryConfig, RolloutConfig, RunConfig, TrainConfig
from empo2_studio.envs import TrapEnv
from empo2_studio.memory import make_embedder
from empo2_studio.race import Race, lora_state
from empo2_studio.rollout import play_group
from empo2_studio.stopping import StopRequested, raise_if_stopped, stop_requested, stop_scope


def race_cfg() -> RunConfig:
    return RunConfig(
        run_id="base",
        env=EnvConfig(name="trap", task="trap-light-bulb", variations=(0, 1), step_limit=3),
        memory=MemoryConfig(embedder="hash", similarity_threshold=-1.0),
        rollout=RolloutConfig(group_size=3, p_memory=0.5),
        train=TrainConfig(learning_rate=1e-2, checkpoint_every=100, eval_variations=3, eval_repeats=2),
    )


def test_the_check_raises_only_inside_a_scope_whose_event_is_set_and_only_in_its_thread():
    event = threading.Event()
    raise_if_stopped()  # no scope: nothing to check
    with stop_scope(event):
        raise_if_stopped()  # not set yet
        event.set()
        assert stop_requested()
        with pytest.raises(StopRequested):
            raise_if_stopped()
        other: list[bool] = []
        t = threading.Thread(target=lambda: other.append(stop_requested()))
        t.start()
        t.join()
        assert other == [False]  # another thread (another job) has its own scope
        with stop_scope(None):
            raise_if_stopped()  # an inner scope without an event: no checks
    assert not stop_requested()


def test_a_stop_cuts_a_group_within_one_lock_step_and_drops_its_caches(tiny_policy):
    event, steps = threading.Event(), []

    def on_step(index: int, step) -> None:
        steps.append((index, step.index))
        if len(steps) == 3:  # the first lock-step of all 3 episodes has ended
            event.set()

    envs = [TrapEnv() for _ in range(3)]
    with stop_scope(event), pytest.raises(StopRequested):
        play_group(envs, tiny_policy, None, task="trap-light-bulb", variation=0, split="train",
                   rollout_mode="naive", update_mode=None, temperature=1.0, seed=0, on_step=on_step,
                   keep_caches=True)  # fmt: skip
    assert steps == [(0, 0), (1, 0), (2, 0)]  # no second lock-step was sampled
    assert len(tiny_policy.sampler.states) == 0  # kept caches of the abandoned episodes are gone


def test_a_stop_during_the_evaluation_before_training_saves_nothing(tmp_path, tiny_policy):
    race = Race.create(tmp_path, race_cfg(), policy=tiny_policy, embedder=make_embedder("hash"), run_id="e")
    event, progress = threading.Event(), []

    def on_progress(arm, played, total, won) -> None:
        progress.append((arm, played, total))
        event.set()  # after the first test episode ends

    with stop_scope(event), pytest.raises(StopRequested):
        race.run(2, eval_every=1, on_progress=on_progress)
    race.close()
    # 3 test layouts × 2, shared by the arms, played in batches of 3 (the group size); every episode that
    # ended in the lock-step that set the event is counted, then the next lock-step stops the batch
    assert progress[0] == (None, 1, 6) and progress == [(None, k, 6) for k in range(1, len(progress) + 1)]
    assert len(progress) < 3
    assert race.saved == {} and race.evals == {"EMPO2": [], "GRPO": []}
    assert all(t.session.checkpoints() == [] and t.session.metrics() == [] for t in race.trainers.values())
    from empo2_studio.app.race_job import drop_empty_sessions

    dirs = {arm: t.session.dir for arm, t in race.trainers.items()}
    race.trainers["GRPO"].session.append_metrics({"iteration": 0, "kind": "eval"})
    assert drop_empty_sessions(race) == {} and all(d.exists() for d in dirs.values())  # one arm recorded: both kept
    (dirs["GRPO"] / "metrics.jsonl").unlink()
    tip = race.trainers["EMPO2"].store.add_tip("trap-light-bulb", 0, "added while the race ran")
    assert drop_empty_sessions(race) == {} and all(d.exists() for d in dirs.values())  # a tip is kept too
    race.trainers["EMPO2"].store.delete([tip.tip_id])
    assert drop_empty_sessions(race) == {arm: t.session.run_id for arm, t in race.trainers.items()}
    assert not any(d.exists() for d in dirs.values())
    line = closing_line("", 12.0, {"EMPO2": [], "GRPO": []}, {"EMPO2": [], "GRPO": []}, [],
                        "seed 0, the evaluation before training: 2 of 6 test episodes")  # fmt: skip
    assert line == ("stopped during seed 0, the evaluation before training: 2 of 6 test episodes after 12 s · "
                    "no evaluation or iteration finished; nothing saved, no session kept")  # fmt: skip
    # an evaluation finished, no iteration: its rows are kept, no weights were saved (a new user read
    # "nothing saved" beside a session holding the evaluation's 12 episodes)
    evals = {"EMPO2": [{"seed": 0, "iteration": 0}], "GRPO": [{"seed": 0, "iteration": 0}]}
    line = closing_line("", 46.0, {"EMPO2": [], "GRPO": []}, evals, [], "seed 0, iteration 1 of 15 · EMPO²")
    assert line == ("stopped during seed 0, iteration 1 of 15 · EMPO² after 46 s · seed 0: iterations EMPO² 0, "
                    "GRPO 0; 1 evaluation(s) · no iteration finished: no checkpoint saved; the finished "
                    "evaluations are kept in the race's sessions")  # fmt: skip


def test_a_stop_inside_an_iteration_keeps_each_arms_last_finished_one(tmp_path, tiny_policy):
    race = Race.create(tmp_path, race_cfg(), policy=tiny_policy, embedder=make_embedder("hash"), run_id="i")
    event, kept = threading.Event(), {}

    def on_arm(arm, report) -> None:
        trainer = race.trainers[arm]
        kept[arm] = (trainer.iteration, trainer.rng.getstate(), lora_state(tiny_policy))
        if arm == "EMPO2" and report.iteration == 2:
            event.set()  # GRPO's iteration 2 is cut at its first lock-step

    with stop_scope(event), pytest.raises(StopRequested):
        race.run(3, on_arm=on_arm)
    race.close()
    assert {arm: len(rows) for arm, rows in race.rows.items()} == {"EMPO2": 2, "GRPO": 1}
    assert {arm: p.name for arm, p in race.saved.items()} == {"EMPO2": "iter_000002", "GRPO": "iter_000001"}
    grpo = race.trainers["GRPO"]
    # the cut iteration left no trace in the trainer: the counter and the draws are those after iteration 1
    assert grpo.iteration == kept["GRPO"][0] == 1 and grpo.rng.getstate() == kept["GRPO"][1]
    assert [i for i, _ in grpo.session.checkpoints()] == [1]
    assert [r["iteration"] for r in grpo.session.metrics()] == [1]
    line = closing_line("", 80.0, {a: [{"seed": 0, **r} for r in rows] for a, rows in race.rows.items()},
                        {"EMPO2": [], "GRPO": []}, ["i-race-empo2 (iteration 2)", "i-race-grpo (iteration 1)"],
                        "seed 0, iteration 2 of 3 · GRPO")  # fmt: skip
    assert line == ("stopped during seed 0, iteration 2 of 3 · GRPO after 80 s · seed 0: iterations EMPO² 2, "
                    "GRPO 1; 0 evaluation(s) · checkpoints saved: i-race-empo2 (iteration 2), i-race-grpo (iteration 1)")


def test_a_stop_inside_an_update_changes_no_weight_and_no_counter(tmp_path, tiny_policy):
    import torch

    from empo2_studio.sessions import Session
    from empo2_studio.trainer import Trainer

    session = Session.create(tmp_path, race_cfg())
    trainer = Trainer(session.config, session, policy=tiny_policy, embedder=make_embedder("hash"))
    before, draws = lora_state(tiny_policy), trainer.rng.getstate()
    event = threading.Event()
    param = next(p for p in tiny_policy.trainable_parameters() if p.requires_grad)
    tips_then: list[int] = []  # the iteration's tips, written before its update
    hook = param.register_hook(lambda grad: tips_then.append(trainer.store.count()) or event.set())  # first backward: stop
    try:
        with stop_scope(event), pytest.raises(StopRequested):
            trainer.step(forced_mode="on-policy")  # 3 episodes, micro-batches of 2: cut before the second
    finally:
        hook.remove()
    after = lora_state(tiny_policy)
    assert event.is_set() and all(torch.equal(before[k], after[k]) for k in before)  # the optimizer never stepped
    assert trainer.iteration == 0 and trainer.rng.getstate() == draws and session.metrics() == []
    assert tips_then[0] > 0 and trainer.store.count() == 0  # its episodes were never recorded: nor are their tips
    trainer.step(forced_mode="on-policy")  # the next iteration is iteration 1, as if the cut one never began
    assert [r["iteration"] for r in session.metrics()] == [1] and trainer.store.count() > 0
    ids = {ep.episode_id for ep in session.episodes()}
    assert {t.source_episode_id for t in trainer.store.list_tips()} <= ids  # every tip's episode is on disk
    trainer.close()
