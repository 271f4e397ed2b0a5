"""The tip memory as the studio curates it (paper §2): `TipStore`, the table with its search and edits.

`TipStore` is the one class the rest of the package uses: `TipStore.open(path, embedder, cfg)`. It
adds curation (the studio's Tips tab and `empo2-studio tips`) on top of the table (`tip_table.py`:
storage, episode entries, versions, re-embedding) and its search (`tip_search.py`: the retrieval
rule, free-text search): `list_tips`, `add_tip`, `update_tip`, `delete`, `set_enabled`,
`export_jsonl` / `import_jsonl` (format in `records.py`). Every write runs under the table's file lock
and makes a new LanceDB version (`versions` / `restore` undo it). Every public method validates its
arguments first and raises ValueError / KeyError with the table unchanged.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence

from lancedb.expr import col, lit

from empo2_studio.memory import records as rec
from empo2_studio.memory.tip_search import TipSearch
from empo2_studio.memory.tip_table import (  # noqa: F401  (re-exported: the store's public names)
    REEMBED_COMMAND,
    EmbedderMismatchError,
    TableVersion,
    entry_text,
    new_row,
)
from empo2_studio.types import Episode, RetrievedTip, SkippedTip, Tip


@dataclass(frozen=True, slots=True)
class ImportResult:
    added: int
    """Rows written."""
    skipped_duplicates: int
    """Lines whose text already existed in their partition (or earlier in the file)."""



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


class TipStore(TipSearch):
    """A LanceDB-backed tip memory: table, search and curation. Create with `TipStore.open(path, embedder, cfg)`."""

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
        row = new_row(task, variation, text, action, score, "", key_text, self._embed([key_text])[0], time.time(), "manual")
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

    def remove_episode_tips(self, episode_ids: Sequence[str]) -> int:
        """Delete the tips written from these episodes (`source_episode_id`) that nobody edited or
        pinned since; returns how many. For a stopped training iteration, whose episodes are never
        recorded. Not undone: what those tips already did to others (a structured memory's merges,
        counts and retirements; the oldest tips a full partition dropped)."""
        if not episode_ids:
            return 0
        where = col("source_episode_id").isin([lit(i) for i in episode_ids]) & (col("edited") == lit(False))
        if "pinned" in self._table.schema.names:  # a structured memory: a teacher's pin keeps a tip
            where = where & (col("pinned") == lit(False))
        with self._lock:
            n = self._table.count_rows(where.to_sql())
            if n:
                self._table.delete(where)
        return n

    def set_enabled(self, tip_ids: Sequence[str], enabled: bool) -> int:
        """Enable or disable tips in bulk; returns how many. Unknown ids raise KeyError, nothing changes."""
        rec.check_bool(enabled, "enabled")
        ids = self._existing_ids_or_raise(tip_ids, "update")
        with self._lock:
            self._existing_ids_or_raise(ids, "update")
            self._table.update(where=col("id").isin([lit(i) for i in ids]), values={"enabled": enabled})
        return len(ids)

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

    # ------------------------------------------------------------------ import / export
    def export_jsonl(self, path: str | Path, **filters: Any) -> int:
        """Write the tips matching `filters` (as in `list_tips`) to a JSONL file; returns the count."""
        where = rec.where_clause(**filters)
        rows = sorted(self._rows(where), key=lambda r: (r["task"], r["variation"], r["seq"]))
        Path(path).write_text("".join(rec.row_to_json(r) + "\n" for r in rows), encoding="utf-8")
        return len(rows)

    def import_jsonl(self, path: str | Path, *, check: Callable[[str, int], str | None] | None = None) -> ImportResult:
        """Import a JSONL tip file (format: `records` module docstring). Every line is validated
        first, and its (task, variation) by `check` when given (a message for a partition no episode
        can read, `records.refuse_partitions`); any bad line raises ValueError listing line numbers and
        nothing is imported; so does a file without a single tip (most likely the wrong file).
        Duplicate texts are skipped; the partition cap applies (oldest evicted)."""
        with open(path, encoding="utf-8") as fh:  # lines end at newlines only: a tip may hold U+2028
            lines = list(fh)
        records = rec.parse_jsonl(lines)
        if not records:
            raise ValueError(f"{Path(path).name} holds no tips (no non-blank lines); nothing imported")
        rec.refuse_partitions(lines, records, check)
        vectors = self._embed([r["key_text"] for r in records])
        now = time.time()
        rows = []
        for r, v in zip(records, vectors):
            row = new_row(r["task"], r["variation"], r["text"], r["action"], r["score"], r["source_episode_id"],
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
