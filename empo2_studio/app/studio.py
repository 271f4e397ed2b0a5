"""The app's shared, process-wide state: sessions root, the one model, tip stores, trainers, jobs.

One `Studio` lives per process. It loads the policy and the embedder once (lazily, in a job so the
page can show progress while the embedded model is converted), and hands every tab the same
`TipStore` per session (so an edit in the Tips tab is what the next episode retrieves) and the same
`Trainer` per session. Anything that runs the model goes through `jobs` and its model lock.

Which model and embedder: the real ones by default (`PolicyConfig()` → the embedded SmolLM2 model,
MiniLM embedder). Tests build the studio with `policy="tiny"` / `embedder="hash"` (or the environment
variables `EMPO2_STUDIO_TEST_POLICY=tiny` and `EMPO2_STUDIO_TEST_EMBEDDER=hash`).
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from empo2_studio.app.jobs import Job, JobRegistry
from empo2_studio.config import EMBEDDER_NAMES, EnvConfig, RunConfig
from empo2_studio.types import ENV_NAMES

log = logging.getLogger(__name__)

DEFAULT_RUN_ID = "studio"
"""The session the studio creates (or reopens) when started without one."""

DEFAULT_TASKS = {"trap": "trap-light-bulb", "scienceworld": "power-component"}
"""Task of a new session per env (power-component: the task of the authors' released config)."""

POLICY_CHOICES = ("real", "tiny")
EMBEDDER_CHOICES = EMBEDDER_NAMES


class Studio:
    """Shared state of one studio process (see module docstring)."""

    def __init__(
        self,
        sessions_root: str | os.PathLike[str],
        *,
        env: str | None = None,
        policy: str | Any | None = None,
        embedder: str | Any | None = None,
        run_id: str = DEFAULT_RUN_ID,
        config: RunConfig | None = None,
    ) -> None:
        """
        Args:
            sessions_root: folder holding one sub-folder per session (created if missing).
            env: environment of a newly created default session ("trap" or "scienceworld");
                None = "scienceworld".
            policy: "real" (the run config's model, default), "tiny" (random-init test model) or a
                ready `Policy` object. None reads `EMPO2_STUDIO_TEST_POLICY`, else "real".
            embedder: "minilm", "hash" or a ready `Embedder`; None reads `EMPO2_STUDIO_TEST_EMBEDDER`,
                else the session config's embedder.
            run_id: the default session to create or reopen.
            config: config of the default session when it is created (None = `default_config`).
        Raises:
            ValueError: unknown env / policy / embedder name.
        """
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach a hub at run time
        self.root = Path(sessions_root)
        self.root.mkdir(parents=True, exist_ok=True)
        env = env or "scienceworld"
        if env not in ENV_NAMES:
            raise ValueError(f"env must be one of {list(ENV_NAMES)}, got {env!r}")
        self.env_name = env
        policy = policy if policy is not None else os.environ.get("EMPO2_STUDIO_TEST_POLICY", "real")
        embedder = embedder if embedder is not None else os.environ.get("EMPO2_STUDIO_TEST_EMBEDDER") or None
        if isinstance(policy, str) and policy not in POLICY_CHOICES:
            raise ValueError(f"policy must be one of {list(POLICY_CHOICES)} or a Policy, got {policy!r}")
        if isinstance(embedder, str) and embedder not in EMBEDDER_CHOICES:
            raise ValueError(f"embedder must be one of {list(EMBEDDER_CHOICES)} or an Embedder, got {embedder!r}")
        self._policy_spec = policy
        self._embedder_spec = embedder
        self._policy: Any = None if isinstance(policy, str) else policy
        self._embedder: Any = None if isinstance(embedder, str) or embedder is None else embedder
        self._fresh_adapter: Path | None = None
        self.jobs = JobRegistry()
        # Lock order: `_load_lock` (held while the model/embedder load, tens of seconds) may take `_lock`
        # (sessions), never the reverse: code holding `_lock` gets the model and embedder first.
        self._lock = threading.RLock()
        self._load_lock = threading.Lock()
        self._sessions: dict[str, Any] = {}
        self._stores: dict[str, Any] = {}
        self._trainers: dict[str, Any] = {}
        self._meta_envs: dict[str, Any] = {}
        self._pools: dict[str, Any] = {}
        self._config = config
        self.loaded_adapter: str | None = None
        """Which adapter the shared policy holds now: None (fresh/base), or "run_id:iteration"."""
        self.default_run_id = self.open_or_create(run_id).dir.name

    # ---- sessions -------------------------------------------------------------------------------
    def default_config(self, run_id: str = DEFAULT_RUN_ID) -> RunConfig:
        """Config of a new studio session: the chosen env, its default task, the embedder in use."""
        env_cfg = EnvConfig(name=self.env_name, task=DEFAULT_TASKS[self.env_name])
        cfg = RunConfig(run_id=run_id, env=env_cfg)
        if isinstance(self._embedder_spec, str):
            cfg = cfg.with_overrides(memory={"embedder": self._embedder_spec})
        return cfg.validate()

    def open_or_create(self, run_id: str) -> Any:
        """Open session `run_id`, or create it with `default_config` when it does not exist."""
        from empo2_studio.sessions import Session

        with self._lock:
            if run_id in self._sessions:
                return self._sessions[run_id]
            if (self.root / run_id / "config.json").exists():
                session = Session.open(self.root, run_id)
            else:
                cfg = replace(self._config, run_id=run_id) if self._config is not None else self.default_config(run_id)
                session = Session.create(self.root, cfg)
            self._sessions[session.dir.name] = session
            return session

    def session(self, run_id: str) -> Any:
        """An existing session (cached); raises KeyError naming the sessions that exist."""
        from empo2_studio.sessions import Session

        with self._lock:
            if run_id not in self._sessions:
                if not (self.root / run_id / "config.json").exists():
                    raise KeyError(f"no session {run_id!r} under {self.root}; existing: {self.session_ids()}")
                self._sessions[run_id] = Session.open(self.root, run_id)
            return self._sessions[run_id]

    def session_ids(self) -> list[str]:
        from empo2_studio.sessions import list_sessions

        return [s.dir.name for s in list_sessions(self.root)]

    def create_session(self, cfg: RunConfig) -> Any:
        """Create a new session from `cfg` (validated); returns it."""
        from empo2_studio.sessions import Session

        session = Session.create(self.root, cfg.validate())
        with self._lock:
            self._sessions[session.dir.name] = session
        return session

    # ---- model and embedder ---------------------------------------------------------------------
    @property
    def model_ready(self) -> bool:
        return self._policy is not None and self._embedder is not None

    def embedder(self) -> Any:
        """The shared embedder (loaded on first use)."""
        if self._embedder is None:
            from empo2_studio.memory import make_embedder

            with self._load_lock:
                if self._embedder is None:
                    name = self._embedder_spec or self.session(self.default_run_id).config.memory.embedder
                    embedder = make_embedder(name)
                    if hasattr(embedder, "load"):
                        embedder.load()  # while the banner shows progress, not at the first retrieval
                    self._embedder = embedder
        return self._embedder

    def policy(self) -> Any:
        """The shared policy (loaded on first use; the first conversion of the embedded model takes
        about half a minute). Callers that sample or train must hold `jobs.model_lock`."""
        if self._policy is None or self._fresh_adapter is None:
            with self._load_lock:
                if self._policy is None:
                    self._policy = self._load_policy()
                if self._fresh_adapter is None:
                    # A copy of the untrained adapter: new sessions start from it (see `trainer`).
                    fresh = Path(tempfile.mkdtemp(prefix="empo2-fresh-adapter-"))
                    self._policy.save_adapter(str(fresh))
                    self._fresh_adapter = fresh
        return self._policy

    def _load_policy(self) -> Any:
        if self._policy_spec == "tiny":
            from empo2_studio.policy import build_tiny_policy

            return build_tiny_policy()
        from empo2_studio.policy import load_policy

        return load_policy(self.session(self.default_run_id).config.policy)

    def prepare_model(self) -> Job:
        """Start (or return the running) job that loads the embedder and the policy."""
        for job in self.jobs.running("model"):
            return job

        def work(job: Job) -> str:
            t0 = time.time()
            job.update(progress=0.1, message="loading the embedder")
            self.embedder()
            job.update(progress=0.3, message="preparing the model (the first start converts it, ~35 s)")
            self.policy()
            job.update(progress=1.0, message=f"model ready ({time.time() - t0:.0f} s)")
            return "ready"

        return self.jobs.start("model", work, label="prepare model", uses_model=False)

    # ---- per-session shared objects -------------------------------------------------------------
    def store(self, run_id: str) -> Any:
        """The session's `TipStore`, one per process (the Tips tab, episodes and training share it)."""
        embedder = self.embedder()  # before `_lock` (lock order, see __init__)
        with self._lock:
            if run_id in self._trainers:
                return self._trainers[run_id].store
            if run_id not in self._stores:
                from empo2_studio.memory import TipStore

                session = self.session(run_id)
                self._stores[run_id] = TipStore.open(session.tips_path, embedder, session.config.memory)
            return self._stores[run_id]

    def meta_env(self, name: str) -> Any:
        """An env instance used only to list tasks and variations (kept open)."""
        with self._lock:
            if name not in self._meta_envs:
                from empo2_studio.envs import make_env

                self._meta_envs[name] = make_env(EnvConfig(name=name, task=DEFAULT_TASKS[name]))
            return self._meta_envs[name]

    def close(self) -> None:
        """Close the envs this studio opened (the JVM of ScienceWorld)."""
        with self._lock:
            for env in self._meta_envs.values():
                for e in env if isinstance(env, list) else [env]:
                    e.close()
            self._meta_envs.clear()
            for trainer in self._trainers.values():
                trainer.close()
            for pool in self._pools.values():
                pool.close()
            self._pools.clear()

    def env_pool(self, run_id: str) -> Any:
        """The session's env pool (its env config), shared by its trainer and adaptation runs, so a
        ScienceWorld session keeps one group of JVMs however often its trainer is rebuilt."""
        with self._lock:
            if run_id not in self._pools:
                from empo2_studio.envs import EnvPool

                self._pools[run_id] = EnvPool(self.session(run_id).config.env)
            return self._pools[run_id]

    # ---- model-side helpers used by the job bodies (call with jobs.model_lock held) --------------
    def episode_envs(self, run_id: str, name: str) -> list[Any]:
        """Two env instances of `name` for side-by-side episodes (kept open and reused); the session's
        env settings (step limit, simplification) apply when it uses the same env."""
        cfg = self.session(run_id).config.env
        env_cfg = replace(cfg, variations=()) if cfg.name == name else EnvConfig(name=name, task=DEFAULT_TASKS[name])
        with self._lock:
            key = f"episodes:{env_cfg}"
            if key not in self._meta_envs:
                from empo2_studio.envs import make_env

                self._meta_envs[key] = [make_env(env_cfg) for _ in range(2)]
            return self._meta_envs[key]

    def trainer(self, run_id: str) -> Any:
        """The session's Trainer on the shared policy (resumed from its latest checkpoint if any).

        A session without a checkpoint starts from the fresh adapter saved when the model was loaded,
        so it never inherits another session's weights.
        """
        policy, embedder = self.policy(), self.embedder()  # before `_lock` (lock order, see __init__)
        with self._lock:
            current = self._trainers.get(run_id)
            if current is not None and self.loaded_adapter == f"{run_id}:trainer":
                return current
            if current is not None:
                self._trainers.pop(run_id).close()
            from empo2_studio.trainer import Trainer

            session = self.session(run_id)
            self.check_compatible(session.config)
            kw = {"policy": policy, "embedder": embedder, "envs": self.env_pool(run_id)}
            if session.latest_checkpoint() is not None:
                trainer = Trainer.resume(session, **kw)
            else:
                if self.loaded_adapter is not None:
                    policy.load_adapter(str(self._fresh_adapter))
                trainer = Trainer(session.config, session, **kw)
            self._stores.pop(run_id, None)  # one store per session: from now on the trainer's
            self._trainers[run_id] = trainer
            self.loaded_adapter = f"{run_id}:trainer"
            return trainer

    def check_compatible(self, cfg: RunConfig) -> None:
        """Raise ValueError when `cfg` needs another base model / LoRA shape / embedder than the
        one this process loaded (they are fixed per studio process)."""
        self.session(self.default_run_id).check_compatible(cfg)

    def use_checkpoint(self, run_id: str, checkpoint: str | None) -> int:
        """Put the weights an episode should play with into the shared policy; returns their iteration.

        `checkpoint` None / "" / "current": the session trainer's weights (the trainer is built, from
        its latest checkpoint or the fresh adapter, when it is not live: the policy never plays with
        another session's weights); otherwise a checkpoint folder of the session. Before other
        weights are loaded, the trainer's unsaved progress is saved as a checkpoint, and the trainer
        is rebuilt from its latest checkpoint the next time it is needed, so nothing trained is lost.
        """
        if not checkpoint or checkpoint == "current":
            return self.trainer(run_id).iteration
        paths = {str(p): i for i, p in self.session(run_id).checkpoints()}
        if checkpoint not in paths:
            raise ValueError(f"unknown checkpoint {checkpoint!r} of session {run_id!r}; valid: {sorted(paths)}")
        policy = self.policy()  # before `_lock` (lock order, see __init__)
        with self._lock:
            self._retire_live_trainer()
            policy.load_adapter(checkpoint)
            self.loaded_adapter = f"{run_id}:{checkpoint}"
        return paths[checkpoint]

    def fresh_policy(self) -> Any:
        """The shared policy with the untrained adapter loaded, for work outside the session trainers
        (the EMPO² vs GRPO race). As in `use_checkpoint`, a live trainer's unsaved progress is saved
        as a checkpoint first and every trainer reloads its own weights when next needed. Call with
        `jobs.model_lock` held; call again when done so the policy is left as "fresh"."""
        policy = self.policy()  # before `_lock` (lock order, see __init__)
        with self._lock:
            self._retire_live_trainer()
            policy.load_adapter(str(self._fresh_adapter))
            self.loaded_adapter = None
        return policy

    def _retire_live_trainer(self) -> None:
        """Before other weights go into the policy: checkpoint and drop the trainer whose weights it
        holds (rebuilt from that checkpoint the next time it is needed). Call with `_lock` held."""
        owner = self.loaded_adapter.split(":")[0] if self.loaded_adapter else None
        if self.loaded_adapter and self.loaded_adapter.endswith(":trainer") and owner in self._trainers:
            stale = self._trainers.pop(owner)
            stale.save_checkpoint()
            stale.close()
            self._stores[owner] = stale.store  # keep one store handle per session

    def adapter_checksum(self) -> str:
        """SHA-256 over the policy's trainable (LoRA) parameters: equal before and after = untouched."""
        import hashlib

        digest = hashlib.sha256()
        for param in self.policy().trainable_parameters():
            digest.update(param.detach().float().cpu().numpy().tobytes())
        return digest.hexdigest()

    def seed(self, seed: int) -> None:
        """Seed the policy's sampler so a seed replays the same episode pair."""
        from empo2_studio.rollout import seed_policy

        seed_policy(self.policy(), int(seed))

    def current_trainer(self, run_id: str) -> Any | None:
        """The session's live trainer, if one is built."""
        return self._trainers.get(run_id)
