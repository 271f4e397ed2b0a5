"""The app's shared, process-wide state, as small parts with one job each, behind one facade.

One `Studio` lives per process and hands every tab the same objects:
- `sessions` (`caches.SessionCache`): one `Session` per run id;
- `envs` (`caches.EnvCache`): the envs kept open (task lists, episode pairs, one pool per session);
- `model` (`model_slot.ModelLoader`): the one policy and embedder, loaded lazily in a job so the page
  can show progress while the embedded model is converted;
- `slot` (`model_slot.ModelSlot`): whose weights the policy holds (a typed `Weights` value), the live
  trainer on them and one `TipStore` per session (an edit in the Tips tab is what the next episode
  retrieves); every weight change is a `slot.swap`, which saves the live trainer first;
- `jobs` (`jobs.JobRegistry`): background work; anything that runs the model holds its model lock;
- `idle_release` (`memory_use.IdleRelease`): hands the heap a finished job freed back to the OS.
Each part has its own lock and none calls another while holding it, so there is no lock order.

Which model and embedder: the real ones by default (`PolicyConfig()` → the embedded SmolLM2 model,
MiniLM embedder). Tests build the studio with `policy="tiny"` / `embedder="hash"` (or the environment
variables `EMPO2_STUDIO_TEST_POLICY=tiny` and `EMPO2_STUDIO_TEST_EMBEDDER=hash`).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from empo2_studio.app.caches import DEFAULT_TASKS, EnvCache, SessionCache
from empo2_studio.app.jobs import Job, JobRegistry
from empo2_studio.app.memory_use import IdleRelease, share_note_writer
from empo2_studio.app.model_slot import CheckpointWeights, ModelLoader, ModelSlot, Weights
from empo2_studio.config import EMBEDDER_NAMES, EnvConfig, RunConfig
from empo2_studio.sessions import on_env
from empo2_studio.types import ENV_NAMES

if TYPE_CHECKING:
    from empo2_studio.sessions import Session

log = logging.getLogger(__name__)

DEFAULT_RUN_ID = "studio"
"""The session the studio creates (or reopens) when started without one."""
DEFAULT_ENV = "trap"
"""The default session's env when none is asked for: the Lesson's, where the embedded model learns."""

__all__ = ["DEFAULT_ENV", "DEFAULT_RUN_ID", "DEFAULT_TASKS", "EMBEDDER_CHOICES", "POLICY_CHOICES", "Studio"]

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
            env: environment of the default session ("trap" or "scienceworld"); None = "trap", where
                the embedded model shows what memory and distillation change (the Lesson). When
                `run_id` is the default ("studio") and that session plays another env,
                `studio-<env>` is opened (or created) instead, so the studio opens on the env asked for.
            policy: "real" (the run config's model, default), "tiny" (random-init test model) or a
                ready `Policy` object. None reads `EMPO2_STUDIO_TEST_POLICY`, else "real".
            embedder: "minilm", "hash" or a ready `Embedder`; None reads `EMPO2_STUDIO_TEST_EMBEDDER`,
                else the session config's embedder.
            run_id: the default session to create or reopen.
            config: config of the sessions `open_or_create` creates (run id replaced; None =
                `default_config`).
        Raises:
            ValueError: unknown env / policy / embedder name.
        """
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach a hub at run time
        self.root = Path(sessions_root)
        self.root.mkdir(parents=True, exist_ok=True)
        env = env or DEFAULT_ENV
        if env not in ENV_NAMES:
            raise ValueError(f"env must be one of {list(ENV_NAMES)}, got {env!r}")
        self.env_name = env
        policy = policy if policy is not None else os.environ.get("EMPO2_STUDIO_TEST_POLICY", "real")
        embedder = embedder if embedder is not None else os.environ.get("EMPO2_STUDIO_TEST_EMBEDDER") or None
        if isinstance(policy, str) and policy not in POLICY_CHOICES:
            raise ValueError(f"policy must be one of {list(POLICY_CHOICES)} or a Policy, got {policy!r}")
        if isinstance(embedder, str) and embedder not in EMBEDDER_CHOICES:
            raise ValueError(f"embedder must be one of {list(EMBEDDER_CHOICES)} or an Embedder, got {embedder!r}")
        self._embedder_spec = embedder
        self._config = config
        self.jobs = JobRegistry()
        self.sessions = SessionCache(self.root, self._new_session_config)
        if run_id == DEFAULT_RUN_ID and self._other_env(run_id):
            run_id = f"{DEFAULT_RUN_ID}-{env}"
        self.default_run_id = self.sessions.open_or_create(run_id).dir.name
        default_cfg = self.sessions.get(self.default_run_id).config
        self.model = ModelLoader(policy, embedder or default_cfg.memory.embedder, policy_config=default_cfg.policy)
        self.envs = EnvCache()
        self.slot = ModelSlot(self.model, session=self.session, envs=self.env_pool)
        self.idle_release = IdleRelease(self.jobs)  # hands a finished job's freed heap back to the OS

    # ---- sessions -------------------------------------------------------------------------------
    def _other_env(self, run_id: str) -> bool:
        """Session `run_id` exists on disk and plays another env than this studio's."""
        path = self.root / run_id / "config.json"
        if not path.is_file():
            return False
        return self.sessions.get(run_id).config.env.name != self.env_name

    def env_session(self, env: str) -> Session:
        """The studio's session of `env`: the default session when it plays `env`, else
        `studio-<env>` (opened, or created from the default session's config on `env` and its
        default task). ValueError for an unknown env."""
        if env not in ENV_NAMES:
            raise ValueError(f"env must be one of {list(ENV_NAMES)}, got {env!r}")
        default = self.session(self.default_run_id)
        if default.config.env.name == env:
            return default
        run_id = f"{DEFAULT_RUN_ID}-{env}"
        if (self.root / run_id / "config.json").is_file():
            return self.session(run_id)
        cfg = on_env(replace(default.config, run_id=run_id), EnvConfig(name=env, task=DEFAULT_TASKS[env]))
        return self.create_session(cfg)

    def default_config(self, run_id: str = DEFAULT_RUN_ID) -> RunConfig:
        """Config of a new studio session: the chosen env, its default task, the embedder in use."""
        env_cfg = EnvConfig(name=self.env_name, task=DEFAULT_TASKS[self.env_name])
        cfg = RunConfig(run_id=run_id, env=env_cfg)
        if isinstance(self._embedder_spec, str):
            cfg = cfg.with_overrides(memory={"embedder": self._embedder_spec})
        return cfg.validate()

    def _new_session_config(self, run_id: str) -> RunConfig:
        return replace(self._config, run_id=run_id) if self._config is not None else self.default_config(run_id)

    def open_or_create(self, run_id: str) -> Session:
        """Open session `run_id`, or create it (the studio's `config`, else `default_config`)."""
        return self.sessions.open_or_create(run_id)

    def session(self, run_id: str) -> Session:
        """An existing session (cached); raises KeyError naming the sessions that exist."""
        return self.sessions.get(run_id)

    def session_ids(self) -> list[str]:
        return self.sessions.ids()

    def create_session(self, cfg: RunConfig) -> Session:
        """Create a new session from `cfg` (validated); returns it."""
        return self.sessions.create(cfg)

    def check_compatible(self, cfg: RunConfig) -> None:
        """Raise ValueError when `cfg` needs another base model / LoRA shape / embedder than the
        one this process loaded (they are fixed per studio process)."""
        self.session(self.default_run_id).check_compatible(cfg)

    # ---- model and embedder ---------------------------------------------------------------------
    @property
    def model_ready(self) -> bool:
        return self.model.ready

    def embedder(self) -> Any:
        """The shared embedder (loaded on first use)."""
        return self.model.embedder()

    def policy(self) -> Any:
        """The shared policy (loaded on first use; the first conversion of the embedded model takes
        about half a minute). Callers that sample or train must hold `jobs.model_lock`."""
        return self.model.policy()

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
            job.update(progress=0.8, message="loading the note writer on the model's weights")
            self.share_note_writer()
            job.update(progress=1.0, message=f"model ready ({time.time() - t0:.0f} s)")
            return "ready"

        return self.jobs.start("model", work, label="prepare model", uses_model=False)

    def share_note_writer(self) -> int:
        """Load the note writer the trap sessions use (the launch session's config, on the trap env,
        where the shipped writer writes) and let its frozen base weights share the policy's storage
        (`memory_use.share_note_writer`): one copy of the base model instead of two. Returns the bytes
        saved (0 for a model that writes its own tips). No lock: a tensor is swapped for an equal one,
        so a writer already running reads the same numbers from either. A missing writer adapter is
        logged, not raised: it fails where tips are first written, as it did before it was loaded here."""
        cfg = self.session(self.default_run_id).config
        trap = cfg if cfg.env.name == "trap" else replace(cfg, env=EnvConfig(name="trap", task=DEFAULT_TASKS["trap"]))
        try:
            return share_note_writer(trap, self.policy())
        except FileNotFoundError as exc:
            log.warning("note writer not loaded at start: %s", exc)
            return 0

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

    # ---- envs -----------------------------------------------------------------------------------
    def meta_env(self, name: str) -> Any:
        """An env instance used only to list tasks and variations (kept open)."""
        return self.envs.meta_env(name)

    def episode_envs(self, run_id: str, name: str) -> list[Any]:
        """Two env instances of `name` for side-by-side episodes (kept open and reused); the session's
        env settings (step limit, simplification) apply when it uses the same env."""
        return self.envs.episode_pair(self.session(run_id).config.env, name)

    def env_pool(self, run_id: str) -> Any:
        """The session's env pool (its env config), shared by its trainer and adaptation runs."""
        return self.envs.pool(run_id, self.session(run_id).config.env)

    def close(self) -> None:
        """Close the live trainer and the envs this studio opened (the JVMs of ScienceWorld)."""
        self.idle_release.close()
        self.slot.close()
        self.envs.close()

    # ---- weights in the shared policy (call with jobs.model_lock held) ----------------------------
    @property
    def loaded_adapter(self) -> Weights:
        """Which weights the shared policy holds now (`model_slot.Weights`; None = fresh)."""
        return self.slot.loaded

    def store(self, run_id: str) -> Any:
        """The session's `TipStore`, one per process (the Tips tab, episodes and training share it)."""
        return self.slot.store(run_id)

    def trainer(self, run_id: str) -> Any:
        """The session's Trainer on the shared policy (resumed from its latest checkpoint if any; a
        session without one starts from the fresh adapter, never another session's weights). Swapping
        it in saves the trainer that was live (`ModelSlot.swap`). ValueError when the session needs
        another base model / LoRA shape / embedder than the loaded one."""
        self.check_compatible(self.session(run_id).config)
        return self.slot.trainer(run_id)

    def use_checkpoint(self, run_id: str, checkpoint: str | None) -> int:
        """Put the weights an episode should play with into the shared policy; returns their iteration.

        `checkpoint` None / "" / "current": the session trainer's weights (`trainer`); otherwise a
        checkpoint folder of the session, swapped in with `ModelSlot.swap`, which first saves the live
        trainer's progress as a checkpoint. ValueError for a folder that is not one of the session's
        checkpoints.
        """
        if not checkpoint or checkpoint == "current":
            return self.trainer(run_id).iteration
        paths = {str(p): i for i, p in self.session(run_id).checkpoints()}
        if checkpoint not in paths:
            raise ValueError(f"unknown checkpoint {checkpoint!r} of session {run_id!r}; valid: {sorted(paths)}")
        self.slot.swap(CheckpointWeights(run_id, checkpoint))
        return paths[checkpoint]

    def fresh_policy(self) -> Any:
        """The shared policy with the untrained adapter swapped in (`ModelSlot.swap(None)`, which saves
        the live trainer first), for work outside the session trainers (the EMPO² vs GRPO race). Call
        again when done so the policy is left as "fresh"."""
        self.slot.swap(None)
        return self.policy()

    def current_trainer(self, run_id: str) -> Any | None:
        """The session's trainer when it is the live one, else None."""
        return self.slot.live_trainer(run_id)
