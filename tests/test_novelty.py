"""Novelty reward and the update-mode schedule (paper §4.2–4.3)."""

import math
import random

import numpy as np
import pytest

from empo2_studio.algorithm.novelty import NoveltyMemory
from empo2_studio.algorithm.schedule import draw_update_mode


def test_novelty_reward_hand_checked():
    mem = NoveltyMemory(threshold=0.9)
    assert mem.reward(np.array([1.0, 0.0])) == 1.0  # first state: new
    assert mem.reward(np.array([2.0, 0.0])) == 0.5  # same direction: 2nd visit of prototype 0
    # cos = 0.99 / |(0.99, 0.141)| ≈ 0.99 ≥ 0.9: 3rd visit
    assert mem.reward(np.array([0.99, 0.141])) == pytest.approx(1 / 3)
    assert mem.reward(np.array([0.0, 1.0])) == 1.0  # orthogonal: new prototype
    # 45°: cos 0.707 to both prototypes, below 0.9: new
    assert mem.reward(np.array([1.0, 1.0])) == 1.0
    assert len(mem) == 3 and mem.counts == (3, 1, 1)
    assert mem.reward(np.array([-1.0, 0.0])) == 1.0  # opposite direction: cos −1, new


def test_novelty_threshold_boundary_and_batch():
    mem = NoveltyMemory(threshold=math.cos(math.pi / 4) - 1e-9)
    # (1, 1) is within 45° of (1, 0): a revisit, not stored, so (0, 1) (90° from the prototype) is new.
    assert mem.rewards(np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])) == pytest.approx([1.0, 0.5, 1.0])
    assert mem.counts == (2, 1)
    mem.reset()
    assert len(mem) == 0 and mem.reward(np.array([0.0, 1.0])) == 1.0


def test_novelty_bad_input():
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        NoveltyMemory(threshold=1.5)
    mem = NoveltyMemory()
    with pytest.raises(ValueError, match="non-zero"):
        mem.reward(np.zeros(3))
    mem.reward(np.ones(3))
    with pytest.raises(ValueError, match="dim"):
        mem.reward(np.ones(4))
    with pytest.raises(ValueError, match="1-D"):
        mem.reward(np.ones((2, 3)))
    assert len(mem) == 1


def test_schedule_frequencies_over_20k_draws():
    rng = random.Random(0)
    n = 20_000
    draws = [draw_update_mode(rng, 0.25, 2 / 3) for _ in range(n)]
    freq = {m: draws.count(m) / n for m in ("on-policy", "on-policy-with-tips", "off-policy")}
    assert freq["off-policy"] == pytest.approx(1 / 6, abs=0.01)
    assert freq["on-policy-with-tips"] == pytest.approx(1 / 12, abs=0.01)
    assert freq["on-policy"] == pytest.approx(3 / 4, abs=0.01)


def test_schedule_edges_and_determinism():
    rng = random.Random(1)
    assert {draw_update_mode(rng, 0.0, 2 / 3) for _ in range(500)} == {"on-policy"}  # p = 0 is GRPO
    assert {draw_update_mode(rng, 1.0, 1.0) for _ in range(500)} == {"off-policy"}
    assert {draw_update_mode(rng, 1.0, 0.0) for _ in range(500)} == {"on-policy-with-tips"}
    a = [draw_update_mode(random.Random(7), 0.5, 0.5) for _ in range(1)]
    b = [draw_update_mode(random.Random(7), 0.5, 0.5) for _ in range(1)]
    assert a == b


def test_schedule_bad_probability_leaves_rng_untouched():
    rng = random.Random(3)
    state = rng.getstate()
    with pytest.raises(ValueError, match="p_memory"):
        draw_update_mode(rng, 1.5, 0.5)
    with pytest.raises(ValueError, match="q_off_policy"):
        draw_update_mode(rng, 0.5, -0.1)
    assert rng.getstate() == state
