"""The policy-gradient losses of EMPO² (paper §4.2 Eq. 1–2, App. C–D; method.md §1.3).

Pure functions on tensors: no model, optimizer or I/O. The trainer scores the sampled action tokens with
the policy, builds the masks, and passes everything here.

One loss serves all three update modes; only the log-prob sources differ:

| mode                | `logps` (current, with grad)   | `old_logps` (behaviour, no grad) |
|---------------------|--------------------------------|----------------------------------|
| on-policy           | π_θ(a | s, u)                  | π_old(a | s, u)                  |
| on-policy-with-tips | π_θ(a | s, u, tips)            | π_old(a | s, u, tips)            |
| off-policy          | π_θ(a | s, u)  (tips removed)  | π_old(a | s, u, tips)            |

The off-policy row is the paper's "reward-guided self-distillation": actions that tips made likely are
pulled into the tip-free policy. Its ratio starts far from 1, which is why the low-probability mask
(`low_prob_mask`) exists: tokens the tip-free policy finds nearly impossible would otherwise dominate
the gradient (paper Fig. 6 shows training going to NaN without it).

Shapes: B rows (one per trained turn), T response-token positions (right-padded); `loss_mask` is 1 on
the tokens that are trained. Log-probs are natural-log probabilities of the sampled tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor

from empo2_studio.config import LOSS_AGGS, LOW_PROB_RULES  # the valid `loss_agg` / `rule` values

_MAX_LOG_RATIO = 20.0
"""Log-ratios are clamped to ±20 before exp: e^20 ≈ 5e8 is already far outside every clip, and an
overflowing ratio (inf) would turn a masked or clipped token's zero gradient into NaN."""


def clipped_surrogate_loss(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    loss_mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.3,
    dual_clip: float = 10.0,
    loss_agg: str = "token-mean",
    normalizer: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO/GRPO clipped surrogate with asymmetric clipping and dual clip (paper Eq. 1, App. D.2).

    Per token, with ρ = exp(logps − old_logps):
        loss_t = −min(ρ·A, clip(ρ, 1 − clip_low, 1 + clip_high)·A)
    and, for A < 0 only, the dual clip bounds it: loss_t = min(loss_t, dual_clip·|A|), so a token whose
    ratio exploded (ρ > dual_clip) cannot push the loss without limit.
    At ρ = 1 the gradient is the REINFORCE gradient −A·∇log π.

    Also the off-policy distillation loss: call it with `logps` from the tip-free prompt and `old_logps`
    = the behaviour log-probs recorded on the with-tips prompt (see the module docstring).

    Args:
        logps: (B, T) current log-probs of the sampled tokens (carries the gradient).
        old_logps: (B, T) behaviour log-probs (treated as constants; detached here).
        advantages: (B, T) per-token advantages, or (B,) one per row (broadcast to its tokens).
        loss_mask: (B, T) bool or 0/1; tokens outside it contribute nothing, not even NaN.
        clip_low: ε_low ≥ 0, ratio floor 1 − ε_low for A < 0 (paper 0.2).
        clip_high: ε_high ≥ 0, ratio ceiling 1 + ε_high for A > 0 (paper 0.3).
        dual_clip: c > 1, loss bound c·|A| for A < 0 (recipe 10.0).
        loss_agg: one of `LOSS_AGGS`.
        normalizer: optional divisor replacing the local count (valid tokens for "token-mean", rows
            otherwise), e.g. the global batch's count under data parallelism.

    Returns:
        (loss, metrics): a scalar tensor, and floats over the valid tokens: `loss/policy`,
        `ratio/mean`, `ratio/max`, `ratio/min`, `ratio/clip_frac_low`, `ratio/clip_frac_high`,
        `ratio/dual_clip_frac`, `ratio/approx_kl` (k3 estimate of KL(π_old‖π_θ)). With no valid token
        the loss is 0 (still attached to the graph), ratios report 1 and fractions 0.

    Raises:
        ValueError: unknown `loss_agg`, mismatched shapes, clip_low/clip_high < 0, dual_clip ≤ 1.
    """
    _check_agg(loss_agg)
    if clip_low < 0 or clip_high < 0:
        raise ValueError(f"clip_low and clip_high must be ≥ 0, got {clip_low!r}, {clip_high!r}")
    if not dual_clip > 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip!r}")
    mask = _as_mask(loss_mask, logps)
    _same_shape(logps=logps, old_logps=old_logps, loss_mask=mask)
    adv = _token_advantages(advantages, logps).to(logps.dtype)

    # Masked positions get log-ratio 0 *before* exp: padding may hold −inf/garbage log-probs, and
    # where() alone would still backpropagate 0·inf = NaN through the unused branch.
    log_ratio = torch.where(mask, logps - old_logps.detach(), torch.zeros_like(logps))
    log_ratio = log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    ratio = torch.exp(log_ratio)

    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    per_token = torch.where(adv < 0, torch.minimum(per_token, -adv * dual_clip), per_token)
    per_token = torch.where(mask, per_token, torch.zeros_like(per_token))
    loss = aggregate(per_token, mask, loss_agg, normalizer=normalizer)

    with torch.no_grad():
        metrics = _ratio_metrics(ratio, log_ratio, adv, mask, clip_low, clip_high, dual_clip)
        metrics["loss/policy"] = float(loss.detach())
    return loss, metrics


def tapered_off_policy_loss(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    loss_mask: Tensor,
    *,
    loss_agg: str = "token-mean",
    normalizer: float | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.3,
    dual_clip: float = 10.0,
) -> tuple[Tensor, dict[str, float]]:
    """Tapered off-policy REINFORCE (TOPR, Le Roux et al. 2025, arXiv 2503.14286) for distillation.

    Per token, with ρ = exp(logps − old_logps) (tip-free current over with-tips behaviour):
        loss_t = −A · log π_θ(a_t)              for A ≥ 0  (weight 1: the tip's action is learned as is)
        loss_t = −A · sg(min(ρ, 1)) · log π_θ(a_t)  for A < 0  (truncated importance weight)
    so the gradient is −A·∇log π for good actions whatever ρ, and at most −A·ρ·∇log π for bad ones.
    The clipped surrogate instead gives −A·ρ·∇log π for A > 0 and ρ < 1 − ε_low: for an action that only
    the tip made likely ρ is tiny (≈ 0.01 with the embedded model), and so is its gradient. Used for the
    off-policy rows of Eq. 2 when `AlgoConfig.off_policy_loss == "tapered"` (a departure, see docs/departures.md).

    Args / shapes as `clipped_surrogate_loss` ((B, T) log-probs and mask, (B, T) or (B,) advantages);
    `clip_low`, `clip_high`, `dual_clip` only feed the ratio metrics so both losses report alike.

    Returns:
        (loss, metrics) with the same keys as `clipped_surrogate_loss`.

    Raises:
        ValueError: unknown `loss_agg`, mismatched shapes.
    """
    _check_agg(loss_agg)
    mask = _as_mask(loss_mask, logps)
    _same_shape(logps=logps, old_logps=old_logps, loss_mask=mask)
    adv = _token_advantages(advantages, logps).to(logps.dtype)
    log_ratio = torch.where(mask, logps.detach() - old_logps.detach(), torch.zeros_like(logps))
    log_ratio = log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    ratio = torch.exp(log_ratio)
    weight = torch.where(adv >= 0, torch.ones_like(ratio), ratio.clamp(max=1.0))
    safe_logps = torch.where(mask, logps, torch.zeros_like(logps))  # padding may hold −inf
    per_token = torch.where(mask, -adv * weight * safe_logps, torch.zeros_like(logps))
    loss = aggregate(per_token, mask, loss_agg, normalizer=normalizer)
    with torch.no_grad():
        metrics = _ratio_metrics(ratio, log_ratio, adv, mask, clip_low, clip_high, dual_clip)
        metrics["loss/policy"] = float(loss.detach())
    return loss, metrics


def aggregate(per_token: Tensor, loss_mask: Tensor, loss_agg: str, *, normalizer: float | None = None) -> Tensor:
    """Reduce (B, T) per-token losses (already zero outside the mask) to a scalar.

    token-mean: Σ loss / Σ mask. seq-mean-token-mean: mean over rows with ≥ 1 valid token of each row's
    token mean. seq-mean-token-sum: the same with each row's token sum. `normalizer` replaces the
    denominator (tokens, or rows) when given. Raises ValueError on an unknown `loss_agg`.
    """
    _check_agg(loss_agg)
    mask = loss_mask.to(per_token.dtype)
    per_token = per_token * mask
    if loss_agg == "token-mean":
        denom = mask.sum() if normalizer is None else torch.tensor(float(normalizer))
        return per_token.sum() / denom.clamp_min(1.0)
    tokens_per_row = mask.sum(dim=1)
    row_sum = per_token.sum(dim=1)
    rows = row_sum / tokens_per_row.clamp_min(1.0) if loss_agg == "seq-mean-token-mean" else row_sum
    n_rows = (tokens_per_row > 0).sum().to(per_token.dtype) if normalizer is None else torch.tensor(float(normalizer))
    return rows.sum() / n_rows.clamp_min(1.0)


def low_prob_mask(
    logps_ref: Tensor,
    *,
    threshold: float = -5.0,
    rule: str = "per-token",
    loss_mask: Tensor,
) -> Tensor:
    """The tokens KEPT by the low-probability mask δ (paper §4.2 Eq. 2; recipe: per sequence).

    Args:
        logps_ref: (B, T) log-probs the rule looks at. The paper uses the current tip-free log-probs
            π_θ(a | s, u); the recipe uses the behaviour (with-tips) log-probs. The trainer chooses.
        threshold: log δ ≤ 0 (default −5, p ≈ 0.0067).
        rule: "per-token" drops each valid token with log-prob < threshold; "per-sequence" drops every
            token of a row whose lowest valid-token log-prob is < threshold; "off" keeps `loss_mask`.
        loss_mask: (B, T) the tokens that would be trained without this mask.

    Returns:
        (B, T) bool, a subset of `loss_mask`. `dropped_fraction(kept, loss_mask)` gives `mask/low_prob_frac`.

    Raises:
        ValueError: threshold > 0, an unknown rule, or mismatched shapes.
    """
    if not threshold <= 0.0:
        raise ValueError(f"threshold is a log-prob and must be ≤ 0, got {threshold!r}")
    if rule not in LOW_PROB_RULES:
        raise ValueError(f"unknown low-prob mask rule {rule!r}; valid: {list(LOW_PROB_RULES)}")
    mask = _as_mask(loss_mask, logps_ref)
    _same_shape(logps_ref=logps_ref, loss_mask=mask)
    if rule == "off":
        return mask.clone()
    low = (logps_ref.detach() < threshold) & mask
    if rule == "per-token":
        return mask & ~low
    return mask & ~low.any(dim=1, keepdim=True)


def dropped_fraction(kept: Tensor, loss_mask: Tensor) -> float:
    """`mask/low_prob_frac`: the fraction of `loss_mask`'s tokens that `kept` drops (0.0 if none valid)."""
    valid = loss_mask.bool()
    n = int(valid.sum())
    return 0.0 if n == 0 else float((valid & ~kept.bool()).sum()) / n


def kl_penalty(logps: Tensor, ref_logps: Tensor, loss_mask: Tensor, *, loss_agg: str = "token-mean") -> Tensor:
    """k3 estimate of KL(π_θ ‖ π_ref) on the sampled tokens, aggregated like the policy loss.

    Per token, with d = ref_logps − logps: k = exp(d) − d − 1 ≥ 0 (Schulman's unbiased, low-variance
    estimator; the paper's β·KL term, β = `AlgoConfig.kl_coef`, 0 by default).

    Args:
        logps: (B, T) current log-probs (with grad). ref_logps: (B, T) reference (adapter-free) log-probs.
        loss_mask: (B, T). loss_agg: one of `LOSS_AGGS`.

    Returns:
        A scalar tensor ≥ 0 to be added as kl_coef · kl. Raises ValueError as `clipped_surrogate_loss`.
    """
    _check_agg(loss_agg)
    mask = _as_mask(loss_mask, logps)
    _same_shape(logps=logps, ref_logps=ref_logps, loss_mask=mask)
    d = torch.where(mask, ref_logps.detach() - logps, torch.zeros_like(logps)).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    per_token = torch.exp(d) - d - 1.0
    return aggregate(torch.where(mask, per_token, torch.zeros_like(per_token)), mask, loss_agg)


def _ratio_metrics(
    ratio: Tensor, log_ratio: Tensor, adv: Tensor, mask: Tensor, clip_low: float, clip_high: float, c: float
) -> dict[str, float]:
    n = int(mask.sum())
    if n == 0:
        return {
            "ratio/mean": 1.0, "ratio/max": 1.0, "ratio/min": 1.0, "ratio/clip_frac_low": 0.0,
            "ratio/clip_frac_high": 0.0, "ratio/dual_clip_frac": 0.0, "ratio/approx_kl": 0.0,
        }  # fmt: skip
    r = ratio[mask]
    a = adv[mask]
    lr = log_ratio[mask]
    return {
        "ratio/mean": float(r.mean()),
        "ratio/max": float(r.max()),
        "ratio/min": float(r.min()),
        # The clipped branch is the active one (zero gradient) in exactly these cases.
        "ratio/clip_frac_low": float(((a < 0) & (r < 1.0 - clip_low)).sum()) / n,
        "ratio/clip_frac_high": float(((a > 0) & (r > 1.0 + clip_high)).sum()) / n,
        "ratio/dual_clip_frac": float(((a < 0) & (r > c)).sum()) / n,
        # k3 estimate of KL(π_old ‖ π_θ) from tokens sampled by π_old: (ρ − 1) − log ρ ≥ 0.
        "ratio/approx_kl": float(((r - 1.0) - lr).mean()),
    }


def _token_advantages(advantages: Tensor, like: Tensor) -> Tensor:
    if advantages.dim() == 1 and advantages.shape[0] == like.shape[0]:
        return advantages[:, None].expand_as(like)
    if advantages.shape == like.shape:
        return advantages
    raise ValueError(f"advantages must be (B,) or (B, T) = {tuple(like.shape)}, got {tuple(advantages.shape)}")


def _as_mask(loss_mask: Tensor, like: Tensor) -> Tensor:
    if loss_mask.shape != like.shape:
        raise ValueError(f"loss_mask shape {tuple(loss_mask.shape)} != log-prob shape {tuple(like.shape)}")
    return loss_mask.bool()


def _same_shape(**tensors: Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"shapes must match, got {shapes}")


def _check_agg(loss_agg: str) -> None:
    if loss_agg not in LOSS_AGGS:
        raise ValueError(f"unknown loss_agg {loss_agg!r}; valid: {list(LOSS_AGGS)}")
