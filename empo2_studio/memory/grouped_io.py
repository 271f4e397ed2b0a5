"""A teacher's hands on the structured memory: pin, retire, merge, the groups view, import and export.

`GroupedCuration` is the curation half of `StructuredTipStore` (`grouped_store.py` holds the writing
and retrieval rules it calls: `_place_locked`, `_group_rows_locked`, `check_place`, `place_of`).

Import (`import_jsonl`) takes a flat export or a structured one (`grouped_records`). A flat line gets its
group computed: the place its key text shows last (a generated tip's key is its episode's conversation,
so the room the episode ended in; a teacher's tip is keyed by its own text, which names no room in the
sentences `TextEnv.place_of` reads, so it goes to ANYWHERE). A structured line keeps its place, which must
be one the environment knows, and its counts. An import stores every line but exact duplicates of a
group (as the flat store skips exact duplicates of a partition): no merge, contradiction or cap runs on
it, so flat → structured → flat keeps every row (tests/test_memory_structure.py counts them); the next
tip written into a group applies the cap there.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from lancedb.expr import col, lit

from empo2_studio.memory import grouped_records as grec
from empo2_studio.memory import records as rec
from empo2_studio.memory import structure as st
from empo2_studio.memory.tip_store import ImportResult, TipStore
from empo2_studio.memory.tip_table import new_row
from empo2_studio.types import Tip


class GroupedCuration(TipStore):
    """Pin, retire, merge, list groups, import/export with the structure (see the module docstring)."""

    def pin(self, tip_ids: Sequence[str], pinned: bool = True) -> int:
        """Pin (or unpin) tips: a pinned tip is shown first in its group and never evicted."""
        return self._set(tip_ids, {"pinned": rec.check_bool(pinned, "pinned")}, "pin")

    def retire(self, tip_ids: Sequence[str], reason: str = "retired by hand") -> int:
        """Retire tips: kept with their counts, never shown. `unretire` brings them back."""
        return self._set(tip_ids, {"retired": True, "retired_reason": rec.check_text(reason, "reason", 200)}, "retire")

    def unretire(self, tip_ids: Sequence[str]) -> int:
        return self._set(tip_ids, {"retired": False, "retired_reason": ""}, "unretire")

    def _set(self, tip_ids: Sequence[str], values: dict[str, Any], verb: str) -> int:
        ids = self._existing_ids_or_raise(tip_ids, verb)
        with self._lock:
            self._existing_ids_or_raise(ids, verb)
            self._table.update(where=col("id").isin([lit(i) for i in ids]), values=values)
        return len(ids)

    def merge(self, keep_id: str, other_ids: Sequence[str]) -> Tip:
        """Merge tips of one group into `keep_id`: their used/helped counts are added to it, their
        source episodes appended to its `merged_sources`, and they are deleted; its text stays as it is.
        ValueError when the tips are not all in the group of `keep_id` (nothing changes)."""
        rec.check_tip_id(keep_id)
        others = [i for i in self._existing_ids_or_raise(other_ids, "merge") if i != keep_id]
        if not others:
            raise ValueError("name at least one other tip to merge into the kept one")
        with self._lock:
            rows = self._rows(col("id").isin([lit(i) for i in [keep_id, *others]]),
                              ["id", "task", "variation", "place", "used", "helped", "merged_sources", "source_episode_id"])  # fmt: skip
            by_id = {r["id"]: r for r in rows}
            if keep_id not in by_id or len(by_id) != len(others) + 1:
                raise KeyError(f"unknown tip id(s) among {[keep_id, *others][:10]}; nothing was merged")
            keep = by_id[keep_id]
            group = (keep["task"], keep["variation"], keep["place"])
            strays = [i for i in others if (by_id[i]["task"], by_id[i]["variation"], by_id[i]["place"]) != group]
            if strays:
                raise ValueError(f"tips {[i[:8] for i in strays]} are not in group {st.group_label(*group)!r}; "
                                 "only tips of one group are merged")  # fmt: skip
            sources = keep["merged_sources"]
            for i in others:
                for src in [by_id[i]["source_episode_id"], *by_id[i]["merged_sources"].split()]:
                    sources = grec.with_source(sources, src)
            values = {"used": keep["used"] + sum(by_id[i]["used"] for i in others),
                      "helped": keep["helped"] + sum(by_id[i]["helped"] for i in others), "merged_sources": sources}  # fmt: skip
            self._table.update(where=col("id") == lit(keep_id), values=values)
            self._table.delete(col("id").isin([lit(i) for i in others]))
        return self.get(keep_id)

    def update_tip(self, tip_id: str, *, text: str | None = None, score: float | None = None,
                   enabled: bool | None = None) -> Tip:  # fmt: skip
        """As `TipStore.update_tip`; a new text is also re-embedded as the tip's text vector."""
        tip = super().update_tip(tip_id, text=text, score=score, enabled=enabled)
        if text is not None:
            with self._lock:
                self._table.update(where=col("id") == lit(tip_id), values={"text_vector": self._embed([text])[0].tolist()})
        return tip

    # ------------------------------------------------------------------ the groups view
    def group_rows(self, task: str, variation: int, place: str) -> list[dict[str, Any]]:
        """A group's tips as dicts (no vectors), pinned first, then best record (`structure.record`)."""
        rows = self._group_rows_locked(rec.check_task(task), rec.check_variation(variation), place)
        rows.sort(key=lambda r: (r["retired"], not r["pinned"], tuple(-x for x in st.record(r))))
        return [{k: v for k, v in r.items() if k not in ("vector", "text_vector")} for r in rows]

    def groups(self, task: str | None = None, *, best: int = 3) -> list[st.GroupSummary]:
        """Every group with tips (optionally of one task): what it is about, its tip counts, running
        mean and its `best` live tips by record, sorted by task, variation, place."""
        where = rec.where_clause(task=task)
        rows = self._rows(where, ["id", "task", "variation", "place", "text", "score", "used", "helped", "pinned", "retired",
                                 "created_at"])
        stats = {(g["task"], g["variation"], g["place"]): g for g in self._groups.search().limit(None).to_arrow().to_pylist()}
        by_group: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
        for r in rows:
            by_group.setdefault((r["task"], r["variation"], r["place"]), []).append(r)
        out = []
        for key in sorted(by_group):
            members = by_group[key]
            live = sorted((r for r in members if not r["retired"]), key=lambda r: (not r["pinned"], tuple(-x for x in st.record(r))))
            g = stats.get(key, {"episodes": 0, "mean_score": 0.0})
            out.append(st.GroupSummary(*key, tips=len(live), retired=len(members) - len(live),
                                       pinned=sum(r["pinned"] for r in live), episodes=int(g["episodes"]),
                                       mean_score=float(g["mean_score"]),
                                       best=tuple({k: r[k] for k in ("id", "text", "used", "helped", "pinned")} for r in live[:best])))  # fmt: skip
        return out

    # ------------------------------------------------------------------ import / export
    def export_jsonl(self, path: str | Path, *, flat: bool = False, **filters: Any) -> int:  # type: ignore[override]
        """Write the tips matching `filters` (as `list_tips`) as JSONL: structured lines, or with
        `flat=True` the flat format a flat store imports. Returns the count."""
        rows = sorted(self._rows(rec.where_clause(**filters)), key=lambda r: (r["task"], r["variation"], r["place"], r["seq"]))
        Path(path).write_text("".join(grec.row_to_json(r, flat=flat) + "\n" for r in rows), encoding="utf-8")
        return len(rows)

    def import_jsonl(self, path: str | Path, *, check: Callable[[str, int], str | None] | None = None) -> ImportResult:  # type: ignore[override]
        """Import flat or structured JSONL (module docstring). Every line is checked first, places
        included, and (task, variation) by `check` (`records.refuse_partitions`); any bad line raises
        ValueError naming it and nothing is imported."""
        with open(path, encoding="utf-8") as fh:  # lines end at newlines only: a tip may hold U+2028
            lines = list(fh)
        records = grec.parse_jsonl(lines)
        if not records:
            raise ValueError(f"{Path(path).name} holds no tips (no non-blank lines); nothing imported")
        rec.refuse_partitions(lines, records, check)
        bad = []
        for n, r in enumerate(records, start=1):
            place = r["structure"].get("place")
            if place is not None:
                try:
                    self.check_place(r["task"], place)
                except ValueError as exc:
                    bad.append(f"tip {n} ({r['text'][:40]!r}): {exc}")
        if bad:
            raise ValueError(f"{len(bad)} tip(s) with a group the environment does not know, nothing imported:\n" + "\n".join(bad[:20]))
        keys = self._embed([r["key_text"] for r in records])
        texts = self._embed([r["text"] for r in records])
        now = time.time()
        rows = []
        for r, k, t in zip(records, keys, texts):
            row = new_row(r["task"], r["variation"], r["text"], r["action"], r["score"], r["source_episode_id"],
                          r["key_text"], k, now if r["created_at"] is None else r["created_at"], "imported")
            row.update(grec.structure_defaults(), enabled=r["enabled"], edited=r["edited"], id=r["id"] or row["id"],
                       text_vector=np.asarray(t, np.float32).tolist())  # fmt: skip
            row.update(r["structure"])
            row["place"] = self.filed(r["structure"].get("place") or self.place_of(r["key_text"]))
            rows.append(row)
        with self._lock:
            return self._import_locked(rows)

    def _import_locked(self, rows: list[dict[str, Any]]) -> ImportResult:
        taken = {r["id"] for r in self._rows(col("id").isin([lit(r["id"]) for r in rows]), ["id"])}
        texts: dict[tuple[str, int, str], set[str]] = {}
        seqs: dict[tuple[str, int, str], int] = {}
        kept, skipped = [], 0
        for row in rows:
            key = (row["task"], row["variation"], row["place"])
            if key not in texts:
                existing = self._group_rows_locked(*key)
                texts[key] = {r["text"] for r in existing}
                seqs[key] = max((r["seq"] for r in existing), default=-1) + 1
            if row["text"] in texts[key]:
                skipped += 1
                continue
            texts[key].add(row["text"])
            if row["id"] in taken:  # keep the file's ids where free, so a round trip keeps them
                row["id"] = uuid.uuid4().hex
            taken.add(row["id"])
            row["seq"], seqs[key] = seqs[key], seqs[key] + 1
            kept.append(row)
        if kept:
            before = self._table.count_rows()
            self._add_rows(kept)
            if self._table.count_rows() != before + len(kept):  # every line is a row or a counted duplicate
                raise RuntimeError(f"import wrote {self._table.count_rows() - before} rows for {len(kept)} tips")
        return ImportResult(len(kept), skipped)
