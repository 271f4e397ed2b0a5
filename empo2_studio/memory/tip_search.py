"""Searching the tip table: the retrieval rule of a memory rollout, and free-text search (paper §2).

Retrieval (`retrieve`): embed the current conversation, keep enabled tips of the same (task,
variation) whose key has cosine similarity > `similarity_threshold`, order them by stored score
(descending; ties: higher similarity, then newer), return the first `top_k`. Curated tips (added by
hand, edited, or imported without a source episode) are pinned when `MemoryConfig.pin_curated` is on:
they are shown first at every step of their task and variation, whatever their similarity, and the
rule above fills the rest. Departure from the paper's similarity rule: a hand-written tip is keyed by
its own text, which resembles the conversation at step 0 only, so a teacher's tip vanished from the
prompt after the first move. `retrieve_explained` also says why the nearest other tips were not shown.

The default engine reads a partition's enabled keys from LanceDB once per table version and searches
them exactly in numpy (LanceDB's per-query overhead is several ms, numpy's well under one: see
benchmarks/bench_memory.py); `engine="lancedb"` runs the same rule as a LanceDB flat vector search
with a `where` prefilter and a distance range, and the tests check that both agree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np

from empo2_studio.config import MemoryConfig
from empo2_studio.memory import records as rec
from empo2_studio.memory.embedder import Embedder
from empo2_studio.memory.tip_table import TipTable
from empo2_studio.types import RetrievedTip, SkippedTip, Tip

_SEARCH_COLS = ["id", "text", "score", "seq", "_distance"]
MAX_SKIPPED = 5
"""How many not-shown tips `retrieve_explained` reports per query (nearest first)."""


class TipSearch(TipTable):
    """The tip table with its searches; a partition's keys stay in RAM per table version."""

    def __init__(self, path: Path, db: Any, embedder: Embedder, cfg: MemoryConfig, mismatch: str | None) -> None:
        super().__init__(path, db, embedder, cfg, mismatch)
        self._cache: dict[tuple[str, int], tuple[int, tuple]] = {}

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
        curated = [rec.is_curated(o, e, src) for o, e, src in zip(origin, data["edited"].to_pylist(), sources)]
        arrays = (
            data["id"].to_pylist(), data["text"].to_pylist(), data["score"].to_numpy().astype(np.float64),
            data["seq"].to_numpy().astype(np.int64), np.ascontiguousarray(keys, dtype=np.float32),
            np.asarray(data["enabled"].to_pylist(), dtype=bool), np.asarray(curated, dtype=bool),
        )
        if len(self._cache) > 256:  # bound RAM when many partitions are queried
            self._cache.clear()
        self._cache[(task, variation)] = (version, arrays)
        return arrays

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
