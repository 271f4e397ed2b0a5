"""Tip retrieval latency: LanceDB (the TipStore rule) vs numpy brute-force cosine, same vectors, same run.

For N = 1k, 10k, 100k tips, laid out either in one (task, variation) partition or spread evenly over
30 partitions, it builds a TipStore from synthetic 384-d unit keys (batch inserts), then times the
retrieval rule (same partition, enabled, cosine > 0.5, order by score, top 10):
- lancedb: `TipStore.retrieve_vector(engine="lancedb")` (flat vector search, `where` prefilter,
           distance range);
- store:   `TipStore.retrieve_vector()` (default engine: the partition's keys read from LanceDB once
           per table version, then numpy; includes the per-query table-version check);
- numpy:   the same rule on the partition's key matrix held in RAM (matrix-vector product + sort),
           the floor.
Every answer of both store paths is checked against numpy's ("wrong" counts mismatching queries). Keys are drawn around 8 cluster centres per
partition so about 1/8 of a partition passes the threshold, as with real, similar conversations.
Query embedding (the other half of a retrieval) is timed separately with the real MiniLM embedder on
a conversation-sized text, and with the hash fake.

Run: PYTHONPATH=. .venv/bin/python benchmarks/bench_memory.py [--sizes 1000 10000 100000] [--queries 100] [--result NAME]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from empo2_studio.config import MemoryConfig
from empo2_studio.memory import TipStore
from empo2_studio.memory.records import tip_record_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import add_result_option, write_result  # noqa: E402

DIM, THRESHOLD, TOP_K, CLUSTERS, PARTITIONS = 384, 0.5, 10, 8, 30


class _FixedDim:
    """Stands in for an embedder of the right name/dim while the benchmark inserts its own vectors."""

    name, dim = "minilm", DIM

    def embed(self, texts):  # never called: the benchmark passes vectors
        raise AssertionError("bench inserts and queries raw vectors")


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _cluster_keys(rng, n: int, centres: np.ndarray) -> np.ndarray:
    # spread 0.8: same-cluster cosine ≈ 1/(1+0.64) ≈ 0.61 > 0.5; other clusters ≈ 0
    which = rng.integers(0, len(centres), n)
    return _unit(centres[which] + 0.8 * rng.standard_normal((n, DIM)) / np.sqrt(DIM))


def build(path: Path, n_total: int, n_parts: int, rng) -> tuple[TipStore, dict, dict, float]:
    """Store with n_total rows over n_parts partitions; returns (store, keys, scores, build seconds)."""
    per = n_total // n_parts
    store = TipStore.open(path, _FixedDim(), MemoryConfig(max_tips_per_partition=max(per, 1000)))
    schema = tip_record_model(DIM).to_arrow_schema()
    keys, scores, centres = {}, {}, {}
    t0 = time.perf_counter()
    for p in range(n_parts):
        centres[p] = _unit(rng.standard_normal((CLUSTERS, DIM)))
        keys[p] = _cluster_keys(rng, per, centres[p])
        scores[p] = rng.integers(-100, 101, per).astype(np.float64)
        batch = pa.table({
            "id": [f"p{p}-{i}" for i in range(per)], "task": ["task"] * per, "variation": [p] * per,
            "text": [f"tip {i}" for i in range(per)], "action": [""] * per, "score": scores[p],
            "source_episode_id": [""] * per, "key_text": [""] * per,
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(keys[p].ravel()), DIM),
            "created_at": [0.0] * per, "seq": list(range(per)), "origin": ["generated"] * per,
            "enabled": [True] * per, "edited": [False] * per,
        }, schema=schema)
        store._table.add(batch)  # bulk path for the benchmark only: the API adds episode by episode
    store.centres = centres
    return store, keys, scores, time.perf_counter() - t0


def numpy_rule(keys: np.ndarray, scores: np.ndarray, q: np.ndarray) -> list[int]:
    sims = keys @ q
    hit = np.flatnonzero(sims > THRESHOLD)
    order = np.lexsort((-sims[hit], -scores[hit]))  # score desc, then similarity desc
    return hit[order[:TOP_K]].tolist()


def time_calls(fn, queries) -> tuple[np.ndarray, list]:
    out, ms = [], []
    for q in queries:
        t = time.perf_counter()
        out.append(fn(q))
        ms.append((time.perf_counter() - t) * 1e3)
    return np.array(ms), out


def bench_layout(n_total: int, n_parts: int, n_queries: int, rng) -> dict:
    with tempfile.TemporaryDirectory() as d:
        store, keys, scores, build_s = build(Path(d) / "tips.lance", n_total, n_parts, rng)
        part = 0
        queries = list(_cluster_keys(rng, n_queries, store.centres[part]))
        t = time.perf_counter()
        store.retrieve_vector("task", part, queries[0])  # first call reads the partition's keys
        load_ms = (time.perf_counter() - t) * 1e3
        for q in queries[:3]:  # warm up all paths
            store.retrieve_vector("task", part, q, engine="lancedb"), numpy_rule(keys[part], scores[part], q)
        lance_ms, lance_out = time_calls(lambda q: store.retrieve_vector("task", part, q, engine="lancedb"), queries)
        store_ms, store_out = time_calls(lambda q: store.retrieve_vector("task", part, q), queries)
        numpy_ms, numpy_out = time_calls(lambda q: numpy_rule(keys[part], scores[part], q), queries)
        hits = [int((keys[part] @ q > THRESHOLD).sum()) for q in queries]
        expected = [[f"p{part}-{i}" for i in b] for b in numpy_out]
        wrong = sum([t.tip_id for t in a] != e for a, e in zip(lance_out, expected))
        wrong += sum([t.tip_id for t in a] != e for a, e in zip(store_out, expected))
    return {
        "layout": f"{n_total:>6} tips, {n_parts:>2} part.", "per_part": n_total // n_parts, "build_s": build_s,
        "lance": lance_ms, "store": store_ms, "numpy": numpy_ms, "load_ms": load_ms,
        "hits": float(np.median(hits)), "mismatch": wrong,
    }


def bench_embedding(n: int) -> list[tuple[str, np.ndarray]]:
    from empo2_studio.memory import make_embedder

    text = " ".join(["user: You are in the kitchen. You see a fridge, a table and a door to the hallway."
                     " assistant: open door"] * 20)  # a conversation longer than MiniLM's 256-token window
    rows = []
    for name in ("hash", "minilm"):
        e = make_embedder(name)
        e.embed([text])  # warm up
        ms, _ = time_calls(lambda t: e.embed([t]), [text] * n)
        rows.append((name, ms))
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    add_result_option(ap)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    out: dict = {"retrieval": [], "embedding": []}
    rng = np.random.default_rng(args.seed)
    print(f"retrieval rule: cosine > {THRESHOLD}, order by score, top {TOP_K}; {args.queries} queries per row\n")
    head = (f"{'layout':<22}{'rows/part':>10}{'hits':>6}{'build s':>8}{'load ms':>8}"
            f"{'lancedb p50/p95 ms':>20}{'store p50/p95 ms':>18}{'numpy p50/p95 ms':>18}{'store/numpy':>12}{'wrong':>6}")
    print(head + "\n" + "-" * len(head))
    for n in args.sizes:
        for parts in (1, PARTITIONS):
            r = bench_layout(n, parts, args.queries, rng)
            cells = "".join(f"{'%.2f / %.2f' % tuple(np.percentile(r[k], [50, 95])):>{w}}"
                            for k, w in (("lance", 20), ("store", 18), ("numpy", 18)))
            ratio = np.median(r["store"]) / np.median(r["numpy"])
            print(f"{r['layout']:<22}{r['per_part']:>10}{r['hits']:>6.0f}{r['build_s']:>8.1f}{r['load_ms']:>8.1f}"
                  f"{cells}{ratio:>11.1f}x{r['mismatch']:>6}", flush=True)
            kept = {k: r[k] for k in ("per_part", "hits", "build_s", "load_ms", "mismatch")}
            ms = {f"{k}_p{q}_ms": float(np.percentile(r[k], q)) for k in ("lance", "store", "numpy") for q in (50, 95)}
            out["retrieval"].append({"tips": n, "partitions": parts, **kept, **ms, "store_over_numpy": float(ratio)})
    print("\nquery embedding (one conversation-sized text per call)")
    for name, ms in bench_embedding(max(10, args.queries // 4)):
        p50, p95 = np.percentile(ms, [50, 95])
        print(f"  {name:<8} p50 {p50:7.2f} ms   p95 {p95:7.2f} ms")
        out["embedding"].append({"embedder": name, "p50_ms": float(p50), "p95_ms": float(p95)})
    write_result(args.result, __file__, argv, started, [args.seed], out, queries=args.queries)


if __name__ == "__main__":
    main()
