"""The tip table on disk: one LanceDB table of tips, partitioned by (task, variation) (paper §2).

`TipTable` opens (or creates) the table, writes the entries of a played episode (`add_episode_tips`),
reads rows back (`get`, `count`) and manages what every write leaves behind: LanceDB table versions
(`versions`, `restore`) and the embedder that built the key vectors (`reembed`). Search over it is in
`tip_search.py`, the studio's curation in `tip_store.py`; the row format and its checks in `records.py`.

Writing (`add_episode_tips`): after an episode, the tip the policy wrote is stored once per step,
as "<tip>; at that step the action taken was <action>; the episode ended with score <R>/100", with
the episode score and one shared key, the embedding of the episode's final conversation. Exact
duplicate texts within a partition are skipped, so an episode adds one row per distinct action it
took (fewer when earlier episodes stored the same texts); a partition keeps at most
`MemoryConfig.max_tips_per_partition` entries, oldest evicted first (FIFO).

On disk, `path` is a LanceDB directory holding the table `tips`, `embedder.json` (which embedder
built the vectors, from which table version on) and `.write.lock`. Every read-modify-write runs under
that file lock, so the studio and a CLI process can write the same store at once without lost
writes or duplicates; reads check for the newest table version on every call.

Filters are built with `lancedb.expr` (`col(...) == lit(...)`), which quotes values, so a value such
as "x' OR '1'='1" can only ever match itself. Every public method validates its arguments first
and raises ValueError / KeyError with the table unchanged.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Iterable, Self, Sequence

import lancedb
import numpy as np
import pyarrow as pa
from filelock import FileLock
from lancedb.expr import Expr, col, lit

from empo2_studio.config import MemoryConfig
from empo2_studio.memory import records as rec
from empo2_studio.memory.embedder import Embedder
from empo2_studio.types import Episode, Tip

TABLE = "tips"
REEMBED_COMMAND = "empo2-studio tips reembed --session <run_id>"


class EmbedderMismatchError(ValueError):
    """The table's vectors were built by another embedder than the one it was opened with."""


@dataclass(frozen=True, slots=True)
class TableVersion:
    version: int
    timestamp: datetime
    rows: int



def entry_text(tip_text: str, action: str, score: float) -> str:
    """The stored content of one per-step entry (paper §2, own wording)."""
    return f"{tip_text.rstrip(' .;')}; at that step the action taken was {action}; the episode ended with score {score:.1f}/100"


def checked_entries(episode: Episode, tip_text: str, key_text: str) -> tuple[str, int, float, list[str]]:
    """(task, variation, score, one entry text per step) of an episode's tip, every part checked.

    Raises:
        ValueError: a bad task, variation, score, tip text, key text or entry text (named).
    """
    task, variation = rec.check_task(episode.task), rec.check_variation(episode.variation)
    score = rec.check_score(episode.score)
    rec.check_text(tip_text)
    rec.check_text(key_text, "key text", rec.MAX_KEY_CHARS)
    texts = [entry_text(tip_text, s.action or s.sample.text, score) for s in episode.steps]
    for t in texts:
        rec.check_text(t, "tip entry text")
    return task, variation, score, texts


class TipTable:
    """The LanceDB tip table with its write lock and embedder record. Create with `open(path, embedder, cfg)`."""

    def __init__(self, path: Path, db: Any, embedder: Embedder, cfg: MemoryConfig, mismatch: str | None) -> None:
        self.path, self._db, self.embedder, self.cfg = path, db, embedder, cfg
        self._table = db.open_table(TABLE)
        self._lock = FileLock(str(path / ".write.lock"), timeout=120)
        self._mismatch = mismatch

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(
        cls, path: str | Path, embedder: Embedder, cfg: MemoryConfig | None = None, *, verify_embedder: bool = True
    ) -> Self:
        """Open (or create) the store at `path` (a directory, e.g. `sessions/<run>/tips.lance`).

        Raises EmbedderMismatchError (a ValueError) naming both embedders and the re-embed command when
        the table was built by another embedder. With `verify_embedder=False` it opens anyway, but
        every call that embeds or searches raises the same error until `reembed(embedder)` is called.
        """
        cfg = cfg or MemoryConfig()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        db = lancedb.connect(str(path), read_consistency_interval=timedelta(0))
        with FileLock(str(path / ".write.lock"), timeout=120):
            history = rec.read_history(path)
            if not (path / f"{TABLE}.lance").is_dir():  # LanceDB keeps a local table in <name>.lance/
                table = db.create_table(TABLE, schema=cls.record_model(embedder.dim))
                history = [{"name": embedder.name, "dim": embedder.dim, "from_version": table.version}]
                rec.write_history(path, history)
            elif not history:  # table without a record: trust it only if the dimension fits
                dim = db.open_table(TABLE).schema.field("vector").type.list_size
                history = [{"name": embedder.name if dim == embedder.dim else f"unknown-{dim}d", "dim": dim, "from_version": 1}]
                rec.write_history(path, history)
        current = history[-1]
        mismatch = None
        if (current["name"], current["dim"]) != (embedder.name, embedder.dim):
            mismatch = (
                f"the tips at {path} were embedded with {current['name']!r} ({current['dim']}-d) but the store was "
                f"opened with {embedder.name!r} ({embedder.dim}-d); re-embed them with `{REEMBED_COMMAND}` "
                f"(TipStore.reembed) or open the store with the {current['name']!r} embedder"
            )
            if verify_embedder:
                raise EmbedderMismatchError(mismatch)
        return cls(path, db, embedder, cfg, mismatch)

    @staticmethod
    def record_model(dim: int) -> type:
        """The table's schema (`records.tip_record_model`; the structured store adds its columns)."""
        return rec.tip_record_model(dim)

    @property
    def version(self) -> int:
        """Current table version (every write makes a new one)."""
        return self._table.version

    # ------------------------------------------------------------------ writing
    def add_episode_tips(self, episode: Episode, tip_text: str, key_text: str) -> list[Tip]:
        """Store the episode's tip once per step (paper §2); returns the entries written (duplicates
        of existing texts in the partition are skipped). Raises ValueError on a bad tip text, key
        text, task, variation or score; nothing is written then."""
        task, variation, score, texts = checked_entries(episode, tip_text, key_text)
        if not texts:
            return []
        vector = self._embed([key_text])[0]
        now = time.time()
        rows = [
            new_row(task, variation, t, s.action or s.sample.text, score, episode.episode_id, key_text, vector, now, "generated")
            for t, s in zip(texts, episode.steps)
        ]
        with self._lock:
            added, _ = self._insert_locked(rows)
        return [rec.row_to_tip(r) for r in added]

    # ------------------------------------------------------------------ reading
    def count(self, task: str | None = None, variation: int | None = None, *, enabled: bool | None = None) -> int:
        """Number of tips, optionally in one task / partition / enabled state."""
        where = rec.where_clause(task=task, variation=variation, enabled=enabled)
        return self._table.count_rows(None if where is None else where.to_sql())

    def get(self, tip_id: str) -> Tip:
        """One tip by id. Raises KeyError when unknown."""
        rows = self._rows(col("id") == lit(rec.check_tip_id(tip_id)))
        if not rows:
            raise KeyError(f"unknown tip id {tip_id!r}")
        return rec.row_to_tip(rows[0])

    # ------------------------------------------------------------------ versions / embedder
    def versions(self) -> list[TableVersion]:
        """The table's versions, oldest first (LanceDB keeps one per write)."""
        return [
            TableVersion(int(v["version"]), v["timestamp"], int(v.get("metadata", {}).get("total_rows", -1)))
            for v in self._table.list_versions()
        ]

    def restore(self, version: int) -> int:
        """Make an earlier version current again (as a new version, so it can be undone); returns
        the new version. Raises ValueError for an unknown version or one whose vectors were built
        by another embedder than the current one."""
        if isinstance(version, bool) or not isinstance(version, int):
            raise ValueError(f"version must be an integer, got {version!r}")
        with self._lock:
            known = [v.version for v in self.versions()]
            if version not in known:
                raise ValueError(f"unknown table version {version}; versions are {known[0]}…{known[-1]}")
            history = rec.read_history(self.path)
            then = [h for h in history if h["from_version"] <= version][-1]
            if (then["name"], then["dim"]) != (history[-1]["name"], history[-1]["dim"]):
                raise ValueError(
                    f"version {version} holds vectors from {then['name']!r} ({then['dim']}-d), the table now uses "
                    f"{history[-1]['name']!r}; restore a version ≥ {history[-1]['from_version']}"
                )
            self._table.restore(version)
            self._table.checkout_latest()
            return self._table.version

    def reembed(self, embedder: Embedder) -> int:
        """Re-embed every tip's key text with `embedder` and make it the store's embedder (one new
        table version; the CLI runs it as `empo2-studio tips reembed --session <run_id>`). Returns
        the number of tips re-embedded."""
        with self._lock:
            data = self._table.to_arrow().drop_columns(["vector"]).to_pylist()
            vectors = embedder.embed([r["key_text"] for r in data]) if data else np.zeros((0, embedder.dim), np.float32)
            for r, v in zip(data, vectors):
                r["vector"] = v.tolist()
            self._reembed_extra(data, embedder)
            schema = self.record_model(embedder.dim).to_arrow_schema()
            self._table = self._db.create_table(TABLE, data=pa.Table.from_pylist(data, schema=schema), mode="overwrite")
            history = rec.read_history(self.path) + [
                {"name": embedder.name, "dim": embedder.dim, "from_version": self._table.version}
            ]
            rec.write_history(self.path, history)
            self.embedder, self._mismatch = embedder, None
        return len(data)

    # ------------------------------------------------------------------ internals
    def _reembed_extra(self, rows: list[dict[str, Any]], embedder: Embedder) -> None:
        """Hook for `reembed`: a subclass re-embeds its other vector columns in `rows` (none here)."""

    def _embed(self, texts: list[str]) -> np.ndarray:
        self._check_embedder()
        return self.embedder.embed(texts)

    def _check_embedder(self) -> None:
        if self._mismatch:
            raise EmbedderMismatchError(self._mismatch)

    def _rows(self, where: Expr | None, columns: list[str] | None = None) -> list[dict[str, Any]]:
        cols = columns or [c for c in self._table.schema.names if c != "vector"]
        q = self._table.search().select(cols).limit(None)
        if where is not None:
            q = q.where(where)
        return q.to_arrow().to_pylist()

    def _existing_ids_or_raise(self, tip_ids: Sequence[str], verb: str) -> list[str]:
        if isinstance(tip_ids, str):
            raise ValueError("pass a list of tip ids, not a single string")
        ids = list(dict.fromkeys(rec.check_tip_id(i) for i in tip_ids))
        if not ids:
            raise ValueError(f"no tip ids given to {verb}")
        found = {r["id"] for r in self._rows(col("id").isin([lit(i) for i in ids]), ["id"])}
        missing = [i for i in ids if i not in found]
        if missing:
            raise KeyError(f"unknown tip id(s) {missing[:10]}; nothing was {verb}d")
        return ids

    def _insert_locked(self, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
        """Dedupe, number, add and FIFO-evict, per partition. Caller holds the lock. Returns
        (rows added, number skipped as duplicates)."""
        cap = self.cfg.max_tips_per_partition
        added: list[dict[str, Any]] = []
        evict: list[str] = []
        skipped = 0
        for (task, variation), part_rows in _group(rows).items():
            existing = self._rows(rec.where_clause(task=task, variation=variation), ["id", "text", "seq"])
            seen = {r["text"] for r in existing}
            next_seq = max((r["seq"] for r in existing), default=-1) + 1
            fresh = []
            for row in part_rows:
                if row["text"] in seen:
                    skipped += 1
                    continue
                seen.add(row["text"])
                row["seq"], next_seq = next_seq, next_seq + 1
                fresh.append(row)
            fresh = fresh[-cap:]
            overflow = len(existing) + len(fresh) - cap
            if overflow > 0:
                evict += [r["id"] for r in sorted(existing, key=lambda r: r["seq"])[:overflow]]
            added += fresh
        if added:
            schema = self.record_model(self.embedder.dim).to_arrow_schema()
            self._table.add(pa.Table.from_pylist(added, schema=schema))
        if evict:  # after the add: a crash in between leaves a partition over the cap, never loses new tips
            self._table.delete(col("id").isin([lit(i) for i in evict]))
        return added, skipped


def new_row(task, variation, text, action, score, episode_id, key_text, vector, created_at, origin) -> dict[str, Any]:
    """A table row for one tip (a fresh id, enabled, not edited; `seq` is set when inserted)."""
    return {
        "id": uuid.uuid4().hex, "task": task, "variation": variation, "text": text, "action": action,
        "score": score, "source_episode_id": episode_id, "key_text": key_text,
        "vector": np.asarray(vector, dtype=np.float32).tolist(), "created_at": float(created_at), "seq": 0,
        "origin": origin, "enabled": True, "edited": False,
    }


def _group(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["task"], row["variation"]), []).append(row)
    return groups
