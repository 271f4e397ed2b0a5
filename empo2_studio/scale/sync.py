"""`GradSync`: what makes one data-parallel update equal the one-process update (design.md §11).

The update (`update._one_pass`) takes each micro-batch's loss as a *sum* over its tokens (normaliser 1)
and divides the accumulated gradient by the count at the end. With R ranks, rank r holds the gradient
sum g_r = Σ_{tokens of r} ∇ℓ_t and the count n_r. The one-process gradient over the union is

    ∇L = (Σ_r g_r) / (Σ_r n_r)            ("global": what this module gives)

whereas averaging per-rank means (DDP over a locally normalised loss) gives

    ∇L' = (1/R) Σ_r g_r / n_r             ("per-rank": wrong whenever the n_r differ)

The gradients are reduced by the engine: `wrap` puts the policy's model in torch
`DistributedDataParallel` through `accelerate.Accelerator.prepare_model` (gloo on CPU, nccl on CUDA),
and grad-enabled scoring runs through that wrapper (`HFPolicy.train_forward`). DDP's reducer
all-reduces the gradient buckets during the backward pass, overlapped with it. Its stock hook takes
the mean over ranks, (1/R) Σ_r g_r; the update multiplies by R and divides by the all-reduced count
N = Σ_r n_r (`reduce_pass`), i.e. it scales the per-rank loss by R / N, so the step uses ∇L exactly
(×R is exact in binary floating point for R a power of two). "per-rank" (kept only to show, in the
tests, that the normaliser matters) installs a comm hook that divides each rank's buckets by its own
n_r before DDP's mean, and the update then divides by 1.

Uneven micro-batches: ranks play different groups, so they run different numbers of micro-batch
backward passes. Every micro-batch but a rank's last runs under `no_sync` (gradients accumulate
locally, no collective); the last one is synchronised, so every rank issues exactly one set of bucket
all-reduces per optimizer pass whatever its micro-batch count. A rank with no micro-batch (every turn
over the length limit) or with a non-finite loss runs one zero-weight synchronised pass instead
(`zero_pass`), so its peers never wait on it; a non-finite loss on any rank then skips the step on
all of them (the finiteness flag is all-reduced).

The counts and metric sums are all-reduced here too (one float64 vector): the count is tokens for
`token-mean` and rows for the seq-mean aggregations (`update._local_count`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
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
        engine: the DDP-wrapped model after `wrap` (None with one process: nothing to reduce).
        seconds: wall time spent in the count / metric collectives since creation (the gradient
            all-reduce runs inside the backward pass, overlapped; it is not in here).
        calls: gradient buckets DDP's reducer has all-reduced (counted by the comm hook).
        synced_passes: synchronised backward passes this rank ran (one per optimizer pass).

    Raises:
        ValueError: unknown `normalizer`.
    """

    def __init__(self, ctx: Any, *, normalizer: str = "global") -> None:
        if normalizer not in NORMALIZERS:
            raise ValueError(f"normalizer must be one of {list(NORMALIZERS)}, got {normalizer!r}")
        self.ctx = ctx
        self.normalizer = normalizer
        self.engine: Any = None
        self.accelerator: Any = None
        self._target: Any = None
        self.seconds = 0.0
        self.calls = 0
        self.synced_passes = 0
        self._local_count = 1.0

    # ---- the engine --------------------------------------------------------------------------
    def wrap(self, policy: Any) -> Any:
        """Wrap `policy.model` in DDP (through accelerate) and route its grad-enabled scoring through it.

        No-op with one process. Returns the policy. Raises TypeError when the policy has no torch
        module to wrap (DDP needs the forward that produces the gradients).
        """
        if self.ctx.world_size == 1:
            return policy
        target = getattr(policy, "local", policy)  # VLLMPolicy trains its local HFPolicy
        model = getattr(target, "model", None)
        if not isinstance(model, torch.nn.Module) or not hasattr(target, "train_forward"):
            raise TypeError(f"data parallelism needs a policy with a torch `model` and `train_forward`, got {type(target).__name__}")
        from accelerate import DistributedDataParallelKwargs

        # broadcast_buffers=False: DDP would otherwise broadcast buffers at every grad-enabled forward,
        # and ranks run different numbers of forwards (one per conversation); the buffers (rotary
        # tables) are constants. find_unused_parameters=False: every forward reaches every LoRA weight.
        ddp_kwargs = DistributedDataParallelKwargs(broadcast_buffers=False, find_unused_parameters=False)
        self.accelerator = make_accelerator(cpu=self.ctx.device.type == "cpu", kwargs_handlers=[ddp_kwargs])
        engine = self.accelerator.prepare_model(model, device_placement=False)
        if not isinstance(engine, torch.nn.parallel.DistributedDataParallel):
            raise RuntimeError(f"accelerate did not wrap the model in DDP (distributed type {self.accelerator.distributed_type})")
        engine.register_comm_hook(self, _counting_hook)
        self.engine = engine
        self._target = target
        target.train_forward = engine
        return policy

    def release(self) -> None:
        """Unwrap the model and drop DDP and the accelerator (end of a run; idempotent).

        Why: DDP's reducer holds the process group and this object (its comm-hook state). Left alive
        until interpreter exit, gloo's threads outlive Python's finalisation and the process can abort
        ("terminate called without an active exception"); released here, they go before
        `DistContext.close` destroys the group.
        """
        if self.engine is None:
            return
        self._target.train_forward = None
        if self.accelerator is not None:
            self.accelerator.free_memory()
        self.engine = self.accelerator = self._target = None

    @contextlib.contextmanager
    def micro_batch(self, last: bool) -> Iterator[None]:
        """Context of one micro-batch's forward + backward: DDP's `no_sync` unless `last` (the forward
        must be inside it too: DDP arms its reducer in the forward)."""
        if self.engine is None:
            yield
            return
        if last:
            yield
            return
        with self.accelerator.no_sync(self.engine):
            yield

    def before_synced_backward(self, local_count: float) -> None:
        """Record this rank's count n_r (all micro-batches) for the "per-rank" comm hook."""
        self._local_count = max(float(local_count), 1.0)
        self.synced_passes += 1

    def zero_pass(self) -> None:
        """A zero-weight synchronised forward + backward on a 1-token input: this rank's share of the
        bucket all-reduces when it has no micro-batch to train or stopped at a non-finite loss."""
        if self.engine is None:
            return
        dev = next(self.engine.parameters()).device
        x = torch.zeros((1, 1), dtype=torch.long, device=dev)
        self._local_count = 1.0
        self.synced_passes += 1
        out = self.engine(input_ids=x, use_cache=False, logits_to_keep=1).logits
        (out.float().sum() * 0.0).backward()  # every LoRA weight gets a zero gradient: hooks fire

    # ---- counts and metrics ------------------------------------------------------------------
    def any(self, flag: bool) -> bool:
        """True when `flag` is true on at least one rank."""
        return self._timed(lambda: self.ctx.all_reduce([1.0 if flag else 0.0], "max"))[0] > 0.0

    def sum(self, value: float) -> float:
        """Σ over the ranks of `value`."""
        return self._timed(lambda: self.ctx.all_reduce([float(value)], "sum"))[0]

    def reduce_pass(self, sums: Any, params: list[torch.Tensor], finite: bool) -> bool:
        """Make `sums` (update._Sums) global and the gradients of `params` ready for ÷ `sums.count`.

        Called after the pass's synchronised backward, so each `p.grad` is DDP's mean over the ranks.
        After it, `sums.count` is the global count (Σ n_r; 1.0 under "per-rank", whose gradient is
        then already normalised), every metric sum is global, ratio max/min are global, and each
        `p.grad` is Σ_r g_r (global). Returns the global finiteness: False on every rank if the loss
        was non-finite on any rank.
        """
        t0 = time.perf_counter()
        ratio_keys = list(RATIO_SUMMED)
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
        for p in params:
            if p.grad is None:  # only without an engine (one process): a weight no token reached
                p.grad = torch.zeros_like(p)
        if self.engine is not None and self.normalizer == "global":
            for p in params:  # DDP's mean (1/R) Σ g_r → Σ g_r; the update divides by N
                p.grad.mul_(self.ctx.world_size)
        if self.normalizer == "per-rank":
            if self.engine is None:  # one process: its own count is the global one
                for p in params:
                    p.grad.div_(self._local_count)
            sums.count = 1.0
        self.seconds += time.perf_counter() - t0
        return all_finite

    def _timed(self, fn: Any) -> Any:
        t0 = time.perf_counter()
        out = fn()
        self.seconds += time.perf_counter() - t0
        return out


def make_accelerator(*, cpu: bool, kwargs_handlers: list[Any]) -> Any:
    """The `accelerate.Accelerator` that wraps the model: mixed precision "no" whatever the user's
    `accelerate config` or ACCELERATE_MIXED_PRECISION says, so forwards under `accelerate launch`
    run in the model's own dtype as under torchrun (an autocast would change the scored log-probs
    against the sampled ones; the CUDA model is already bf16: `loading.compute_dtype`)."""
    from accelerate import Accelerator

    return Accelerator(cpu=cpu, mixed_precision="no", kwargs_handlers=kwargs_handlers)


def _counting_hook(sync: GradSync, bucket):  # type: ignore[no-untyped-def]
    """DDP comm hook: the stock mean all-reduce (`default_hooks.allreduce_hook`), counted; under the
    "per-rank" normaliser each rank first divides its bucket by its own count n_r.

    `bucket` (a `dist.GradBucket`) and the return (a Future of the reduced flat tensor) carry no
    annotation: DDP inspects them, and under `from __future__ import annotations` they are strings it
    refuses."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    sync.calls += 1
    if sync.normalizer == "per-rank":
        bucket.buffer().div_(sync._local_count)
    return default_hooks.allreduce_hook(None, bucket)  # type: ignore[arg-type]  # None = the default group
