"""Two of the studio's parts (see `studio.Studio`): the session cache and the env cache.

Each part has one lock, held only around its own dict, and calls no other part while holding it, so
no part's lock is ever taken inside another's (there is no lock order to remember).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from empo2_studio.config import EnvConfig, RunConfig

DEFAULT_TASKS = {"trap": "trap-light-bulb", "scienceworld": "power-component"}
"""Task of a new session per env (power-component: the task of the authors' released config)."""


class SessionCache:
    """One `Session` object per run id and process (opened or created on first use), so every tab
    appends to the same session handle."""

    def __init__(self, root: Path, new_config: Callable[[str], RunConfig]) -> None:
        """`root`: the sessions folder (exists); `new_config(run_id)`: the config a missing session
        is created with by `open_or_create`."""
        self.root = root
        self._new_config = new_config
        self._lock = threading.Lock()
        self._sessions: dict[str, Any] = {}

    def open_or_create(self, run_id: str) -> Any:
        """Open session `run_id`, or create it with `new_config(run_id)` when it does not exist."""
        from empo2_studio.sessions import Session

        with self._lock:
            if run_id not in self._sessions:
                if (self.root / run_id / "config.json").exists():
                    self._sessions[run_id] = Session.open(self.root, run_id)
                else:
                    session = Session.create(self.root, self._new_config(run_id))
                    self._sessions[session.dir.name] = session
            return self._sessions[run_id]

    def get(self, run_id: str) -> Any:
        """An existing session; raises KeyError naming the sessions that exist."""
        from empo2_studio.sessions import Session

        with self._lock:
            if run_id not in self._sessions:
                if not (self.root / run_id / "config.json").exists():
                    raise KeyError(f"no session {run_id!r} under {self.root}; existing: {self.ids()}")
                self._sessions[run_id] = Session.open(self.root, run_id)
            return self._sessions[run_id]

    def create(self, cfg: RunConfig) -> Any:
        """Create a new session from `cfg` (validated); raises what `Session.create` raises
        (e.g. FileExistsError for a taken run id)."""
        from empo2_studio.sessions import Session

        session = Session.create(self.root, cfg.validate())
        with self._lock:
            self._sessions[session.dir.name] = session
        return session

    def ids(self) -> list[str]:
        """Run ids of the sessions on disk (`sessions.list_sessions` order)."""
        from empo2_studio.sessions import list_sessions

        return [s.dir.name for s in list_sessions(self.root)]


class EnvCache:
    """The envs the studio keeps open: one per env name to list tasks, two per env config for
    side-by-side episodes, and one `EnvPool` per session (shared by its trainer and adaptation runs,
    so a ScienceWorld session keeps one group of JVMs however often its trainer is rebuilt)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._meta: dict[str, Any] = {}
        self._pairs: dict[EnvConfig, list[Any]] = {}
        self._pools: dict[str, Any] = {}

    def meta_env(self, name: str) -> Any:
        """An env instance of `name` used only to list tasks and variations."""
        from empo2_studio.envs import make_env

        with self._lock:
            if name not in self._meta:
                self._meta[name] = make_env(EnvConfig(name=name, task=DEFAULT_TASKS[name]))
            return self._meta[name]

    def episode_pair(self, session_env: EnvConfig, name: str) -> list[Any]:
        """Two env instances of `name`; the session's env settings (step limit, simplification)
        apply when the session uses the same env, else `name`'s defaults."""
        from empo2_studio.envs import make_env

        if session_env.name == name:
            env_cfg = replace(session_env, variations=())
        else:
            env_cfg = EnvConfig(name=name, task=DEFAULT_TASKS[name])
        with self._lock:
            if env_cfg not in self._pairs:
                self._pairs[env_cfg] = [make_env(env_cfg) for _ in range(2)]
            return self._pairs[env_cfg]

    def pool(self, run_id: str, env_cfg: EnvConfig) -> Any:
        """Session `run_id`'s `EnvPool` (built from `env_cfg` on first use)."""
        from empo2_studio.envs import EnvPool

        with self._lock:
            if run_id not in self._pools:
                self._pools[run_id] = EnvPool(env_cfg)
            return self._pools[run_id]

    def close(self) -> None:
        """Close every env and pool (the JVMs of ScienceWorld); the cache can be used again after."""
        with self._lock:
            for env in [*self._meta.values(), *(e for pair in self._pairs.values() for e in pair)]:
                env.close()
            for pool in self._pools.values():
                pool.close()
            self._meta.clear()
            self._pairs.clear()
            self._pools.clear()
