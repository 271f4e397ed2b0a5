"""Elapsed and expected time from measured unit times (a fake clock: no timed test)."""

from __future__ import annotations

import pytest

from empo2_studio.lesson import timing


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_countdown_falls_with_the_clock_and_moves_only_at_a_measurement():
    clock = FakeClock()
    cd = timing.Countdown({"step": 5}, {"step": (20.0, "the last lesson here")}, clock=clock)
    assert cd.left() == 100.0 and cd.line() == "0:00 elapsed · about 1:40 left"
    clock.now += 30  # step 1 runs 30 s: the prior's 100 s counted down, not held
    assert cd.left() == 70.0 and cd.line() == "0:30 elapsed · about 1:10 left"
    cd.finished("step")  # measured 30 s: 4 steps × 30 s
    assert cd.left() == 120.0 and cd.per_unit("step") == (30.0, "measured 30.0 s each")
    seen = []
    for _ in range(10):  # step 2 runs 50 s, read every 5 s: it falls, never rises
        clock.now += 5
        seen.append(cd.left())
    assert seen == [115.0, 110.0, 105.0, 100.0, 95.0, 90.0, 85.0, 80.0, 75.0, 70.0]
    cd.finished("step")  # mean (30 + 50) / 2 = 40 s × 3 left
    assert cd.left() == 120.0 and cd.line() == "1:20 elapsed · about 2:00 left"
    clock.now += 130  # a step far slower than measured: 0:00, said so, not negative
    assert cd.left() == 0.0 and cd.line() == "3:30 elapsed · about 0:00 left (over the estimate)"
    cd.finished("step", 3)  # 130 s for 3 steps: all done, elapsed only
    assert cd.complete and cd.line() == "3:30 elapsed"


def test_a_countdown_of_several_kinds_counts_each_from_its_own_steps():
    clock = FakeClock()
    cd = timing.Countdown({"EMPO² iteration": 2, "GRPO iteration": 2, "test episode": 4},
                          {"EMPO² iteration": (40.0, "prior"), "GRPO iteration": (20.0, "prior")}, clock=clock)
    assert cd.left() is None and cd.line() == "0:00 elapsed"  # test episodes: nothing known yet
    clock.now += 12
    cd.finished("test episode", 4)  # 3 s each; nothing left of them
    assert cd.left() == 2 * 40.0 + 2 * 20.0
    clock.now += 50
    cd.finished("EMPO² iteration")  # 50 s against a prior of 40: pace 1.25, so GRPO's 20 s counts 25 s
    assert cd.left() == 1 * 50.0 + 2 * 25.0 and cd.pace("prior") == 1.25
    assert cd.per_unit("GRPO iteration") == (25.0, "prior × 1.2, the pace measured so far")
    clock.now += 10
    cd.finished("GRPO iteration")  # 10 s: 50 + 10
    assert cd.left() == 60.0 and cd.sources() == "EMPO² iteration 50.0 s, GRPO iteration 10.0 s, test episode 3.0 s"
    cd.replan("test episode", 6)  # the env has more test layouts than planned: 2 more × 3 s
    assert cd.left() == 66.0
    with pytest.raises(ValueError, match="replan needs a planned kind and units ≥ 0, got 'eval', 1"):
        cd.replan("eval", 1)
    with pytest.raises(ValueError, match="unknown unit kind 'eval'; valid"):
        cd.finished("eval")
    with pytest.raises(ValueError, match=r"unit counts must be whole numbers ≥ 0, got \{'step': -1\}"):
        timing.Countdown({"step": -1})
    with pytest.raises(ValueError, match=r"priors for kinds not in the plan: \['x'\]"):
        timing.Countdown({"step": 1}, {"x": (1.0, "?")})


def test_the_pace_rescales_only_priors_from_the_same_source():
    clock = FakeClock()
    cd = timing.Countdown({"EMPO² iteration": 2, "GRPO iteration": 2, "test episode": 10},
                          {"EMPO² iteration": (30.0, "an earlier race"), "GRPO iteration": (20.0, "an earlier race"),
                           "test episode": (7.0, "rough")}, clock=clock)  # fmt: skip
    clock.now += 4
    cd.finished("test episode", 2)  # 2 s each against a rough 7 s: pace 2/7 for rough figures only
    assert cd.pace("rough") == pytest.approx(2 / 7) and cd.pace("an earlier race") is None
    assert cd.left() == pytest.approx(2 * 30.0 + 2 * 20.0 + 8 * 2.0)  # the earlier race's figures stand
    clock.now += 15
    cd.finished("EMPO² iteration")  # 15 s against 30: the earlier race's GRPO figure halves too
    assert cd.left() == pytest.approx(15.0 + 2 * 10.0 + 8 * 2.0)


def test_rates_come_from_the_latest_measured_lesson_rows():
    rows = [
        {"kind": "lesson", "lesson/stage": "naive", "time/episode": 4.0},
        {"kind": "lesson", "lesson/stage": "memory", "time/episode": 30.0},
        {"kind": "train", "time/episode": 99.0},
        {"kind": "lesson", "lesson/stage": "distill", "time/distill_step": 120.0, "distill/episodes": 16.0},
        {"kind": "lesson", "lesson/stage": "naive_again", "time/episode": 6.0},
    ]
    # stage 5 is timed apart from stage 1: its episodes end sooner once they win
    assert timing.rates_from_metrics(rows) == {"episode": 4.0, "memory_episode": 30.0, "distill_episode": 7.5,
                                               "after_episode": 6.0}
    assert timing.rate({}, "episode") == (timing.FALLBACK["episode"], False)
    with pytest.raises(ValueError, match="unknown time unit 'step'"):
        timing.rate({}, "step")
    # 2 variations × 8 episodes: 16 × 4 s + 16 × 30 s + 5 steps × 16 × 7.5 s + 16 × 6 s
    rates = {"episode": 4.0, "memory_episode": 30.0, "distill_episode": 7.5, "after_episode": 6.0}
    assert timing.lesson_seconds(2, 8, 5, rates) == 64 + 480 + 600 + 96
    assert timing.lesson_seconds(2, 8, 5, {}) == 16 * (3.0 + 10.0 + 5 * 7.0 + 3.0)  # the fallback: 816 s
    cd = timing.lesson_countdown(2, 8, 5, rates, ["distill"], clock=FakeClock())  # one stage: its own total
    assert cd.plan == {"distill step": 5} and cd.left() == 600.0
    with pytest.raises(ValueError, match=r"unknown lesson stages \['tips'\]"):
        timing.lesson_countdown(2, 8, 5, rates, ["tips"])
    assert "rough estimate" in timing.rates_note({}) and "measured on this machine" in timing.rates_note({"episode": 6.0})
    assert "about 2 min: docs/benchmarks/lesson_studio.md" in timing.rates_note({})  # the trap's quiet lesson
    assert "about 7 min: docs/benchmarks/sw_lesson.md" in timing.rates_note({}, "scienceworld")
    with pytest.raises(ValueError, match="valid|one of"):
        timing.rates_note({}, "alfworld")
    assert (timing.clock_text(75), timing.clock_text(3725), timing.minutes_text(40), timing.minutes_text(828)) == (
        "1:15", "1:02:05", "40 s", "about 14 min")
    assert [timing.seconds_text(x) for x in (115.2, 5.24, 0.0432)] == ["115 s", "5.2 s", "0.043 s"]
