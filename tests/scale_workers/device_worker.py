"""torchrun worker: join the process group for a run whose policy device is argv[2] on a machine that
claims CUDA (torch.cuda.is_available patched True); write this rank's device and backend to argv[1]."""

import json
import sys
from pathlib import Path

import torch

torch.cuda.is_available = lambda: True  # a GPU machine, as far as the device choice can tell

from empo2_studio.config import PolicyConfig, RunConfig  # noqa: E402
from empo2_studio.scale.launch import join  # noqa: E402

ctx = join(RunConfig(policy=PolicyConfig(device=sys.argv[2])))  # type: ignore[arg-type]
Path(sys.argv[1], f"rank{ctx.rank}.json").write_text(json.dumps(
    {"rank": ctx.rank, "world": ctx.world_size, "device": str(ctx.device), "backend": ctx.backend}))
ctx.close()
