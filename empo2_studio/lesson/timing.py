"""Elapsed and expected time of the lesson's stages (and the race's iterations), from this machine.

A stage is a number of equal units (a playing stage: one lock-step group of episodes per variation;
the distill stage: one update per step; a race: one iteration per arm). The expected time left is the
mean unit time measured so far in the running stage; before its first unit ends, the per-unit time
the last lesson recorded (`time/episode`, `time/distill_step` in its metrics rows, see
`results.metrics_row`); with nothing recorded, `FALLBACK`, a rough figure labelled as an estimate.
Times depend on the machine and its load (a 2-core CPU shared with other work is several times
slower than an idle one), which is why the studio states them from measurements.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

FALLBACK: dict[str, float] = {"episode": 3.0, "memory_episode": 10.0, "distill_episode": 7.0}
"""Rough seconds per unit with the embedded model on a loaded 2-core CPU, used only before anything
was measured: "episode" = one naive episode of a lock-step group; "memory_episode" = one memory
episode (a longer prompt, and it plays on to success instead of failing early); "distill_episode" =
one memory episode in one distill step (a step over 16 episodes ≈ 110 s). Together: a default lesson
≈ 14 min, as measured on such a machine (notebook 2026-12-03-lesson-race)."""

RATE_KEYS = ("episode", "memory_episode", "distill_episode")


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
    """Seconds per unit (`RATE_KEYS`) from the latest `kind: lesson` rows that recorded them: a naive
    stage's "episode", the memory stage's "memory_episode", the distill stage's "distill_episode";
    a unit never measured is absent."""
    out: dict[str, float] = {}
    for row in rows:
        if row.get("kind") != "lesson":
            continue
        per_episode = row.get("time/episode")
        if isinstance(per_episode, (int, float)) and per_episode > 0:
            out["memory_episode" if row.get("lesson/stage") == "memory" else "episode"] = float(per_episode)
        step, n = row.get("time/distill_step"), row.get("distill/episodes")
        if isinstance(step, (int, float)) and isinstance(n, (int, float)) and step > 0 and n > 0:
            out["distill_episode"] = float(step) / float(n)
    return out


def rate(rates: Mapping[str, float], unit: str) -> tuple[float, bool]:
    """(seconds per `unit`, measured?): the measured rate, else `FALLBACK`'s."""
    if unit not in RATE_KEYS:
        raise ValueError(f"unknown time unit {unit!r}; valid: {list(RATE_KEYS)}")
    return (float(rates[unit]), True) if unit in rates else (FALLBACK[unit], False)


def lesson_seconds(variations: int, episodes: int, distill_steps: int, rates: Mapping[str, float]) -> float:
    """Expected seconds of a whole lesson: two naive stages and one memory stage of `variations` ×
    `episodes` episodes, and `distill_steps` steps over the memory stage's episodes."""
    played = variations * episodes
    per = {unit: rate(rates, unit)[0] for unit in RATE_KEYS}
    return played * (2 * per["episode"] + per["memory_episode"] + distill_steps * per["distill_episode"])


def rates_note(rates: Mapping[str, float]) -> str:
    """Where the expected times come from, for the page."""
    if not any(k in rates for k in RATE_KEYS):
        return "a rough estimate: nothing measured on this machine yet (the first stage measures it)"
    parts = []
    for unit, what in (("episode", "per naive episode"), ("memory_episode", "per memory episode"),
                       ("distill_episode", "per memory episode per distill step")):  # fmt: skip
        seconds, measured = rate(rates, unit)
        parts.append(f"{seconds_text(seconds)} {what}" + ("" if measured else " (rough estimate)"))
    return "measured on this machine by the last lesson: " + ", ".join(parts)


class Eta:
    """Elapsed and expected time of `units` equal units of work.

    Args:
        units: how many units the work has.
        prior: seconds per unit before one is measured, with its label (e.g. (23.0, "the last
            lesson's step time")); None: nothing to expect yet.
        clock: seconds now (`time.perf_counter`; a test passes its own).
    """

    def __init__(self, units: int, prior: tuple[float, str] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:  # fmt: skip
        self.units = max(1, int(units))
        self.prior = prior
        self.clock = clock
        self.start = clock()
        self.done = 0
        self.unit_seconds: list[float] = []
        self._last = self.start

    def finished(self, units: int = 1) -> None:
        """`units` more units ended now."""
        now = self.clock()
        per = (now - self._last) / max(1, units)
        self.unit_seconds += [per] * units
        self.done += units
        self._last = now

    @property
    def elapsed(self) -> float:
        return self.clock() - self.start

    def left(self) -> tuple[float, str] | None:
        """(expected seconds left, where the figure comes from), or None with nothing to go on."""
        remaining = max(0, self.units - self.done)
        if self.unit_seconds:
            per = sum(self.unit_seconds) / len(self.unit_seconds)
            return remaining * per, f"measured {seconds_text(per)} each"
        if self.prior is not None:
            return remaining * self.prior[0], self.prior[1]
        return None

    def line(self) -> str:
        """E.g. "1:05 elapsed · about 2:10 left (measured 65 s each)"."""
        left = self.left() if self.done < self.units else None
        tail = f" · about {clock_text(left[0])} left ({left[1]})" if left is not None else ""
        return f"{clock_text(self.elapsed)} elapsed{tail}"
