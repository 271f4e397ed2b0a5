"""The EMPO² vs GRPO race on one shared tiny policy: interleaved arms do not leak state."""

from __future__ import annotations

import pytest
import torch

from empo2_studio.config import EnvConfig, MemoryConfig, RolloutConfig, RunConfig, TrainConfig
from empo2_studio.memory import make_embedder
from empo2_studio.race import (
    ARMS, Race, arm_config, arm_rows_summary, free_race_ids, load_lora_state, lora_state, race_verdict,
)
from empo2_studio.sessions import Session
from empo2_studio.trainer import Trainer


def race_cfg() -> RunConfig:
    return RunConfig(
        run_id="base",
        env=EnvConfig(name="trap", task="trap-light-bulb", variations=(0, 1), step_limit=3),
        memory=MemoryConfig(embedder="hash", similarity_threshold=-1.0),
        rollout=RolloutConfig(group_size=3, p_memory=0.5),
        train=TrainConfig(learning_rate=1e-2, checkpoint_every=100),
    )


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_arm_configs():
    cfg = race_cfg()
    grpo = arm_config(cfg, "GRPO", "x")
    assert (grpo.rollout.p_memory, grpo.algo.intrinsic_coef, grpo.run_id) == (0.0, 0.0, "x")
    assert arm_config(cfg, "EMPO2") == cfg
    with pytest.raises(ValueError, match="unknown arm"):
        arm_config(cfg, "PPO")


def test_interleaved_arms_match_solo_runs(tmp_path, tiny_policy):
    root = tmp_path / "sessions"
    embedder = make_embedder("hash")
    initial = lora_state(tiny_policy)
    race = Race.create(root, race_cfg(), policy=tiny_policy, embedder=embedder, run_id="base")
    seen = []
    assert race.run(2, on_iteration=lambda k, reports: seen.append((k, sorted(reports)))) == 2
    race.close()
    assert seen == [(1, sorted(ARMS)), (2, sorted(ARMS))]
    ids = {arm: t.session.run_id for arm, t in race.trainers.items()}
    assert ids == {"EMPO2": "base-race-empo2", "GRPO": "base-race-grpo"}
    assert free_race_ids(root, "base") == {"EMPO2": "base-race2-empo2", "GRPO": "base-race2-grpo"}

    assert not _equal(race.states["EMPO2"], race.states["GRPO"])
    for arm, trainer in race.trainers.items():
        rows = [r for r in Session.open(root, ids[arm]).metrics() if r.get("kind") == "train"]
        assert [r["iteration"] for r in rows] == [1, 2]
        assert trainer.session.latest_checkpoint()[0] == 2
    grpo_eps = Session.open(root, ids["GRPO"]).episodes()
    assert grpo_eps and {e.rollout_mode for e in grpo_eps} == {"naive"}
    assert all(s.intrinsic_reward == 0.0 for e in grpo_eps for s in e.steps)
    assert len(arm_rows_summary(race.rows)) == 4

    # each arm alone, from the same start and seed, ends with exactly the race's weights
    for arm in ARMS:
        load_lora_state(tiny_policy, initial)
        cfg = arm_config(race_cfg(), arm, f"solo-{arm.lower()}")
        solo = Trainer(cfg, Session.create(root, cfg), policy=tiny_policy, embedder=embedder)
        for _ in range(2):
            solo.step()
        solo.close()
        assert _equal(lora_state(tiny_policy), race.states[arm]), arm


def test_stop_after_the_current_iteration(tmp_path, tiny_policy):
    import threading

    stop = threading.Event()
    race = Race.create(tmp_path, race_cfg(), policy=tiny_policy, embedder=make_embedder("hash"), run_id="s")
    assert race.run(5, stop=stop, on_iteration=lambda k, r: stop.set()) == 1
    assert race.iteration == 1 and all(len(r) == 1 for r in race.rows.values())
    race.close()


def test_the_grpo_arm_writes_no_tips_and_never_reflects(tmp_path, tiny_policy, monkeypatch):
    from empo2_studio.memory import reflection
    from empo2_studio.race import reads_tips

    calls: list[int] = []
    real = reflection.write_tips
    monkeypatch.setattr(reflection, "write_tips", lambda policy, episodes, *a, **k: (calls.append(len(episodes)), real(policy, episodes, *a, **k))[1])
    race = Race.create(tmp_path, race_cfg(), policy=tiny_policy, embedder=make_embedder("hash"), run_id="g", arms=("GRPO",))
    grpo = race.trainers["GRPO"]
    tips_before = grpo.store.count()
    assert not reads_tips(grpo.cfg) and grpo.write_tips is False
    race.run(1)
    assert calls == [] and grpo.store.count() == tips_before == 0
    assert race.rows["GRPO"][0]["memory/tips_written"] == 0.0 and arm_rows_summary(race.rows)[0][5] == 0
    assert tiny_policy.sampler.states == {}  # no KV cache kept for a reflection that never comes
    race.close()

    # the EMPO² arm (p_memory 0.5) reads tips, so it writes them: one reflection call per group of 3
    assert reads_tips(race_cfg()) and reads_tips(arm_config(race_cfg(), "GRPO").with_overrides(rollout={"forced_mode": "off-policy"}))
    empo2 = Race.create(tmp_path, race_cfg(), policy=tiny_policy, embedder=make_embedder("hash"), run_id="e", arms=("EMPO2",))
    empo2.run(1)
    assert calls == [3] and empo2.trainers["EMPO2"].write_tips is True
    empo2.close()


def test_each_arm_reports_its_row_as_soon_as_it_finishes(tmp_path, tiny_policy):
    race = Race.create(tmp_path, race_cfg(), policy=tiny_policy, embedder=make_embedder("hash"), run_id="r")
    seen: list[tuple[str, int, dict[str, int]]] = []
    race.run(2, on_arm=lambda arm, report: seen.append((arm, report.iteration, {a: len(r) for a, r in race.rows.items()})))
    race.close()
    assert seen == [
        ("EMPO2", 1, {"EMPO2": 1, "GRPO": 0}), ("GRPO", 1, {"EMPO2": 1, "GRPO": 1}),
        ("EMPO2", 2, {"EMPO2": 2, "GRPO": 1}), ("GRPO", 2, {"EMPO2": 2, "GRPO": 2}),
    ]
    table = arm_rows_summary(race.rows)
    assert [row[:2] for row in table] == [[1, "EMPO²"], [1, "GRPO"], [2, "EMPO²"], [2, "GRPO"]]
    assert all(row[3].endswith("%") and 0 <= int(row[3][:-1]) <= 100 for row in table)  # success in %


def _evals(rates: dict[int, list[float]]) -> list[dict]:
    return [{"iteration": it, "eval/success_rate": r, "seed": s} for it, rs in rates.items() for s, r in enumerate(rs)]


def test_the_verdict_names_the_winner_by_its_last_common_evaluation():
    # EMPO² at 30: (0.5 + 0.25 + 0.375) / 3 = 0.375; GRPO (0.125 + 0 + 0.125) / 3 = 0.0833 → +29 points, 4.5×
    evals = {"EMPO2": _evals({0: [0, 0, 0], 30: [0.5, 0.25, 0.375], 40: [1.0, 1.0, 1.0]}),
             "GRPO": _evals({0: [0, 0, 0], 30: [0.125, 0.0, 0.125]})}
    assert race_verdict(evals) == ("EMPO² won: after 30 iterations it solves 38% of the unseen test layouts without "
                                   "memory, against GRPO's 8% (+29 points, 4.5×; mean of 3 seeds).")
    tie = {"EMPO2": _evals({0: [0.0], 10: [0.0]}), "GRPO": _evals({0: [0.0], 10: [0.0]})}
    assert race_verdict(tie) == "A tie: after 10 iterations both arms solve 0% of the unseen test layouts without memory (one seed)."
    assert race_verdict(tie, split="dev") == "A tie: after 10 iterations both arms solve 0% of the dev layouts without memory (one seed)."
    grpo_ahead = {"EMPO2": _evals({5: [0.0]}), "GRPO": _evals({5: [0.5]})}
    assert race_verdict(grpo_ahead).startswith("GRPO won: after 5 iterations it solves 50%") and "×" not in race_verdict(grpo_ahead)
    assert race_verdict({"EMPO2": _evals({0: [0.0]}), "GRPO": _evals({0: [0.0]})}) == ""  # only the start: no verdict yet
    assert race_verdict({"EMPO2": _evals({10: [0.5]})}) == "" and race_verdict({}) == ""


def test_evaluations_before_the_first_every_n_and_after_the_last(tmp_path, tiny_policy):
    cfg = race_cfg().with_overrides(train={"eval_variations": 1, "eval_repeats": 1})
    race = Race.create(tmp_path, cfg, policy=tiny_policy, embedder=make_embedder("hash"), run_id="v")
    seen: list[tuple[str, int]] = []
    with pytest.raises(ValueError, match="eval_every must be a whole number ≥ 0"):
        race.run(1, eval_every=-1)
    assert race.run(3, eval_every=2, on_eval=lambda arm, row: seen.append((arm, row["iteration"]))) == 3
    race.close()
    assert seen == [("EMPO2", 0), ("GRPO", 0), ("EMPO2", 2), ("GRPO", 2), ("EMPO2", 3), ("GRPO", 3)]
    assert race.evals["EMPO2"][0] == race.evals["GRPO"][0]  # the shared start is evaluated once
    for arm, trainer in race.trainers.items():
        evals = [r for r in trainer.session.metrics() if r.get("kind") == "eval"]
        assert [r["iteration"] for r in evals] == [0, 2, 3]  # the shared start in both sessions
        assert ("shared_from" in evals[0], "time/eval" in evals[0]) == ((False, True) if arm == "EMPO2" else (True, False))
        assert all(0.0 <= r["eval/success_rate"] <= 1.0 and r["eval/episodes"] == 1 for r in race.evals[arm])
