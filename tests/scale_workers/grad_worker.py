"""torchrun worker: this rank's share of the fixed batch → gradient under GradSync (global and
per-rank normaliser), saved with the rank's pid so the test can prove two processes ran."""

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
result = {"rank": ctx.rank, "world": ctx.world_size, "backend": ctx.backend, "pid": os.getpid()}
for normalizer in ("global", "per-rank"):
    grads, metrics = update_gradient(policy, mine, adv, GradSync(ctx, normalizer=normalizer))
    result[normalizer] = grads
    result[f"{normalizer}/metrics"] = metrics
torch.save(result, out / f"rank{ctx.rank}.pt")
ctx.close()
