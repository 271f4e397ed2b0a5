"""The Lesson: the one phenomenon the studio exists to teach, as five short stages on the trap env.

An agent stuck in an exploration trap (it focuses on the look-alike it can see and fails) is rescued
by its notes (a curated tip saying where the target is), and distillation moves what the notes taught
into its weights, so the naive agent, without any tip, succeeds too:

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
between distill steps: a stage ends early, the next ones do not start) and a `progress(fraction,
message)` callback, and returns a `StageResult` (per-variation rows, episode ids, wall time). The
playing stages use one seed per variation, so stages 1, 3 and 5 draw the same random numbers and
differ only by the tips (3) or the weights (5). Each stage appends a `{"kind": "lesson"}` metrics row
to the session; the episodes are saved to the session without a group (`group_id` ""), which is what
makes the naive ones the distillation baseline. What the lesson stored (tip ids, the memory episodes
to distill) is kept in the session's state.json under "lesson", so the stages can run as separate jobs.

Uses the trainer's policy, tip store, env pool and session; no Gradio.

Over 400 lines because the five stages share one persisted state and one result shape.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from empo2_studio.rollout import play_group, sampling_seed, seed_policy
from empo2_studio.types import Episode, RolloutMode

TRAP_TASKS = ("trap-light-bulb", "trap-find-animal", "trap-water-plant")
STAGES = ("naive", "tips", "memory", "distill", "naive_again")
"""Stage names in order (also the `lesson/stage` value of each metrics row)."""
STAGE_TITLES = {
    "naive": "1 · naive",
    "tips": "2 · curated tips",
    "memory": "3 · with tips",
    "distill": "4 · distill",
    "naive_again": "5 · naive after distillation",
}
PLAY_STAGES = ("naive", "memory", "naive_again")
TIP_SCORE = 100.0
"""Score of a lesson tip: the best, so retrieval ranks it first."""

Progress = Callable[[float, str], None]


def curated_tip(task: str, variation: int) -> str:
    """The pre-filled tip of the lesson: where the target is and the winning actions (TrapEnv's)."""
    from empo2_studio.envs import TrapEnv

    return TrapEnv().curated_tip(task, variation)


def split_of(task: str, variation: int) -> str:
    """The split a trap variation belongs to (train 0–23, dev 24–35, test 36–47)."""
    from empo2_studio.envs import TrapEnv

    env = TrapEnv()
    for split in ("train", "dev", "test"):
        if variation in env.variations(task, split):  # type: ignore[arg-type]
            return split
    valid = [v for s in ("train", "dev", "test") for v in env.variations(task, s)]  # type: ignore[arg-type]
    raise ValueError(f"variation {variation} is not a variation of {task!r}; valid: {valid[0]}…{valid[-1]}")


@dataclass(frozen=True)
class LessonSettings:
    """What the lesson plays. `temperature` None = the run's train temperature."""

    task: str = "trap-light-bulb"
    variations: tuple[int, ...] = (0, 1)
    episodes: int = 8
    """Episodes per variation in each playing stage (one lock-step group)."""
    distill_steps: int = 5
    """Distill-now calls in stage 4. 5, not 3: over seeds 0–2 naive success rises 0.00 → 0.42 after 5
    (docs/benchmarks/lesson.md), 0.38 after 3 (docs/notebook/2026-12-02-distill-setups.md); each step
    over 16 short episodes takes ~23 s."""
    temperature: float | None = None
    seed: int = 0

    def validate(self) -> LessonSettings:
        """Return self, or raise ValueError naming the bad value."""
        if self.task not in TRAP_TASKS:
            raise ValueError(f"the lesson runs on the trap env; task must be one of {list(TRAP_TASKS)}, got {self.task!r}")
        if not self.variations:
            raise ValueError("pick at least one variation")
        if len(set(self.variations)) != len(self.variations):
            raise ValueError(f"variations must not repeat, got {list(self.variations)}")
        for v in self.variations:
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"variations must be whole numbers, got {v!r}")
            split_of(self.task, v)
        if isinstance(self.episodes, bool) or not isinstance(self.episodes, int) or not 1 <= self.episodes <= 64:
            raise ValueError(f"episodes per variation must be a whole number in 1…64, got {self.episodes!r}")
        if isinstance(self.distill_steps, bool) or not isinstance(self.distill_steps, int) or not 1 <= self.distill_steps <= 50:
            raise ValueError(f"distill steps must be a whole number in 1…50, got {self.distill_steps!r}")
        if self.temperature is not None and not 0.0 < float(self.temperature) <= 10.0:
            raise ValueError(f"temperature must be in (0, 10], got {self.temperature!r}")
        return self


@dataclass(frozen=True)
class VariationRow:
    """One variation's outcome in a playing stage."""

    variation: int
    episodes: int
    successes: int
    success_rate: float
    mean_score: float


@dataclass(frozen=True)
class StageResult:
    """What one stage did. `rows`: playing stages; `tips`: the tips stage (variation → tip id);
    `steps`: the distill stage (one dict of update metrics per step)."""

    stage: str
    rows: tuple[VariationRow, ...] = ()
    episode_ids: tuple[str, ...] = ()
    seconds: float = 0.0
    stopped: bool = False
    tips: dict[int, str] = field(default_factory=dict)
    steps: tuple[dict[str, float], ...] = ()
    checkpoint: str = ""

    @property
    def episodes(self) -> int:
        return sum(r.episodes for r in self.rows)

    @property
    def success_rate(self) -> float:
        """Successes over all episodes of the stage (0 when none were played)."""
        n = self.episodes
        return sum(r.successes for r in self.rows) / n if n else 0.0

    @property
    def mean_score(self) -> float:
        n = self.episodes
        return sum(r.mean_score * r.episodes for r in self.rows) / n if n else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tips"] = {str(k): v for k, v in self.tips.items()}
        d.update(episodes=self.episodes, success_rate=self.success_rate, mean_score=self.mean_score)
        return d

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> StageResult:
        return StageResult(
            stage=d["stage"], rows=tuple(VariationRow(**r) for r in d.get("rows", ())),
            episode_ids=tuple(d.get("episode_ids", ())), seconds=float(d.get("seconds", 0.0)),
            stopped=bool(d.get("stopped", False)), tips={int(k): v for k, v in d.get("tips", {}).items()},
            steps=tuple(d.get("steps", ())), checkpoint=d.get("checkpoint", ""),
        )  # fmt: skip


def variation_row(variation: int, episodes: Sequence[Episode]) -> VariationRow:
    n = len(episodes)
    wins = sum(1 for e in episodes if e.won)
    return VariationRow(variation, n, wins, wins / n if n else 0.0, sum(e.score for e in episodes) / n if n else 0.0)


class Lesson:
    """The five stages on one trainer (a trap session). See the module docstring."""

    def __init__(self, trainer: Any, settings: LessonSettings | None = None) -> None:
        """
        Raises:
            ValueError: the trainer's session is not a trap session, or bad settings.
        """
        settings = (settings or LessonSettings()).validate()
        if trainer.cfg.env.name != "trap":
            raise ValueError(
                f"the Lesson runs on the exploration trap; session {trainer.session.run_id!r} is a "
                f"{trainer.cfg.env.name} session (open one with `empo2-studio app --env trap --run-id trapdemo`)"
            )
        self.trainer = trainer
        self.settings = settings

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
    def naive(self, stop: threading.Event | None = None, progress: Progress | None = None) -> StageResult:
        """Stage 1: naive episodes (no tips) with the current weights.

        Raises ValueError once this session's weights are distilled: stage 1 is the baseline the
        lesson compares against, and replaying it on distilled weights would overwrite it."""
        if "distill" in results_from_metrics(self.trainer.session.metrics(), self.settings.task):
            raise ValueError(
                "this lesson's weights are already distilled, so stage 1 would no longer show the naive "
                "baseline: play 5 · naive again to measure them, or Play the lesson to start a new lesson"
            )
        return self._play("naive", "naive", stop, progress)

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

    def memory(self, stop: threading.Event | None = None, progress: Progress | None = None) -> StageResult:
        """Stage 3: memory episodes; they retrieve the stored tips at every step and write none."""
        result = self._play("memory", "memory", stop, progress)
        memory_eps = dict(self._state().get("memory_episodes", {}))
        memory_eps[self.settings.task] = list(result.episode_ids)
        self._set_state(memory_episodes=memory_eps)
        return result

    def distill(
        self, stop: threading.Event | None = None, progress: Progress | None = None,
        episode_ids: Sequence[str] | None = None,
    ) -> StageResult:  # fmt: skip
        """Stage 4: `Trainer.distill(ids)` `distill_steps` times on the memory episodes (default: those
        of the latest memory stage), then a checkpoint of the session.

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
            m = self.trainer.distill(ids).metrics
            steps.append({
                "step": float(k + 1),
                **{key: float(m[key]) for key in ("loss/policy", "grad/norm", "ratio/mean", "train/turns") if key in m},
                "train/no_signal": float(m.get("train/no_signal", 0.0)),
            })  # fmt: skip
        checkpoint = str(self.trainer.save_checkpoint()) if steps else ""
        _report(progress, 1.0, f"{len(steps)} distill step(s) done")
        result = StageResult("distill", episode_ids=tuple(ids), seconds=time.perf_counter() - t0, stopped=stopped,
                             steps=tuple(steps), checkpoint=checkpoint)  # fmt: skip
        self._record(result)
        return result

    def naive_again(self, stop: threading.Event | None = None, progress: Progress | None = None) -> StageResult:
        """Stage 5: stage 1 again, after distillation."""
        return self._play("naive_again", "naive", stop, progress)

    def run_all(
        self,
        tips: Mapping[int, str] | None = None,
        *,
        stop: threading.Event | None = None,
        progress: Progress | None = None,
        on_stage: Callable[[StageResult], None] | None = None,
    ) -> list[StageResult]:
        """The five stages in order; a stop request ends the current stage early and skips the rest.
        `progress` gets the overall fraction; `on_stage` each finished stage's result."""
        out: list[StageResult] = []
        runners: dict[str, Callable[[Progress], StageResult]] = {
            "naive": lambda p: self.naive(stop, p),
            "tips": lambda p: self.add_tips(tips),
            "memory": lambda p: self.memory(stop, p),
            "distill": lambda p: self.distill(stop, p),
            "naive_again": lambda p: self.naive_again(stop, p),
        }
        for i, stage in enumerate(STAGES):
            if stop is not None and stop.is_set():
                break

            def scaled(fraction: float, message: str, i: int = i, stage: str = stage) -> None:
                _report(progress, (i + fraction) / len(STAGES), f"{STAGE_TITLES[stage]}: {message}")

            scaled(0.0, "starting")
            result = runners[stage](scaled)
            out.append(result)
            if on_stage is not None:
                on_stage(result)
            if result.stopped:
                break
        return out

    # ---- helpers --------------------------------------------------------------------------------
    def _play(self, stage: str, mode: RolloutMode, stop: threading.Event | None, progress: Progress | None) -> StageResult:
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
                    _report(progress, (i + min(reached[0], limit) / limit) / n, f"{what}: step {reached[0]} of ≤ {limit}")

            seed = self._seed(v)
            seed_policy(trainer.policy, seed)
            episodes = play_group(
                envs, trainer.policy, trainer.store, task=s.task, variation=v, split=split_of(s.task, v),  # type: ignore[arg-type]
                rollout_mode=mode, update_mode=None, temperature=self.temperature, seed=seed,
                on_step=on_step if progress is not None else None, group_id="",
            )  # fmt: skip
            trainer.session.append_episodes(episodes)
            rows.append(variation_row(v, episodes))
            ids += [e.episode_id for e in episodes]
        result = StageResult(stage, rows=tuple(rows), episode_ids=tuple(ids), seconds=time.perf_counter() - t0,
                             stopped=stopped)  # fmt: skip
        _report(progress, 1.0, f"success {result.success_rate:.0%} · mean score {result.mean_score:.1f}")
        self._record(result)
        return result

    def _seed(self, variation: int) -> int:
        """One seed per variation, shared by the playing stages (they differ only by tips / weights)."""
        return sampling_seed(self.settings.seed, variation)

    def _record(self, result: StageResult) -> None:
        """The stage's `kind: lesson` metrics row (numbers only, plus the stage and task names)."""
        row: dict[str, Any] = {
            "iteration": self.trainer.iteration, "kind": "lesson", "lesson/stage": result.stage,
            "lesson/task": self.settings.task, "lesson/variations": ",".join(map(str, self.settings.variations)),
            "time/stage": result.seconds, "lesson/stopped": float(result.stopped),
        }  # fmt: skip
        if result.stage in PLAY_STAGES:
            row.update({"lesson/episodes": float(result.episodes), "lesson/success_rate": result.success_rate,
                        "lesson/score_mean": result.mean_score, "lesson/temperature": self.temperature})  # fmt: skip
            for r in result.rows:
                row.update({f"lesson/v{r.variation}/episodes": float(r.episodes),
                            f"lesson/v{r.variation}/successes": float(r.successes),
                            f"lesson/v{r.variation}/score_mean": r.mean_score})  # fmt: skip
        elif result.stage == "distill":
            row["lesson/distill_steps"] = float(len(result.steps))
            row["distill/episodes"] = float(len(result.episode_ids))
            if result.steps:
                last = result.steps[-1]
                row.update({k: v for k, v in last.items() if k != "step"})
            for k, step in enumerate(result.steps, 1):  # every step, so a reloaded page shows them all
                row.update({f"lesson/step{k}/{key}": v for key, v in step.items() if key != "step"})
        elif result.stage == "tips":
            row["lesson/tips"] = float(len(result.tips))
        self.trainer.session.append_metrics(row)


def results_from_metrics(rows: Sequence[Mapping[str, Any]], task: str) -> dict[str, StageResult]:
    """The latest result of each playing / distill stage of `task`, rebuilt from a session's
    `kind: lesson` metrics rows (what a reloaded page shows). Episode ids are not in the rows."""
    out: dict[str, StageResult] = {}
    for row in rows:
        if row.get("kind") != "lesson" or row.get("lesson/task") != task:
            continue
        stage = row.get("lesson/stage")
        if stage in PLAY_STAGES:
            vrows = []
            for key, value in row.items():
                if key.startswith("lesson/v") and key.endswith("/episodes"):
                    v = int(key[len("lesson/v"):-len("/episodes")])
                    n = int(value)
                    wins = int(row.get(f"lesson/v{v}/successes", 0))
                    vrows.append(VariationRow(v, n, wins, wins / n if n else 0.0, float(row.get(f"lesson/v{v}/score_mean", 0.0))))
            out[stage] = StageResult(stage, rows=tuple(vrows), seconds=float(row.get("time/stage", 0.0)),
                                     stopped=bool(row.get("lesson/stopped")))  # fmt: skip
        elif stage == "distill":
            n = int(row.get("lesson/distill_steps", 0))
            steps = [{"step": float(k), **{key[len(f"lesson/step{k}/"):]: float(v) for key, v in row.items()
                                            if key.startswith(f"lesson/step{k}/")}} for k in range(1, n + 1)]  # fmt: skip
            if n and len(steps[-1]) == 1:  # a row written before every step was recorded: the last step only
                steps = [{"step": float(n), **{k: float(row[k]) for k in ("loss/policy", "grad/norm", "train/no_signal")
                                               if isinstance(row.get(k), (int, float))}}]  # fmt: skip
            out[stage] = StageResult(stage, seconds=float(row.get("time/stage", 0.0)), stopped=bool(row.get("lesson/stopped")),
                                     steps=tuple(steps))  # fmt: skip
    return out


def _report(progress: Progress | None, fraction: float, message: str) -> None:
    if progress is not None:
        progress(max(0.0, min(1.0, fraction)), message)
