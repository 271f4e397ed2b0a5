"""Which update mode an iteration uses (paper §4.2, App. F.1; method.md §1.1).

One draw per training iteration, so the whole batch shares one mode (as in Algorithm 1 and the recipe):
with probability p the rollouts use memory (tips in the prompt); a memory iteration is learned
off-policy (tips removed at update time) with probability q, otherwise on-policy with tips; the
remaining 1 − p iterations are plain on-policy (GRPO). Defaults p = 0.25, q = 2/3 give
P(off-policy) = 1/6, P(on-policy-with-tips) = 1/12, P(on-policy) = 3/4. p = 0 is exactly GRPO.
"""

from __future__ import annotations

import random

from empo2_studio.types import UpdateMode


def draw_update_mode(rng: random.Random, p_memory: float, q_off_policy: float) -> UpdateMode:
    """Draw one iteration's update mode from a single uniform number of `rng`.

    Args:
        rng: the run's seeded generator (one `rng.random()` call per draw, so runs replay exactly).
        p_memory: P(memory rollout), in [0, 1].
        q_off_policy: P(off-policy | memory rollout), in [0, 1].

    Returns:
        "off-policy" (prob p·q), "on-policy-with-tips" (p·(1 − q)) or "on-policy" (1 − p).

    Raises:
        ValueError: a probability outside [0, 1] (the rng is not advanced).
    """
    for name, value in (("p_memory", p_memory), ("q_off_policy", q_off_policy)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    u = rng.random()
    if u < p_memory * q_off_policy:
        return "off-policy"
    if u < p_memory:
        return "on-policy-with-tips"
    return "on-policy"
