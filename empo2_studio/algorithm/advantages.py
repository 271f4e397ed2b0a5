"""Group-relative advantages (GRPO), paper §4.2 / method.md §1.2 step 4.

Each episode's return R is compared with the other episodes of its group (the N episodes played on the
same task variation in the same iteration): A = (R − mean_group) / (std_group + ε), with the sample
standard deviation (ddof = 1), as in the authors' recipe. Every token of every turn of an episode is then
trained with that one advantage (broadcast by `losses.clipped_surrogate_loss`).

Departure from a naive formula: a group whose returns are all equal carries no learning signal, and its
advantages are set to exactly 0. "Equal" allows float residue: returns are sums of rewards, and a sum
can differ from an equal one in the last bit (fp64 `25.999999999999996` vs `26`; one fp32 ulp at ~100
is 7.6e-6, above ε = 1e-6). Standardising such a residue would turn it into advantages of ±0.6…±1.4,
so a group whose standard deviation is at most `rel_tol × max(1, max |R|)` counts as constant, with
`rel_tol = max(1e-9, 8 × the machine epsilon of the input dtype)` (1e-9 for float64 and integer
input, 9.5e-7 for float32). Everything is computed in float64 before the result is cast back.
"""

from __future__ import annotations

import torch
from torch import Tensor


RELATIVE_TOLERANCE = 1e-9
"""Returns whose group std is ≤ this × max(1, max |R|) are equal (float64 residue); see the module docstring."""


def group_advantages(returns: Tensor, eps: float = 1e-6) -> Tensor:
    """Standardise episode returns within each group.

    Args:
        returns: (G, N) float tensor, one row per group, one column per episode (N ≥ 2).
            Score points: each episode's sum of rewards (`Episode.return_` = final − starting score,
            −200 … 200), plus the intrinsic bonus if the caller adds it.
        eps: added to the standard deviation before dividing (paper / recipe: 1e-6); ≥ 0
            (`RunConfig.validate` requires > 0 for a run).

    Returns:
        (G, N) advantages, `returns`' dtype (float32 for integer input); rows whose returns are all
        equal, up to float residue (module docstring), are exactly 0.

    Raises:
        ValueError: if `returns` is not 2-D, a group has fewer than 2 episodes, a value is not finite,
            or `eps` is negative or not finite.
    """
    if returns.dim() != 2:
        raise ValueError(f"returns must be a (G, N) tensor, got shape {tuple(returns.shape)}")
    if returns.shape[1] < 2:
        raise ValueError(f"each group needs at least 2 episodes for a std (ddof=1), got N={returns.shape[1]}")
    if not torch.isfinite(returns).all():
        raise ValueError(f"returns must be finite, got {returns.tolist()}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < float("inf"):
        raise ValueError(f"eps must be a finite number ≥ 0, got {eps!r}")
    r = returns.to(torch.float64)  # scores up to ±100: compute in double, return the caller's dtype
    mean = r.mean(dim=1, keepdim=True)
    std = r.std(dim=1, unbiased=True, keepdim=True)
    adv = (r - mean) / (std + eps)
    rel_tol = max(RELATIVE_TOLERANCE, 8 * torch.finfo(returns.dtype).eps) if returns.is_floating_point() else RELATIVE_TOLERANCE
    scale = r.abs().amax(dim=1, keepdim=True).clamp(min=1.0)
    constant = std <= rel_tol * scale
    adv = torch.where(constant, torch.zeros_like(adv), adv)
    return adv.to(returns.dtype) if returns.is_floating_point() else adv.to(torch.float32)

