"""The studio's one model: loading it (`ModelLoader`) and what weights it holds (`ModelSlot`).

The process holds one policy; sessions take turns putting their weights into it. `ModelSlot.loaded`
records whose weights those are as a typed value (`Weights`), and `ModelSlot.swap` is the only way to
change them: it first saves the live trainer's weights as a checkpoint (so nothing trained is lost),
then loads the target. Each class has one lock and calls the other (and the session/env caches) only
before taking its own, so no lock is ever taken inside another's.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from empo2_studio.config import PolicyConfig


class ModelLoader:
    """Loads the shared policy and embedder once, on first use (the first conversion of the embedded
    model takes about half a minute, so the studio runs it in a job that shows progress)."""

    def __init__(self, policy: str | Any, embedder: str | Any, *, policy_config: PolicyConfig) -> None:
        """
        Args:
            policy: "real" (load `policy_config`), "tiny" (random-init test model) or a ready `Policy`.
            embedder: an embedder name ("minilm", "hash") or a ready `Embedder`.
            policy_config: what "real" loads (the default session's policy config).
        """
        self._policy_spec = policy
        self._embedder_spec = embedder
        self._policy_config = policy_config
        self._policy: Any = None if isinstance(policy, str) else policy
        self._embedder: Any = None if isinstance(embedder, str) else embedder
        self._fresh: Path | None = None
        self._lock = threading.Lock()

    @property
    def policy_spec(self) -> str | Any:
        """What the policy was asked as: "real", "tiny" or the ready `Policy` object."""
        return self._policy_spec

    @property
    def policy_config(self) -> PolicyConfig:
        """What "real" loads."""
        return self._policy_config

    @property
    def ready(self) -> bool:
        """Both the policy and the embedder are loaded."""
        return self._policy is not None and self._embedder is not None

    def embedder(self) -> Any:
        """The shared embedder (built and loaded on first use)."""
        if self._embedder is None:
            from empo2_studio.memory import make_embedder

            with self._lock:
                if self._embedder is None:
                    embedder = make_embedder(self._embedder_spec)
                    if hasattr(embedder, "load"):
                        embedder.load()  # while the banner shows progress, not at the first retrieval
                    self._embedder = embedder
        return self._embedder

    def policy(self) -> Any:
        """The shared policy (loaded on first use, with a copy of its untrained adapter saved, see
        `fresh_adapter`). Callers that sample or train must hold `jobs.model_lock`."""
        if self._policy is None or self._fresh is None:
            with self._lock:
                if self._policy is None:
                    self._policy = self._load_policy()
                if self._fresh is None:
                    fresh = Path(tempfile.mkdtemp(prefix="empo2-fresh-adapter-"))
                    # Removed with the loader or at exit: one studio launch must not leave a folder behind.
                    weakref.finalize(self, shutil.rmtree, fresh, ignore_errors=True)
                    self._policy.save_adapter(str(fresh))
                    self._fresh = fresh
        return self._policy

    def fresh_adapter(self) -> Path:
        """Folder of the untrained adapter saved when the policy was loaded (new sessions and the race
        start from it, so none inherits another session's weights)."""
        self.policy()
        assert self._fresh is not None
        return self._fresh

    def _load_policy(self) -> Any:
        if self._policy_spec == "tiny":
            from empo2_studio.policy import build_tiny_policy

            return build_tiny_policy()
        from empo2_studio.policy import load_policy

        return load_policy(self._policy_config)


@dataclass(frozen=True, slots=True)
class TrainerWeights:
    """The weights of session `run_id`'s live trainer (they change as it trains)."""

    run_id: str


@dataclass(frozen=True, slots=True)
class CheckpointWeights:
    """The weights saved in checkpoint folder `path` of session `run_id` (frozen)."""

    run_id: str
    path: str


Weights: TypeAlias = TrainerWeights | CheckpointWeights | None
"""What the shared policy holds; None = the untrained (fresh) adapter."""


@dataclass(frozen=True, slots=True)
class Swap:
    """What `ModelSlot.swap` did."""

    loaded: Weights
    """The weights the policy holds now (the target)."""
    saved: Path | None
    """The checkpoint written for the trainer whose weights were swapped out; None when none was live or
    it had trained nothing since its last checkpoint."""
    trainer: Any | None
    """The live trainer when the target is `TrainerWeights`, else None."""


def build_trainer(session: Any, *, policy: Any, embedder: Any, envs: Any, from_fresh: Path | None) -> Any:
    """A `Trainer` for `session` on the shared policy: resumed from its latest checkpoint when it has
    one, else new, after loading `from_fresh` (the untrained adapter) when that is not None."""
    from empo2_studio.trainer import Trainer

    kw = {"policy": policy, "embedder": embedder, "envs": envs}
    if session.latest_checkpoint() is not None:
        return Trainer.resume(session, **kw)
    if from_fresh is not None:
        policy.load_adapter(str(from_fresh))
    return Trainer(session.config, session, **kw)


class ModelSlot:
    """Which weights the shared policy holds, the one live trainer on them, and one `TipStore` per
    session (the live trainer's own store for its session, so an edit in the Tips tab is what its next
    episode retrieves).

    Invariant: a trainer is live exactly when `loaded` is `TrainerWeights` of its session.
    """

    def __init__(
        self,
        loader: ModelLoader,
        *,
        session: Callable[[str], Any],
        envs: Callable[[str], Any],
        open_store: Callable[[Any, Any], Any] | None = None,
        new_trainer: Callable[..., Any] = build_trainer,
    ) -> None:
        """
        Args:
            loader: the shared model.
            session: run id → `Session` (the session cache).
            envs: run id → the session's `EnvPool` (the env cache).
            open_store: (session, embedder) → `TipStore`; None = `TipStore.open` on the session's tips.
            new_trainer: builds a trainer, signature of `build_trainer` (tests pass a fake).
        """
        self._loader = loader
        self._session = session
        self._envs = envs
        self._open_store = open_store or _open_tip_store
        self._new_trainer = new_trainer
        self._lock = threading.RLock()  # re-entered by `trainer` → `swap`
        self._loaded: Weights = None
        self._live: Any | None = None
        self._stores: dict[str, Any] = {}

    @property
    def loaded(self) -> Weights:
        """The weights the shared policy holds now."""
        return self._loaded

    def swap(self, target: Weights) -> Swap:
        """Put `target` into the shared policy. Call with `jobs.model_lock` held.

        In order: (1) when a trainer is live and the target is not its weights, its unsaved progress (if
        it trained since its last checkpoint) is saved as a checkpoint (returned as `Swap.saved`) and
        the trainer is closed (the next
        `TrainerWeights` swap of its session resumes from that checkpoint); (2) the target is loaded:
        the fresh adapter, the checkpoint folder, or the session's trainer (resumed from its latest
        checkpoint, or new on the fresh adapter). Swapping to the live trainer's own weights is a no-op.

        Raises:
            ValueError: the target's adapter belongs to another base model / LoRA shape (the policy then
                still holds the saved-out weights, recorded as their `CheckpointWeights`).
        """
        policy, embedder = self._loader.policy(), self._loader.embedder()  # loaded before our lock
        fresh = self._loader.fresh_adapter()
        if isinstance(target, TrainerWeights):
            session, envs = self._session(target.run_id), self._envs(target.run_id)
        with self._lock:
            if target is not None and target == self._loaded and self._live is not None:
                return Swap(target, None, self._live)
            saved = self._save_live()
            if target is None:
                policy.load_adapter(str(fresh))
            elif isinstance(target, CheckpointWeights):
                policy.load_adapter(target.path)
            else:
                from_fresh = fresh if self._loaded is not None else None
                self._live = self._new_trainer(session, policy=policy, embedder=embedder, envs=envs,
                                               from_fresh=from_fresh)  # fmt: skip
                self._stores.pop(target.run_id, None)  # one store per session: from now on the trainer's
            self._loaded = target
            return Swap(target, saved, self._live)

    def _save_live(self) -> Path | None:
        """Step (1) of `swap`: checkpoint and close the live trainer, keep its store. Call with the lock."""
        if self._live is None:
            return None
        trainer, self._live = self._live, None
        assert isinstance(self._loaded, TrainerWeights)
        run_id = self._loaded.run_id
        # A trainer that trained nothing since its last checkpoint (an Episodes pair, a Lesson's other
        # session) adds no folder: the policy holds that checkpoint, or the fresh adapter it started on.
        # Every update and distill step advances `iteration`, so an equal one means the same weights.
        path = trainer.save_checkpoint() if trainer.iteration != trainer.saved[0] else None
        held = path or trainer.saved[1]
        trainer.close()
        self._stores[run_id] = trainer.store  # keep one store handle per session
        self._loaded = CheckpointWeights(run_id, str(held)) if held else None  # what the policy holds now
        return path

    def trainer(self, run_id: str) -> Any:
        """Session `run_id`'s trainer on the shared policy (`swap` to its `TrainerWeights`)."""
        return self.swap(TrainerWeights(run_id)).trainer

    def live_trainer(self, run_id: str) -> Any | None:
        """Session `run_id`'s trainer when it is live, else None."""
        with self._lock:
            return self._live if self._loaded == TrainerWeights(run_id) else None

    def store(self, run_id: str) -> Any:
        """Session `run_id`'s `TipStore`, one per process (the live trainer's when it is this session's)."""
        embedder = self._loader.embedder()  # loaded before our lock
        session = self._session(run_id)
        with self._lock:
            if self._live is not None and self._loaded == TrainerWeights(run_id):
                return self._live.store
            if run_id not in self._stores:
                self._stores[run_id] = self._open_store(session, embedder)
            return self._stores[run_id]

    def close(self) -> None:
        """Close the live trainer (without saving: the job bodies save what they train)."""
        with self._lock:
            if self._live is not None:
                self._live.close()


def _open_tip_store(session: Any, embedder: Any) -> Any:
    from empo2_studio.memory import open_tip_store

    return open_tip_store(session.tips_path, embedder, session.config.memory, env=session.config.env)
