"""Elapsed and expected time from measured unit times (a fake clock: no timed test)."""

from __future__ import annotations

import pytest

from empo2_studio.lesson import timing


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_eta_uses_the_prior_until_a_unit_is_measured():
    clock = FakeClock()
    eta = timing.Eta(5, (20.0, "the last lesson's step time"), clock=clock)
    clock.now += 30
    assert eta.left() == (100.0, "the last lesson's step time")
    assert eta.line() == "0:30 elapsed · about 1:40 left (the last lesson's step time)"
    eta.finished()  # step 1 took 30 s
    clock.now += 50
    eta.finished()  # step 2 took 50 s: mean 40 s, 3 steps left
    assert eta.left() == (120.0, "measured 40.0 s each") and eta.line().startswith("1:20 elapsed · about 2:00 left")
    eta.finished(3)
    assert eta.line() == "1:20 elapsed"
    assert timing.Eta(2, None, clock=clock).line() == "0:00 elapsed"


def test_rates_come_from_the_latest_measured_lesson_rows():
    rows = [
        {"kind": "lesson", "lesson/stage": "naive", "time/episode": 4.0},
        {"kind": "lesson", "lesson/stage": "memory", "time/episode": 30.0},
        {"kind": "train", "time/episode": 99.0},
        {"kind": "lesson", "lesson/stage": "distill", "time/distill_step": 120.0, "distill/episodes": 16.0},
        {"kind": "lesson", "lesson/stage": "naive_again", "time/episode": 6.0},
    ]
    assert timing.rates_from_metrics(rows) == {"episode": 6.0, "memory_episode": 30.0, "distill_episode": 7.5}
    assert timing.rate({}, "episode") == (timing.FALLBACK["episode"], False)
    with pytest.raises(ValueError, match="unknown time unit 'step'"):
        timing.rate({}, "step")
    # 2 variations × 8 episodes: 2 naive stages × 16 × 6 s + 16 × 30 s + 5 steps × 16 × 7.5 s
    assert timing.lesson_seconds(2, 8, 5, {"episode": 6.0, "memory_episode": 30.0, "distill_episode": 7.5}) == 192 + 480 + 600
    assert timing.lesson_seconds(2, 8, 5, {}) == 16 * (2 * 3.0 + 10.0 + 5 * 7.0)  # the fallback: 816 s
    assert "rough estimate" in timing.rates_note({}) and "measured on this machine" in timing.rates_note({"episode": 6.0})
    assert (timing.clock_text(75), timing.clock_text(3725), timing.minutes_text(40), timing.minutes_text(828)) == (
        "1:15", "1:02:05", "40 s", "about 14 min")
    assert [timing.seconds_text(x) for x in (115.2, 5.24, 0.0432)] == ["115 s", "5.2 s", "0.043 s"]
