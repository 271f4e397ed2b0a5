"""Elapsed and expected time of every studio job, from the unit times measured on this machine.

`Countdown` follows a job made of units of a few kinds (the lesson: naive, memory and
after-distillation episodes and distill steps, `UNIT_NAMES`; a race: each arm's iterations and test
episodes; training: iterations). Each kind's seconds per unit are the mean of its units measured so
far in the job; before the first, a prior: for the lesson the per-unit time the last lesson recorded
(`time/episode`, `time/distill_step` in its metrics rows, see `results.metrics_row`, keyed by
`STAGE_RATE`), with nothing recorded `FALLBACK`, a rough figure labelled as an estimate. The estimate
is taken at each measurement and counts down with the clock until the next. Times depend on the
machine and its load (a 2-core CPU shared with other work is several times slower than an idle one),
which is why the studio states them from measurements.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

FALLBACK: dict[str, float] = {"episode": 3.0, "memory_episode": 10.0, "distill_episode": 7.0, "after_episode": 3.0}
"""Rough seconds per unit with the embedded model on a loaded 2-core CPU, used only before anything
was measured: "episode" = one naive episode of a lock-step group; "memory_episode" = one memory
episode (a longer prompt, and it plays on to success instead of failing early); "distill_episode" =
one memory episode in one distill step (a step over 16 episodes ≈ 110 s); "after_episode" = one naive
episode after distillation (stage 5, timed apart from stage 1: its episodes end sooner once they
win). Together: a default lesson ≈ 14 min, as measured on such a machine (notebook
2026-12-03-lesson-race)."""

RATE_KEYS = ("episode", "memory_episode", "distill_episode", "after_episode")
STAGE_RATE = {"naive": "episode", "memory": "memory_episode", "naive_again": "after_episode"}
"""The rate key a playing stage measures and is expected by."""
UNIT_NAMES = {"naive": "naive episode", "memory": "memory episode", "distill": "distill step",
              "naive_again": "naive episode after distillation"}  # fmt: skip
"""The countdown kind of each stage's unit (`Countdown`)."""


def clock_text(seconds: float) -> str:
    """Seconds as "m:ss" (or "h:mm:ss" from one hour)."""
    s = max(0, int(round(seconds)))
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def seconds_text(seconds: float) -> str:
    """A unit time: "110 s", "5.2 s", "0.04 s"."""
    return f"{seconds:.0f} s" if seconds >= 100 else f"{seconds:.1f} s" if seconds >= 1 else f"{seconds:.2g} s"


def minutes_text(seconds: float) -> str:
    """A duration for a sentence: "40 s", "about 3 min", "about 1.5 h"."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"about {round(seconds / 60)} min"
    return f"about {seconds / 3600:.1f} h"


def rates_from_metrics(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Seconds per unit (`RATE_KEYS`) from the latest `kind: lesson` rows that recorded them: stage 1's
    "episode", the memory stage's "memory_episode", the distill stage's "distill_episode", stage 5's
    "after_episode"; a unit never measured is absent."""
    out: dict[str, float] = {}
    for row in rows:
        if row.get("kind") != "lesson":
            continue
        per_episode = row.get("time/episode")
        if isinstance(per_episode, (int, float)) and per_episode > 0:
            out[STAGE_RATE.get(str(row.get("lesson/stage")), "episode")] = float(per_episode)
        step, n = row.get("time/distill_step"), row.get("distill/episodes")
        if isinstance(step, (int, float)) and isinstance(n, (int, float)) and step > 0 and n > 0:
            out["distill_episode"] = float(step) / float(n)
    return out


def rate(rates: Mapping[str, float], unit: str) -> tuple[float, bool]:
    """(seconds per `unit`, measured?): the measured rate, else `FALLBACK`'s."""
    if unit not in RATE_KEYS:
        raise ValueError(f"unknown time unit {unit!r}; valid: {list(RATE_KEYS)}")
    return (float(rates[unit]), True) if unit in rates else (FALLBACK[unit], False)


def lesson_countdown(variations: int, episodes: int, distill_steps: int, rates: Mapping[str, float],
                     stages: Sequence[str] = ("naive", "memory", "distill", "naive_again"),
                     clock: Callable[[], float] = time.perf_counter) -> Countdown:  # fmt: skip
    """The countdown of the lesson's `stages` (default all four that take time): each playing stage
    `variations` × `episodes` episodes of its own kind, the distill stage `distill_steps` steps over
    the memory stage's episodes; priors from `rates` (measured here, else `FALLBACK`, labelled).

    Raises:
        ValueError: an unknown stage name.
    """
    bad = [s for s in stages if s not in UNIT_NAMES]
    if bad:
        raise ValueError(f"unknown lesson stages {bad}; valid: {list(UNIT_NAMES)}")
    played = variations * episodes
    plan, priors = {}, {}
    for stage in stages:
        key = STAGE_RATE.get(stage, "distill_episode")
        per, measured = rate(rates, key)
        kind = UNIT_NAMES[stage]
        plan[kind] = distill_steps if stage == "distill" else played
        priors[kind] = (per * played if stage == "distill" else per, "the last lesson here" if measured else "rough estimate")
    return Countdown(plan, priors, clock=clock)


def lesson_seconds(variations: int, episodes: int, distill_steps: int, rates: Mapping[str, float]) -> float:
    """Expected seconds of a whole lesson (`lesson_countdown` before it starts): two naive stages and one
    memory stage of `variations` × `episodes` episodes, and `distill_steps` steps over the memory stage's
    episodes."""
    return float(lesson_countdown(variations, episodes, distill_steps, rates).estimate or 0.0)


QUIET_LESSON = {
    "trap": "a quiet one played the default lesson in about 2 min: docs/benchmarks/lesson_studio.md",
    "scienceworld": "a quiet one played the default ScienceWorld lesson's stages in about 7 min: "
                    "docs/benchmarks/sw_lesson.md",
}
"""What a quiet 2-core CPU measured for each env's default lesson (cited while nothing is measured here)."""


def rates_note(rates: Mapping[str, float], env: str = "trap") -> str:
    """Where the expected times come from, for the page; `env`: the lesson's environment, whose quiet
    figure is cited while nothing is measured. ValueError for an unknown env."""
    if env not in QUIET_LESSON:
        raise ValueError(f"env must be one of {list(QUIET_LESSON)}, got {env!r}")
    if not any(k in rates for k in RATE_KEYS):
        return ("a rough estimate: nothing measured on this machine yet (the first stage measures it; these are a "
                f"loaded 2-core CPU's figures, and {QUIET_LESSON[env]})")  # fmt: skip
    parts = []
    for unit, what in (("episode", "per naive episode"), ("memory_episode", "per memory episode"),
                       ("distill_episode", "per memory episode per distill step"),
                       ("after_episode", "per naive episode after distillation")):  # fmt: skip
        seconds, measured = rate(rates, unit)
        parts.append(f"{seconds_text(seconds)} {what}" + ("" if measured else " (rough estimate)"))
    return "the times measured on this machine by the last lesson: " + ", ".join(parts)


class Countdown:
    """Elapsed time and a remaining-time estimate for work made of units of a few kinds.

    The work is a plan: kind → units (e.g. {"EMPO² iteration": 60, "GRPO iteration": 60, "test
    episode": 336}). Each kind's seconds per unit are the mean of the units of that kind measured so
    far in this work, or, until one is measured, its prior (seconds, where that figure comes from)
    times this work's pace: measured seconds over what the priors of the measured units said (a
    machine four times faster than a rough figure makes every unmeasured kind four times shorter); the
    pace is taken per source of the priors (their labels), so one source never rescales another. The
    estimate is Σ units left × seconds per unit, taken when a unit ends (a measurement) and counted down
    with the clock from then on, so between two measurements it falls one second per second and never
    rises; when it reaches 0:00 before the work ends it stays there, saying so ("over the estimate").
    A new measurement may move it either way. The status line reads it at every poll, so it moves on
    the page while a long unit runs.

    Args:
        plan: kind → units of that kind (kinds with 0 units are allowed; negative counts are not).
        priors: kind → (seconds per unit, label), for kinds not measured yet; a kind with neither
            a prior nor a measurement leaves the estimate unknown ("elapsed" only) until measured.
        clock: seconds now (`time.perf_counter`; a test passes its own).

    Raises:
        ValueError: a negative or non-whole unit count, or a prior for a kind not in the plan.
    """

    def __init__(self, plan: Mapping[str, int], priors: Mapping[str, tuple[float, str]] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:  # fmt: skip
        bad = {k: v for k, v in plan.items() if isinstance(v, bool) or not isinstance(v, int) or v < 0}
        if bad:
            raise ValueError(f"unit counts must be whole numbers ≥ 0, got {bad}")
        priors = dict(priors or {})
        stray = sorted(set(priors) - set(plan))
        if stray:
            raise ValueError(f"priors for kinds not in the plan: {stray}; plan kinds: {sorted(plan)}")
        self.plan = dict(plan)
        self.priors = priors
        self.clock = clock
        self.start = self._mark = clock()
        self.done: dict[str, int] = {k: 0 for k in plan}
        self.measured: dict[str, list[float]] = {k: [] for k in plan}
        """Seconds of every measured unit, per kind, in order."""
        self._at, self._left = self.start, self._estimate()

    def finished(self, kind: str, units: int = 1) -> None:
        """`units` more units of `kind` ended now; they took the time since the previous `finished`
        or `restart_unit` (split evenly). Raises ValueError for a kind not in the plan."""
        if kind not in self.plan:
            raise ValueError(f"unknown unit kind {kind!r}; valid: {sorted(self.plan)}")
        now = self.clock()
        units = max(1, int(units))
        self.measured[kind] += [(now - self._mark) / units] * units
        self.done[kind] += units
        self._mark = now
        self._at, self._left = now, self._estimate()

    def replan(self, kind: str, units: int) -> None:
        """`kind` has `units` in all after all (e.g. once the env says how many test layouts it has).
        Raises ValueError for a kind not in the plan or a negative count."""
        if kind not in self.plan or units < 0:
            raise ValueError(f"replan needs a planned kind and units ≥ 0, got {kind!r}, {units!r}; kinds: {sorted(self.plan)}")
        self.plan[kind] = int(units)
        self._at, self._left = self.clock(), self._estimate()

    def restart_unit(self) -> None:
        """The next unit starts now (time since the last mark was spent on something else, e.g. saving)."""
        self._mark = self.clock()

    def per_unit(self, kind: str) -> tuple[float, str] | None:
        """(seconds per unit of `kind`, where it comes from), or None when nothing is known."""
        measured = self.measured.get(kind)
        if measured:
            per = sum(measured) / len(measured)
            return per, f"measured {seconds_text(per)} each"
        prior = self.priors.get(kind)
        pace = None if prior is None else self.pace(prior[1])
        if prior is None or pace is None:
            return prior
        return prior[0] * pace, f"{prior[1]} × {pace:.2g}, the pace measured so far"

    def pace(self, source: str) -> float | None:
        """Measured seconds over the seconds the priors from `source` (their label) gave the same units;
        None before a unit with such a prior is measured. Per source, so a rough figure that is far off
        never rescales a figure measured here earlier."""
        kinds = [k for k, v in self.measured.items() if v and k in self.priors and self.priors[k][1] == source]
        said = sum(self.priors[k][0] * len(self.measured[k]) for k in kinds)
        return sum(sum(self.measured[k]) for k in kinds) / said if said > 0 else None

    def _estimate(self) -> float | None:
        total = 0.0
        for kind, units in self.plan.items():
            left = max(0, units - self.done[kind])
            if left:
                per = self.per_unit(kind)
                if per is None:
                    return None
                total += left * per[0]
        return total

    @property
    def elapsed(self) -> float:
        """Seconds since the work started."""
        return self.clock() - self.start

    @property
    def complete(self) -> bool:
        """Whether every planned unit has ended."""
        return all(self.done[k] >= n for k, n in self.plan.items())

    @property
    def estimate(self) -> float | None:
        """Seconds left as estimated at the last measurement (at the start before any): what `left`
        counts down from; None while some kind left has no figure."""
        return self._left

    def left(self) -> float | None:
        """Seconds left: the last estimate minus the time since it was taken, never below 0; None
        while some kind left has no figure."""
        if self._left is None:
            return None
        return max(0.0, self._left - (self.clock() - self._at))

    def line(self) -> str:
        """E.g. "1:05 elapsed · about 2:10 left" (+ " (over the estimate)" at 0:00 with work left)."""
        left = None if self.complete else self.left()
        if left is None:
            return f"{clock_text(self.elapsed)} elapsed"
        tail = " (over the estimate)" if left == 0.0 else ""
        return f"{clock_text(self.elapsed)} elapsed · about {clock_text(left)} left{tail}"

    def sources(self) -> str:
        """Where each kind's figure comes from, e.g. "EMPO² iteration 19.0 s (measured …)"."""
        parts = []
        for kind in self.plan:
            per = self.per_unit(kind)
            if per is not None and self.plan[kind]:
                parts.append(f"{kind} {seconds_text(per[0])}" + ("" if per[1].startswith("measured") else f" ({per[1]})"))
        return ", ".join(parts)
