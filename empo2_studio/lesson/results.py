"""What the Lesson plays and what it records: its settings, stage results and their metrics rows.

Data only (no model, no env run): `LessonSettings` (checked form values), `StageResult` (one stage's
rows, ids and wall time), `metrics_row` (the `{"kind": "lesson"}` row a stage appends to the session)
and `results_from_metrics` (those rows read back, which is what a reloaded page shows). The stages
that produce them are in `lesson.stages`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from empo2_studio.lesson.scienceworld import LESSON_EPISODES, LESSON_VARIATIONS, SCIENCEWORLD_LESSON_TASKS
from empo2_studio.lesson.scienceworld import curated_tip as scienceworld_tip
from empo2_studio.lesson.scienceworld import curated_tips as scienceworld_tips
from empo2_studio.types import Episode

TRAP_TASKS = ("trap-light-bulb", "trap-find-animal", "trap-water-plant")
LESSON_TASKS = TRAP_TASKS + SCIENCEWORLD_LESSON_TASKS
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


def lesson_env(task: str) -> str:
    """The environment a lesson task runs in: "trap" or "scienceworld".

    Raises:
        ValueError: `task` is no lesson task (the message names the valid ones).
    """
    if task in TRAP_TASKS:
        return "trap"
    if task in SCIENCEWORLD_LESSON_TASKS:
        return "scienceworld"
    raise ValueError(f"the lesson runs on {list(LESSON_TASKS)}, got {task!r}")


def curated_tip(task: str, variation: int) -> str:
    """The pre-filled tip of the lesson: where the target is and the winning actions (`TrapEnv.curated_tip`,
    or `lesson.scienceworld.curated_tip`, which plays the simulator's gold path once)."""
    if lesson_env(task) == "scienceworld":
        return scienceworld_tip(task, variation)
    from empo2_studio.envs import TrapEnv

    return TrapEnv().curated_tip(task, variation)


def curated_tips(task: str, variations: Sequence[int]) -> list[str]:
    """`curated_tip` of each variation; ScienceWorld's play their gold paths on one simulator."""
    if lesson_env(task) == "scienceworld":
        return scienceworld_tips(task, list(variations))
    return [curated_tip(task, v) for v in variations]


def split_of(task: str, variation: int) -> str:
    """The split a variation belongs to (trap: train 0–23, dev 24–35, test 36–47; ScienceWorld: the
    simulator's own splits).

    Raises:
        ValueError: `variation` is not a variation of `task` (the message gives the valid range).
    """
    from empo2_studio.envs import TrapEnv
    from empo2_studio.envs.scienceworld import ScienceWorldEnv

    env = ScienceWorldEnv() if lesson_env(task) == "scienceworld" else TrapEnv()
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
    (docs/benchmarks/lesson.md), 0.38 after 3 (docs/notebook/2026-12-02-distill-setups.md); a step's
    time depends on the machine (`lesson.timing`, docs/notebook/2026-12-03-lesson-race.md)."""
    temperature: float | None = None
    seed: int = 0

    def validate(self) -> LessonSettings:
        """Return self, or raise ValueError naming the bad value."""
        lesson_env(self.task)
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


def lesson_defaults(task: str) -> LessonSettings:
    """The lesson a teacher gets for `task` before changing anything: trap tasks 2 variations × 8
    episodes; ScienceWorld's find-animal `LESSON_VARIATIONS` × `LESSON_EPISODES` (several animal
    blocks, so distillation teaches which objects are animals, not one variation's names).

    Raises:
        ValueError: `task` is no lesson task.
    """
    if lesson_env(task) == "scienceworld":
        return LessonSettings(task=task, variations=LESSON_VARIATIONS, episodes=LESSON_EPISODES)
    return LessonSettings(task=task)


def train_variations(task: str) -> tuple[int, ...]:
    """The variations a lesson of `task` may teach: the train split (trap 0–23; ScienceWorld the
    simulator's, find-animal 0–149). No JVM starts.

    Raises:
        ValueError: `task` is no lesson task.
    """
    from empo2_studio.envs import TrapEnv
    from empo2_studio.envs.scienceworld import ScienceWorldEnv

    env = ScienceWorldEnv() if lesson_env(task) == "scienceworld" else TrapEnv()
    return tuple(env.variations(task, "train"))  # type: ignore[arg-type]


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
    `steps`: the distill stage (one dict of update metrics per step). While a stage runs, its
    partial result (the rows / steps so far) has `running` True."""

    stage: str
    rows: tuple[VariationRow, ...] = ()
    episode_ids: tuple[str, ...] = ()
    seconds: float = 0.0
    stopped: bool = False
    tips: dict[int, str] = field(default_factory=dict)
    steps: tuple[dict[str, float], ...] = ()
    checkpoint: str = ""
    running: bool = False

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
            steps=tuple(d.get("steps", ())), checkpoint=d.get("checkpoint", ""), running=bool(d.get("running", False)),
        )  # fmt: skip


def variation_row(variation: int, episodes: Sequence[Episode]) -> VariationRow:
    n = len(episodes)
    wins = sum(1 for e in episodes if e.won)
    return VariationRow(variation, n, wins, wins / n if n else 0.0, sum(e.score for e in episodes) / n if n else 0.0)


def metrics_row(result: StageResult, settings: LessonSettings, *, iteration: int, temperature: float) -> dict[str, Any]:
    """The stage's `kind: lesson` metrics row: numbers, plus the stage and task names.

    Playing stages also record `time/episode` (stage seconds per episode) and the distill stage
    `time/distill_step` (seconds per step), unless stopped: what `lesson.timing` expects the next
    lesson to take."""
    row: dict[str, Any] = {
        "iteration": iteration, "kind": "lesson", "lesson/stage": result.stage,
        "lesson/task": settings.task, "lesson/variations": ",".join(map(str, settings.variations)),
        "time/stage": result.seconds, "lesson/stopped": float(result.stopped),
    }  # fmt: skip
    if result.stage in PLAY_STAGES:
        row.update({"lesson/episodes": float(result.episodes), "lesson/success_rate": result.success_rate,
                    "lesson/score_mean": result.mean_score, "lesson/temperature": temperature})  # fmt: skip
        if result.episodes and not result.stopped:  # a stopped stage's time holds a cut group: no rate
            row["time/episode"] = result.seconds / result.episodes
        for r in result.rows:
            row.update({f"lesson/v{r.variation}/episodes": float(r.episodes),
                        f"lesson/v{r.variation}/successes": float(r.successes),
                        f"lesson/v{r.variation}/score_mean": r.mean_score})  # fmt: skip
    elif result.stage == "distill":
        row["lesson/distill_steps"] = float(len(result.steps))
        row["distill/episodes"] = float(len(result.episode_ids))
        if result.steps:
            last = result.steps[-1]
            row.update({k: v for k, v in last.items() if k not in ("step", "seconds")})
            if not result.stopped:
                row["time/distill_step"] = result.seconds / len(result.steps)
        for k, step in enumerate(result.steps, 1):  # every step, so a reloaded page shows them all
            row.update({f"lesson/step{k}/{key}": v for key, v in step.items() if key != "step"})
    elif result.stage == "tips":
        row["lesson/tips"] = float(len(result.tips))
    return row


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
            out[stage] = StageResult(stage, seconds=float(row.get("time/stage", 0.0)), stopped=bool(row.get("lesson/stopped")),
                                     steps=tuple(_distill_steps(row)))  # fmt: skip
    return out


def _distill_steps(row: Mapping[str, Any]) -> list[dict[str, float]]:
    n = int(row.get("lesson/distill_steps", 0))
    steps = [{"step": float(k), **{key[len(f"lesson/step{k}/"):]: float(v) for key, v in row.items()
                                    if key.startswith(f"lesson/step{k}/")}} for k in range(1, n + 1)]  # fmt: skip
    if n and len(steps[-1]) == 1:  # a row without per-step keys: the last step only
        steps = [{"step": float(n), **{k: float(row[k]) for k in ("loss/policy", "grad/norm", "train/no_signal")
                                       if isinstance(row.get(k), (int, float))}}]  # fmt: skip
    return steps
