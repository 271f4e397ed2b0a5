"""Scale-out on existing engines: data-parallel training (torch.distributed, launched by torchrun or
`accelerate launch`), rollouts sampled by vLLM servers, env instances in Ray worker processes.

The algorithm code is the single-process code: `update.policy_update` with a `GradSync` (the model in
DDP through accelerate, which reduces the gradients; the global token normaliser), `rollout.play_group`
on each rank's share of the groups, the same sessions. `scale.strategy` "fsdp" is refused (`FSDP_REFUSAL`).

Modules: `dist` (process group, collectives) · `sync` (GradSync: DDP wrapping, no_sync, the update's count reductions) · `trainer`
(DistributedTrainer: shards groups, rank 0 writes the session) · `launch` (the `train` command under a
launcher) · `vllm_sampler` (a `Policy` whose `sample` asks vLLM) · `ray_pool` (TextEnv proxies on Ray).
The single-process path imports only this file (stdlib): `needs_scale_path`, `check_launch`.
"""

from __future__ import annotations

import os
from typing import Any


FSDP_REFUSAL = (
    "scale.strategy 'fsdp' is not supported yet: FSDP all-gathers the sharded weights in every forward, "
    "so every rank must run the same forwards in the same order, but each rank here samples, writes tips "
    "and scores its own groups (different episode lengths, different numbers of forwards), which would "
    "deadlock; on CPU accelerate does not offer FSDP at all (a multi-CPU run is always DDP). "
    "Use scale.strategy 'ddp' (the default)"
)
"""Why `scale.strategy = "fsdp"` is refused at launch (also in docs/scale-out.md)."""


def launched_world_size() -> int:
    """WORLD_SIZE as exported by torchrun / accelerate launch (1 when not launched). ValueError if bad."""
    raw = os.environ.get("WORLD_SIZE", "1")
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"WORLD_SIZE must be a positive integer, got {raw!r}") from None
    if n < 1:
        raise ValueError(f"WORLD_SIZE must be a positive integer, got {raw!r}")
    return n


def needs_scale_path(cfg: Any) -> bool:
    """True when `train` must run through `scale.launch`: several processes, vLLM, or a Ray pool."""
    return launched_world_size() > 1 or cfg.scale.sampler != "hf" or cfg.scale.env_pool != "local"


def check_launch(cfg: Any, world_size: int, *, resuming: bool) -> None:
    """ValueError naming the mismatch when the launcher's process count does not fit the run.

    A new run records the launched count in `scale.processes` (a default of 1 is filled in); a
    resumed run must be launched with the count it was trained with (each rank's novelty memory is
    checkpointed per rank); every process plays whole groups, so it needs
    `rollout.variations_per_iteration` ≥ processes; `scale.strategy` "fsdp" is refused (below).
    """
    if cfg.scale.strategy == "fsdp":
        raise ValueError(FSDP_REFUSAL)
    want = cfg.scale.processes
    if want != world_size and (resuming or want != 1):
        how = f"torchrun --nproc_per_node {want} -m empo2_studio train" if want > 1 else "empo2-studio train"
        what = "session was trained with" if resuming else "config asks for"
        raise ValueError(
            f"scale.processes: the {what} {want} process(es) but {world_size} were launched; run `{how} …`"
        )
    if world_size > 1 and cfg.rollout.variations_per_iteration < world_size:
        raise ValueError(
            f"rollout.variations_per_iteration must be ≥ the {world_size} processes (each plays whole "
            f"groups), got {cfg.rollout.variations_per_iteration}"
        )
