"""The structured tip memory on LanceDB: `StructuredTipStore`, a `TipStore` whose tips live in groups.

`memory.structure = "structured"` (docs/memory-structure.md). The rules (groups, rank, merges,
contradictions, caps, the helped count) are in `structure.py`; this module reads and writes them. The
table is the flat one with extra columns (`grouped_records.py`), in its own directory beside the flat
store (`structured_path`), so a session's flat tips are never touched; a second table, `groups`, keeps
each group's running mean score. Everything the flat store offers (list, edit, delete, enable,
versions, restore, re-embed, search) works unchanged on it.

    store = StructuredTipStore.open(path, embedder, cfg, world=env)   # env: anything with places/place_of
    hits = store.retrieve_explained(task, variation, queries, places=["workshop"])
    store.add_episode_tips(episode, tip, key)   # feedback for the tips it read, then its entries by place

Every public method validates first and raises ValueError / KeyError with the tables unchanged; a tip
whose place the environment does not know is refused naming the valid groups.
"""

from __future__ import annotations

import time
import zlib
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np
import pyarrow as pa
from lancedb.expr import col, lit

from empo2_studio.config import MemoryConfig
from empo2_studio.memory import grouped_records as grec
from empo2_studio.memory import records as rec
from empo2_studio.memory import structure as st
from empo2_studio.memory.embedder import Embedder
from empo2_studio.memory.grouped_io import GroupedCuration
from empo2_studio.memory.tip_table import checked_entries, new_row
from empo2_studio.types import Episode, RetrievedTip, SkippedTip, Tip

GROUPS = "groups"
_COLS = ["id", "text", "action", "origin", "edited", "score", "seq", "created_at", "enabled", "place", "used", "helped", "pinned", "retired",
         "retired_reason", "merged_sources", "source_episode_id", "vector", "text_vector"]  # fmt: skip


class Places(Protocol):
    """What the store needs of an environment (`TextEnv` has both)."""

    def places(self, task: str) -> tuple[str, ...]: ...

    def place_of(self, observation: str) -> str | None: ...


def structured_path(flat_path: str | Path) -> Path:
    """Where a session's structured store lives: beside its flat one (tips.lance → tips-structured.lance)."""
    p = Path(flat_path)
    return p.with_name(f"{p.stem}-structured{p.suffix}")


class StructuredTipStore(GroupedCuration):
    """Tips in groups (task, variation, place). Create with `StructuredTipStore.open(path, embedder, cfg, world=env)`."""

    world: Places | None = None
    rules: st.StructureRules = st.StructureRules()

    @staticmethod
    def record_model(dim: int) -> type:
        return grec.grouped_record_model(dim)

    @classmethod
    def open(cls, path: str | Path, embedder: Embedder, cfg: MemoryConfig | None = None, *,  # type: ignore[override]
             world: Places | None = None, rules: st.StructureRules | None = None, verify_embedder: bool = True):  # fmt: skip
        """Open (or create) the store at `path`; `world` says the places (None: every tip goes to
        `ANYWHERE` and a named place is refused)."""
        store = super().open(path, embedder, cfg, verify_embedder=verify_embedder)
        store.world = world
        store.rules = rules or st.ARMS.get(store.cfg.structure, st.StructureRules())
        if f"{GROUPS}.lance" not in {p.name for p in Path(path).iterdir()}:
            schema = pa.schema([("task", pa.string()), ("variation", pa.int64()), ("place", pa.string()),
                                ("episodes", pa.int64()), ("mean_score", pa.float64())])  # fmt: skip
            store._db.create_table(GROUPS, schema=schema, exist_ok=True)
        store._groups = store._db.open_table(GROUPS)
        store._gcache = {}
        return store

    # ------------------------------------------------------------------ places
    def known_places(self, task: str) -> tuple[str, ...]:
        """The environment's places for `task` (none without a world)."""
        return tuple(self.world.places(task)) if self.world is not None else ()

    def place_of(self, text: str) -> str:
        """The place `text` shows (`TextEnv.place_of`), or ANYWHERE (always, when the rules do not group by place)."""
        if not self.rules.by_place:
            return st.ANYWHERE
        return (self.world.place_of(text) if self.world is not None else None) or st.ANYWHERE

    def filed(self, place: str) -> str:
        """The group a tip of `place` is filed under: `place`, or ANYWHERE when the rules do not group by place."""
        return place if self.rules.by_place else st.ANYWHERE

    def check_place(self, task: str, place: Any) -> str:
        """`place` if the environment knows it for `task` (or ANYWHERE); else ValueError naming the valid groups."""
        return st.check_place(place, self.known_places(rec.check_task(task)), task)

    def episode_places(self, episode: Episode) -> list[str]:
        """The place of each step: where the observation the agent acted on put it (the first
        observation for step 0, the previous step's after that); a step whose observation names no
        place keeps the place before it."""
        place = self.place_of(episode.first_observation) if episode.first_observation else st.ANYWHERE
        out = []
        for i, s in enumerate(episode.steps):
            if i > 0:
                place = self.filed((self.world.place_of(episode.steps[i - 1].observation) if self.world else None) or place)
            out.append(place)
        return out

    # ------------------------------------------------------------------ writing
    def add_episode_tips(self, episode: Episode, tip_text: str, key_text: str) -> list[Tip]:
        """Credit the tips the episode read (`record_episode`), then store its tip once per step in
        the group of the step's place: merged, contradicting or added (`structure.placement`).
        Returns the entries added (merged ones are not new tips). ValueError on bad input, nothing written."""
        task, variation, score, texts = checked_entries(episode, tip_text, key_text)
        self.record_episode(episode)
        if not texts:
            return []
        places = self.episode_places(episode)
        key = self._embed([key_text])[0]
        text_vectors = self._embed(texts)
        now = time.time()
        rows = []
        for t, s, place, tv in zip(texts, episode.steps, places, text_vectors):
            row = new_row(task, variation, t, s.action or s.sample.text, score, episode.episode_id, key_text, key, now, "generated")
            rows.append({**row, **grec.structure_defaults(), "place": place, "text_vector": tv.tolist()})
        with self._lock:
            added = self._place_locked(rows)
        return [rec.row_to_tip(r) for r in added]

    def add_tip(self, task: str, variation: int, text: str, *, score: float = 0.0, action: str = "",  # type: ignore[override]
                key_text: str | None = None, enabled: bool = True, place: str = st.ANYWHERE,
                pinned: bool = False) -> Tip:  # fmt: skip
        """A teacher's tip in the group `place` (default ANYWHERE), always added: the rules never merge
        or retire a teacher's tip (`structure` docstring), only the group cap may retire an unpinned one.
        Raises ValueError for an unknown place (naming the valid groups), bad values, or the same text
        already in the group."""
        rec.check_task(task), rec.check_variation(variation), rec.check_text(text)
        self.check_place(task, place)
        score = rec.check_score(score)
        rec.check_bool(enabled, "enabled"), rec.check_bool(pinned, "pinned")
        key_text = text if key_text is None else rec.check_text(key_text, "key text", rec.MAX_KEY_CHARS)
        vectors = self._embed([key_text, text])
        row = new_row(task, variation, text, action, score, "", key_text, vectors[0], time.time(), "manual")
        place = self.filed(place)
        row.update(grec.structure_defaults(), enabled=enabled, place=place, pinned=pinned, text_vector=vectors[1].tolist())
        with self._lock:
            if any(r["text"] == text for r in self._group_rows_locked(task, variation, place)):
                raise ValueError(f"a tip with this exact text already exists in group {st.group_label(task, variation, place)!r}: {text!r:.120}")
            added = self._place_locked([row])
        return rec.row_to_tip(added[0])

    def record_episode(self, episode: Episode) -> int:
        """Count the episode's reading of its tips: each distinct tip shown gets used += 1, and
        helped += 1 when the episode's score beat the running mean of the tip's group (then the mean
        takes the score in), or with `rules.helped_by = "source"` when it scored at least the tip's own
        source episode and above 0 (`structure.reproduced`); the group's mean takes the score in either
        way. Tips deleted since are skipped. Returns the number of tips credited."""
        shown = list(dict.fromkeys(t.tip_id for s in episode.steps for t in s.tips))
        if not shown:
            return 0
        score = rec.check_score(episode.score)
        with self._lock:
            rows = self._rows(col("id").isin([lit(i) for i in shown]), ["id", "task", "variation", "place", "score"])
            by_group: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
            for r in rows:
                by_group.setdefault((r["task"], r["variation"], r["place"]), []).append(r)
            for (task, variation, place), group in by_group.items():
                n, mean = self._group_stats(task, variation, place)
                by_helped: dict[bool, list[str]] = {True: [], False: []}
                for r in group:
                    by_helped[st.reader_helped(self.rules, score, float(r["score"]), n, mean)].append(r["id"])
                for helped, ids in by_helped.items():
                    if ids:
                        self._table.update(where=col("id").isin([lit(i) for i in ids]),
                                           values_sql={"used": "used + 1", "helped": "helped + 1" if helped else "helped"})  # fmt: skip
                self._set_group_stats(task, variation, place, *st.updated_mean(n, mean, score))
        return len(rows)

    def _place_locked(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Place new rows (one group at a time, its rows read once): merge, contradiction or add, then
        the group cap. Caller holds the lock. Returns the rows added."""
        added: list[dict[str, Any]] = []
        groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
        for row in rows:
            groups.setdefault((row["task"], row["variation"], row["place"]), []).append(row)
        for (task, variation, place), new in groups.items():
            existing = self._group_rows_locked(task, variation, place)
            next_seq = max((r["seq"] for r in existing), default=-1) + 1
            updates: dict[str, dict[str, Any]] = {}
            fresh: list[dict[str, Any]] = []
            for row in new:
                # a teacher's tip (structure.teachers_tip): the rules never merge it or retire it
                pool = [] if st.teachers_tip(row) else [r for r in existing + fresh if not st.teachers_tip(r)]
                sims = [float(np.dot(row["text_vector"], r["text_vector"])) for r in pool]
                p = st.placement(row["text"], row["score"], row["created_at"], pool, sims, self.rules)
                if p.kind == "merge":
                    target = next(r for r in pool if r["id"] == p.target)
                    target["used"] += row["used"]
                    target["helped"] += row["helped"]
                    # the tip keeps its best source score: a won episode's near duplicate of a lower-scored note makes it a won note
                    target["score"] = max(float(target["score"]), float(row["score"]))
                    target["merged_sources"] = grec.with_source(target["merged_sources"], row["source_episode_id"])
                    updates[target["id"]] = target
                    continue
                if p.kind == "contradiction":
                    old = next(r for r in pool if r["id"] == p.target)
                    loser = old if p.winner == "new" else row
                    winner = row if p.winner == "new" else old
                    loser.update(retired=True, retired_reason=f"contradicted by {winner['id'][:8]} (text similarity {p.similarity:.2f})")
                    if loser is old:
                        updates[old["id"]] = old
                row["seq"], next_seq = next_seq, next_seq + 1
                fresh.append(row)
            for rid in st.evict(existing + fresh, self.rules.max_stored):
                r = next(r for r in existing + fresh if r["id"] == rid)
                r.update(retired=True, retired_reason=f"over the group cap ({self.rules.max_stored})")
                if any(r is e for e in existing):
                    updates[rid] = r
            for rid, r in updates.items():
                if not any(f["id"] == rid for f in fresh):
                    self._table.update(where=col("id") == lit(rid), values={k: r[k] for k in (
                        "used", "helped", "score", "merged_sources", "retired", "retired_reason")})  # fmt: skip
            if fresh:
                self._add_rows(fresh)
            added += fresh
        return added

    def _add_rows(self, rows: list[dict[str, Any]]) -> None:
        schema = self.record_model(self.embedder.dim).to_arrow_schema()
        self._table.add(pa.Table.from_pylist(rows, schema=schema))

    # ------------------------------------------------------------------ reading
    def _group_rows_locked(self, task: str, variation: int, place: str) -> list[dict[str, Any]]:
        where = rec.where_clause(task=task, variation=variation) & (col("place") == lit(place))
        rows = self._table.search().where(where).select(_COLS).limit(None).to_arrow().to_pylist()
        for r in rows:
            r["vector"], r["text_vector"] = np.asarray(r["vector"], np.float32), np.asarray(r["text_vector"], np.float32)
        return rows

    def _group_rows(self, task: str, variation: int, place: str) -> list[dict[str, Any]]:
        """A group's rows, cached per table version (as the flat partition)."""
        version = self._table.version
        key = (task, variation, place)
        hit = self._gcache.get(key)
        if hit is None or hit[0] != version:
            if len(self._gcache) > 256:
                self._gcache.clear()
            hit = self._gcache[key] = (version, self._group_rows_locked(task, variation, place))
        return hit[1]

    def _group_stats(self, task: str, variation: int, place: str) -> tuple[int, float]:
        where = (col("task") == lit(task)) & (col("variation") == lit(variation)) & (col("place") == lit(place))
        rows = self._groups.search().where(where).limit(None).to_arrow().to_pylist()
        return (int(rows[0]["episodes"]), float(rows[0]["mean_score"])) if rows else (0, 0.0)

    def _set_group_stats(self, task: str, variation: int, place: str, episodes: int, mean: float) -> None:
        where = (col("task") == lit(task)) & (col("variation") == lit(variation)) & (col("place") == lit(place))
        self._groups.delete(where)
        self._groups.add([{"task": task, "variation": variation, "place": place, "episodes": episodes, "mean_score": mean}])

    # ------------------------------------------------------------------ retrieval
    def retrieve_explained(
        self, task: str, variation: int, query_texts: Sequence[str], places: Sequence[str] | None = None
    ) -> list[tuple[list[RetrievedTip], list[SkippedTip]]]:
        """Per query: the tips shown and the nearest ones not shown, with why. The query's group is
        (task, variation, place) with `places[i]` (None: the place the query text shows, else
        ANYWHERE), together with the ANYWHERE group; order: pinned, then (`cfg.pin_curated`) the other
        teacher's tips (`structure.shown_first`), then (`rules.wins_first`) notes of won episodes, then
        rank (`structure.rank`; `rules.score_order`: source score, unhelpful tips behind), `cfg.top_k`
        shown. Retired and disabled tips are never shown (reported as skipped)."""
        rec.check_task(task), rec.check_variation(variation)
        if isinstance(query_texts, str):
            raise ValueError("pass a list of query texts, not a single string")
        for q in query_texts:
            rec.check_text(q, "query text", rec.MAX_KEY_CHARS)
        if places is not None and len(places) != len(query_texts):
            raise ValueError(f"got {len(places)} places for {len(query_texts)} queries")
        if not query_texts:
            return []
        wanted = [self.place_of(q) if places is None or places[i] is None else self.filed(places[i]) for i, q in enumerate(query_texts)]
        thr = self.cfg.similarity_threshold if self.rules.threshold else None
        out = []
        for place, q, text in zip(wanted, self._embed(list(query_texts)), query_texts):
            rows = self._group_rows(task, variation, place) + ([] if place == st.ANYWHERE else self._group_rows(task, variation, st.ANYWHERE))
            sims = [float(np.dot(r["vector"], q)) for r in rows]
            seed = zlib.crc32(text.encode()) if self.rules.random_order else None
            chosen = st.retrieval_order(rows, sims, self.rules.count_weight, self.cfg.top_k, threshold=thr, seed=seed,
                                        wins_first=self.rules.wins_first, score_order=self.rules.score_order,
                                        pin_curated=self.cfg.pin_curated)  # fmt: skip
            hits = [RetrievedTip(rows[i]["id"], rows[i]["text"], float(rows[i]["score"]), sims[i], self._first(rows[i]),
                                 self._why(rows[i], sims[i])) for i in chosen]  # fmt: skip
            out.append((hits, self._why_not(rows, sims, set(chosen))))
        return out

    def _why(self, r: dict[str, Any], sim: float) -> str:
        """"group kitchen · pinned · rank 1.03 = similarity 0.78 + 0.5·(1+1)/(2+2) · used 2, helped 1"
        (score order: "group anywhere · score 83.0 · similarity 0.61 · used 8, helped 2: did not help, behind the rest")."""
        u, h, w = r["used"], r["helped"], self.rules.count_weight
        pin = (" · pinned" if r["pinned"] else " · a teacher's tip: shown first" if self._first(r)
               else " · a random pick" if self.rules.random_order
               else " · a won episode's: shown first" if self._won_first(r) else "")  # fmt: skip
        if self.rules.score_order:
            return f"group {r['place']}{pin} · score {float(r['score']):.1f} · similarity {sim:.2f} · used {u}, helped {h}{self._behind(r)}"
        return f"group {r['place']}{pin} · rank {st.rank(sim, u, h, w):.2f} = similarity {sim:.2f} + {w:g}·({h}+1)/({u}+2) · used {u}, helped {h}"

    def _first(self, r: dict[str, Any]) -> bool:
        return st.shown_first(r, self.cfg.pin_curated)

    def _behind(self, r: dict[str, Any]) -> str:
        return ": did not help, behind the rest" if self.rules.score_order and not self._first(r) and st.unhelpful(r["used"], r["helped"]) else ""

    def _won_first(self, r: dict[str, Any]) -> bool:
        return self.rules.wins_first and st.won(r)

    def _why_not(self, rows: list[dict[str, Any]], sims: list[float], shown: set[int]) -> list[SkippedTip]:
        out = []
        thr = self.cfg.similarity_threshold if self.rules.threshold else None
        for i in sorted(range(len(rows)), key=lambda i: -sims[i]):
            if i in shown:
                continue
            r = rows[i]
            rank = st.rank(sims[i], r["used"], r["helped"], self.rules.count_weight)
            first = "; won episodes' notes go first" if self.rules.wins_first and not self._won_first(r) and not self._first(r) else ""
            order = f"score {float(r['score']):.1f}" if self.rules.score_order else f"rank {rank:.2f}"
            why = (f"retired: {r['retired_reason']}" if r["retired"] else "disabled" if not r["enabled"]
                   else f"similarity {sims[i]:.2f} ≤ threshold {thr:.2f}" if thr is not None and not self._first(r) and sims[i] <= thr
                   else f"outside the top {self.cfg.top_k} of group {r['place']} ({order}, used {r['used']}, helped {r['helped']}{first}{self._behind(r)})")  # fmt: skip
            out.append(SkippedTip(r["id"], r["text"], float(r["score"]), sims[i], why))
            if len(out) == 5:
                break
        return out

    def _reembed_extra(self, rows: list[dict[str, Any]], embedder: Embedder) -> None:
        vectors = embedder.embed([r["text"] for r in rows]) if rows else []
        for r, v in zip(rows, vectors):
            r["text_vector"] = v.tolist()

