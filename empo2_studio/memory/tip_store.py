"""The tip memory: one LanceDB table of verbal tips, partitioned by (task, variation) (paper §2).

Writing (`add_episode_tips`): after an episode, the tip the policy wrote is stored once per step,
as "<tip>; at that step the action taken was <action>; the episode ended with score <R>/100", with
the episode score and one shared key, the embedding of the episode's final conversation. Exact
duplicate texts within a partition are skipped; a partition keeps at most
`MemoryConfig.max_tips_per_partition` entries, oldest evicted first (FIFO).

Retrieval (`retrieve`): embed the current conversation, keep enabled tips of the same (task,
variation) whose key has cosine similarity > `similarity_threshold`, order them by stored score
(descending; ties: higher similarity, then newer), return the first `top_k`. Curated tips (added by
hand, edited, or imported without a source episode) are pinned when `MemoryConfig.pin_curated` is on:
they are shown first at every step of their task and variation, whatever their similarity, and the
rule above fills the rest. Departure from the paper's similarity rule: a hand-written tip is keyed by
its own text, which resembles the conversation at step 0 only, so a teacher's tip vanished from the
prompt after the first move. `retrieve_explained` also says why the nearest other tips were not shown. The default engine
reads a partition's enabled keys from LanceDB once per table version and searches them exactly in
numpy (LanceDB's per-query overhead is several ms, numpy's well under one: see
benchmarks/bench_memory.py); `engine="lancedb"` runs the same rule as a LanceDB flat vector search
with a `where` prefilter and a distance range, and the tests check that both agree.

Curation (the studio's Tips tab and `empo2-studio tips`): `list_tips`, `search`, `get`, `add_tip`,
`update_tip`, `delete`, `set_enabled`, `export_jsonl` / `import_jsonl` (format in `records.py`),
`versions` / `restore` (LanceDB table versions: every write is a version).

On disk, `path` is a LanceDB directory holding the table `tips`, `embedder.json` (which embedder
built the vectors, from which table version on) and `.write.lock`. Every read-modify-write runs under
that file lock, so the studio and a CLI process can write the same store at once without lost
writes or duplicates; reads check for the newest table version on every call.

Filters are built with `lancedb.expr` (`col(...) == lit(...)`), which quotes values, so a value such
as "x' OR '1'='1" can only ever match itself. Every public method validates its arguments first
and raises ValueError / KeyError with the table unchanged.

Over 400 lines because the store is one concept with one lock and one version check around the
table: retrieval, curation (edit, bulk, versions, restore), JSONL import/export and re-embedding all
read and write the same in-RAM partition cache; the row format and its checks are in records.py.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Iterable, Literal, Protocol, Sequence

import lancedb
import numpy as np
import pyarrow as pa
from filelock import FileLock
from lancedb.expr import Expr, col, lit

from empo2_studio.config import MemoryConfig
from empo2_studio.memory import records as rec
from empo2_studio.memory.embedder import Embedder
from empo2_studio.types import Episode, RetrievedTip, SkippedTip, Tip

TABLE = "tips"
REEMBED_COMMAND = "empo2-studio tips reembed --session <run_id>"
_SEARCH_COLS = ["id", "text", "score", "seq", "_distance"]
MAX_SKIPPED = 5
"""How many not-shown tips `retrieve_explained` reports per query (nearest first)."""


class EmbedderMismatchError(ValueError):
    """The table's vectors were built by another embedder than the one it was opened with."""


@dataclass(frozen=True, slots=True)
class TableVersion:
    version: int
    timestamp: datetime
    rows: int


@dataclass(frozen=True, slots=True)
class ImportResult:
    added: int
    """Rows written."""
    skipped_duplicates: int
    """Lines whose text already existed in their partition (or earlier in the file)."""


def entry_text(tip_text: str, action: str, score: float) -> str:
    """The stored content of one per-step entry (paper §2, own wording)."""
    return f"{tip_text.rstrip(' .;')}; at that step the action taken was {action}; the episode ended with score {score:.1f}/100"



class TipMemory(Protocol):
    """What the rollout and the reflection need of a tip memory (`TipStore` implements it)."""

    def retrieve_explained(
        self, task: str, variation: int, query_texts: Sequence[str]
    ) -> list[tuple[list[RetrievedTip], list[SkippedTip]]]:
        """Per query: the tips retrieved for it, and the nearest ones it skipped (see `TipStore`)."""
        ...

    def add_episode_tips(self, episode: Episode, tip_text: str, key_text: str) -> list[Tip]:
        """Store an episode's tip once per step; returns the entries written. ValueError on bad input."""
        ...


class TipStore:
    """A LanceDB-backed tip memory. Create with `TipStore.open(path, embedder, cfg)`."""

    def __init__(self, path: Path, db: Any, embedder: Embedder, cfg: MemoryConfig, mismatch: str | None) -> None:
        self.path, self._db, self.embedder, self.cfg = path, db, embedder, cfg
        self._table = db.open_table(TABLE)
        self._lock = FileLock(str(path / ".write.lock"), timeout=120)
        self._mismatch = mismatch
        self._cache: dict[tuple[str, int], tuple[int, tuple]] = {}

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(
        cls, path: str | Path, embedder: Embedder, cfg: MemoryConfig | None = None, *, verify_embedder: bool = True
    ) -> TipStore:
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
                table = db.create_table(TABLE, schema=rec.tip_record_model(embedder.dim))
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

    @property
    def version(self) -> int:
        """Current table version (every write makes a new one)."""
        return self._table.version

    # ------------------------------------------------------------------ retrieval
    def retrieve(self, task: str, variation: int, query_text: str) -> list[RetrievedTip]:
        """Tips for one step of a memory rollout (paper §2): embed `query_text` (the conversation so
        far), then `retrieve_vector`. Raises ValueError on a bad task/variation or empty query."""
        rec.check_task(task), rec.check_variation(variation)
        rec.check_text(query_text, "query text", rec.MAX_KEY_CHARS)
        return self.retrieve_vector(task, variation, self._embed([query_text])[0])

    def retrieve_batch(self, task: str, variation: int, query_texts: Sequence[str]) -> list[list[RetrievedTip]]:
        """`retrieve` for several conversations of one partition (a lock-step group) with one
        batched embedding call. Returns one list per query text."""
        rec.check_task(task), rec.check_variation(variation)
        if isinstance(query_texts, str):
            raise ValueError("pass a list of query texts, not a single string")
        for q in query_texts:
            rec.check_text(q, "query text", rec.MAX_KEY_CHARS)
        if not query_texts:
            return []
        return [self.retrieve_vector(task, variation, v) for v in self._embed(list(query_texts))]

    def retrieve_explained(
        self, task: str, variation: int, query_texts: Sequence[str]
    ) -> list[tuple[list[RetrievedTip], list[SkippedTip]]]:
        """`retrieve_batch`, plus per query the (at most `MAX_SKIPPED`) nearest tips of the partition
        that were not shown and why: "disabled", "similarity 0.42 ≤ threshold 0.50", or "outside the
        top 10 (score 25.0)". One batched embedding call; same validation as `retrieve_batch`."""
        rec.check_task(task), rec.check_variation(variation)
        for q in query_texts:
            rec.check_text(q, "query text", rec.MAX_KEY_CHARS)
        if not query_texts:
            return []
        out = []
        for vector in self._embed(list(query_texts)):
            hits = self.retrieve_vector(task, variation, vector)
            out.append((hits, self._skipped(task, variation, vector, {h.tip_id for h in hits})))
        return out

    def _skipped(self, task: str, variation: int, q: np.ndarray, shown: set[str]) -> list[SkippedTip]:
        ids, texts, scores, seqs, keys, enabled, _ = self._partition(task, variation)
        sims = keys @ np.asarray(q, dtype=np.float32).reshape(-1)
        thr, k = self.cfg.similarity_threshold, self.cfg.top_k
        out = []
        for i in np.argsort(-sims, kind="stable"):
            if ids[i] in shown:
                continue
            if not enabled[i]:
                reason = "disabled"
            elif sims[i] <= thr:
                reason = f"similarity {sims[i]:.2f} ≤ threshold {thr:.2f}"
            else:
                reason = f"outside the top {k} (score {scores[i]:.1f})"
            out.append(SkippedTip(ids[i], texts[i], float(scores[i]), float(sims[i]), reason))
            if len(out) == MAX_SKIPPED:
                break
        return out

    def retrieve_vector(
        self, task: str, variation: int, vector: np.ndarray, *, threshold: float | None = None,
        top_k: int | None = None, engine: Literal["numpy", "lancedb"] = "numpy",
    ) -> list[RetrievedTip]:
        """Retrieval rule on a query vector (dim,), unit norm: same partition, enabled, cosine
        similarity > threshold, ordered by score desc (ties: similarity desc, newer first), top_k;
        with `cfg.pin_curated` (numpy engine) the partition's enabled curated tips come first, in the
        same order, whatever their similarity.

        engine "numpy" (default): exact brute force on the partition's keys, read from the table
        once per table version and kept in RAM (a few ms of LanceDB per query otherwise; see
        benchmarks/bench_memory.py). engine "lancedb": the same rule as a LanceDB flat vector search
        with a `where` prefilter and a distance range (the reference the numpy path is tested against; it
        applies the similarity rule only, never pins).
        """
        self._check_embedder()
        thr = self.cfg.similarity_threshold if threshold is None else threshold
        k = self.cfg.top_k if top_k is None else top_k
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape != (self.embedder.dim,):
            raise ValueError(f"query vector must have shape ({self.embedder.dim},), got {np.shape(vector)}")
        if engine == "numpy":
            ids, texts, scores, seqs, keys, enabled, curated = self._partition(task, variation)
            sims = keys @ q  # (n,)
            pinned = enabled & curated if self.cfg.pin_curated else np.zeros_like(enabled)
            hit = np.flatnonzero(enabled & (sims > thr) & ~pinned)
            pin = np.flatnonzero(pinned)
            first = pin[np.lexsort((-seqs[pin], -sims[pin], -scores[pin]))]  # last key sorts first
            rest = hit[np.lexsort((-seqs[hit], -sims[hit], -scores[hit]))]
            chosen = np.concatenate([first, rest])[:k]
            return [RetrievedTip(ids[i], texts[i], float(scores[i]), float(sims[i]), bool(pinned[i])) for i in chosen]
        if engine != "lancedb":
            raise ValueError(f"engine must be 'numpy' or 'lancedb', got {engine!r}")
        where = rec.where_clause(task=task, variation=variation, enabled=True)
        limit = max(self.cfg.max_tips_per_partition, k)
        while True:  # the cap bounds a partition, but a lowered cap may leave more rows: widen until complete
            rows = (
                self._table.search(q, vector_column_name="vector")
                .distance_type("cosine")
                .where(where, prefilter=True)
                .distance_range(upper_bound=1.0 - thr)
                .select(_SEARCH_COLS)
                .limit(limit)
                .to_arrow()
                .to_pylist()
            )
            if len(rows) < limit:
                break
            limit *= 4
        hits = [(r, 1.0 - float(r["_distance"])) for r in rows]
        hits = [(r, s) for r, s in hits if s > thr]
        hits.sort(key=lambda h: (-h[0]["score"], -h[1], -h[0]["seq"]))
        return [RetrievedTip(tip_id=r["id"], text=r["text"], score=float(r["score"]), similarity=s) for r, s in hits[:k]]

    def _partition(self, task: str, variation: int) -> tuple:
        """(ids, texts, scores, seqs, keys (n, dim), enabled (n,) bool, curated (n,) bool) of the
        partition's tips, disabled ones included, cached per table version: any write, by this or
        another process, makes a new version and a reload."""
        version = self._table.version  # checks the newest manifest (read_consistency_interval=0)
        cached = self._cache.get((task, variation))
        if cached is not None and cached[0] == version:
            return cached[1]
        where = rec.where_clause(task=task, variation=variation)
        cols = ["id", "text", "score", "seq", "vector", "enabled", "origin", "edited", "source_episode_id"]
        data = self._table.search().where(where).select(cols).limit(None).to_arrow()
        keys = data["vector"].combine_chunks().flatten().to_numpy().reshape(-1, self.embedder.dim)
        origin, sources = data["origin"].to_pylist(), data["source_episode_id"].to_pylist()
        curated = [
            o == "manual" or bool(e) or (o == "imported" and not src)
            for o, e, src in zip(origin, data["edited"].to_pylist(), sources)
        ]
        arrays = (
            data["id"].to_pylist(), data["text"].to_pylist(), data["score"].to_numpy().astype(np.float64),
            data["seq"].to_numpy().astype(np.int64), np.ascontiguousarray(keys, dtype=np.float32),
            np.asarray(data["enabled"].to_pylist(), dtype=bool), np.asarray(curated, dtype=bool),
        )
        if len(self._cache) > 256:  # bound RAM when many partitions are queried
            self._cache.clear()
        self._cache[(task, variation)] = (version, arrays)
        return arrays

    # ------------------------------------------------------------------ writing
    def add_episode_tips(self, episode: Episode, tip_text: str, key_text: str) -> list[Tip]:
        """Store the episode's tip once per step (paper §2); returns the entries written (duplicates
        of existing texts in the partition are skipped). Raises ValueError on a bad tip text, key
        text, task, variation or score; nothing is written then."""
        task, variation = rec.check_task(episode.task), rec.check_variation(episode.variation)
        score = rec.check_score(episode.score)
        rec.check_text(tip_text)
        rec.check_text(key_text, "key text", rec.MAX_KEY_CHARS)
        texts = [entry_text(tip_text, s.action or s.sample.text, score) for s in episode.steps]
        for t in texts:
            rec.check_text(t, "tip entry text")
        if not texts:
            return []
        vector = self._embed([key_text])[0]
        now = time.time()
        rows = [
            _row(task, variation, t, s.action or s.sample.text, score, episode.episode_id, key_text, vector, now, "generated")
            for t, s in zip(texts, episode.steps)
        ]
        with self._lock:
            added, _ = self._insert_locked(rows)
        return [rec.row_to_tip(r) for r in added]

    def add_tip(
        self, task: str, variation: int, text: str, *, score: float = 0.0, action: str = "",
        key_text: str | None = None, enabled: bool = True,
    ) -> Tip:
        """Add a manual tip. Its key is the embedding of `key_text` (default: the tip text).
        Raises ValueError on bad values or when the same text already exists in the partition."""
        rec.check_task(task), rec.check_variation(variation), rec.check_text(text)
        score = rec.check_score(score)
        rec.check_bool(enabled, "enabled")
        key_text = text if key_text is None else rec.check_text(key_text, "key text", rec.MAX_KEY_CHARS)
        row = _row(task, variation, text, action, score, "", key_text, self._embed([key_text])[0], time.time(), "manual")
        row["enabled"] = enabled
        with self._lock:
            added, skipped = self._insert_locked([row])
        if skipped:
            raise ValueError(f"a tip with this exact text already exists for ({task!r}, {variation}): {text!r:.120}")
        return rec.row_to_tip(added[0])

    def update_tip(
        self, tip_id: str, *, text: str | None = None, score: float | None = None, enabled: bool | None = None
    ) -> Tip:
        """Edit one tip. A text or score change sets `edited`. When the key was the tip text itself
        (manual/imported tips), a new text is re-embedded as the new key; a generated tip keeps its
        key, the episode conversation it was written about. Raises KeyError for an unknown id,
        ValueError for bad values or a text that duplicates another tip of the partition."""
        rec.check_tip_id(tip_id)
        if text is None and score is None and enabled is None:
            raise ValueError("update_tip needs at least one of text, score, enabled")
        values: dict[str, Any] = {}
        if text is not None:
            values["text"] = rec.check_text(text)
        if score is not None:
            values["score"] = rec.check_score(score)
        if enabled is not None:
            values["enabled"] = rec.check_bool(enabled, "enabled")
        with self._lock:
            old = self._rows(col("id") == lit(tip_id), ["id", "task", "variation", "text", "key_text", "score"])
            if not old:
                raise KeyError(f"unknown tip id {tip_id!r}")
            old = old[0]
            if text is not None and text != old["text"]:
                dup = rec.where_clause(task=old["task"], variation=old["variation"]) & (col("text") == lit(text))
                if self._table.count_rows(dup.to_sql()):
                    raise ValueError(f"another tip of ({old['task']!r}, {old['variation']}) already has this text")
                if old["key_text"] == old["text"]:
                    self._check_embedder()
                    values["key_text"] = text
                    values["vector"] = self._embed([text])[0].tolist()
            if ("text" in values and text != old["text"]) or ("score" in values and values["score"] != old["score"]):
                values["edited"] = True
            self._table.update(where=col("id") == lit(tip_id), values=values)
        return self.get(tip_id)

    def delete(self, tip_ids: Sequence[str]) -> int:
        """Delete tips by id; returns how many. Raises KeyError naming unknown ids (nothing deleted)."""
        ids = self._existing_ids_or_raise(tip_ids, "delete")
        with self._lock:
            self._existing_ids_or_raise(ids, "delete")
            self._table.delete(col("id").isin([lit(i) for i in ids]))
        return len(ids)

    def set_enabled(self, tip_ids: Sequence[str], enabled: bool) -> int:
        """Enable or disable tips in bulk; returns how many. Unknown ids raise KeyError, nothing changes."""
        rec.check_bool(enabled, "enabled")
        ids = self._existing_ids_or_raise(tip_ids, "update")
        with self._lock:
            self._existing_ids_or_raise(ids, "update")
            self._table.update(where=col("id").isin([lit(i) for i in ids]), values={"enabled": enabled})
        return len(ids)

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

    def list_tips(
        self, *, task: str | None = None, variation: int | None = None, origin: str | None = None,
        enabled: bool | None = None, text_contains: str | None = None, limit: int | None = None,
    ) -> list[Tip]:
        """Tips matching every given filter (`text_contains`: case-insensitive substring), in
        insertion order per partition (task, variation, oldest first). Bad filter values raise ValueError."""
        where = rec.where_clause(task=task, variation=variation, origin=origin, enabled=enabled, text_contains=text_contains)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(f"limit must be a positive integer or None, got {limit!r}")
        rows = self._rows(where)
        rows.sort(key=lambda r: (r["task"], r["variation"], r["seq"]))
        return [rec.row_to_tip(r) for r in rows[:limit]]

    def search(
        self, query: str, *, task: str | None = None, variation: int | None = None, limit: int = 20
    ) -> list[tuple[Tip, float]]:
        """Semantic search for the Tips tab: tips (enabled or not) whose key is most similar to the
        free-text `query`, as (tip, cosine similarity), most similar first."""
        rec.check_text(query, "search query", rec.MAX_KEY_CHARS)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive integer, got {limit!r}")
        builder = self._table.search(self._embed([query])[0], vector_column_name="vector").distance_type("cosine")
        where = rec.where_clause(task=task, variation=variation)
        if where is not None:
            builder = builder.where(where, prefilter=True)
        rows = builder.limit(limit).to_arrow().drop_columns(["vector"]).to_pylist()
        return [(rec.row_to_tip(r), 1.0 - float(r["_distance"])) for r in rows]

    # ------------------------------------------------------------------ import / export
    def export_jsonl(self, path: str | Path, **filters: Any) -> int:
        """Write the tips matching `filters` (as in `list_tips`) to a JSONL file; returns the count."""
        where = rec.where_clause(**filters)
        rows = sorted(self._rows(where), key=lambda r: (r["task"], r["variation"], r["seq"]))
        Path(path).write_text("".join(rec.row_to_json(r) + "\n" for r in rows), encoding="utf-8")
        return len(rows)

    def import_jsonl(self, path: str | Path) -> ImportResult:
        """Import a JSONL tip file (format: `records` module docstring). Every line is validated
        first; any bad line raises ValueError listing line numbers and nothing is imported; so does
        a file without a single tip (most likely the wrong file). Duplicate texts are skipped; the
        partition cap applies (oldest evicted)."""
        with open(path, encoding="utf-8") as fh:
            records = rec.parse_jsonl(fh)
        if not records:
            raise ValueError(f"{Path(path).name} holds no tips (no non-blank lines); nothing imported")
        vectors = self._embed([r["key_text"] for r in records])
        now = time.time()
        rows = []
        for r, v in zip(records, vectors):
            row = _row(r["task"], r["variation"], r["text"], r["action"], r["score"], r["source_episode_id"],
                       r["key_text"], v, now if r["created_at"] is None else r["created_at"], "imported")
            row.update(enabled=r["enabled"], edited=r["edited"], id=r["id"] or row["id"])
            rows.append(row)
        with self._lock:
            taken = {r["id"] for r in self._rows(col("id").isin([lit(r["id"]) for r in rows]), ["id"])}
            seen: set[str] = set()
            for row in rows:  # keep the file's ids where free, so a round trip keeps them
                if row["id"] in taken or row["id"] in seen:
                    row["id"] = uuid.uuid4().hex
                seen.add(row["id"])
            added, skipped = self._insert_locked(rows)
        return ImportResult(len(added), skipped)

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
            schema = rec.tip_record_model(embedder.dim).to_arrow_schema()
            self._table = self._db.create_table(TABLE, data=pa.Table.from_pylist(data, schema=schema), mode="overwrite")
            history = rec.read_history(self.path) + [
                {"name": embedder.name, "dim": embedder.dim, "from_version": self._table.version}
            ]
            rec.write_history(self.path, history)
            self.embedder, self._mismatch = embedder, None
        return len(data)

    # ------------------------------------------------------------------ internals
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
            schema = rec.tip_record_model(self.embedder.dim).to_arrow_schema()
            self._table.add(pa.Table.from_pylist(added, schema=schema))
        if evict:  # after the add: a crash in between leaves a partition over the cap, never loses new tips
            self._table.delete(col("id").isin([lit(i) for i in evict]))
        return added, skipped


def _row(task, variation, text, action, score, episode_id, key_text, vector, created_at, origin) -> dict[str, Any]:
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
