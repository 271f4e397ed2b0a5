"""torchrun worker: this rank's share of the fixed batch → gradient through DDP (accelerate) under
GradSync's global and per-rank normalisers, one micro-batch per episode (rank 0 runs 1 micro-batch, rank
1 runs 3), plus a batch where rank 0 has no episode at all (its zero-weight synced pass); saved with the
rank's pid and the engine's counters so the test can prove two processes ran and DDP reduced."""

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ for scale_cases

from scale_cases import ADVANTAGES, SHARDS, load_batch, perturb_lora, update_gradient  # noqa: E402

from empo2_studio.policy import build_tiny_policy  # noqa: E402
from empo2_studio.scale.dist import DistContext  # noqa: E402
from empo2_studio.scale.sync import GradSync  # noqa: E402

batch, out = Path(sys.argv[1]), Path(sys.argv[2])
torch.set_num_threads(1)
ctx = DistContext.from_env(cpu=True)
policy = build_tiny_policy(decoding="constrained", seed=0)
perturb_lora(policy)
episodes = load_batch(batch)
idx = SHARDS[ctx.rank]
mine, adv = [episodes[i] for i in idx], [ADVANTAGES[i] for i in idx]
sync = GradSync(ctx)
sync.wrap(policy)  # one DDP wrapper for the whole run (a second would register a second set of hooks)
result = {"rank": ctx.rank, "world": ctx.world_size, "backend": ctx.backend, "pid": os.getpid(),
          "engine": type(sync.engine).__name__, "train_forward": policy.train_forward is sync.engine}
for normalizer in ("global", "per-rank"):
    sync.normalizer = normalizer
    calls, passes = sync.calls, sync.synced_passes
    grads, metrics = update_gradient(policy, mine, adv, sync, micro_batch_episodes=1)
    result[normalizer] = grads
    result[f"{normalizer}/metrics"] = metrics
    result[f"{normalizer}/bucket_allreduces"] = sync.calls - calls
    result[f"{normalizer}/synced_passes"] = sync.synced_passes - passes
sync.normalizer = "global"
own = [] if ctx.rank == 0 else mine  # rank 0 has nothing to train: its zero pass joins rank 1's reduction
grads, metrics = update_gradient(policy, own, [] if ctx.rank == 0 else adv, sync, micro_batch_episodes=1)
result["empty-rank0"], result["empty-rank0/metrics"] = grads, metrics
torch.save(result, out / f"rank{ctx.rank}.pt")
sync.release()
ctx.close()
