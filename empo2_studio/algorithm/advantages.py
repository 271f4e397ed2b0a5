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


def group_advantages(returns: Tensor, eps: float = 1e-6, task_returns: Tensor | None = None) -> Tensor:
    """Standardise episode returns within each group.

    Args:
        returns: (G, N) float tensor, one row per group, one column per episode (N ≥ 2).
            Score points: each episode's sum of rewards (`Episode.return_` = final − starting score,
            −200 … 200), plus the intrinsic bonus if the caller adds it.
        eps: added to the standard deviation before dividing (paper / recipe: 1e-6); ≥ 0
            (`RunConfig.validate` requires > 0 for a run).
        task_returns: optional (G, N) task returns alone (no novelty bonus): rows where these are all
            equal get advantage 0 too (`algo.skip_flat_groups`). Why: when every episode of a group wins
            (or every one fails alike), the novelty bonus alone (~0.01–0.1 points) separates the returns,
            and standardising turns that into advantages of ±1 — a full-size update on noise. DAPO's
            dynamic sampling drops such groups; an option here, not in the paper.

    Returns:
        (G, N) advantages, `returns`' dtype (float32 for integer input); rows whose returns (or
        `task_returns`) are all equal, up to float residue (module docstring), are exactly 0.

    Raises:
        ValueError: if `returns` is not 2-D, a group has fewer than 2 episodes, a value is not finite,
            `eps` is negative or not finite, or `task_returns` has another shape than `returns`.
    """
    if task_returns is not None:
        if task_returns.shape != returns.shape:
            raise ValueError(f"task_returns must have the shape of returns {tuple(returns.shape)}, got {tuple(task_returns.shape)}")
        flat = (group_advantages(task_returns, eps) == 0).all(dim=1, keepdim=True)
        adv = group_advantages(returns, eps)
        return torch.where(flat, torch.zeros_like(adv), adv)
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


def discounted_returns(rewards: Tensor, gamma: float) -> Tensor:
    """Return-to-go of every step: G_t = Σ_{k ≥ t} γ^(k−t) r_k (GiGPO's step return, method.md §5).

    Args:
        rewards: (T,) per-step rewards of one episode (score points, plus any intrinsic bonus).
        gamma: discount in [0, 1].

    Returns:
        (T,) float64 returns-to-go.

    Raises:
        ValueError: `rewards` is not 1-D or not finite, or `gamma` is outside [0, 1].
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be a (T,) tensor, got shape {tuple(rewards.shape)}")
    if not torch.isfinite(rewards).all():
        raise ValueError(f"rewards must be finite, got {rewards.tolist()}")
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be a number in [0, 1], got {gamma!r}")
    out = torch.zeros(rewards.shape[0], dtype=torch.float64)
    running = 0.0
    for t in range(rewards.shape[0] - 1, -1, -1):  # T ≤ a few dozen steps: a plain loop is clearest
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


def step_advantages(states: list[list[object]], returns: list[Tensor], eps: float = 1e-6) -> list[Tensor]:
    """Step-level relative advantages over anchor states (GiGPO, Feng et al. 2025; method.md §5).

    Within one group (episodes played from the same start), every step taken from the same
    environment state forms an anchor group, wherever in its episode it happened. Each step's
    return-to-go is standardised within its anchor group exactly as `group_advantages` standardises
    episode returns, so actions taken from the same state are compared with each other: in the trap,
    "focus on the table" and "go to hallway" from the same kitchen, or the first move from the hallway.
    A state seen once (no peer), or whose returns are all equal, gets advantage 0.

    Args:
        states: per episode, one hashable state key per step (the state the action was taken in).
        returns: per episode, a (T_i,) tensor of returns-to-go (`discounted_returns`), T_i = len(states[i]).
        eps: added to the anchor group's std (≥ 0).

    Returns:
        Per episode, (T_i,) float64 step advantages.

    Raises:
        ValueError: the lists differ in length, an episode's keys and returns differ in length, or a
            value is not finite (from `group_advantages`).
    """
    if len(states) != len(returns):
        raise ValueError(f"need one return row per episode, got {len(returns)} for {len(states)} episodes")
    anchors: dict[object, list[tuple[int, int]]] = {}
    for i, (keys, g) in enumerate(zip(states, returns)):
        if len(keys) != g.shape[0]:
            raise ValueError(f"episode {i}: {len(keys)} state keys but {g.shape[0]} returns")
        for t, key in enumerate(keys):
            anchors.setdefault(key, []).append((i, t))
    out = [torch.zeros(g.shape[0], dtype=torch.float64) for g in returns]
    for members in anchors.values():
        if len(members) < 2:
            continue
        row = torch.tensor([[float(returns[i][t]) for i, t in members]], dtype=torch.float64)
        for (i, t), a in zip(members, group_advantages(row, eps)[0].tolist()):
            out[i][t] = a
    return out
