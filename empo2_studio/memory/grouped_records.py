"""The structured tip table's extra columns and its JSONL lines (a flat line plus the structure keys).

A structured row is a flat row (`records.tip_record_model`) with:
  place           str    the group's place ("workshop", or `structure.ANYWHERE`)
  used            int    episodes that were shown the tip
  helped          int    of those, the ones that beat their group's running mean score (flat-rotate-source:
                         that scored at least the tip's source episode, and above 0)
  pinned          bool   a teacher's pick: shown first in its group, never evicted
  retired         bool   kept for the record but never shown (lost a contradiction, evicted, or by hand)
  retired_reason  str    why ("contradicted by 3f2a…", "over the group cap", "retired by hand")
  merged_sources  str    source episode ids of tips merged into this one, space separated
  text_vector     vector the embedding of `text` (duplicate and contradiction checks; `vector` stays the key)

A structured export line is a flat line (format: `records` docstring) with the first seven of these keys
(never the vector). An import takes both: a flat line gets its group computed (`StructuredTipStore`)
and zero counts; a structured line keeps its group and counts, and its place is checked against the
environment's places. Any bad line → ValueError naming line numbers, nothing imported.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Iterable

from lancedb.pydantic import Vector

from empo2_studio.memory import records as rec

STRUCTURE_KEYS = ("place", "used", "helped", "pinned", "retired", "retired_reason", "merged_sources")
"""The JSONL keys a structured export adds to a flat line."""
MAX_SOURCES_CHARS = 20_000
"""Longest `merged_sources` kept (oldest ids dropped first)."""


@functools.cache
def grouped_record_model(dim: int) -> type:
    """The structured table's schema: the flat one plus the columns of the module docstring."""

    class GroupedTipRecord(rec.tip_record_model(dim)):  # type: ignore[misc, valid-type]
        place: str
        used: int
        helped: int
        pinned: bool
        retired: bool
        retired_reason: str
        merged_sources: str
        text_vector: Vector(dim)  # type: ignore[valid-type]

    return GroupedTipRecord


def structure_defaults() -> dict[str, Any]:
    """The structure columns of a new tip (place filled in by the caller)."""
    return {"place": "", "used": 0, "helped": 0, "pinned": False, "retired": False, "retired_reason": "",
            "merged_sources": ""}  # fmt: skip


def with_source(sources: str, episode_id: str) -> str:
    """`merged_sources` with one more episode id (skipped when empty), capped at MAX_SOURCES_CHARS."""
    ids = sources.split() + ([episode_id] if episode_id else [])
    out = " ".join(ids)
    while len(out) > MAX_SOURCES_CHARS and ids:
        ids = ids[1:]
        out = " ".join(ids)
    return out


def row_to_json(row: dict[str, Any], *, flat: bool = False) -> str:
    """One export line: the flat keys, plus the structure keys unless `flat`."""
    line = json.loads(rec.row_to_json(row))
    if not flat:
        line.update({k: row[k] for k in STRUCTURE_KEYS})
    return json.dumps(line, ensure_ascii=False)


def parse_jsonl(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Validate flat or structured JSONL lines; one dict per non-blank line: the flat record
    (`records.parse_jsonl`) plus "structure": the structure keys given (validated; {} for a flat line).
    ValueError listing every bad line (first 20), as `records.parse_jsonl`."""
    out, errors = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
            structure = _check_structure({k: obj.pop(k) for k in STRUCTURE_KEYS if k in obj})
            record = rec._parse_line(json.dumps(obj))  # the flat line's checks, one by one
        except json.JSONDecodeError as exc:
            errors.append(f"line {number}: not valid JSON ({exc.msg})")
            continue
        except ValueError as exc:
            errors.append(f"line {number}: {exc}")
            continue
        record["structure"] = structure
        out.append(record)
    if errors:
        more = f"\n… and {len(errors) - 20} more" if len(errors) > 20 else ""
        raise ValueError(f"{len(errors)} bad line(s) in tip file, nothing imported:\n" + "\n".join(errors[:20]) + more)
    return out


def _check_structure(values: dict[str, Any]) -> dict[str, Any]:
    for key in ("used", "helped"):
        v = values.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{key} must be an integer ≥ 0, got {v!r}")
    if values.get("helped", 0) > values.get("used", 0):
        raise ValueError(f"helped ({values.get('helped')}) cannot exceed used ({values.get('used', 0)})")
    for key in ("pinned", "retired"):
        if key in values:
            rec.check_bool(values[key], key)
    for key in ("place", "retired_reason", "merged_sources"):
        if key in values and not isinstance(values[key], str):
            raise ValueError(f"{key} must be a string, got {values[key]!r:.80}")
    return values
