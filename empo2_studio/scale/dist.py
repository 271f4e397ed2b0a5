"""The process group of a data-parallel run, set up by accelerate from the launcher's environment.

torchrun (`python -m torch.distributed.run`) and `accelerate launch` both export RANK / WORLD_SIZE /
LOCAL_RANK / MASTER_ADDR / MASTER_PORT; `accelerate.PartialState` reads them and initialises
torch.distributed (gloo on CPU, nccl on CUDA). Everything here is a thin wrapper so the trainer and
the tests speak in floats and Python objects.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from empo2_studio.scale import launched_world_size


def wants_cpu(policy_device: str) -> bool:
    """Whether a run whose `policy.device` is `policy_device` joins with CPU + gloo: "cpu", or "auto"
    on a machine without CUDA ("cuda" and "auto" with CUDA take nccl and this rank's GPU)."""
    return policy_device == "cpu" or (policy_device == "auto" and not torch.cuda.is_available())


@dataclass(frozen=True)
class DistContext:
    """This process's place in the run: `rank` in [0, world_size), its `device`, the `backend`."""

    rank: int
    world_size: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        """Rank 0: the only process that writes the session."""
        return self.rank == 0

    @classmethod
    def from_env(cls, *, cpu: bool | None = None) -> DistContext:
        """Join the process group the launcher described (idempotent).

        Args:
            cpu: force CPU + gloo (`wants_cpu(policy.device)`: a CPU policy on a GPU machine must not
                join with nccl); None = CUDA (nccl) when available, else CPU (gloo).

        Raises:
            RuntimeError: WORLD_SIZE > 1 but no process group could be formed (not under a launcher).
        """
        from accelerate import PartialState

        use_cpu = (not torch.cuda.is_available()) if cpu is None else cpu
        state = PartialState(cpu=use_cpu)
        world = launched_world_size()
        if world > 1 and not dist.is_initialized():
            raise RuntimeError(
                f"WORLD_SIZE={world} but torch.distributed is not initialised; launch with "
                f"`torchrun --nproc_per_node {world} -m empo2_studio train …`"
            )
        device = torch.device("cpu") if use_cpu else state.device
        backend = dist.get_backend() if dist.is_initialized() else "none"
        return cls(rank=state.process_index, world_size=state.num_processes, device=device, backend=backend)

    # ---- collectives (no-ops with one process) -------------------------------------------------
    def _tensor(self, values: list[float]) -> torch.Tensor:
        dev = self.device if self.backend == "nccl" else torch.device("cpu")
        return torch.tensor(values, dtype=torch.float64, device=dev)

    def all_reduce(self, values: list[float], op: str = "sum") -> list[float]:
        """Element-wise sum / max / min of `values` over the ranks (float64)."""
        if self.world_size == 1:
            return list(values)
        ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
        if op not in ops:
            raise ValueError(f"op must be one of {list(ops)}, got {op!r}")
        t = self._tensor(list(values))
        dist.all_reduce(t, op=ops[op])
        return t.tolist()

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj` (picklable), in rank order."""
        if self.world_size == 1:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        if self.world_size == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()

    def close(self) -> None:
        """Leave the process group (end of the run), once every rank got here.

        The barrier keeps a rank from tearing the group down while a peer is still in a collective;
        the collection frees the DDP wrappers `GradSync.release` let go before the group goes.
        """
        if dist.is_initialized():
            self.barrier()
            gc.collect()
            dist.destroy_process_group()
