"""`GradSync`: what makes one data-parallel update equal the one-process update (design.md §11).

The update (`update._one_pass`) takes each micro-batch's loss as a *sum* over its tokens (normaliser 1)
and divides the accumulated gradient by the count at the end. With R ranks, rank r holds the gradient
sum g_r = Σ_{tokens of r} ∇ℓ_t and the count n_r. The one-process gradient over the union is

    ∇L = (Σ_r g_r) / (Σ_r n_r)            ("global": what this module computes)

whereas averaging per-rank means (what a DDP engine does with a locally normalised loss) gives

    ∇L' = (1/R) Σ_r g_r / n_r             ("per-rank": wrong whenever the n_r differ)

so `reduce_pass` all-reduces (SUM) the counts, the metric sums and one flat buffer of every trainable
gradient, and leaves the update to divide by the global count. All ranks end with identical gradients
and identical clipped norms, so the identical AdamW steps keep their weights identical. "per-rank" is
kept only to show, in the tests, that the normaliser matters.

The count is tokens for `token-mean` and rows for the seq-mean aggregations (`update._local_count`).
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
import torch.distributed as dist

RATIO_SUMMED = ("ratio/mean", "ratio/clip_frac_low", "ratio/clip_frac_high", "ratio/dual_clip_frac", "ratio/approx_kl")
"""Ratio metrics the update averages with token weights (max and min are reduced by max / min)."""

NORMALIZERS = ("global", "per-rank")


class GradSync:
    """The reductions `update.policy_update` runs when `UpdateSettings.sync` is set.

    Args:
        ctx: a `dist.DistContext` (rank, world size, collectives).
        normalizer: "global" (correct) or "per-rank" (the DDP-of-local-means mistake, for tests).

    Attributes:
        seconds: wall time spent in the collectives since creation (the all-reduce cost).
        calls: how many gradient all-reduces ran.

    Raises:
        ValueError: unknown `normalizer`.
    """

    def __init__(self, ctx: Any, *, normalizer: str = "global") -> None:
        if normalizer not in NORMALIZERS:
            raise ValueError(f"normalizer must be one of {list(NORMALIZERS)}, got {normalizer!r}")
        self.ctx = ctx
        self.normalizer = normalizer
        self.seconds = 0.0
        self.calls = 0

    def any(self, flag: bool) -> bool:
        """True when `flag` is true on at least one rank."""
        return self._timed(lambda: self.ctx.all_reduce([1.0 if flag else 0.0], "max"))[0] > 0.0

    def sum(self, value: float) -> float:
        """Σ over the ranks of `value`."""
        return self._timed(lambda: self.ctx.all_reduce([float(value)], "sum"))[0]

    def reduce_pass(self, sums: Any, params: list[torch.Tensor], finite: bool) -> bool:
        """Make `sums` (update._Sums) and the gradients of `params` those of the whole batch.

        After it, `sums.count` is the global count (Σ n_r; 1.0 under "per-rank", whose gradient is
        then already normalised), every metric sum is global, ratio max/min are global, and each
        `p.grad` is Σ_r g_r (a zero tensor where a rank had no gradient). Returns the global
        finiteness: False on every rank if the loss was non-finite on any rank.
        """
        t0 = time.perf_counter()
        ratio_keys = [k for k in RATIO_SUMMED]
        local_count = sums.count
        vec = [1.0 if finite else 0.0, sums.count, sums.loss_sum, sums.kl_sum, float(sums.tokens),
               float(sums.dropped), float(sums.valid), float(sums.rows), sums.weight,
               1.0 if sums.ratio else 0.0] + [sums.ratio.get(k, 0.0) for k in ratio_keys]  # fmt: skip
        total = self.ctx.all_reduce(vec, "sum")
        hi = self.ctx.all_reduce([sums.ratio.get("ratio/max", -math.inf), -sums.ratio.get("ratio/min", math.inf)], "max")
        all_finite = total[0] == float(self.ctx.world_size)
        sums.count, sums.loss_sum, sums.kl_sum = total[1], total[2], total[3]
        sums.tokens, sums.dropped, sums.valid, sums.rows = (int(round(x)) for x in total[4:8])
        sums.weight = total[8]
        if total[9] > 0:  # some rank trained tokens: the ratio metrics exist
            sums.ratio = dict(zip(ratio_keys, total[10:]))
            sums.ratio["ratio/max"], sums.ratio["ratio/min"] = hi[0], -hi[1]
        self._reduce_grads(params, local_count)
        if self.normalizer == "per-rank":
            sums.count = 1.0
        self.seconds += time.perf_counter() - t0
        return all_finite

    def _reduce_grads(self, params: list[torch.Tensor], local_count: float) -> None:
        """One all-reduce (SUM) of every gradient, flattened into a single buffer."""
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if self.ctx.world_size == 1 and self.normalizer == "global":
            return
        flat = torch.cat([p.grad.reshape(-1).to(torch.float32) for p in params])
        if self.normalizer == "per-rank":
            flat = flat / max(local_count, 1.0) / self.ctx.world_size
        if self.ctx.backend != "nccl":
            flat = flat.cpu()
        if self.ctx.world_size > 1:
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        self.calls += 1
        offset = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(flat[offset : offset + n].view_as(p.grad).to(p.grad.device, p.grad.dtype))
            offset += n

    def _timed(self, fn: Any) -> Any:
        t0 = time.perf_counter()
        out = fn()
        self.seconds += time.perf_counter() - t0
        return out
