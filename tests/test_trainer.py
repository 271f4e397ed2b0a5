"""The trainer on the trap env with the tiny random policy, the hash embedder and tmp sessions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from empo2_studio.config import EnvConfig, MemoryConfig, RolloutConfig, RunConfig, TrainConfig
from empo2_studio.envs.trap import TrapEnv
from empo2_studio.memory import make_embedder
from empo2_studio.rollout.episodes import KEY_TAIL_CHARS
from empo2_studio.sessions import Session
from empo2_studio.trainer import MODE_CODE, Trainer
from empo2_studio.types import Episode, Step
from fakes import ScriptedPolicy

REPO = Path(__file__).resolve().parents[1]


def small_cfg(**over) -> RunConfig:
    """2 episodes per group, 3 steps per episode, a large LR so one step visibly moves the adapter."""
    cfg = RunConfig(
        run_id="t",
        env=EnvConfig(name="trap", task="trap-light-bulb", variations=(0, 1), step_limit=3),
        memory=MemoryConfig(embedder="hash", similarity_threshold=-1.0),
        rollout=RolloutConfig(group_size=2),
        train=TrainConfig(learning_rate=1e-2, checkpoint_every=1, eval_variations=2, eval_repeats=2),
    )
    return cfg.with_overrides(**over) if over else cfg


def make_trainer(tmp_path, tiny_policy, **over) -> Trainer:
    cfg = small_cfg(**over)
    session = Session.create(tmp_path / "sessions", cfg)
    return Trainer(session.config, session, policy=tiny_policy, embedder=make_embedder("hash"))


def _named(policy):
    return {n: p.detach().clone() for n, p in policy.model.named_parameters()}


def _params(policy):
    return [p.detach().clone() for p in policy.trainable_parameters()]


def test_one_iteration_on_the_scripted_policy_moves_its_shift_by_the_worked_gradient(tmp_path):
    """A whole `Trainer.step` (rollout, advantages, update, AdamW) without a tokenizer or model.

    Variation 0 of trap-light-bulb: the first episode of the group plays the gold path ("go to
    kitchen" 13 bytes, "focus on green light bulb" 25, "turn on green light bulb" 24: 62 tokens,
    score 100), the second the decoy reflex ("focus on red light bulb", 23 tokens, −100, over).
    Returns ±100, so the advantages are ±100/std = ±1/√2 (std of [100, −100] with ddof 1 is 100√2).
    At shift 0 every ratio is 1 and the token-mean loss is −(62 − 23)/(√2 · 85) = −0.32444, which is
    also d loss / d shift, so |grad| = 0.32444 (under the clip of 1). AdamW's first step moves a
    parameter by lr · g/|g|: the shift goes from 0 to +0.01 (lr), raising every action's log-prob,
    since the winning episode has more tokens than the losing one.
    """
    env, task = TrapEnv(), "trap-light-bulb"
    plans = [env.gold_path(task, 0), env.focus_first_path(task, 0)]
    roles: dict[str, int] = {}  # episode key → its plan, in the order the episodes first ask

    def script(request):
        return plans[roles.setdefault(request.key, len(roles))][len(request.turns) - 1]

    cfg = small_cfg(env={"variations": (0,)}, algo={"intrinsic_coef": 0.0})  # returns = scores
    session = Session.create(tmp_path / "sessions", cfg)
    policy = ScriptedPolicy(script, logprob=-0.5)
    trainer = Trainer(session.config, session, policy=policy, embedder=make_embedder("hash"))
    report = trainer.step(forced_mode="on-policy")
    episodes = session.episodes(list(report.episode_ids))
    assert [(ep.score, len(ep.steps)) for ep in episodes] == [(100.0, 3), (-100.0, 1)]
    m = report.metrics
    assert (m["train/turns"], m["train/tokens"], m["ratio/mean"]) == (4.0, 85.0, 1.0)
    assert m["loss/policy"] == pytest.approx(-39 / (85 * 2**0.5), rel=1e-5)
    assert m["grad/norm"] == pytest.approx(39 / (85 * 2**0.5), rel=1e-5)
    assert float(policy.shift.detach()) == pytest.approx(0.01, abs=1e-6)
    # the checkpoint keeps the trained shift, and a resumed trainer (a fresh policy) starts from it
    trainer.save_checkpoint()
    resumed = Trainer.resume(session, policy=ScriptedPolicy(script), embedder=make_embedder("hash"))
    assert resumed.iteration == 1
    assert float(resumed.policy.shift.detach()) == pytest.approx(0.01, abs=1e-6)


def test_one_step_changes_lora_weights_and_no_base_weight(tmp_path, tiny_policy):
    trainer = make_trainer(tmp_path, tiny_policy)
    before = _named(tiny_policy)
    phases: list[str] = []
    trainer.on_phase = phases.append
    report = trainer.step(forced_mode="on-policy")
    episodes = trainer.session.episodes(list(report.episode_ids))
    where = f"naive rollouts of variation {episodes[0].variation}"
    limit = trainer.envs(1)[0].step_limit(trainer.cfg.env.task)  # 3
    assert phases == [
        f"{where}: starting 2 episodes",
        *[f"{where}: step {t} of ≤ {limit}" for t in range(1, max(len(ep.steps) for ep in episodes) + 1)],
        "writing the tips of 2 episodes",
        "on-policy update: re-scoring 2 episodes, backward, optimizer step",
        "on-policy update: re-scoring episodes 1–2 of 2",  # one micro-batch (micro_batch_episodes 2)
        "on-policy update: backward through episodes 1–2 of 2",
    ]
    after = _named(tiny_policy)
    lora = [n for n in before if "lora_" in n]
    base = [n for n in before if "lora_" not in n]
    assert lora and base
    assert any(not torch.equal(before[n], after[n]) for n in lora)
    assert all(torch.equal(before[n], after[n]) for n in base)
    m = report.metrics
    assert report.iteration == trainer.iteration == 1 and report.update_mode == "on-policy"
    assert m["rollout/update_mode"] == MODE_CODE["on-policy"] == 0
    assert m["guard/skipped"] == 0.0 and not report.skipped_update
    # The update renamed the weights: the episodes were sampled by the starting ones, the next by iter_000001.
    assert m["train/optimizer_steps"] == 1.0
    assert {ep.policy_version for ep in episodes} == {"base"} and tiny_policy.version == "iter_000001"
    # First pass with unchanged weights: scoring reproduces the behaviour log-probs, ratio 1.
    assert m["ratio/min"] == pytest.approx(1.0, abs=1e-3) and m["ratio/max"] == pytest.approx(1.0, abs=1e-3)
    for key in ("rollout/score_mean", "rollout/success_rate", "rollout/score_naive", "rollout/episode_len",
                "loss/policy", "loss/kl", "mask/low_prob_frac", "memory/tips_total", "memory/tips_written",
                "memory/tips_retrieved_mean", "reward/intrinsic_mean", "time/sampling", "time/env",
                "time/scoring", "time/backward", "time/memory", "time/iteration"):  # fmt: skip
        assert key in m, key
    assert m["memory/tips_retrieved_mean"] == 0.0  # naive rollout: nothing retrieved
    assert m["memory/tips_total"] > 0  # ...but every training episode wrote its tip
    rows = trainer.session.metrics()
    assert rows[-1]["iteration"] == 1 and rows[-1]["kind"] == "train"
    assert {e.episode_id for e in trainer.session.episodes()} == set(report.episode_ids)


def test_mode_schedule_wiring(tmp_path, tiny_policy):
    trainer = make_trainer(tmp_path, tiny_policy, rollout={"group_size": 2, "p_memory": 1.0, "q_off_policy": 1.0})
    report = trainer.step()
    assert report.update_mode == "off-policy" and report.metrics["rollout/update_mode"] == 2
    eps = trainer.session.episodes(list(report.episode_ids))
    assert all(ep.rollout_mode == "memory" and ep.update_mode == "off-policy" for ep in eps)
    assert "rollout/score_memory" in report.metrics
    assert trainer.step(forced_mode="on-policy").update_mode == "on-policy"  # forced wins over p = 1
    with pytest.raises(ValueError, match="forced_mode"):
        trainer.step(forced_mode="sideways")


def test_mode_schedule_p0_is_grpo(tmp_path, tiny_policy):
    trainer = make_trainer(tmp_path, tiny_policy, rollout={"group_size": 2, "p_memory": 0.0})
    reports = [trainer.step() for _ in range(2)]
    assert [r.update_mode for r in reports] == ["on-policy", "on-policy"]


def test_advantages_use_extrinsic_plus_scaled_intrinsic(tmp_path, tiny_policy):
    trainer = make_trainer(tmp_path, tiny_policy, algo={"intrinsic_coef": 2.0})

    def ep(rewards, bonuses):
        steps = tuple(
            Step(index=i, user_message="u", tips=(), valid_actions=(), sample=None, action="a", corrected=False,
                 reward=r, score=0.0, observation="o", intrinsic_reward=b)  # fmt: skip
            for i, (r, b) in enumerate(zip(rewards, bonuses))
        )
        return Episode("e", "trap", "t", 0, "train", "naive", "on-policy", "constrained", 1.0, 0, steps, 0.0, False)

    # Returns: 25 + 2·1 = 27 and 0 + 2·(1 + 0.5) = 3; mean 15, std (ddof 1) = 16.97...
    adv = trainer._advantages([[ep([25.0], [1.0]), ep([0.0, 0.0], [1.0, 0.5])]])
    assert adv == pytest.approx([12 / 16.970563, -12 / 16.970563], rel=1e-5)
    # both won 25: the novelty bonus alone (27 vs 28) gives ±0.707, unless flat groups are skipped
    same_task = [[ep([25.0], [1.0]), ep([25.0], [1.5])]]
    assert trainer._advantages(same_task) == pytest.approx([-0.707107, 0.707107], rel=1e-5)
    skipping = make_trainer(tmp_path / "skip", tiny_policy, algo={"intrinsic_coef": 2.0, "skip_flat_groups": True})
    assert skipping._advantages(same_task) == [0.0, 0.0]
    assert skipping._advantages([[ep([25.0], [1.0]), ep([0.0, 0.0], [1.0, 0.5])]]) == pytest.approx(adv)


def test_step_level_credit_adds_anchor_state_advantages(tmp_path, tiny_policy):
    trainer = make_trainer(
        tmp_path, tiny_policy, algo={"intrinsic_coef": 0.0, "step_advantage_coef": 0.5, "step_gamma": 1.0}
    )

    def ep(rewards, observations):
        steps = tuple(
            Step(index=i, user_message="u", tips=(), valid_actions=("a", "b"), sample=None, action="a",
                 corrected=False, reward=r, score=0.0, observation=o)  # fmt: skip
            for i, (r, o) in enumerate(zip(rewards, observations))
        )
        return Episode("e", "trap", "t", 0, "train", "naive", "on-policy", "constrained", 1.0, 0, steps, 0.0, False)

    # Returns 100 and −100: episode advantages ±1/√2 (std 100·√2). Step 0 is the shared start state:
    # returns-to-go 100, −100 → ±1/√2. Step 1 comes after different observations (K, W): no peer, 0.
    # Per turn: ±(1/√2 + 0.5/√2) at step 0, ±1/√2 at step 1.
    adv = trainer._advantages([[ep([25.0, 75.0], ["K", "done"]), ep([25.0, -125.0], ["W", "done"])]])
    r = 2**-0.5
    assert adv[0] == pytest.approx([1.5 * r, r], rel=1e-5)
    assert adv[1] == pytest.approx([-1.5 * r, -r], rel=1e-5)
    # The same observation before step 1: that step is compared too (75 vs −125 → ±1/√2 more).
    adv = trainer._advantages([[ep([25.0, 75.0], ["K", "done"]), ep([25.0, -125.0], ["K", "done"])]])
    assert adv[0] == pytest.approx([1.5 * r, 1.5 * r], rel=1e-5)


class NaNScores:
    """Wraps the real policy; its scores become NaN (still attached to the graph)."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def score(self, conversations, **kw):
        return [[lp * float("nan") for lp in conv] for conv in self.inner.score(conversations, **kw)]


def test_nan_loss_skips_the_step_and_never_touches_weights(tmp_path, tiny_policy):
    trainer = make_trainer(tmp_path, tiny_policy)
    trainer.policy = NaNScores(tiny_policy)
    before = _named(tiny_policy)
    report = trainer.step(forced_mode="on-policy")
    assert report.skipped_update and report.metrics["guard/skipped"] == 1.0
    assert all(torch.equal(before[n], p) for n, p in tiny_policy.model.named_parameters())
    assert all(p.grad is None for p in tiny_policy.trainable_parameters())
    assert trainer.session.metrics()[-1]["guard/skipped"] == 1.0
    assert report.metrics["train/optimizer_steps"] == 0.0 and trainer.policy.version == "base"  # same weights


def test_nan_gradient_skips_the_step(tmp_path, tiny_policy):
    trainer = make_trainer(tmp_path, tiny_policy)
    param = tiny_policy.trainable_parameters()[0]
    handle = param.register_hook(lambda g: g * float("nan"))
    try:
        before = _named(tiny_policy)
        report = trainer.step(forced_mode="on-policy")
    finally:
        handle.remove()
    assert report.metrics["guard/skipped"] == 1.0 and report.skipped_update
    assert all(torch.equal(before[n], p) for n, p in tiny_policy.model.named_parameters())
    assert len(trainer.optimizer.state) == 0  # AdamW never stepped


def _tips_snapshot(store):
    return store.version, sorted((t.tip_id, t.text, t.score) for t in store.list_tips())


def test_evaluate_never_touches_memory(tmp_path, tiny_policy):
    trainer = make_trainer(tmp_path, tiny_policy)
    trainer.step(forced_mode="on-policy")
    snapshot = _tips_snapshot(trainer.store)
    calls = []
    real_retrieve = trainer.store.retrieve
    trainer.store.retrieve = lambda *a, **k: calls.append(a) or real_retrieve(*a, **k)
    result = trainer.evaluate()
    assert calls == [] and _tips_snapshot(trainer.store) == snapshot
    assert result["eval/episodes"] == 4.0  # 2 test variations × 2 repeats
    assert -100.0 <= result["eval/score_mean"] <= 100.0 and 0.0 <= result["eval/success_rate"] <= 1.0
    assert result["eval/trap-light-bulb/score_mean"] == result["eval/score_mean"]
    test_eps = [e for e in trainer.session.episodes() if e.split == "test"]
    assert len(test_eps) == 4 and all(e.rollout_mode == "naive" and e.temperature == 0.4 for e in test_eps)
    assert {e.variation for e in test_eps} == {36, 37}  # the trap env's first test variations
    assert all(s.tips == () for e in test_eps for s in e.steps)


def test_evaluate_plays_the_layouts_in_batches_as_wide_as_a_group_and_counts_each_episode(tmp_path, tiny_policy):
    trainer = make_trainer(tmp_path, tiny_policy, rollout={"group_size": 3}, train={"eval_variations": 4, "eval_repeats": 1})
    progress = []
    result = trainer.evaluate(on_progress=lambda played, total, won: progress.append((played, total, won)))
    test_eps = [e for e in trainer.session.episodes() if e.split == "test"]
    # 4 layouts × 1 episode in batches of 3 (the group size): 36, 37, 38 together, then 39
    assert sorted(e.variation for e in test_eps) == [36, 37, 38, 39] and result["eval/episodes"] == 4.0
    assert [p[:2] for p in progress] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert progress[-1][2] == sum(e.won for e in test_eps) == round(4 * result["eval/success_rate"])
    assert len(trainer.pool._envs) == 3  # no env made beyond the group's


def test_evaluate_on_the_dev_split_plays_dev_layouts_and_says_so(tmp_path, tiny_policy):
    trainer = make_trainer(tmp_path, tiny_policy)
    trainer.evaluate(split="dev")
    eps = trainer.session.episodes()
    assert {e.variation for e in eps} == {24, 25} and {e.split for e in eps} == {"dev"}  # dev starts at 24
    assert trainer.session.metrics()[-1]["split"] == "dev"
    trainer.evaluate()
    assert "split" not in trainer.session.metrics()[-1]  # a test row reads as every test row before it
    with pytest.raises(ValueError, match="evaluate plays the test or the dev split, got 'train'"):
        trainer.evaluate(split="train")


def test_adapt_keeps_weights_and_grows_the_new_task_memory(tmp_path, tiny_policy):
    trainer = make_trainer(tmp_path, tiny_policy)
    before = _named(tiny_policy)
    rows = trainer.adapt("trap-find-animal", trials=2)
    assert all(torch.equal(before[n], p) for n, p in tiny_policy.model.named_parameters())
    assert [r["adapt/trial"] for r in rows] == [0.0, 1.0, 2.0]
    tips = [r["adapt/tips_total"] for r in rows]
    assert tips[0] > 0 and tips == sorted(tips)  # tips written after every trial
    assert trainer.store.count(task="trap-light-bulb") == 0  # the training task's partition untouched
    eps = trainer.session.episodes()
    assert [e.rollout_mode for e in eps[:2]] == ["naive", "naive"]
    assert all(e.rollout_mode == "memory" for e in eps[2:]) and all(e.update_mode is None for e in eps)
    with pytest.raises(ValueError, match="not trained on"):
        trainer.adapt("trap-light-bulb")
    with pytest.raises(ValueError, match="unknown task"):
        trainer.adapt("no-such-task")


def test_distill_refuses_naive_episodes_and_trains_memory_ones(tmp_path, tiny_policy):
    # T = 3: at T = 1 the tiny random model plays "look around" at every step on the trap's prompt, so
    # every return is equal and the distill step has no signal to check
    trainer = make_trainer(tmp_path, tiny_policy, rollout={"group_size": 2, "train_temperature": 3.0})
    naive = trainer.step(forced_mode="on-policy")
    before = _params(tiny_policy)
    with pytest.raises(ValueError, match="without tips"):
        trainer.distill(list(naive.episode_ids))
    assert all(torch.equal(a, b) for a, b in zip(before, tiny_policy.trainable_parameters()))
    with pytest.raises(KeyError):
        trainer.distill(["no-such-episode"])
    memory = trainer.step(forced_mode="on-policy-with-tips")
    before = _params(tiny_policy)
    report = trainer.distill(list(memory.episode_ids))
    assert report.update_mode == "off-policy" and report.metrics["distill/episodes"] == 2.0
    assert report.episode_ids == ()  # no new rollouts
    assert "train/no_signal" not in report.metrics
    assert any(not torch.equal(a, b) for a, b in zip(before, tiny_policy.trainable_parameters()))


def _ungrouped(episode_id: str, mode: str, score: float) -> Episode:
    """A demo/lesson episode (no group) of trap-light-bulb variation 0 with one step of reward `score`."""
    from empo2_studio.types import ActionSample

    step = Step(
        index=0, user_message="u", tips=(), valid_actions=("look around",),
        sample=ActionSample(text="look around", token_ids=(1,), logprobs=(0.0,)), action="look around",
        corrected=False, reward=score, score=score, observation="o",
    )  # fmt: skip
    return Episode(
        episode_id=episode_id, env="trap", task="trap-light-bulb", variation=0, split="train", rollout_mode=mode,
        update_mode=None, decoding="constrained", temperature=1.0, seed=0, steps=(step,), score=score, won=score >= 100,
    )  # fmt: skip


def test_distill_measures_ungrouped_memory_episodes_against_the_naive_ones_of_their_variation(tmp_path, tiny_policy):
    trainer = make_trainer(tmp_path, tiny_policy, algo={"intrinsic_coef": 0.0})
    eps = [_ungrouped("n1", "naive", 0.0), _ungrouped("n2", "naive", 25.0),
           _ungrouped("m1", "memory", 100.0), _ungrouped("m2", "memory", 100.0)]  # fmt: skip
    trainer.session.append_episodes(eps)
    # Returns [0, 25, 100, 100]: mean 56.25, std (ddof 1) 51.54 → memory A = 43.75 / 51.54 = 0.8489.
    # Without the naive baseline both memory episodes (100, 100) would get A = 0: no signal.
    got = trainer._distill_advantages([eps[2], eps[3]])
    assert got == pytest.approx([0.84887, 0.84887], abs=1e-4)


def test_checkpoint_and_resume_restore_state(tmp_path, tiny_policy):
    trainer = make_trainer(tmp_path, tiny_policy)
    trainer.train(2)
    assert [i for i, _ in trainer.session.checkpoints()] == [1, 2]
    saved = _params(tiny_policy)
    rng_state = trainer.rng.getstate()
    trainer.step()  # iteration 3, never checkpointed (as if killed before its save)
    from empo2_studio.policy import build_tiny_policy

    fresh = build_tiny_policy(seed=0)
    session = Session.open(tmp_path / "sessions", "t")
    resumed = Trainer.resume(session, policy=fresh, embedder=make_embedder("hash"))
    assert resumed.iteration == 2 and resumed.rng.getstate() == rng_state
    assert all(torch.equal(a, b) for a, b in zip(saved, fresh.trainable_parameters()))
    assert len(resumed.optimizer.state) > 0
    assert resumed.step().iteration == 3
    # the re-run iteration 3 replaces the lost one in the history; the file keeps both
    assert [(r["kind"], r["iteration"]) for r in session.metrics()] == [
        ("train", 1), ("train", 2), ("resume", 2), ("train", 3)]
    assert [r["iteration"] for r in session.metrics(superseded=True)] == [1, 2, 3, 2, 3]


def test_resume_loads_the_checkpoint_in_place_of_a_warm_start_folder_that_is_gone(tmp_path, tiny_policy, monkeypatch):
    """A session whose stored warm-start folder moved or was deleted (a newer default, a moved clone)
    resumes from its checkpoint, which holds every trained weight: the policy is loaded with the
    checkpoint as its adapter, so `warm_start_dir` never looks for the folder."""
    import empo2_studio.policy as policy_pkg
    from empo2_studio.policy import build_tiny_policy
    from empo2_studio.policy.loading import warm_start_dir

    trainer = make_trainer(tmp_path, tiny_policy, policy={"warm_start": str(tmp_path / "gone")})
    trainer.train(1)
    asked, loads = [], []

    def load_policy(cfg):  # as the real one: the policy starts from cfg.adapter
        asked.append(cfg)
        policy = build_tiny_policy(seed=0)
        real_load = policy.load_adapter
        policy.load_adapter = lambda path: loads.append(path) or real_load(path)
        policy.load_adapter(cfg.adapter)
        return policy

    monkeypatch.setattr(policy_pkg, "load_policy", load_policy)
    resumed = Trainer.resume(Session.open(tmp_path / "sessions", "t"), embedder=make_embedder("hash"))
    (cfg,) = asked
    assert loads == [cfg.adapter]  # the checkpoint is read once, not again after the policy is built
    assert cfg.adapter == str(trainer.session.adapter_dir(1)) and warm_start_dir(cfg) is None
    assert cfg.warm_start == str(tmp_path / "gone") and resumed.iteration == 1
    assert all(torch.equal(a, b) for a, b in zip(_params(tiny_policy), resumed.policy.trainable_parameters()))


def test_resume_without_checkpoint_is_refused(tmp_path, tiny_policy):
    trainer = make_trainer(tmp_path, tiny_policy)
    with pytest.raises(ValueError, match="no complete checkpoint"):
        Trainer.resume(trainer.session, policy=tiny_policy, embedder=make_embedder("hash"))


_TRAIN_SCRIPT = textwrap.dedent(
    """
    import sys
    from empo2_studio.memory import make_embedder
    from empo2_studio.policy import build_tiny_policy
    from empo2_studio.sessions import Session
    from empo2_studio.trainer import Trainer
    session = Session.open(sys.argv[1], "t")
    trainer = Trainer(session.config, session, policy=build_tiny_policy(seed=0), embedder=make_embedder("hash"))
    trainer.train(1000)
    """
)


@pytest.mark.slow  # a subprocess re-imports torch/transformers/lancedb: tens of seconds on a loaded CPU
def test_kill_during_training_then_resume_continues(tmp_path, tiny_policy):
    root = tmp_path / "sessions"
    Session.create(root, small_cfg())
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", _TRAIN_SCRIPT, str(root)], env=env, cwd=tmp_path)
    session = Session.open(root, "t")
    try:
        deadline = time.time() + 120
        while len(session.checkpoints()) < 2 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert len(session.checkpoints()) >= 2, "training subprocess made no checkpoints"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    session = Session.open(root, "t")
    last_ckpt, _ = session.latest_checkpoint()
    metrics_before = session.metrics()
    episodes_before = session.episodes()
    assert max(r["iteration"] for r in metrics_before) >= last_ckpt  # nothing completed was lost
    resumed = Trainer.resume(session, policy=tiny_policy, embedder=make_embedder("hash"))
    assert resumed.iteration == last_ckpt
    report = resumed.step()
    assert report.iteration == last_ckpt + 1
    # The kill may land between an iteration's metrics row and its checkpoint: that row is then
    # superseded by the re-run (left out of the history, kept in the file), never lost.
    kept = [r for r in metrics_before if r["iteration"] <= last_ckpt]
    assert session.metrics()[: len(kept) + 1] == [*kept, {"iteration": last_ckpt, "kind": "resume"}]
    assert session.metrics(superseded=True)[: len(metrics_before)] == metrics_before
    assert len(session.episodes()) == len(episodes_before) + len(report.episode_ids)


# ---- slow: the real embedded model (4-bit) and the real MiniLM embedder --------------------------


@pytest.fixture(scope="module")
def real_policy():
    from empo2_studio.policy import load_policy

    return load_policy(RunConfig().policy)  # the embedded SmolLM2-135M-Instruct, 4-bit, fresh LoRA


@pytest.mark.slow
def test_real_model_off_policy_step_on_trap(tmp_path, real_policy):
    # 3 episodes at temperature 2 so the seeded group is not 3 identical trajectories (those carry
    # exactly zero gradient: +A and −A on the same tokens cancel).
    cfg = small_cfg(
        env={"variations": (0,), "step_limit": 2},
        memory={"embedder": "minilm", "similarity_threshold": 0.5},
        rollout={"group_size": 3, "train_temperature": 2.0},
        train={"learning_rate": 1e-3, "checkpoint_every": 1},
    )
    session = Session.create(tmp_path / "sessions", cfg)
    trainer = Trainer(cfg, session, policy=real_policy, embedder=make_embedder("minilm"))
    # A tip keyed on the first step's query text (the tail of the opening) makes retrieval certain.
    from empo2_studio.envs.trap import TrapEnv
    from empo2_studio.policy import prompts

    env = TrapEnv()
    obs = env.reset("trap-light-bulb", 0)
    opening = prompts.conversation_text([(prompts.first_user_message("trap", obs, env.fewshot_examples("trap-light-bulb")), "")])
    trainer.store.add_tip("trap-light-bulb", 0, "The bulbs in the hallway are decoys; look in other rooms first.",
                          score=50.0, key_text=opening[-KEY_TAIL_CHARS:])  # fmt: skip
    before = _named(real_policy)
    # A group whose returns happen to be all equal carries no gradient (every advantage is 0): play
    # further iterations until one has a learning signal (seeded, so the same count each run).
    for _ in range(4):
        report = trainer.step(forced_mode="off-policy")
        if "train/no_signal" not in report.metrics:
            break
    m = report.metrics
    assert not report.skipped_update and all(v == v for v in m.values()), m  # no NaN anywhere
    assert "train/no_signal" not in m and m["grad/norm"] > 0, m
    assert m["memory/tips_retrieved_mean"] > 0
    # Off-policy: tip-free current vs with-tips behaviour log-probs, so the ratio is not identically 1.
    assert abs(m["ratio/min"] - 1.0) > 1e-6 or abs(m["ratio/max"] - 1.0) > 1e-6
    after = _named(real_policy)
    assert any(not torch.equal(before[n], after[n]) for n in before if "lora_" in n)
    assert all(torch.equal(before[n], after[n]) for n in before if "lora_" not in n)
    assert trainer.store.count(task="trap-light-bulb") > 1  # the group's tips were written


@pytest.mark.slow
@pytest.mark.scienceworld
def test_one_short_iteration_on_scienceworld(tmp_path, real_policy):
    cfg = small_cfg(
        env={"name": "scienceworld", "task": "find-living-thing", "variations": (0,), "step_limit": 3},
        memory={"embedder": "minilm", "similarity_threshold": 0.5},
        train={"learning_rate": 1e-3, "checkpoint_every": 1},
    )
    session = Session.create(tmp_path / "sessions", cfg)
    trainer = Trainer(cfg, session, policy=real_policy, embedder=make_embedder("minilm"))
    try:
        report = trainer.step(forced_mode="on-policy")
    finally:
        trainer.close()
    episodes = session.episodes(list(report.episode_ids))
    assert len(episodes) == 2 and all(e.env == "scienceworld" and 1 <= len(e.steps) <= 3 for e in episodes)
    assert all(s.action in s.valid_actions for e in episodes for s in e.steps)
    assert all(-100.0 <= e.score <= 100.0 for e in episodes)
    m = report.metrics
    assert not report.skipped_update and m["memory/tips_written"] == 2.0
    assert m["time/env"] > 0 and m["time/sampling"] > 0
