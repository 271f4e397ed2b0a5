"""torchrun worker: a data-parallel run of the trap env with the tiny model and the hash embedder.

argv: sessions root, "new" or "resume", iterations. Each rank writes rank<r>-<mode>.json with its pid,
iteration and a checksum of its LoRA weights (equal on every rank when the updates stayed in sync)."""

import json
import os
import sys
from pathlib import Path

import torch

from empo2_studio.config import EnvConfig, MemoryConfig, RolloutConfig, RunConfig, ScaleConfig, TrainConfig
from empo2_studio.memory import make_embedder
from empo2_studio.policy import build_tiny_policy
from empo2_studio.scale.dist import DistContext
from empo2_studio.scale.trainer import DistributedTrainer
from empo2_studio.sessions import Session

root, mode, iterations = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
torch.set_num_threads(1)
ctx = DistContext.from_env(cpu=True)
cfg = RunConfig(
    run_id="dp",
    env=EnvConfig(name="trap", task="trap-light-bulb", variations=(0, 1), step_limit=3),
    memory=MemoryConfig(embedder="hash", similarity_threshold=-1.0),
    # T = 3: at T = 1 the tiny random model plays "look around" at every step, and the test checks that
    # the two ranks played different episodes
    rollout=RolloutConfig(group_size=2, variations_per_iteration=2, p_memory=1.0, q_off_policy=0.5, train_temperature=3.0),
    train=TrainConfig(learning_rate=1e-2, checkpoint_every=1, iterations=iterations),
    scale=ScaleConfig(processes=ctx.world_size),
)
kw = dict(ctx=ctx, policy=build_tiny_policy(decoding="constrained", seed=0), embedder=make_embedder("hash"))
if mode == "new":
    if ctx.is_main:
        Session.create(root, cfg)
    ctx.barrier()
    trainer = DistributedTrainer(cfg, Session.open(root, "dp"), **kw)
else:
    trainer = DistributedTrainer.resume(Session.open(root, "dp"), **kw)
reports = trainer.train(iterations)
trainer.close()
lora = torch.cat([p.detach().reshape(-1) for p in trainer.policy.trainable_parameters()])
out = {"rank": ctx.rank, "pid": os.getpid(), "iteration": trainer.iteration, "lora": lora.double().sum().item(),
       "lora_abs": lora.double().abs().sum().item(), "reports": [r.iteration for r in reports],
       "modes": [r.update_mode for r in reports],
       "released": trainer.sync.engine is None and trainer.policy.train_forward is None}
(root / f"rank{ctx.rank}-{mode}.json").write_text(json.dumps(out))
ctx.close()
