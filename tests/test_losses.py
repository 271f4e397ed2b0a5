"""Losses and masks on hand-computed 2×3 tensors (paper Eq. 1–2; method.md §1.3)."""

import math

import pytest
import torch

from empo2_studio.algorithm.losses import (
    aggregate,
    clipped_surrogate_loss,
    dropped_fraction,
    kl_penalty,
    low_prob_mask,
)

# Ratios chosen to hit every branch: row 0 has A = +1, row 1 has A = −1.
RATIOS = [[1.5, 0.5, 1.0], [12.0, 0.7, 1.1]]
ADV = torch.tensor([1.0, -1.0])
# Hand-computed per-token losses −min(ρA, clip(ρ, 0.8, 1.3)A), dual-clipped at 10|A| for A < 0:
#   row 0: 1.5 → −1.3 (high clip), 0.5 → −0.5, 1.0 → −1.0
#   row 1: 12 → min(12, 10) = 10 (dual clip), 0.7 → 0.8 (low clip), 1.1 → 1.1
PER_TOKEN = [[-1.3, -0.5, -1.0], [10.0, 0.8, 1.1]]


def _logps(requires_grad=True):
    old = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -1.0, -2.0]])
    new = (old + torch.log(torch.tensor(RATIOS))).detach().requires_grad_(requires_grad)
    return new, old


def test_token_mean_all_valid_matches_hand_value():
    new, old = _logps()
    loss, m = clipped_surrogate_loss(new, old, ADV, torch.ones(2, 3))
    assert loss.item() == pytest.approx(sum(map(sum, PER_TOKEN)) / 6, abs=1e-5)
    assert m["loss/policy"] == pytest.approx(9.1 / 6, abs=1e-5)


def test_masked_token_zero_gradient_and_all_metrics():
    new, old = _logps()
    old = old.clone()
    old[1, 2] = -math.inf  # a padded position with garbage behaviour log-prob: must not leak NaN
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    loss, m = clipped_surrogate_loss(new, old, ADV, mask)
    assert loss.item() == pytest.approx((-1.3 - 0.5 - 1.0 + 10.0 + 0.8) / 5, abs=1e-5)
    loss.backward()
    # d/dlogp of −ρA is −ρA when unclipped; clipped, dual-clipped and masked tokens get exactly 0.
    expected = torch.tensor([[0.0, -0.5 / 5, -1.0 / 5], [0.0, 0.0, 0.0]])
    assert torch.allclose(new.grad, expected, atol=1e-6)
    assert new.grad[1, 2].item() == 0.0
    assert m["ratio/mean"] == pytest.approx((1.5 + 0.5 + 1.0 + 12.0 + 0.7) / 5, rel=1e-5)
    assert m["ratio/max"] == pytest.approx(12.0, rel=1e-5)
    assert m["ratio/min"] == pytest.approx(0.5, rel=1e-5)
    assert m["ratio/clip_frac_high"] == pytest.approx(1 / 5)
    assert m["ratio/clip_frac_low"] == pytest.approx(1 / 5)
    assert m["ratio/dual_clip_frac"] == pytest.approx(1 / 5)
    k3 = sum(r - 1 - math.log(r) for r in (1.5, 0.5, 1.0, 12.0, 0.7)) / 5
    assert m["ratio/approx_kl"] == pytest.approx(k3, rel=1e-5)
    assert all(isinstance(v, float) for v in m.values())


def test_sequence_aggregations():
    new, old = _logps()
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    l_mm, _ = clipped_surrogate_loss(new, old, ADV, mask, loss_agg="seq-mean-token-mean")
    assert l_mm.item() == pytest.approx((-2.8 / 3 + 10.8 / 2) / 2, abs=1e-5)
    l_ms, _ = clipped_surrogate_loss(new, old, ADV, mask, loss_agg="seq-mean-token-sum")
    assert l_ms.item() == pytest.approx((-2.8 + 10.8) / 2, abs=1e-5)


def test_without_dual_clip_bound_the_exploded_token_would_dominate():
    new, old = _logps()
    # c = 20 > 12: the dual clip no longer binds, so the token costs 12 instead of 10.
    loss, m = clipped_surrogate_loss(new, old, ADV, torch.ones(2, 3), dual_clip=20.0)
    assert loss.item() == pytest.approx((9.1 + 2.0) / 6, abs=1e-5)
    assert m["ratio/dual_clip_frac"] == 0.0


def test_ratio_one_gives_reinforce_gradient():
    logp = torch.tensor([[-0.3, -1.2, -2.0], [-0.7, -0.1, -4.0]], requires_grad=True)
    adv = torch.tensor([[0.5, 0.5, 0.5], [-2.0, -2.0, -2.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    loss, m = clipped_surrogate_loss(logp, logp.detach(), adv, mask)
    loss.backward()
    ref = logp.detach().clone().requires_grad_(True)
    (-(adv * ref * mask).sum() / mask.sum()).backward()  # REINFORCE: −A ∇log π, token mean
    assert torch.allclose(logp.grad, ref.grad)
    assert logp.grad[0, 1].item() == pytest.approx(-0.5 / 5)
    assert m["ratio/mean"] == 1.0 and m["ratio/approx_kl"] == 0.0


def test_off_policy_distillation_uses_tip_free_current_and_with_tips_behaviour():
    # Tips made the sampled tokens likelier: behaviour (with tips) −0.1, current without tips −1.0 / −9.
    logps_no_tips = torch.tensor([[-1.0, -9.0, -0.5]], requires_grad=True)
    behaviour_with_tips = torch.tensor([[-0.1, -0.2, -0.5]], requires_grad=True)
    mask = torch.ones(1, 3, dtype=torch.bool)
    kept = low_prob_mask(logps_no_tips, threshold=-5.0, rule="per-token", loss_mask=mask)
    assert kept.tolist() == [[True, False, True]]
    loss, m = clipped_surrogate_loss(logps_no_tips, behaviour_with_tips, torch.tensor([2.0]), kept)
    # ρ = e^−0.9 ≈ 0.4066 (below 1 − ε_low, but A > 0 so unclipped) and ρ = 1.
    r = math.exp(-0.9)
    assert loss.item() == pytest.approx(-(2 * r + 2 * 1.0) / 2, rel=1e-5)
    loss.backward()
    assert logps_no_tips.grad.tolist()[0] == pytest.approx([-2 * r / 2, 0.0, -2.0 / 2], rel=1e-5)
    assert behaviour_with_tips.grad is None  # the behaviour log-probs are constants
    assert m["ratio/min"] == pytest.approx(r, rel=1e-5)


def test_empty_mask_gives_zero_attached_loss():
    new, old = _logps()
    loss, m = clipped_surrogate_loss(new, old, ADV, torch.zeros(2, 3))
    assert loss.item() == 0.0 and loss.requires_grad
    loss.backward()
    assert torch.count_nonzero(new.grad) == 0
    assert m["ratio/mean"] == 1.0 and m["ratio/clip_frac_high"] == 0.0


def test_normalizer_replaces_local_token_count():
    new, old = _logps()
    loss, _ = clipped_surrogate_loss(new, old, ADV, torch.ones(2, 3), normalizer=12)
    assert loss.item() == pytest.approx(9.1 / 12, abs=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"loss_agg": "sum"}, "token-mean"),
        ({"dual_clip": 1.0}, "dual_clip"),
        ({"clip_low": -0.1}, "clip_low"),
    ],
)
def test_bad_options_raise(kwargs, match):
    new, old = _logps()
    with pytest.raises(ValueError, match=match):
        clipped_surrogate_loss(new, old, ADV, torch.ones(2, 3), **kwargs)


def test_shape_mismatch_raises():
    new, old = _logps()
    with pytest.raises(ValueError, match="advantages"):
        clipped_surrogate_loss(new, old, torch.ones(3), torch.ones(2, 3))
    with pytest.raises(ValueError, match="loss_mask"):
        clipped_surrogate_loss(new, old, ADV, torch.ones(2, 2))
    with pytest.raises(ValueError, match="shapes"):
        clipped_surrogate_loss(new, old[:, :2].repeat(1, 2)[:, :4], ADV, torch.ones(2, 3))


LOGPS_REF = torch.tensor([[-1.0, -6.0, -2.0], [-0.5, -0.1, -7.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])  # the −7 sits on padding and must be ignored


def test_low_prob_mask_per_token():
    kept = low_prob_mask(LOGPS_REF, threshold=-5.0, rule="per-token", loss_mask=MASK)
    assert kept.tolist() == [[True, False, True], [True, True, False]]
    assert dropped_fraction(kept, MASK) == pytest.approx(1 / 5)


def test_low_prob_mask_per_sequence():
    kept = low_prob_mask(LOGPS_REF, threshold=-5.0, rule="per-sequence", loss_mask=MASK)
    assert kept.tolist() == [[False, False, False], [True, True, False]]
    assert dropped_fraction(kept, MASK) == pytest.approx(3 / 5)


def test_low_prob_mask_off_and_threshold_edge():
    assert low_prob_mask(LOGPS_REF, rule="off", loss_mask=MASK).tolist() == MASK.bool().tolist()
    # A token exactly at δ is kept (the indicator is π ≥ δ).
    kept = low_prob_mask(LOGPS_REF, threshold=-6.0, loss_mask=MASK)
    assert kept.tolist() == MASK.bool().tolist()
    assert dropped_fraction(kept, torch.zeros(2, 3)) == 0.0


def test_low_prob_mask_bad_input():
    with pytest.raises(ValueError, match="≤ 0"):
        low_prob_mask(LOGPS_REF, threshold=0.5, loss_mask=MASK)
    with pytest.raises(ValueError, match="per-sequence"):
        low_prob_mask(LOGPS_REF, rule="per-batch", loss_mask=MASK)


def test_kl_penalty_k3_hand_value_and_zero_at_equal():
    logp = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    ref = logp.detach() + math.log(2.0)  # d = log 2 on every token
    kl = kl_penalty(logp, ref, torch.tensor([[1, 1, 0]]))
    assert kl.item() == pytest.approx(2.0 - math.log(2.0) - 1.0, rel=1e-6)
    kl.backward()
    # dk/dlogp = −e^d + 1 = −1 per valid token, over 2 tokens.
    assert logp.grad.tolist()[0] == pytest.approx([-0.5, -0.5, 0.0])
    assert kl_penalty(logp, logp.detach(), torch.ones(1, 3)).item() == 0.0


def test_aggregate_unknown_raises_naming_valid():
    with pytest.raises(ValueError, match="seq-mean-token-sum"):
        aggregate(torch.zeros(2, 3), torch.ones(2, 3), "mean")


def test_tapered_off_policy_loss_by_hand():
    from empo2_studio.algorithm import tapered_off_policy_loss

    # rows: A = +2 with π 0.01 (behaviour 0.9); A = −1 with ρ = 0.5 (π 0.2, behaviour 0.4); padding
    logps = torch.log(torch.tensor([[0.01, 0.0], [0.2, 0.0]])).requires_grad_(True)
    old = torch.log(torch.tensor([[0.9, 1.0], [0.4, 1.0]]))
    mask = torch.tensor([[1, 0], [1, 0]], dtype=torch.bool)
    loss, m = tapered_off_policy_loss(logps, old, torch.tensor([2.0, -1.0]), mask)
    # token losses: −2·log 0.01 = 9.2103; −(−1)·0.5·log 0.2 = −0.8047; token-mean over 2 tokens
    assert float(loss) == pytest.approx((-2 * math.log(0.01) + 0.5 * math.log(0.2)) / 2, rel=1e-6)
    loss.backward()
    # dL/dlogp: −A·w / 2 → −1 for the good action (weight 1, not ρ = 0.011), +0.25 for the bad one
    assert logps.grad.flatten().tolist() == pytest.approx([-1.0, 0.0, 0.25, 0.0], abs=1e-6)
    assert m["ratio/min"] == pytest.approx(0.01 / 0.9, rel=1e-5) and m["ratio/max"] == pytest.approx(0.5, rel=1e-5)
