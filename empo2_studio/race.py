"""The race: EMPO² and GRPO trained side by side from the same starting weights, one shared model.

Two `Trainer`s, one per arm, each with its own session (`<run>-race-empo2`, `<run>-race-grpo`), tip
store, optimizer, RNG and novelty memories, run interleaved iterations: EMPO² iteration k, then GRPO
iteration k, then k + 1 … They share one loaded policy (one model per process): before an arm's
iteration its LoRA weights are copied into the model (`load_lora_state`, which also drops the
sampler's KV caches, computed with the other arm's weights) and afterwards copied out again
(`lora_state`). The copies go into the same parameter tensors, so each arm's AdamW keeps pointing at
the live LoRA parameters; every other piece of state is per trainer. Hence arm A after k interleaved
iterations has exactly the weights of A trained alone for k iterations from the same start and seed.

The arms (`ARMS`, also used by benchmarks/bench_learning.py): "EMPO2" = the given config; "GRPO" =
the same with `rollout.p_memory = 0` (never a memory rollout) and `algo.intrinsic_coef = 0` (no
novelty bonus): the paper's GRPO baseline on the same code path. An arm that never reads tips
(`reads_tips`) writes none either (`Trainer.write_tips` off): the GRPO arm spends no compute on
reflection, so the race compares equal work per iteration apart from what EMPO² needs.

`Race.step` reports each arm's iteration as soon as that arm has finished it (`on_arm`), so a page
shows the rows as they are computed. With `eval_every`, `Race.run` also plays the paper's memory-free
test evaluation (`Trainer.evaluate`: every test layout, no tips, the eval temperature) before the first
iteration, every `eval_every` iterations and after the last; `race_verdict` says in one sentence who
won and by how much (the paper's claim, §4.1: EMPO²'s memory-free policy ahead of GRPO's).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from empo2_studio.config import RunConfig

ARMS: dict[str, dict[str, dict[str, Any]]] = {
    "EMPO2": {"rollout": {}, "algo": {}},
    "GRPO": {"rollout": {"p_memory": 0.0}, "algo": {"intrinsic_coef": 0.0}},
}
"""Config overrides per arm: EMPO² as configured; GRPO = no memory rollouts, no novelty bonus."""

ARM_LABELS = {"EMPO2": "EMPO²", "GRPO": "GRPO"}


def arm_config(cfg: RunConfig, arm: str, run_id: str | None = None) -> RunConfig:
    """`cfg` with the overrides of `arm` (a key of `ARMS`), and `run_id` when given."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; valid: {list(ARMS)}")
    over = ARMS[arm]
    out = cfg.with_overrides(rollout=over["rollout"], algo=over["algo"])
    return replace(out, run_id=run_id) if run_id is not None else out


def reads_tips(cfg: RunConfig) -> bool:
    """Whether a run with `cfg` can ever play a memory rollout (the only reader of its tips)."""
    forced = cfg.rollout.forced_mode
    return forced in ("on-policy-with-tips", "off-policy") or (forced is None and cfg.rollout.p_memory > 0)


def lora_state(policy: Any) -> dict[str, Any]:
    """A detached copy of the policy's LoRA weights (PEFT adapter state dict)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(policy.model).items()}


def load_lora_state(policy: Any, state: Mapping[str, Any]) -> None:
    """Copy LoRA weights saved by `lora_state` into the policy (in place) and drop its KV caches."""
    import torch
    from peft import set_peft_model_state_dict

    with torch.no_grad():
        result = set_peft_model_state_dict(policy.model, dict(state))
    if getattr(result, "unexpected_keys", None):
        raise ValueError(f"LoRA state has unexpected weights: {result.unexpected_keys[:5]}")
    policy.clear_cache()  # cached keys/values were computed with the other weights


def free_race_ids(root: str | Path, run_id: str, arms: tuple[str, ...] = tuple(ARMS)) -> dict[str, str]:
    """Session ids for a new race of `run_id`: `<run_id>-race-<arm>` (lower case), or
    `<run_id>-race2-<arm>`, … when a race of that session already exists."""
    root = Path(root)
    for k in range(1, 1000):
        tag = "race" if k == 1 else f"race{k}"
        ids = {arm: f"{run_id}-{tag}-{arm.lower()}"[:128] for arm in arms}
        if not any((root / i).exists() for i in ids.values()):
            return ids
    raise FileExistsError(f"no free race session id for {run_id!r} in {root}")


class Race:
    """Arms trained with interleaved iterations on one shared policy (module docstring).

    Args:
        trainers: arm name → its Trainer; all on the same `policy` object.
        initial_state: LoRA weights every arm starts from (None = the policy's current weights).
    """

    def __init__(self, trainers: Mapping[str, Any], *, initial_state: Mapping[str, Any] | None = None) -> None:
        if not trainers:
            raise ValueError("a race needs at least one arm")
        policies = {id(t.policy) for t in trainers.values()}
        if len(policies) != 1:
            raise ValueError("the arms of a race must share one policy object (one model per process)")
        self.trainers = dict(trainers)
        for trainer in self.trainers.values():
            trainer.write_tips = reads_tips(trainer.cfg)
        self.policy = next(iter(self.trainers.values())).policy
        start = dict(initial_state) if initial_state is not None else lora_state(self.policy)
        self.states: dict[str, dict[str, Any]] = {arm: {k: v.clone() for k, v in start.items()} for arm in self.trainers}
        """Each arm's LoRA weights between its iterations."""
        self.rows: dict[str, list[dict[str, Any]]] = {arm: [] for arm in self.trainers}
        """Each arm's metrics per iteration (the trainer's report metrics, plus "iteration")."""
        self.loaded: str | None = None
        """The arm whose weights the policy holds now."""
        self.saved: dict[str, Path] = {}
        """Each arm's checkpoint folder from the last `save_checkpoints` (none before)."""
        self.evals: dict[str, list[dict[str, float]]] = {arm: [] for arm in self.trainers}
        """Each arm's memory-free test evaluations: {"iteration", "eval/success_rate" (0…1),
        "eval/score_mean" (−100…100), "eval/episodes", …} in order."""

    @classmethod
    def create(
        cls,
        root: str | Path,
        cfg: RunConfig,
        *,
        policy: Any,
        embedder: Any,
        run_id: str,
        arms: tuple[str, ...] = tuple(ARMS),
        initial_state: Mapping[str, Any] | None = None,
    ) -> Race:
        """New sessions (`free_race_ids`) and trainers for `arms`, from `cfg` with each arm's overrides."""
        from empo2_studio.sessions import Session
        from empo2_studio.trainer import Trainer

        ids = free_race_ids(root, run_id, arms)
        configs = {arm: arm_config(cfg, arm, ids[arm]).validate() for arm in arms}  # all checked first
        trainers = {}
        for arm in arms:
            session = Session.create(root, configs[arm])
            trainers[arm] = Trainer(session.config, session, policy=policy, embedder=embedder)
        return cls(trainers, initial_state=initial_state)

    @property
    def iteration(self) -> int:
        """Iterations every arm has completed."""
        return min(len(r) for r in self.rows.values())

    def use(self, arm: str) -> Any:
        """Put `arm`'s weights into the shared policy (no-op when loaded); returns its trainer."""
        if self.loaded != arm:
            load_lora_state(self.policy, self.states[arm])
            self.loaded = arm
        return self.trainers[arm]

    def _keep(self, arm: str) -> None:
        self.states[arm] = lora_state(self.policy)

    def step(
        self, on_phase: Callable[[str, str], None] | None = None,
        on_arm: Callable[[str, Any], None] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """One iteration of every arm, in order; returns arm → IterationReport. `on_phase(arm, line)`
        follows an arm's phases; `on_arm(arm, report)` runs as soon as that arm's iteration ends (its
        row is in `self.rows` by then)."""
        reports = {}
        for arm, trainer in self.trainers.items():
            trainer = self.use(arm)
            trainer.on_phase = None if on_phase is None else (lambda line, arm=arm: on_phase(arm, line))
            try:
                report = trainer.step()
            finally:
                trainer.on_phase = None
            self._keep(arm)
            self.rows[arm].append({"iteration": report.iteration, **report.metrics})
            reports[arm] = report
            if on_arm is not None:
                on_arm(arm, report)
        return reports

    def evaluate(self, on_eval: Callable[[str, dict[str, float]], None] | None = None,
                 on_progress: Callable[[str | None, int, int, int], None] | None = None) -> dict[str, dict[str, float]]:  # fmt: skip
        """Memory-free test evaluation of every arm at the current iteration (`Trainer.evaluate`);
        returns arm → its row (also appended to `self.evals`). Before the first iteration every arm
        holds the same weights and the same evaluation seed, so they are evaluated once (the episodes in
        the first arm's session) and the row is given to each (in every other arm's session too, marked
        "shared_from": the first arm's run id, without its seconds). `on_eval(arm, row)` runs per arm;
        `on_progress(arm, played, total, won)` after each test layout's episodes (arm None: the shared
        evaluation before the first iteration)."""

        def progress(arm: str | None) -> Callable[[int, int, int], None] | None:
            return None if on_progress is None else (lambda played, total, won: on_progress(arm, played, total, won))

        if self.iteration == 0:
            player = self.use(next(iter(self.trainers)))
            first = player.evaluate(on_progress=progress(None))
            results = {arm: dict(first) for arm in self.trainers}
            for trainer in self.trainers.values():
                if trainer is not player:  # each arm's session shows where it started
                    trainer.session.append_metrics({"iteration": 0, "kind": "eval", **first,
                                                    "shared_from": player.cfg.run_id})  # fmt: skip
        else:
            results = {arm: self.use(arm).evaluate(on_progress=progress(arm)) for arm in self.trainers}
        out = {}
        for arm, result in results.items():
            out[arm] = {"iteration": self.iteration, **{k: float(v) for k, v in result.items()}}
            self.evals[arm].append(out[arm])
            if on_eval is not None:
                on_eval(arm, out[arm])
        return out

    def run(
        self,
        iterations: int,
        *,
        stop: threading.Event | None = None,
        on_iteration: Callable[[int, dict[str, Any]], None] | None = None,
        on_phase: Callable[[str, str], None] | None = None,
        on_arm: Callable[[str, Any], None] | None = None,
        eval_every: int = 0,
        on_eval: Callable[[str, dict[str, float]], None] | None = None,
        on_progress: Callable[[str | None, int, int, int], None] | None = None,
    ) -> int:
        """Up to `iterations` interleaved iterations. `stop` set between iterations ends the race there;
        inside a job's `stopping.stop_scope` a Stop also cuts the iteration or evaluation in progress
        (`StopRequested` propagates), so the arms may end one iteration apart. Either way each arm with
        a finished iteration saves its checkpoint of its last finished one (`saved`); an arm with none
        saves nothing. `on_arm` as in `step`. With `eval_every` ≥ 1: `evaluate` before the first
        iteration, after every `eval_every`-th and after the last (`on_eval`, `on_progress` as there; a
        stopped race skips the last). Returns the interleaved iterations run.

        Raises:
            ValueError: `iterations` < 1 or `eval_every` < 0 (or not whole numbers).
            StopRequested: a job's Stop cut a step (after the checkpoints are saved).
        """
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
            raise ValueError(f"iterations must be a whole number ≥ 1, got {iterations!r}")
        if isinstance(eval_every, bool) or not isinstance(eval_every, int) or eval_every < 0:
            raise ValueError(f"eval_every must be a whole number ≥ 0 (0 = no evaluation), got {eval_every!r}")
        done = 0
        self.loaded = None  # the policy may have been used by others since: always load the first arm
        try:
            if eval_every and self.iteration == 0:
                self.evaluate(on_eval, on_progress)
            for _ in range(iterations):
                if stop is not None and stop.is_set():
                    break
                reports = self.step(on_phase, on_arm)
                done += 1
                if on_iteration is not None:
                    on_iteration(done, reports)
                if eval_every and (self.iteration % eval_every == 0 or done == iterations):
                    self.evaluate(on_eval, on_progress)
        finally:
            self.save_checkpoints()
        return done

    def save_checkpoints(self) -> dict[str, Path]:
        """Each arm's adapter and trainer state, at its last finished iteration, as a checkpoint of its
        session; an arm that has finished none saves nothing. Returns arm → folder, also kept in `saved`."""
        self.loaded = None  # a cut iteration may have left its arm's weights in the policy: load each kept state
        self.saved = {arm: self.use(arm).save_checkpoint() for arm in self.trainers if self.rows[arm]}
        return self.saved

    def close(self) -> None:
        """Release the arms' env pools."""
        for trainer in self.trainers.values():
            trainer.close()


def arm_rows_summary(rows: Mapping[str, list[Mapping[str, Any]]]) -> list[list[Any]]:
    """Table rows [iteration, arm, update mode, success rate ("50%"), mean score, tips written, seconds]
    for display, ordered by iteration then arm."""
    from empo2_studio.trainer import MODE_CODE

    names = {code: mode for mode, code in MODE_CODE.items()}
    out = []
    for arm, arm_rows in rows.items():
        for r in arm_rows:
            mode = names.get(int(r.get("rollout/update_mode", -1)), "?")
            out.append([int(r.get("iteration", 0)), ARM_LABELS.get(arm, arm), mode,
                        f"{float(r.get('rollout/success_rate', 0.0)):.0%}", round(float(r.get("rollout/score_mean", 0.0)), 1),
                        int(r.get("memory/tips_written", 0)), round(float(r.get("time/iteration", 0.0)), 1)])  # fmt: skip
    return sorted(out, key=lambda x: (x[0], x[1]))


def race_verdict(evals: Mapping[str, Sequence[Mapping[str, Any]]], labels: Mapping[str, str] | None = None,
                 split: str = "test") -> str:  # fmt: skip
    """One sentence on who won: each arm's memory-free test success at the last evaluated iteration
    that every arm reached, averaged over the rows there (one per seed). "" before any evaluation
    after iteration 0.

    Args:
        evals: arm → evaluation rows {"iteration", "eval/success_rate" (0…1), optionally "seed"}.
        labels: display names per arm (default `ARM_LABELS`).
        split: the layouts the rows played ("test": "the unseen test layouts"; "dev": "the dev layouts").
    """
    labels = {**ARM_LABELS, **(labels or {})}
    layouts = "the unseen test layouts" if split == "test" else f"the {split} layouts"
    common = set.intersection(*({int(r["iteration"]) for r in rows} for rows in evals.values())) if evals else set()
    common.discard(0)
    if len(evals) < 2 or not common:
        return ""
    at = max(common)
    rates = {}
    for arm, rows in evals.items():
        values = [float(r["eval/success_rate"]) for r in rows if int(r["iteration"]) == at]
        rates[arm] = sum(values) / len(values)
    seeds = len([r for r in next(iter(evals.values())) if int(r["iteration"]) == at])
    tail = f"mean of {seeds} seeds" if seeds > 1 else "one seed"
    (best, b), (runner, r) = sorted(rates.items(), key=lambda kv: -kv[1])[:2]
    if abs(b - r) < 1e-9:
        return (f"A tie: after {at} iterations both arms solve {b:.0%} of {layouts} without "
                f"memory ({tail}).")  # fmt: skip
    ratio = f", {b / r:.1f}×" if r > 0 else ""
    return (f"{labels.get(best, best)} won: after {at} iterations it solves {b:.0%} of {layouts} "
            f"without memory, against {labels.get(runner, runner)}'s {r:.0%} (+{100 * (b - r):.0f} points{ratio}; "
            f"{tail}).")  # fmt: skip


__all__ = ["ARMS", "ARM_LABELS", "Race", "arm_config", "arm_rows_summary", "free_race_ids", "load_lora_state",
           "lora_state", "race_verdict", "reads_tips"]  # fmt: skip
