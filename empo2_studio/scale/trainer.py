"""`DistributedTrainer`: the EMPO² iteration of `trainer.Trainer` over R data-parallel processes.

Per iteration (the same steps as `Trainer.step`, method.md §1.2):

1. every rank draws the same update mode and the same `variations_per_iteration` variations (the
   trainer's RNG is seeded identically and advanced identically on every rank);
2. rank r plays groups r, r + R, r + 2R, … of the iteration (group g's sampler is seeded from (run
   seed, iteration, g), so which rank plays a group does not change its episodes);
3. each episode writes its tip text on the rank that played it (reusing that rank's KV cache);
4. advantages are per group, so local; the update is `update.policy_update` with `GradSync`: the
   policy's model is wrapped in DDP (through accelerate), which all-reduces the gradients in the
   synchronised backward, and the result is normalised by the all-reduced global count, so every
   rank takes the one-process optimizer step;
5. the episodes are gathered in group order; rank 0 alone writes the session (episodes, the other
   ranks' tips, the metrics row, checkpoints); the other ranks open the same tip table read-only and
   see rank 0's writes from the next iteration on (a barrier ends each iteration).

Departures from one process: within one iteration a group does not see the tips written by groups
played on other ranks (in one process, later groups of an iteration see earlier groups' tips); each
rank keeps its own novelty memory (states its groups reached), checkpointed per rank, so a resume must
use the same number of processes; `time/*` are rank 0's.
"""

from __future__ import annotations

import pickle
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from empo2_studio.config import RunConfig
from empo2_studio.rollout import Timings, seed_policy
from empo2_studio.rollout.tip_writing import key_text
from empo2_studio.scale.sync import GradSync
from empo2_studio.trainer import STATE_FILE, Trainer
from empo2_studio.types import IterationReport, UpdateMode
from empo2_studio.update import policy_update

GROUP_SEED_MIX = 0x9E3779B1
"""Group g of an iteration seeds its sampler with (one-process seed) XOR (g × this) mod 2³²: torch's
CPU generator keeps only the low 32 bits of a seed, so an offset of g × 2³² would replay group 0."""


def group_seed(run_seed: int, iteration: int, group: int) -> int:
    """The sampler seed of group `group` of `iteration` (group 0: the one-process trainer's seed)."""
    return ((run_seed * 1_000_003 + iteration) ^ (group * GROUP_SEED_MIX)) % 2**32


class ReadOnlySession:
    """A session as ranks > 0 see it: every read goes to the real session, every write is dropped
    (rank 0 writes the one copy)."""

    def __init__(self, session: Any) -> None:
        self._session = session

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def append_metrics(self, row: dict[str, Any]) -> None:
        pass

    def append_episodes(self, episodes: Any) -> None:
        pass

    def mark_resumed(self, iteration: int) -> None:
        pass

    def set_state(self, state: dict[str, Any]) -> None:
        pass

    def write_checkpoint(self, iteration: int, save: Callable[[Path], None]) -> Path:
        raise RuntimeError("only rank 0 writes checkpoints")


class ReadOnlyStore:
    """The tip table as ranks > 0 see it: retrieval reads the session's table, tip writes are dropped
    here and stored by rank 0 from the gathered episodes."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def add_episode_tips(self, episode: Any, tip_text: str, key_text: str) -> list:
        return []


class _AgreedStop:
    """A stop event read by every rank at once: `is_set` is True on all ranks when any rank's `stop`
    is set (an all-reduce; `Trainer.train` asks once per iteration on every rank)."""

    def __init__(self, sync: GradSync, stop: threading.Event | None) -> None:
        self.sync, self.stop = sync, stop

    def is_set(self) -> bool:
        return self.sync.any(self.stop is not None and self.stop.is_set())


class DistributedTrainer(Trainer):
    """`Trainer` over the ranks of `ctx` (a `dist.DistContext`); same arguments plus `ctx`.

    With world size 1 it is the one-process trainer plus the vLLM / Ray options of `cfg.scale`.
    """

    def __init__(self, cfg: RunConfig, session: Any, *, ctx: Any, policy: Any | None = None,
                 embedder: Any | None = None) -> None:  # fmt: skip
        from empo2_studio.memory import make_embedder, open_tip_store

        self.ctx = ctx
        embedder = embedder if embedder is not None else make_embedder(cfg.memory.embedder)
        if ctx.is_main:  # rank 0 creates the tip table before anyone opens it
            open_tip_store(session.tips_path, embedder, cfg.memory, env=cfg.env)
        ctx.barrier()
        if not ctx.is_main and not isinstance(session, ReadOnlySession):
            session = ReadOnlySession(session)
        if policy is None and cfg.scale.sampler == "vllm":
            from empo2_studio.policy import load_policy
            from empo2_studio.scale.vllm_sampler import VLLMPolicy

            policy = VLLMPolicy(load_policy(cfg.policy), cfg.scale.vllm_urls)
        super().__init__(cfg, session, policy=policy, embedder=embedder)
        if not ctx.is_main:
            self.store = ReadOnlyStore(self.store)
        self.sync = GradSync(ctx)
        self.sync.wrap(self.policy)  # DDP with several processes; the optimizer keeps the same parameters
        self.settings = replace(self.settings, sync=self.sync)
        self._pool: Any = None
        self._publish_adapter()  # vLLM: the servers start from the weights the local model starts from

    # ---- resources ---------------------------------------------------------------------------
    def envs(self, n: int) -> list[Any]:
        """The env pool; with `scale.env_pool = "ray"` each instance lives in a Ray worker process."""
        if self.cfg.scale.env_pool != "ray":
            return super().envs(n)
        from empo2_studio.scale.ray_pool import RayEnvPool

        if self._pool is None:
            self._pool = RayEnvPool(self.cfg.env, address=self.cfg.scale.ray_address or None)
        return self._pool.envs(n)

    def close(self) -> None:
        super().close()
        self.sync.release()
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    # ---- one iteration -----------------------------------------------------------------------
    def step(self, *, forced_mode: UpdateMode | None = None) -> IterationReport:
        """One iteration over all ranks (module docstring); every rank returns rank 0's report."""
        t_start = time.perf_counter()
        mode, variations = self.begin_iteration(forced_mode)
        mine = list(range(self.ctx.rank, len(variations), self.ctx.world_size))
        timings = Timings()
        groups = []
        for g in mine:
            seed_policy(self.policy, group_seed(self.cfg.seed, self.iteration, g))
            groups.append(self._play_training_group(variations[g], mode, timings, []))
        episodes = [ep for grp in groups for ep in grp]
        advantages = self._advantages(groups) if groups else []
        self._phase(f"{mode} update: re-scoring {len(episodes)} episodes on rank {self.ctx.rank}")
        sync_before = self.sync.seconds
        metrics = policy_update(self.policy, self.optimizer, episodes, advantages, mode, self.settings)
        metrics["time/allreduce"] = self.sync.seconds - sync_before
        self.name_weights(metrics)  # a vLLM sampler takes the served adapter's name below instead
        t0 = time.perf_counter()
        gathered = self.ctx.all_gather((mine, groups))
        by_index = {g: grp for idx, grps in gathered for g, grp in zip(idx, grps)}
        all_episodes = [ep for g in sorted(by_index) for ep in by_index[g]]
        if self.ctx.is_main:  # tips of the groups other ranks played
            for rank, (_, grps) in enumerate(gathered):
                if rank == 0:
                    continue
                for ep in (ep for grp in grps for ep in grp):
                    if ep.tip and ep.tip.strip():
                        self.store.add_episode_tips(ep, ep.tip, key_text(ep))
        self._publish_adapter()
        metrics["time/gather"] = time.perf_counter() - t0
        metrics["scale/processes"] = float(self.ctx.world_size)
        metrics = self.ctx.broadcast(self.iteration_metrics(metrics, all_episodes, mode, timings, t_start))
        report = self._record("train", mode, metrics, all_episodes)
        self.ctx.barrier()  # rank 0's writes are on disk before any rank plays the next iteration
        return report

    def _publish_adapter(self) -> None:
        """vLLM sampling: rank 0 saves the updated adapter and loads it on the servers; every rank
        then samples with that adapter version (no-op for the local sampler)."""
        if not hasattr(self.policy, "publish_adapter"):
            return
        # A fresh name every time (a resumed run re-publishes an iteration a server may still hold).
        name = self.ctx.broadcast(f"{self.session.run_id}-it{self.iteration:06d}-{uuid.uuid4().hex[:6]}")
        path = self.session.dir / "served" / name
        if self.ctx.is_main:
            self.policy.save_adapter(str(path))
        self.ctx.barrier()
        self.policy.publish_adapter(str(path), name, load=self.ctx.is_main)
        self.ctx.barrier()

    def train(self, iterations: int, *, stop: threading.Event | None = None,
              on_report: Callable[[IterationReport], None] | None = None) -> list[IterationReport]:  # fmt: skip
        """`Trainer.train`, where the ranks agree on stopping: any rank's stop event stops all."""
        return super().train(iterations, stop=_AgreedStop(self.sync, stop), on_report=on_report)

    def distill(self, episode_ids: Any) -> IterationReport:
        raise NotImplementedError("distill runs in one process: `empo2-studio distill --session RUN_ID …`")

    # ---- checkpoints -------------------------------------------------------------------------
    def save_checkpoint(self) -> Path:
        """Rank 0 writes the adapter and the trainer state (with every rank's novelty memory)."""
        novelty = self.ctx.all_gather(pickle.dumps(self._novelty))
        path = self.session.adapter_dir(self.iteration)
        if self.ctx.is_main:
            state = {
                "iteration": self.iteration, "rng": self.rng.getstate(), "optimizer": self.optimizer.state_dict(),
                "novelty": novelty[0], "novelty_ranks": novelty, "processes": self.ctx.world_size,
            }  # fmt: skip

            def save(tmp: Path) -> None:
                self.policy.save_adapter(str(tmp))
                torch.save(state, tmp / STATE_FILE)

            path = self.session.write_checkpoint(self.iteration, save)
            self.session.set_state({**self.session.state(), "iteration": self.iteration, "checkpoint": str(path.relative_to(self.session.dir))})
        self.ctx.barrier()
        self.saved = (self.iteration, path)
        return path

    @classmethod
    def resume(cls, session: Any, **kw: Any) -> DistributedTrainer:
        """`Trainer.resume` on every rank (rank 0 alone appends the resume row), then each rank takes
        back its own novelty memory. Raises ValueError as `Trainer.resume`, or when the checkpoint was
        written by another number of processes."""
        ctx = kw["ctx"]
        view = session if ctx.is_main else ReadOnlySession(session)
        trainer = super().resume(view, **kw)
        state = torch.load(session.adapter_dir(trainer.iteration) / STATE_FILE, weights_only=False, map_location="cpu")
        ranks = state.get("novelty_ranks", [state["novelty"]])
        if len(ranks) != ctx.world_size:
            raise ValueError(f"the checkpoint was written by {len(ranks)} process(es); resume it with {len(ranks)}, not {ctx.world_size}")
        trainer._novelty = pickle.loads(ranks[ctx.rank])
        trainer._publish_adapter()  # vLLM: serve the checkpoint's adapter
        return trainer
