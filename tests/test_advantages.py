"""Group-relative advantages (paper §4.2; method.md §1.2 step 4)."""

import pytest
import torch

from empo2_studio.algorithm.advantages import group_advantages


def test_hand_values_ddof1():
    adv = group_advantages(torch.tensor([[0.0, 10.0, 20.0, 30.0]]), eps=0.0)
    # mean 15, sample std sqrt((225+25+25+225)/3) = sqrt(500/3)
    s = (500 / 3) ** 0.5
    assert adv.tolist()[0] == pytest.approx([-15 / s, -5 / s, 5 / s, 15 / s])


def test_equal_returns_give_exact_zero_never_nan():
    returns = torch.tensor([[5.0, 5.0, 5.0], [0.1, 0.1, 0.1], [-100.0, 0.0, 100.0]])
    adv = group_advantages(returns)
    assert adv[0].tolist() == [0.0, 0.0, 0.0]
    assert adv[1].tolist() == [0.0, 0.0, 0.0]
    assert adv[2].tolist() == pytest.approx([-1.0, 0.0, 1.0], rel=1e-6)
    assert torch.isfinite(adv).all()
    assert adv.dtype == torch.float32


def test_eps_is_added_to_std():
    adv = group_advantages(torch.tensor([[0.0, 2.0]]), eps=1.0)
    # std = sqrt(2); A = ±1 / (sqrt 2 + 1)
    assert adv.tolist()[0] == pytest.approx([-1 / (2**0.5 + 1), 1 / (2**0.5 + 1)])


def test_float_residue_counts_as_equal_returns():
    # One fp32 ulp apart at ~103 (7.6e-6 > ε = 1e-6): a plain formula gives ±0.597.
    adv = group_advantages(torch.tensor([[103.25952911376953, 103.25953674316406]]))
    assert adv.tolist() == [[0.0, 0.0]] and adv.dtype == torch.float32
    # fp64 summation residue (one ulp at 26), even with ε = 0: a plain formula gives −1.15, 0.58, 0.58.
    adv = group_advantages(torch.tensor([[25.999999999999996, 26.0, 26.0]], dtype=torch.float64), eps=0.0)
    assert adv.tolist() == [[0.0, 0.0, 0.0]] and adv.dtype == torch.float64
    # Near zero the tolerance is absolute (scale max(1, |R|)): 1e-12 apart is equal, 1e-6 apart is not.
    assert group_advantages(torch.tensor([[0.0, 1e-12]], dtype=torch.float64)).tolist() == [[0.0, 0.0]]


def test_small_real_differences_are_still_standardised():
    # 100 vs 100.001 in fp32 (d = 0.00100708, > 8 ulps): std d/√2, A = ±(d/2) / (d/√2 + 1e-6).
    r = torch.tensor([[100.0, 100.001]])
    d = float(r[0, 1].double() - r[0, 0].double())
    a = (d / 2) / (d / 2**0.5 + 1e-6)
    assert group_advantages(r).tolist()[0] == pytest.approx([-a, a], rel=1e-6)
    # Integer returns 5 and 6: mean 5.5, std 1/√2, A = ±0.5 / (0.7071068 + 1e-6).
    assert group_advantages(torch.tensor([[5, 6]])).tolist()[0] == pytest.approx([-0.5 / (0.5**0.5 + 1e-6), 0.5 / (0.5**0.5 + 1e-6)], rel=1e-6)


def test_bad_input_raises():
    with pytest.raises(ValueError, match="G, N"):
        group_advantages(torch.zeros(4))
    with pytest.raises(ValueError, match="at least 2"):
        group_advantages(torch.zeros(3, 1))
    with pytest.raises(ValueError, match="finite"):
        group_advantages(torch.tensor([[1.0, float("nan")]]))
    with pytest.raises(ValueError, match="eps must be a finite number ≥ 0, got -1"):
        group_advantages(torch.tensor([[0.0, 1.0]]), eps=-1)



def test_discounted_returns_by_hand():
    from empo2_studio.algorithm.advantages import discounted_returns

    # G_1 = 75; G_0 = 25 + 0.9 · 75 = 92.5
    assert discounted_returns(torch.tensor([25.0, 75.0]), 0.9).tolist() == pytest.approx([92.5, 75.0])
    assert discounted_returns(torch.tensor([25.0, 75.0]), 0.0).tolist() == [25.0, 75.0]
    assert discounted_returns(torch.zeros(0), 0.95).tolist() == []
    with pytest.raises(ValueError, match="gamma must be a number in \\[0, 1\\], got 1.5"):
        discounted_returns(torch.tensor([1.0]), 1.5)
    with pytest.raises(ValueError, match="\\(T,\\)"):
        discounted_returns(torch.zeros(2, 2), 0.9)


def test_step_advantages_compare_actions_taken_from_the_same_state():
    from empo2_studio.algorithm.advantages import step_advantages

    # Three trap-like episodes, γ = 1. All start in the hallway (S0). A and B reach the kitchen (K):
    # A focuses on the bulb and turns it on (+25, +75), B focuses on the table (+25, −125); C goes to
    # the workshop (W) and loops (0, 0).
    states = [["S0", "K"], ["S0", "K"], ["S0", "W"]]
    returns = [torch.tensor([100.0, 75.0]), torch.tensor([-100.0, -125.0]), torch.tensor([0.0, 0.0])]
    a, b, c = step_advantages(states, returns, eps=0.0)
    # S0: returns 100, −100, 0 → mean 0, std 100 → 1, −1, 0.
    # K: 75, −125 → mean −25, std 100·√2 → ±1/√2. W is seen once: no peer, 0.
    assert a.tolist() == pytest.approx([1.0, 2**-0.5])
    assert b.tolist() == pytest.approx([-1.0, -(2**-0.5)])
    assert c.tolist() == [0.0, 0.0]


def test_step_advantages_pool_a_state_across_times_and_zero_equal_returns():
    from empo2_studio.algorithm.advantages import step_advantages

    # The hallway is visited at step 0 by both and again at step 2 by the first: one anchor group of 3.
    states = [["H", "K", "H"], ["H", "W"]]
    returns = [torch.tensor([10.0, 5.0, 0.0]), torch.tensor([5.0, 5.0])]
    first, second = step_advantages(states, returns, eps=0.0)
    # H: 10, 0, 5 → mean 5, std 5 → 1, −1, 0. K and W are singletons.
    assert first.tolist() == pytest.approx([1.0, 0.0, -1.0])
    assert second.tolist() == pytest.approx([0.0, 0.0])
    # Equal returns from a state carry no signal.
    same = step_advantages([["H"], ["H"]], [torch.tensor([3.0]), torch.tensor([3.0])])
    assert [x.tolist() for x in same] == [[0.0], [0.0]]


def test_step_advantages_bad_input():
    from empo2_studio.algorithm.advantages import step_advantages

    with pytest.raises(ValueError, match="episode 0: 2 state keys but 1 returns"):
        step_advantages([["a", "b"]], [torch.tensor([1.0])])
    with pytest.raises(ValueError, match="one return row per episode"):
        step_advantages([["a"]], [])


def test_flat_task_returns_zero_the_group_whatever_the_novelty_bonus():
    # row 0: every episode won (100); the novelty bonus alone separates the returns, which plain
    # standardisation would turn into advantages of about ±1
    returns = torch.tensor([[100.10, 100.00, 100.05, 100.00], [100.10, 25.00, 100.00, 25.05]], dtype=torch.float64)
    task = torch.tensor([[100.0, 100.0, 100.0, 100.0], [100.0, 25.0, 100.0, 25.0]], dtype=torch.float64)
    plain = group_advantages(returns)
    assert plain[0].abs().max() > 0.8  # (100.1 − 100.0375) / 0.04787 = 1.306
    adv = group_advantages(returns, task_returns=task)
    assert adv[0].tolist() == [0.0, 0.0, 0.0, 0.0]
    # row 1 keeps its standardised returns: mean 62.5375, std (ddof 1) 43.3157…
    assert torch.allclose(adv[1], plain[1]) and abs(adv[1, 0].item() - (100.10 - 62.5375) / 43.3157) < 1e-4
    with pytest.raises(ValueError, match="task_returns must have the shape of returns"):
        group_advantages(returns, task_returns=task[:, :2])
