"""Run records on disk: one folder per run under the sessions root (default `./sessions`).

Layout of `sessions/<run_id>/` (every file readable without the studio):

    config.json          RunConfig.to_json() of the run (run_id filled in)
    metrics.jsonl        one JSON object per line: a trainer/eval report's flat metrics
    episodes.jsonl       one Episode.to_dict() per line (replayable; Episode.from_dict reads it back)
    tips.lance/          the tip table (owned and written by memory.TipStore)
    adapters/iter_000005/  one PEFT adapter folder per checkpoint (plus whatever the trainer saves)
    state.json           iteration, newest checkpoint (relative to the session), Lesson stage; replaced atomically

There is no index file: `list_sessions` scans the root, so the list is never stale.

Crash safety: records are appended and files replaced through `durable.py` (whole lines, fsynced; a
partial last line from a kill -9 is ignored and cut off by the next append), so after a crash the
session opens and every record completed before the kill is still there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from filelock import FileLock

from empo2_studio.config import (
    DEFAULT_WARM_START,
    EMBEDDED_MODEL,
    SCIENCEWORLD_WARM_START,
    WARM_START_DIR,
    EnvConfig,
    RunConfig,
)
from empo2_studio.durable import append_jsonl, atomic_write, finite, fsync_dir, last_jsonl, read_jsonl
from empo2_studio.types import Episode

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""A run id: letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128 chars."""

CONFIG, METRICS, EPISODES, STATE, TIPS, ADAPTERS = (
    "config.json", "metrics.jsonl", "episodes.jsonl", "state.json", "tips.lance", "adapters",
)  # fmt: skip
_CKPT = re.compile(r"^iter_(\d{6,})$")


def default_sessions_root() -> Path:
    """`$EMPO2_SESSIONS_DIR` if set, else `./sessions` (relative to the working directory)."""
    return Path(os.environ.get("EMPO2_SESSIONS_DIR") or "sessions")


def auto_warm_start(env_name: str) -> str:
    """The folder under WARM_START_DIR that "auto" means for a session of `env_name`: the ScienceWorld
    adapter for "scienceworld" (while it is there), `DEFAULT_WARM_START` for every other environment."""
    if env_name == "scienceworld" and (WARM_START_DIR / SCIENCEWORLD_WARM_START / "adapter_config.json").is_file():
        return SCIENCEWORLD_WARM_START
    return DEFAULT_WARM_START


SHIPPED_WARM_STARTS = (DEFAULT_WARM_START, SCIENCEWORLD_WARM_START)
"""The acting adapters "auto" picks between (`auto_warm_start`), by folder name under assets/warmstart."""


def on_env(cfg: RunConfig, env: EnvConfig) -> RunConfig:
    """`cfg` with `env`, for a new session (a lesson's, a race copy's) made from one of another environment.
    When the environment changes, a warm start that is a shipped acting adapter (`SHIPPED_WARM_STARTS` in
    an assets/warmstart folder, of this checkout or another) becomes "auto" again, so the new session loads
    the one shipped for `env` (`absolute_paths`: the ScienceWorld adapter for ScienceWorld) and not the one
    its source stored for its own env. Kept: any other warm start (a folder the user chose, "none"), and
    every warm start when the env stays (a session keeps its weights). Without this the start panel's
    ScienceWorld session loaded the trap's adapter (a walkthrough of 2026-12-07: the find-animal pair's
    memory side read the tip and lost)."""
    policy, folder = cfg.policy, Path(cfg.policy.warm_start).expanduser()
    shipped = folder.name in SHIPPED_WARM_STARTS and folder.parent.name == WARM_START_DIR.name
    if env.name != cfg.env.name and shipped:
        policy = replace(policy, warm_start="auto")
    return replace(cfg, env=env, policy=policy)


def absolute_paths(cfg: RunConfig) -> RunConfig:
    """`cfg` with its `policy.adapter` and `policy.warm_start` folders absolute ("~" expanded), and a warm
    start of "auto" for the embedded model replaced by the folder "auto" loads today for the run's environment
    (`auto_warm_start`: the ScienceWorld adapter for ScienceWorld, else `DEFAULT_WARM_START`),
    so a session keeps its weights when the default changes. Kept as they are: "none", an empty value
    (refused by `policy.loading.warm_start_dir`), and "auto" when an adapter is given, the model is another
    one, or the default folder is missing (the load then names the command that builds it)."""
    policy = cfg.policy
    if policy.adapter:
        policy = replace(policy, adapter=str(Path(policy.adapter).expanduser().resolve()))
    shipped = WARM_START_DIR / auto_warm_start(cfg.env.name)
    if policy.warm_start == "auto" and not policy.adapter and policy.model == EMBEDDED_MODEL and (shipped / "adapter_config.json").is_file():
        policy = replace(policy, warm_start=str(shipped))
    elif policy.warm_start.strip() and policy.warm_start not in ("auto", "none"):
        policy = replace(policy, warm_start=str(Path(policy.warm_start).expanduser().resolve()))
    return replace(cfg, policy=policy)


class SessionNotFoundError(FileNotFoundError):
    """No session with that run id under the root; the message lists the ones that exist."""


def validate_run_id(run_id: str) -> str:
    """Return `run_id`, or raise ValueError naming it and the allowed characters."""
    if not isinstance(run_id, str) or not RUN_ID_PATTERN.match(run_id) or ".." in run_id:
        raise ValueError(
            f"invalid run id {run_id!r}: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (no '..')"
        )
    return run_id


def make_run_id(cfg: RunConfig, now: float | None = None) -> str:
    """Default id `<UTC yyyymmdd-HHMMSS>-<env>-<task>`, with unsafe characters replaced by '-'."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    task = re.sub(r"[^A-Za-z0-9._-]+", "-", cfg.env.task).strip("-.") or "task"
    return f"{stamp}-{cfg.env.name}-{task}"[:128]


@dataclass(frozen=True)
class SessionInfo:
    """One row of `list_sessions`: enough to show a table without loading episodes."""

    run_id: str
    dir: Path
    env: str
    task: str
    model: str
    created_at: float
    """Modification time of config.json (Unix seconds)."""
    iteration: int
    """`state.json`'s "iteration" (0 when absent)."""
    last_metrics: dict[str, Any]
    """The last line of metrics.jsonl ({} when none)."""
    checkpoints: int


class Session:
    """A run folder. Create with `Session.create`, reopen with `Session.open`; never construct directly."""

    def __init__(self, directory: Path, config: RunConfig) -> None:
        self.dir = Path(directory)
        self.config = config
        self._lock = threading.Lock()
        self._file_lock = FileLock(str(self.dir / ".append.lock"))

    # ---- creation and lookup -------------------------------------------------------------------

    @classmethod
    def create(cls, root: str | os.PathLike[str], cfg: RunConfig) -> Session:
        """Make `root/<run_id>/` and write config.json, with a `policy.adapter` or `policy.warm_start`
        folder made absolute (`absolute_paths`) so a resume or eval from another working directory finds it.

        `cfg.run_id` is used when set (validated; an existing id is refused with FileExistsError),
        otherwise `make_run_id(cfg)` with a numeric suffix if that second's id is taken.
        Raises ValueError for an invalid config or run id; nothing is written then.
        """
        cfg.validate()
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        if cfg.run_id:
            run_id = validate_run_id(cfg.run_id)
            directory = root / run_id
            try:
                directory.mkdir()
            except FileExistsError:
                raise FileExistsError(
                    f"session {run_id!r} already exists in {root}; resume it or choose another run id"
                ) from None
        else:
            run_id, directory = fresh_dir(root, make_run_id(cfg))
        cfg = replace(absolute_paths(cfg), run_id=run_id)
        atomic_write(directory / CONFIG, cfg.to_json())
        (directory / ADAPTERS).mkdir()
        return cls(directory, cfg)

    @classmethod
    def open(cls, root: str | os.PathLike[str], run_id: str) -> Session:
        """Open an existing session. Raises SessionNotFoundError listing the available run ids."""
        root = Path(root)
        validate_run_id(run_id)
        path = root / run_id / CONFIG
        if not path.is_file():
            available = [s.run_id for s in list_sessions(root)]
            shown = ", ".join(available[-20:]) if available else "none"
            raise SessionNotFoundError(f"no session {run_id!r} in {root}; available: {shown}")
        return cls(root / run_id, RunConfig.from_json(path.read_text()))

    @property
    def run_id(self) -> str:
        return self.dir.name

    @property
    def tips_path(self) -> Path:
        """Where the tip table lives (`memory.TipStore.open(session.tips_path, ...)`)."""
        return self.dir / TIPS

    def check_compatible(self, cfg: RunConfig) -> None:
        """Raise ValueError when `cfg` cannot continue this session's weights and tips.

        The base model, the LoRA shape (rank, alpha, target modules) and the embedder (it fixes the
        tip table's vector dimension) must match; everything else (learning rate, p, q, ...) may change.
        """
        mine, theirs = _compat_fields(self.config), _compat_fields(cfg)
        diffs = [f"{k}: session has {mine[k]!r}, requested {theirs[k]!r}" for k in mine if mine[k] != theirs[k]]
        if diffs:
            raise ValueError(
                f"cannot resume session {self.run_id!r} with this config ("
                + "; ".join(diffs)
                + "); start a new run instead"
            )

    # ---- append-only records -------------------------------------------------------------------

    def append_metrics(self, row: dict[str, Any]) -> None:
        """Append one metrics row (a flat dict of JSON values) to metrics.jsonl, durably."""
        self._append(METRICS, [row])

    def metrics(self, *, superseded: bool = False) -> list[dict[str, Any]]:
        """The run's metrics history: complete rows in order.

        A resume (`mark_resumed`) re-runs the iterations after its checkpoint, so rows written before
        it for those iterations no longer describe the weights; they are left out here (and of every
        chart), but stay in the file and come back with `superseded=True`.
        """
        rows = read_jsonl(self.dir / METRICS)
        return rows if superseded else current_history(rows)

    def mark_resumed(self, iteration: int) -> None:
        """Record that training continues from the checkpoint of `iteration` (a `kind: resume` row)."""
        self.append_metrics({"iteration": int(iteration), "kind": "resume"})

    def last_metrics(self) -> dict[str, Any]:
        """The last complete metrics row ({} when none), read from the file's end only."""
        return last_jsonl(self.dir / METRICS)

    def append_episodes(self, episodes: Iterable[Episode]) -> None:
        """Append episodes (one `Episode.to_dict()` line each) to episodes.jsonl, in one durable write."""
        self._append(EPISODES, [ep.to_dict() for ep in episodes])

    def episodes(self, ids: Sequence[str] | None = None) -> list[Episode]:
        """All episodes in file order, or those with the given ids in the order asked.

        Raises KeyError naming the ids not found (when `ids` is given).
        """
        rows = read_jsonl(self.dir / EPISODES)
        if ids is None:
            return [Episode.from_dict(r) for r in rows]
        by_id = {r["episode_id"]: r for r in rows}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise KeyError(f"episodes not in session {self.run_id!r}: {missing[:10]}" + (" ..." if len(missing) > 10 else ""))
        return [Episode.from_dict(by_id[i]) for i in ids]

    # ---- checkpoints and state ------------------------------------------------------------------

    def adapter_dir(self, iteration: int) -> Path:
        """`adapters/iter_<iteration:06d>` (not created; `save_pretrained` makes it)."""
        if not isinstance(iteration, int) or iteration < 0:
            raise ValueError(f"iteration must be an int ≥ 0, got {iteration!r}")
        return self.dir / ADAPTERS / f"iter_{iteration:06d}"

    def write_checkpoint(self, iteration: int, save: Callable[[Path], None]) -> Path:
        """Run `save(tmp_dir)` then rename the folder to `adapter_dir(iteration)` in one step, so a
        crash mid-save never leaves a half checkpoint that `checkpoints()` would list."""
        final = self.adapter_dir(iteration)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
        save(tmp)
        if final.exists():  # re-saving the same iteration: keep the newer one
            old = final.with_name(f".old-{final.name}-{os.getpid()}")
            os.replace(final, old)
            os.replace(tmp, final)
            _rmtree(old)
        else:
            os.replace(tmp, final)
        fsync_dir(final.parent)
        return final

    def checkpoints(self) -> list[tuple[int, Path]]:
        """Complete checkpoints `(iteration, folder)`, oldest first. A folder counts once it holds
        `adapter_config.json` (PEFT writes it) — temp and half-written folders are skipped."""
        found = []
        for p in (self.dir / ADAPTERS).glob("iter_*"):
            m = _CKPT.match(p.name)
            if m and p.is_dir() and (p / "adapter_config.json").is_file():
                found.append((int(m.group(1)), p))
        return sorted(found)

    def latest_checkpoint(self) -> tuple[int, Path] | None:
        """The newest complete checkpoint, or None."""
        cps = self.checkpoints()
        return cps[-1] if cps else None

    def set_state(self, state: dict[str, Any]) -> None:
        """Replace state.json atomically (temp file + fsync + os.replace)."""
        atomic_write(self.dir / STATE, json.dumps(finite(state), indent=1, sort_keys=True))

    def state(self) -> dict[str, Any]:
        """The last state written ({} for a new session)."""
        path = self.dir / STATE
        return json.loads(path.read_text()) if path.is_file() else {}

    def info(self) -> SessionInfo:
        """This session's `SessionInfo` row."""
        return SessionInfo(
            run_id=self.run_id,
            dir=self.dir,
            env=self.config.env.name,
            task=self.config.env.task,
            model=self.config.policy.model,
            created_at=(self.dir / CONFIG).stat().st_mtime,
            iteration=int(self.state().get("iteration", 0)),
            last_metrics=self.last_metrics(),
            checkpoints=len(self.checkpoints()),
        )

    def _append(self, name: str, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        with self._lock, self._file_lock:
            append_jsonl(self.dir / name, rows)


def list_sessions(root: str | os.PathLike[str] | None = None) -> list[SessionInfo]:
    """Every session under `root` (default `default_sessions_root()`), oldest first; folders without
    a readable config.json are skipped."""
    root = Path(root) if root is not None else default_sessions_root()
    if not root.is_dir():
        return []
    out = []
    for d in root.iterdir():
        if not (d.is_dir() and RUN_ID_PATTERN.match(d.name) and (d / CONFIG).is_file()):
            continue
        try:
            out.append(Session(d, RunConfig.from_json((d / CONFIG).read_text())).info())
        except (ValueError, TypeError, OSError):
            continue  # someone else's folder or a config from an incompatible version
    return sorted(out, key=lambda s: (s.created_at, s.run_id))


def current_history(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """`rows` without those superseded by a later resume marker: a `kind: resume` row at iteration k
    drops the earlier rows of iterations > k (they were played with weights no checkpoint kept)."""
    out: list[dict[str, Any]] = []
    for row in rows:
        if row.get("kind") == "resume":
            k = row.get("iteration", 0)
            out = [r for r in out if not (isinstance(r.get("iteration"), (int, float)) and r["iteration"] > k)]
        out.append(row)
    return out


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def fresh_dir(root: Path, base: str) -> tuple[str, Path]:
    """Create and return a new folder `root/base`, or `base-2`, `base-3`, … when taken (mkdir without
    exist_ok, so two processes started in the same second never share one). `root` is created if missing.
    Raises FileExistsError after 1000 taken names."""
    root.mkdir(parents=True, exist_ok=True)
    for k in range(1000):
        run_id = base if k == 0 else f"{base}-{k + 1}"
        try:
            (root / run_id).mkdir()
            return run_id, root / run_id
        except FileExistsError:
            continue
    raise FileExistsError(f"could not find a free run id near {base!r} in {root}")


def _compat_fields(cfg: RunConfig) -> dict[str, Any]:
    p = cfg.policy
    return {
        "policy.model": p.model,
        "policy.lora_r": p.lora_r,
        "policy.lora_alpha": p.lora_alpha,
        "policy.lora_target_modules": tuple(p.lora_target_modules),
        "policy.lora_layers": p.lora_layers,
        "memory.embedder": cfg.memory.embedder,
    }
