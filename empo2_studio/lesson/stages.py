"""The Lesson's five stages, run on one trainer of a trap session (the story: `empo2_studio.lesson`).

1. `Lesson.naive`        N naive episodes per variation with the current weights (the trap);
2. `Lesson.add_tips`     one curated tip per variation stored as a manual tip (score 100), the text
                         pre-filled by `curated_tip` and edited by the user;
3. `Lesson.memory`       N memory episodes per variation: they retrieve the tips (and write none, so the
                         curated tips stay the only memory);
4. `Lesson.distill`      `Trainer.distill` on the memory episodes, `distill_steps` times (each call one
                         off-policy update: actions sampled with tips learned without them; the
                         session's ungrouped naive episodes of the same variation are the baseline);
                         a checkpoint is saved afterwards;
5. `Lesson.naive_again`  stage 1 again, with the distilled weights.

`Lesson.run_all` runs them in order. Every stage takes a `stop` event (checked between variations and
between distill steps: a stage ends early, the next ones do not start; inside a job's
`stopping.stop_scope` a Stop also cuts the group or step in progress), a `progress(fraction, message)`
callback (what runs now; the elapsed and expected time are `Lesson.countdown`'s, which each finished
group or distill step feeds, for the caller to show at any moment) and an
`on_partial(result)` callback that receives the stage's result so far (`running` True) each time a
variation's group or a distill step ends, so a page shows rows as they are computed. A stage returns
a `StageResult` (per-variation rows, episode ids, wall time). The playing stages use one seed per
variation, so stages 1, 3 and 5 draw the same random numbers and differ only by the tips (3) or the
weights (5). Each stage appends a `{"kind": "lesson"}` metrics row to the session; the episodes are
saved to the session without a group (`group_id` ""), which is what makes the naive ones the
distillation baseline. What the lesson stored (tip ids, the memory episodes to distill) is kept in the
session's state.json under "lesson", so the stages can run as separate jobs.

Uses the trainer's policy, tip store, env pool and session; no Gradio.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from empo2_studio.lesson.results import (
    PLAY_STAGES, STAGE_TITLES, STAGES, TIP_SCORE, LessonSettings, StageResult, VariationRow, curated_tip,
    lesson_env, metrics_row, results_from_metrics, split_of, variation_row,
)  # fmt: skip
from empo2_studio.lesson.timing import UNIT_NAMES, Countdown, rates_from_metrics
from empo2_studio.rollout import play_group, sampling_seed, seed_policy
from empo2_studio.stopping import StopRequested
from empo2_studio.types import RolloutMode

Progress = Callable[[float, str], None]
OnPartial = Callable[[StageResult], None]


class Lesson:
    """The five stages on one trainer (a trap session). See the module docstring."""

    def __init__(self, trainer: Any, settings: LessonSettings | None = None,
                 rates: Mapping[str, float] | None = None) -> None:  # fmt: skip
        """
        Args:
            rates: seconds per unit measured earlier on this machine (`timing.rates_from_metrics`),
                what a stage expects before its first unit ends; None = this session's own rows.
        Raises:
            ValueError: the trainer's session is not one of the lesson task's environment, or bad settings.
        """
        settings = (settings or LessonSettings()).validate()
        env = lesson_env(settings.task)
        if trainer.cfg.env.name != env:
            raise ValueError(
                f"the lesson on {settings.task!r} runs in the {env} env; session {trainer.session.run_id!r} is a "
                f"{trainer.cfg.env.name} session (open one with `empo2-studio app --env {env} --run-id {env}demo`)"
            )
        self.trainer = trainer
        self.settings = settings
        self.rates = dict(rates) if rates is not None else rates_from_metrics(trainer.session.metrics())
        self.countdown: Countdown | None = None
        """Set by the caller (`timing.lesson_countdown` of the stages it runs): each finished group of
        episodes and distill step is counted on it, as the unit of its stage (`timing.UNIT_NAMES`)."""

    @property
    def temperature(self) -> float:
        t = self.settings.temperature
        return float(t) if t is not None else float(self.trainer.cfg.rollout.train_temperature)

    # ---- state kept in the session (so separate jobs can run separate stages) -------------------
    def _state(self) -> dict[str, Any]:
        lesson = self.trainer.session.state().get("lesson")
        return dict(lesson) if isinstance(lesson, dict) else {}

    def _set_state(self, **values: Any) -> None:
        session = self.trainer.session
        session.set_state({**session.state(), "lesson": {**self._state(), **values}})

    def tip_ids(self) -> dict[int, str]:
        """The lesson's stored tip per variation of the task (ids in the session's tip table)."""
        tips = self._state().get("tips", {})
        prefix = f"{self.settings.task}:"
        return {int(k[len(prefix):]): v for k, v in tips.items() if k.startswith(prefix)}

    def memory_episode_ids(self) -> list[str]:
        """The episodes of the task's latest memory stage (what `distill` learns from by default)."""
        return list(self._state().get("memory_episodes", {}).get(self.settings.task, []))

    # ---- stages ---------------------------------------------------------------------------------
    def naive(self, stop: threading.Event | None = None, progress: Progress | None = None,
              on_partial: OnPartial | None = None) -> StageResult:  # fmt: skip
        """Stage 1: naive episodes (no tips) with the current weights.

        Raises ValueError once this session's weights are distilled: stage 1 is the baseline the
        lesson compares against, and replaying it on distilled weights would overwrite it."""
        if "distill" in results_from_metrics(self.trainer.session.metrics(), self.settings.task):
            raise ValueError(
                "this lesson's weights are already distilled, so stage 1 would no longer show the naive "
                "baseline: play 5 · naive again to measure them, or Play the lesson to start a new lesson"
            )
        return self._play("naive", "naive", stop, progress, on_partial)

    def add_tips(self, texts_by_variation: Mapping[int, str] | None = None) -> StageResult:
        """Stage 2: store each text as a manual tip (score 100) of (task, variation); None or a
        missing variation uses `curated_tip`. An earlier lesson tip of the variation is replaced;
        a tip with exactly this text already in the partition is kept (and enabled) instead.

        Raises:
            ValueError: a variation the lesson does not play, or an empty / too long text (nothing
                is stored then).
        """
        t0 = time.perf_counter()
        task, store = self.settings.task, self.trainer.store
        texts = {int(v): str(t).strip() for v, t in (texts_by_variation or {}).items()}
        unknown = sorted(set(texts) - set(self.settings.variations))
        if unknown:
            raise ValueError(f"tips given for variations {unknown}, but the lesson plays {list(self.settings.variations)}")
        for v in self.settings.variations:
            texts.setdefault(v, curated_tip(task, v))
            if not texts[v]:
                raise ValueError(f"the tip of variation {v} is empty; write one (or keep the pre-filled text)")
        from empo2_studio.memory import records as rec

        for v, text in texts.items():
            rec.check_text(text, f"tip of variation {v}")
        previous = self.tip_ids()
        stored: dict[int, str] = {}
        for v in self.settings.variations:
            stored[v] = self._store_tip(store, task, v, texts[v], previous.get(v))
        all_tips = self._state().get("tips", {})
        self._set_state(tips={**all_tips, **{f"{task}:{v}": i for v, i in stored.items()}})
        result = StageResult("tips", tips=stored, seconds=time.perf_counter() - t0)
        self._record(result)
        return result

    @staticmethod
    def _store_tip(store: Any, task: str, variation: int, text: str, previous_id: str | None) -> str:
        if previous_id is not None:
            try:
                old = store.get(previous_id)
            except KeyError:
                old = None  # deleted in the Tips tab meanwhile
            if old is not None and old.text == text:
                if not old.enabled or old.score != TIP_SCORE:
                    store.update_tip(old.tip_id, enabled=True, score=TIP_SCORE)
                return old.tip_id
            if old is not None:
                store.delete([old.tip_id])
        try:
            return store.add_tip(task, variation, text, score=TIP_SCORE).tip_id
        except ValueError:
            same = [t for t in store.list_tips(task=task, variation=variation) if t.text == text]
            if not same:
                raise
            if not same[0].enabled:
                store.update_tip(same[0].tip_id, enabled=True)
            return same[0].tip_id  # an exact duplicate already stored: keep it

    def memory(self, stop: threading.Event | None = None, progress: Progress | None = None,
               on_partial: OnPartial | None = None) -> StageResult:  # fmt: skip
        """Stage 3: memory episodes; they retrieve the stored tips at every step and write none."""
        result = self._play("memory", "memory", stop, progress, on_partial)
        memory_eps = dict(self._state().get("memory_episodes", {}))
        memory_eps[self.settings.task] = list(result.episode_ids)
        self._set_state(memory_episodes=memory_eps)
        return result

    def distill(
        self, stop: threading.Event | None = None, progress: Progress | None = None,
        episode_ids: Sequence[str] | None = None, on_partial: OnPartial | None = None,
    ) -> StageResult:  # fmt: skip
        """Stage 4: `Trainer.distill(ids)` `distill_steps` times on the memory episodes (default: those
        of the latest memory stage), then a checkpoint of the session. `on_partial` gets the steps so
        far after each step.

        Raises:
            ValueError: no memory episodes to distill (play stage 3 first).
        """
        t0 = time.perf_counter()
        ids = list(episode_ids) if episode_ids is not None else self.memory_episode_ids()
        if not ids:
            raise ValueError("nothing to distill yet: play the memory stage (3) first")
        n = self.settings.distill_steps
        steps: list[dict[str, float]] = []
        stopped = False
        for k in range(n):
            if stop is not None and stop.is_set():
                stopped = True
                break
            _report(progress, k / n, f"distill step {k + 1} of {n} on {len(ids)} memory episodes")
            t_step = time.perf_counter()
            try:
                m = self.trainer.distill(ids).metrics
            except StopRequested:  # a job's Stop cut the step: the weights are those of the steps before
                stopped = True
                break
            self._count("distill", 1)
            steps.append({
                "step": float(k + 1), "seconds": time.perf_counter() - t_step,
                **{key: float(m[key]) for key in ("loss/policy", "grad/norm", "ratio/mean", "train/turns") if key in m},
                "train/no_signal": float(m.get("train/no_signal", 0.0)),
            })  # fmt: skip
            if on_partial is not None:
                on_partial(StageResult("distill", episode_ids=tuple(ids), seconds=time.perf_counter() - t0,
                                       steps=tuple(steps), running=True))  # fmt: skip
        checkpoint = str(self.trainer.save_checkpoint()) if steps else ""
        _report(progress, 1.0, f"{len(steps)} distill step(s) done in {time.perf_counter() - t0:.0f} s")
        result = StageResult("distill", episode_ids=tuple(ids), seconds=time.perf_counter() - t0, stopped=stopped,
                             steps=tuple(steps), checkpoint=checkpoint)  # fmt: skip
        self._record(result)
        return result

    def naive_again(self, stop: threading.Event | None = None, progress: Progress | None = None,
                    on_partial: OnPartial | None = None) -> StageResult:  # fmt: skip
        """Stage 5: stage 1 again, after distillation."""
        return self._play("naive_again", "naive", stop, progress, on_partial)

    def run_stage(
        self, stage: str, tips: Mapping[int, str] | None = None, *, stop: threading.Event | None = None,
        progress: Progress | None = None, on_partial: OnPartial | None = None,
    ) -> StageResult:  # fmt: skip
        """One stage by name (a key of `STAGE_TITLES`); `tips` are for the tips stage.

        Raises:
            ValueError: an unknown stage name, or what the stage raises.
        """
        if stage == "tips":
            return self.add_tips(tips)
        runners: dict[str, Callable[..., StageResult]] = {
            "naive": self.naive, "memory": self.memory, "distill": self.distill, "naive_again": self.naive_again,
        }  # fmt: skip
        if stage not in runners:
            raise ValueError(f"unknown lesson stage {stage!r}; valid: {', '.join(STAGES)}")
        return runners[stage](stop, progress, on_partial=on_partial)

    def run_all(
        self,
        tips: Mapping[int, str] | None = None,
        *,
        stop: threading.Event | None = None,
        progress: Progress | None = None,
        on_stage: Callable[[StageResult], None] | None = None,
        on_partial: OnPartial | None = None,
    ) -> list[StageResult]:
        """The five stages in order; a stop request ends the current stage early and skips the rest.
        `progress` gets the overall fraction; `on_stage` each finished stage's result; `on_partial`
        each running stage's result so far."""
        out: list[StageResult] = []
        for i, stage in enumerate(STAGES):
            if stop is not None and stop.is_set():
                break

            def scaled(fraction: float, message: str, i: int = i, stage: str = stage) -> None:
                _report(progress, (i + fraction) / len(STAGES), f"{STAGE_TITLES[stage]}: {message}")

            scaled(0.0, "starting")
            result = self.run_stage(stage, tips, stop=stop, progress=scaled, on_partial=on_partial)
            out.append(result)
            if on_stage is not None:
                on_stage(result)
            if result.stopped:
                break
        return out

    # ---- helpers --------------------------------------------------------------------------------
    def _play(self, stage: str, mode: RolloutMode, stop: threading.Event | None, progress: Progress | None,
              on_partial: OnPartial | None = None) -> StageResult:  # fmt: skip
        t0 = time.perf_counter()
        s, trainer = self.settings, self.trainer
        envs = trainer.envs(s.episodes)
        rows: list[VariationRow] = []
        ids: list[str] = []
        stopped = False
        n = len(s.variations)
        for i, v in enumerate(s.variations):
            if stop is not None and stop.is_set():
                stopped = True
                break
            limit = envs[0].step_limit(s.task)
            what = f"{s.episodes} {mode} episodes of variation {v}"
            _report(progress, i / n, f"{what} ({i + 1}/{n})")

            reached = [0]

            def on_step(index: int, step: Any, i: int = i, what: str = what, reached: list[int] = reached) -> None:
                if step.index + 1 > reached[0]:  # the first episode to reach a lock-step reports it
                    reached[0] = step.index + 1
                    _report(progress, (i + min(reached[0], limit) / limit) / n,
                            f"{what}: step {reached[0]} of ≤ {limit}")  # fmt: skip

            seed = self._seed(v)
            seed_policy(trainer.policy, seed)
            try:
                episodes = play_group(
                    envs, trainer.policy, trainer.store, task=s.task, variation=v, split=split_of(s.task, v),  # type: ignore[arg-type]
                    rollout_mode=mode, update_mode=None, temperature=self.temperature, seed=seed,
                    on_step=on_step if progress is not None else None, group_id="",
                )  # fmt: skip
            except StopRequested:  # a job's Stop cut this group: the stage keeps the variations before it
                stopped = True
                break
            trainer.session.append_episodes(episodes)
            self._count(stage, s.episodes)
            rows.append(variation_row(v, episodes))
            ids += [e.episode_id for e in episodes]
            del episodes  # the session has them; nothing of the stage keeps them in memory
            if on_partial is not None:
                on_partial(StageResult(stage, rows=tuple(rows), episode_ids=tuple(ids), seconds=time.perf_counter() - t0,
                                       running=True))  # fmt: skip
        result = StageResult(stage, rows=tuple(rows), episode_ids=tuple(ids), seconds=time.perf_counter() - t0,
                             stopped=stopped)  # fmt: skip
        _report(progress, 1.0, f"success {result.success_rate:.0%} · mean score {result.mean_score:.1f} · "
                               f"{result.seconds:.0f} s")  # fmt: skip
        self._record(result)
        return result

    def _count(self, stage: str, units: int) -> None:
        """`units` of `stage`'s kind ended now: counted on `countdown` when it plans that kind."""
        if self.countdown is not None and UNIT_NAMES[stage] in self.countdown.plan:
            self.countdown.finished(UNIT_NAMES[stage], units)

    def _seed(self, variation: int) -> int:
        """One seed per variation, shared by the playing stages (they differ only by tips / weights)."""
        return sampling_seed(self.settings.seed, variation)

    def _record(self, result: StageResult) -> None:
        """The stage's `kind: lesson` metrics row (`results.metrics_row`)."""
        row = metrics_row(result, self.settings, iteration=self.trainer.iteration, temperature=self.temperature)
        self.trainer.session.append_metrics(row)
        self.rates.update(rates_from_metrics([row]))  # the next stage expects what this one measured


def _report(progress: Progress | None, fraction: float, message: str) -> None:
    if progress is not None:
        progress(max(0.0, min(1.0, fraction)), message)
