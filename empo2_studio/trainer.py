"""The EMPO² training loop (paper Algorithm 1; method.md §1.2): rollouts → tips → advantages → update.

`Trainer` owns the policy, the optimizer (AdamW over the LoRA parameters), the tip store, a pool of env
instances (one per group member, kept alive across iterations), one novelty memory per (task, variation)
and the session the run is recorded in. One `step()` is one iteration:

1. draw the update mode (memory with p, off-policy within memory with q; or a forced mode);
2. for each of `variations_per_iteration` training variations, play a group of N episodes in lock-step
   (`rollout.play_group`), memory modes retrieving tips at every step;
3. every training episode writes its tip (all modes, as the recipe does; none when `write_tips` is off);
4. group-relative advantages of R = extrinsic return + intrinsic_coef × Σ novelty bonuses (the paper adds
   the bonus to the score, the recipe's code drops it; `algo.skip_flat_groups`: no update on novelty alone);
5. `update.policy_update`: re-score, mask, clipped surrogate, AdamW (`update_epochs` passes);
6. metrics and episodes go to the session; the adapter (and trainer state) every `checkpoint_every`.

Learning rate: the paper's 1e-6 is for full fine-tuning of a 7B model; LoRA's low-rank delta needs a much
larger step: `TrainConfig.learning_rate` (1e-4 by default; docs/benchmarks/learning.md). Evaluation and OOD
adaptation live in `evaluation.py`; the update math in `update.py`.
"""

from __future__ import annotations

import os
import pickle
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from empo2_studio import evaluation
from empo2_studio.algorithm import NoveltyMemory, discounted_returns, group_advantages, step_advantages
from empo2_studio.config import RunConfig
from empo2_studio.envs import EnvPool
from empo2_studio.rollout import (Timings, draw_update_mode, episode_return, mean_score, play_group, sampling_seed,
                                   seed_policy, state_keys, step_rewards, success_rate, write_group_tips)  # fmt: skip
from empo2_studio.stopping import rollback_on_stop
from empo2_studio.types import UPDATE_MODES, Episode, IterationReport, Split, UpdateMode, rollout_mode_of
from empo2_studio.update import UpdateSettings, policy_update

MODE_CODE = {mode: i for i, mode in enumerate(UPDATE_MODES)}
"""`rollout/update_mode` codes: 0 on-policy, 1 on-policy-with-tips, 2 off-policy."""

STATE_FILE = "trainer_state.pt"
"""Saved next to each checkpoint's adapter: iteration, RNG states, optimizer state, novelty memories."""

PAPER_TRAIN_VARIATIONS = 5
"""The paper trains on the first 5 training variations of a task (method.md §3)."""


class Trainer:
    """Runs EMPO² iterations on one task and records them in a session.

    Args:
        cfg: the run config (validated here; ValueError names the bad field).
        session: where metrics, episodes, tips and checkpoints go (`sessions.Session`).
        policy: a ready policy (e.g. the tiny test policy); None loads `cfg.policy`.
        embedder: a ready embedder; None builds `cfg.memory.embedder`.
        envs: an env pool shared with its owner (the studio), who closes it; None = the trainer's own.
        writer: a ready note writer; None loads `cfg.memory.note_writer` (when set; else `policy` writes).
    """

    def __init__(self, cfg: RunConfig, session: Any, *, policy: Any | None = None, embedder: Any | None = None,
                 envs: EnvPool | None = None, writer: Any | None = None) -> None:  # fmt: skip
        from empo2_studio.memory import make_embedder, open_tip_store
        from empo2_studio.policy import load_policy
        from empo2_studio.policy.note_writer import load_note_writer

        self.cfg = cfg.validate()
        self.session = session
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.policy = policy if policy is not None else load_policy(cfg.policy)
        self.embedder = embedder if embedder is not None else make_embedder(cfg.memory.embedder)
        self.store = open_tip_store(session.tips_path, self.embedder, cfg.memory, env=cfg.env)
        self.iteration = 0
        self.saved: tuple[int, Path | None] = (0, None)  # (iteration, folder) last saved or resumed from
        self.rng = random.Random(cfg.seed)
        trainable = [p for p in self.policy.trainable_parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=cfg.train.learning_rate, weight_decay=cfg.train.weight_decay)
        self.settings = UpdateSettings.from_config(cfg.algo, cfg.train)
        self.pool = envs if envs is not None else EnvPool(cfg.env)
        self._owns_pool = envs is None
        self._novelty: dict[tuple[str, int], NoveltyMemory] = {}
        self._variations: tuple[int, ...] | None = None
        self.on_phase: Callable[[str], None] | None = None
        """Called with a short line as an iteration moves through its phases (the studio's status)."""
        self.write_tips = True  # False: no reflection, no tips (an arm that never reads them: the race's GRPO)
        self.writer, self.note_context = load_note_writer(self.cfg, self.policy, writer)  # who writes the tips (§2)

    # ---- resources ---------------------------------------------------------------------------
    def envs(self, n: int) -> list[Any]:
        """The first `n` env instances of the pool, creating missing ones (kept until `close`)."""
        return self.pool.take(n)

    def close(self) -> None:
        """Release the env pool (JVMs for ScienceWorld) unless its owner shares it. Idempotent."""
        if self._owns_pool:
            self.pool.close()

    def train_variations(self) -> tuple[int, ...]:
        """`cfg.env.variations`, or the first 5 train variations of the task (paper default)."""
        if self._variations is None:
            given = self.cfg.env.variations
            self._variations = given or self.envs(1)[0].variations(self.cfg.env.task, "train")[:PAPER_TRAIN_VARIATIONS]
        return self._variations

    def novelty(self, task: str, variation: int) -> NoveltyMemory | None:
        """The novelty memory of (task, variation); None when the intrinsic reward is off."""
        if self.cfg.algo.intrinsic_coef == 0.0:
            return None
        return self._novelty.setdefault((task, variation), NoveltyMemory(self.cfg.algo.novelty_threshold))

    def _seed_sampling(self, salt: int) -> None:
        """Seed the sampler per iteration from (run seed, iteration) so a resumed run replays it."""
        seed_policy(self.policy, sampling_seed(self.cfg.seed, salt))

    # ---- one iteration -----------------------------------------------------------------------
    def step(self, *, forced_mode: UpdateMode | None = None) -> IterationReport:
        """One training iteration (module docstring); returns its report and records it.

        Raises:
            ValueError: `forced_mode` is not one of on-policy / on-policy-with-tips / off-policy.
        """
        t_start, played = time.perf_counter(), []  # played: episode ids, whose tips a Stop removes (never recorded)
        with rollback_on_stop(self, "iteration", rng=self.rng, undo=lambda: self.store.remove_episode_tips(played)):
            mode, variations = self.begin_iteration(forced_mode)  # a Stop mid-iteration: as if never begun
            self._seed_sampling(self.iteration)
            timings = Timings()
            groups = [self._play_training_group(v, mode, timings, played) for v in variations]
            episodes = [ep for g in groups for ep in g]
            advantages = self._advantages(groups)
            self._phase(f"{mode} update: re-scoring {len(episodes)} episodes, backward, optimizer step")
            metrics = policy_update(self.policy, self.optimizer, episodes, advantages, mode, self.settings,
                                    on_progress=lambda line: self._phase(f"{mode} update: {line}"))  # fmt: skip
        self.name_weights(metrics)
        return self._record("train", mode, self.iteration_metrics(metrics, episodes, mode, timings, t_start), episodes)

    def begin_iteration(self, forced_mode: UpdateMode | None = None) -> tuple[UpdateMode, list[int]]:
        """Start an iteration (here and in the distributed step): draw (mode, variations) from `self.rng`
        (mode: `forced_mode`, else the config's, else by p / q), advance `self.iteration`. ValueError
        when `forced_mode` is not one of on-policy / on-policy-with-tips / off-policy (nothing drawn)."""
        if forced_mode is not None and forced_mode not in UPDATE_MODES:
            raise ValueError(f"forced_mode must be one of {list(UPDATE_MODES)} or None, got {forced_mode!r}")
        r = self.cfg.rollout
        mode = forced_mode or r.forced_mode or draw_update_mode(self.rng, r.p_memory, r.q_off_policy)
        variations = [self.rng.choice(self.train_variations()) for _ in range(r.variations_per_iteration)]
        self.iteration += 1
        return mode, variations

    def name_weights(self, metrics: dict[str, float]) -> None:
        """After an update that changed the weights (`train/optimizer_steps` > 0), name them after this
        iteration, as its checkpoint folder is named: every later episode's `policy_version` then says
        which weights sampled it, not the adapter the run started from."""
        if metrics.get("train/optimizer_steps", 0.0) > 0:
            self.policy.version = self.session.adapter_dir(self.iteration).name

    def iteration_metrics(self, metrics: dict, episodes: Sequence[Episode], mode: UpdateMode, timings: Timings,
                          t_start: float) -> dict[str, float]:  # fmt: skip
        """`metrics` (the update's, extended in place) + the rollout metrics of all the iteration's
        `episodes` + "time/iteration" since `t_start` (a `time.perf_counter()` value)."""
        metrics.update(self._rollout_metrics(episodes, mode, timings))
        metrics["time/iteration"] = time.perf_counter() - t_start
        return metrics

    def train(self, iterations: int, *, stop: threading.Event | None = None,
              on_report: Callable[[IterationReport], None] | None = None) -> list[IterationReport]:  # fmt: skip
        """Run up to `iterations` steps (stopping early, after the current step, when `stop` is set).

        Checkpoints every `checkpoint_every` iterations and once at the end.
        """
        reports = []
        for _ in range(iterations):
            if stop is not None and stop.is_set():
                break
            report = self.step()
            reports.append(report)
            if on_report is not None:
                on_report(report)
            if self.iteration % self.cfg.train.checkpoint_every == 0:
                self.save_checkpoint()
        if reports and self.iteration % self.cfg.train.checkpoint_every != 0:
            self.save_checkpoint()
        return reports

    def _phase(self, line: str) -> None:
        if self.on_phase is not None:
            self.on_phase(line)

    def _play_training_group(self, variation: int, mode: UpdateMode, timings: Timings, played: list[str]) -> list[Episode]:
        task = self.cfg.env.task
        envs = self.envs(self.cfg.rollout.group_size)
        limit = envs[0].step_limit(task)
        where = f"{rollout_mode_of(mode)} rollouts of variation {variation}"
        self._phase(f"{where}: starting {len(envs)} episodes")

        reached = [0]

        def on_step(index: int, step: Any) -> None:
            if step.index + 1 > reached[0]:  # the first episode to reach a lock-step reports it
                reached[0] = step.index + 1
                self._phase(f"{where}: step {reached[0]} of ≤ {limit}")

        episodes = play_group(
            envs, self.policy, self.store, task=task, variation=variation,
            split="train", rollout_mode=rollout_mode_of(mode), update_mode=mode,
            temperature=self.cfg.rollout.train_temperature, seed=sampling_seed(self.cfg.seed, self.iteration),
            embedder=self.embedder, novelty=self.novelty(task, variation), timings=timings, keep_caches=self.write_tips,
            on_step=on_step if self.on_phase is not None else None,
        )  # fmt: skip
        played += [ep.episode_id for ep in episodes]
        self._phase(f"writing the tips of {len(episodes)} episodes" if self.write_tips else "this run writes no tips")
        return write_group_tips(self.policy, self.store, episodes, timings=timings, writer=self.writer,
                                note_context=self.note_context) if self.write_tips else episodes  # fmt: skip

    def _advantages(self, groups: Sequence[Sequence[Episode]]) -> list[float] | list[list[float]]:
        """Group-relative advantages of R = extrinsic return + intrinsic_coef × Σ intrinsic rewards, one
        per episode; with `algo.step_advantage_coef` ω > 0, one per turn instead: A_episode + ω · A_step
        (`algorithm.step_advantages` over each group's anchor states, returns-to-go at γ = `step_gamma`)."""
        a = self.cfg.algo
        returns = torch.tensor([[episode_return(ep, a.intrinsic_coef) for ep in g] for g in groups], dtype=torch.float64)
        task = torch.tensor([[ep.return_ for ep in g] for g in groups], dtype=torch.float64) if a.skip_flat_groups else None
        per_episode = group_advantages(returns, a.adv_eps, task).flatten().tolist()
        if a.step_advantage_coef == 0.0:
            return per_episode
        per_step = []
        for g in groups:
            to_go = [discounted_returns(torch.tensor(step_rewards(ep, a.intrinsic_coef), dtype=torch.float64), a.step_gamma) for ep in g]
            per_step += step_advantages([state_keys(ep) for ep in g], to_go, a.adv_eps)
        return [[ep_adv + a.step_advantage_coef * float(x) for x in steps] for ep_adv, steps in zip(per_episode, per_step)]

    def _rollout_metrics(self, episodes: Sequence[Episode], mode: UpdateMode, timings: Timings) -> dict[str, float]:
        n = len(episodes)
        score = mean_score(episodes)
        steps = [s for ep in episodes for s in ep.steps]
        retrieved = [len(s.tips) for s in steps]
        intrinsic = [s.intrinsic_reward for s in steps]
        return {
            "rollout/score_mean": score,
            f"rollout/score_{rollout_mode_of(mode)}": score,
            "rollout/success_rate": success_rate(episodes),
            "rollout/episode_len": len(steps) / n,
            "rollout/update_mode": float(MODE_CODE[mode]),
            "rollout/episodes": float(n),
            "memory/tips_total": float(self.store.count()),
            "memory/tips_retrieved_mean": sum(retrieved) / max(len(retrieved), 1),
            "memory/tips_written": float(sum(1 for ep in episodes if ep.tip and ep.tip.strip())),
            "reward/intrinsic_mean": sum(intrinsic) / max(len(intrinsic), 1),
            "time/sampling": timings.sampling,
            "time/env": timings.env,
            "time/memory": timings.memory,
        }

    def _record(
        self, kind: str, mode: UpdateMode | None, metrics: dict[str, float], episodes: Sequence[Episode]
    ) -> IterationReport:
        self.session.append_episodes(list(episodes))
        self.session.append_metrics({"iteration": self.iteration, "kind": kind, **metrics})
        return IterationReport(
            iteration=self.iteration, update_mode=mode, metrics=metrics,
            episode_ids=tuple(ep.episode_id for ep in episodes),
            skipped_update=bool(metrics.get("guard/skipped", 0.0)),
        )  # fmt: skip

    # ---- distillation ------------------------------------------------------------------------
    def distill(self, episode_ids: Sequence[str]) -> IterationReport:
        """Off-policy update over chosen memory-mode episodes of this session, without new rollouts.

        Current log-probs on the tip-free conversation vs the with-tips behaviour log-probs (paper §4.2,
        mode (b)). Each episode keeps the advantage it had in its own training group (all session
        episodes sharing its `group_id`). Episodes played outside training (side-by-side pairs, lesson
        episodes: no group) are grouped by (task, variation) with the session's other ungrouped
        episodes of that task and variation, naive ones included: the naive episodes are the baseline
        the memory episodes are measured against and are not trained on. Departure: in the paper every
        off-policy group is a memory group; here a demo's memory episodes that all succeed would
        otherwise carry no signal at all (every advantage 0).

        Raises:
            ValueError: empty selection, or naive episodes among them (named; nothing is changed).
            KeyError: an id not in the session.
        """
        if not episode_ids:
            raise ValueError("distill needs at least one episode id, got none")
        chosen = self.session.episodes(list(episode_ids))
        found = {ep.episode_id for ep in chosen}
        missing = [i for i in episode_ids if i not in found]
        if missing:
            raise KeyError(f"episodes not in session {self.session.dir}: {missing}")
        naive = [ep.episode_id for ep in chosen if ep.rollout_mode != "memory"]
        if naive:
            raise ValueError(
                f"distill trains tip-free on actions sampled WITH tips; these episodes were played "
                f"without tips (rollout_mode 'naive') and cannot be distilled: {naive}"
            )
        t0 = time.perf_counter()
        advantages = self._distill_advantages(chosen)
        with rollback_on_stop(self, "iteration"):
            self.iteration += 1
            metrics = policy_update(self.policy, self.optimizer, chosen, advantages, "off-policy", self.settings,
                                    on_progress=lambda line: self._phase(f"off-policy update: {line}"))  # fmt: skip
        self.name_weights(metrics)
        metrics.update({"distill/episodes": float(len(chosen)), "rollout/update_mode": float(MODE_CODE["off-policy"])})
        metrics["time/iteration"] = time.perf_counter() - t0
        return self._record("distill", "off-policy", metrics, [])

    def _distill_advantages(self, chosen: Sequence[Episode]) -> list[float]:
        by_group: dict[str, list[Episode]] = {}
        for ep in self.session.episodes():
            key = ep.group_id or f"adhoc:{ep.task}:{ep.variation}"
            by_group.setdefault(key, []).append(ep)
        for ep in chosen:  # chosen episodes are in the session; kept here should the read lag
            by_group.setdefault(ep.group_id or f"adhoc:{ep.task}:{ep.variation}", []).append(ep)
        coef = self.cfg.algo.intrinsic_coef
        adv_of: dict[str, float] = {}
        wanted = {ep.group_id or f"adhoc:{ep.task}:{ep.variation}" for ep in chosen}
        for key in wanted:
            unique = list({m.episode_id: m for m in by_group[key]}.values())
            if len(unique) < 2:
                adv_of[unique[0].episode_id] = 0.0  # a lone episode has no baseline: no signal
                continue
            returns = torch.tensor([[episode_return(m, coef) for m in unique]], dtype=torch.float64)
            for m, a in zip(unique, group_advantages(returns, self.cfg.algo.adv_eps)[0].tolist()):
                adv_of[m.episode_id] = a
        return [adv_of[ep.episode_id] for ep in chosen]

    # ---- evaluation, adaptation -------------------------------------------------------------
    def evaluate(self, *, variations: int | None = None, repeats: int | None = None,
                 on_progress: Callable[[int, int, int], None] | None = None, width: int | None = None,
                 split: Split = "test") -> dict[str, float]:  # fmt: skip
        """Test-split (or dev-split) evaluation of this trainer's policy, without memory (`evaluation.evaluate`)."""
        return evaluation.evaluate(self.policy, self.pool, self.cfg, self.session, iteration=self.iteration, variations=variations,
                                   repeats=repeats, on_progress=on_progress, width=width, split=split)  # fmt: skip

    def adapt(self, task: str, *, trials: int = 10, on_trial: Callable[[dict[str, float]], None] | None = None,
              stop: threading.Event | None = None) -> list[dict[str, float]]:  # fmt: skip
        """OOD adaptation of this trainer's policy and tip store, weights frozen (see `evaluation.adapt`)."""
        return evaluation.adapt(
            self.policy, self.pool, self.store, self.cfg, self.session, task, iteration=self.iteration,
            trials=trials, on_trial=on_trial, stop=stop, writer=self.writer, note_context=self.note_context,
        )  # fmt: skip

    # ---- checkpoints -------------------------------------------------------------------------
    def save_checkpoint(self) -> Path:
        """Save the adapter and the trainer state for the current iteration; returns the directory."""
        state = {"iteration": self.iteration, "rng": self.rng.getstate(), "optimizer": self.optimizer.state_dict(),
                 "novelty": pickle.dumps(self._novelty)}  # fmt: skip

        def save(tmp: Path) -> None:
            self.policy.save_adapter(str(tmp))
            torch.save(state, tmp / STATE_FILE)

        # Written into a temp folder and renamed: a kill mid-save never leaves a listed half checkpoint.
        path = self.session.write_checkpoint(self.iteration, save)
        self.session.set_state({**self.session.state(), "iteration": self.iteration, "checkpoint": str(path.relative_to(self.session.dir))})
        self.saved = (self.iteration, path)
        return path

    @classmethod
    def resume(cls, session: Any, **kw: Any) -> Trainer:
        """A trainer continuing `session` from its latest complete checkpoint.

        Loads the adapter (the policy refuses one saved for another base model; without a ready `policy`
        the checkpoint is loaded in place of the warm start, whose folder is then not needed), the
        optimizer, RNG state and novelty memories; tips and episodes recorded after that checkpoint stay,
        metrics rows of the iterations after it are superseded (`Session.mark_resumed`).

        Raises:
            ValueError: the session has no checkpoint, or the checkpoint belongs to another base model.
        """
        latest = latest_complete_checkpoint(session)
        if latest is None:
            raise ValueError(f"session {session.dir} has no complete checkpoint to resume from")
        iteration, path = latest
        # A policy built here loads the checkpoint as its adapter (each subclass builds its own, e.g. for vLLM).
        cfg = replace(session.config, policy=replace(session.config.policy, adapter=str(path)))
        trainer = cls(cfg if kw.get("policy") is None else session.config, session, **kw)
        if kw.get("policy") is not None:  # a policy built from `cfg` holds the checkpoint already
            trainer.policy.load_adapter(str(path))
        # map_location: a GPU-written state resumes anywhere; the optimizer moves it to its parameters
        state = torch.load(Path(path) / STATE_FILE, weights_only=False, map_location="cpu")
        trainer.iteration = int(state["iteration"])
        trainer.saved = (trainer.iteration, Path(path))
        trainer.rng.setstate(state["rng"])
        trainer.optimizer.load_state_dict(state["optimizer"])
        trainer._novelty = pickle.loads(state["novelty"])
        session.mark_resumed(trainer.iteration)
        return trainer


def latest_complete_checkpoint(session: Any) -> tuple[int, Path] | None:
    """The newest checkpoint whose trainer state was fully written (a kill can interrupt a save)."""
    for iteration, path in sorted(session.checkpoints(), reverse=True):
        if (Path(path) / STATE_FILE).exists():
            return iteration, Path(path)
    return None
