"""The tip table's schema (one `LanceModel`), input validation, safe filters, the JSONL tip format.

Everything here works without a database connection: the tip table (`tip_table.py`, `tip_store.py`)
validates every value with these functions before it touches the table, so bad input raises and leaves the table unchanged.

Tip JSONL format (export and import; UTF-8, one JSON object per line, blank lines ignored)
-----------------------------------------------------------------------------------------
Required keys:
  task        str, non-empty, ≤ 200 chars          e.g. "power-component"
  variation   int ≥ 0                              the variation index (the memory partition)
  text        str, non-blank, ≤ 2000 chars         the tip content shown to the agent
  score       number in [-100, 100]                score of the episode that wrote it; retrieval
                                                   orders by it
Optional keys (default):
  id                 str, 1–64 chars of [A-Za-z0-9_-]  (new id; also new when the id is taken)
  action             str ≤ 2000 chars     ("")      the step's action (generated tips)
  source_episode_id  str ≤ 200 chars      ("")
  key_text           str ≤ 200000 chars   (= text)  the text whose embedding is the retrieval key:
                                                    a generated tip's episode conversation, else
                                                    the tip text
  created_at         number ≥ 0           (now)     Unix time
  origin             "generated" | "manual" | "imported"   checked, but imported rows are always
                                                    stored with origin "imported"
  enabled            bool                 (true)
  edited             bool                 (false)
Any other key, a missing required key, or a wrongly typed value is an error reported with its line
number; a file with any bad line imports nothing. Vectors are not in the file: import embeds
`key_text` with the store's embedder, so a file moves between embedders freely.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Iterable

from lancedb.expr import Expr, col, lit
from lancedb.pydantic import LanceModel, Vector

from empo2_studio.types import TIP_ORIGINS, Tip

MAX_TIP_CHARS = 2000
"""Longest accepted tip text (a generated entry is tip ≤ 100 words + the step's action + score)."""
MAX_KEY_CHARS = 200_000
"""Longest accepted key text (a whole episode conversation)."""
MAX_NAME_CHARS = 200
"""Longest task name / source episode id."""
ORIGINS = TIP_ORIGINS
EMBEDDER_FILE = "embedder.json"
"""Sidecar in the store directory: which embedders built the vectors, from which table version on."""
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@functools.cache
def tip_record_model(dim: int) -> type[LanceModel]:
    """The one schema of the tip table, for key vectors of length `dim`."""

    class TipRecord(LanceModel):
        id: str
        task: str
        variation: int
        text: str
        action: str
        score: float
        source_episode_id: str
        key_text: str
        """Text embedded into `vector` (kept so the table can be re-embedded with another model)."""
        vector: Vector(dim)  # type: ignore[valid-type]
        """The retrieval key: unit-norm embedding of `key_text`."""
        created_at: float
        seq: int
        """Insertion order within the (task, variation) partition; FIFO eviction drops the lowest."""
        origin: str
        enabled: bool
        edited: bool

    return TipRecord


def check_text(text: Any, what: str = "tip text", limit: int = MAX_TIP_CHARS) -> str:
    """Return `text` unchanged, or raise ValueError if it is not a non-blank string ≤ `limit` chars."""
    if not isinstance(text, str):
        raise ValueError(f"{what} must be a string, got {type(text).__name__}")
    if not text.strip():
        raise ValueError(f"{what} must not be empty or whitespace, got {text!r}")
    if len(text) > limit:
        raise ValueError(f"{what} is {len(text)} characters; the limit is {limit}")
    return text


def check_score(score: Any) -> float:
    """Return the score as float, or raise ValueError unless it is a finite number in [−100, 100]."""
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        raise ValueError(f"score must be a number in [-100, 100], got {score!r}")
    if not -100.0 <= score <= 100.0:
        raise ValueError(f"score must be in [-100, 100], got {score!r}")
    return float(score)


def check_task(task: Any) -> str:
    if not isinstance(task, str) or not task.strip() or len(task) > MAX_NAME_CHARS:
        raise ValueError(f"task must be a non-empty string of ≤ {MAX_NAME_CHARS} chars, got {task!r}")
    return task


def check_variation(variation: Any) -> int:
    if isinstance(variation, bool) or not isinstance(variation, int) or variation < 0:
        raise ValueError(f"variation must be an integer ≥ 0, got {variation!r}")
    return int(variation)


def check_origin(origin: Any) -> str:
    if origin not in ORIGINS:
        raise ValueError(f"origin must be one of {list(ORIGINS)}, got {origin!r}")
    return origin


def is_curated(origin: str, edited: bool, source_episode_id: str) -> bool:
    """Is a tip a teacher's (`MemoryConfig.pin_curated` shows it first): added by hand, edited, or
    imported without a source episode?"""
    return origin == "manual" or bool(edited) or (origin == "imported" and not source_episode_id)


def check_bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{what} must be true or false, got {value!r}")
    return value


def check_tip_id(tip_id: Any) -> str:
    if not isinstance(tip_id, str) or not _ID.match(tip_id):
        raise ValueError(f"tip id must be 1–64 characters of letters, digits, '-' or '_', got {tip_id!r}")
    return tip_id


def row_to_tip(row: dict[str, Any]) -> Tip:
    """Convert a table row (dict) to the shared `Tip` type."""
    return Tip(
        tip_id=row["id"],
        task=row["task"],
        variation=int(row["variation"]),
        text=row["text"],
        action=row["action"],
        score=float(row["score"]),
        source_episode_id=row["source_episode_id"],
        created_at=float(row["created_at"]),
        origin=row["origin"],
        enabled=bool(row["enabled"]),
        edited=bool(row["edited"]),
    )


_REQUIRED = ("task", "variation", "text", "score")
_OPTIONAL = ("id", "action", "source_episode_id", "key_text", "created_at", "origin", "enabled", "edited")


def row_to_json(row: dict[str, Any]) -> str:
    """One export line for a table row (all format keys, no vector)."""
    keys = ("id",) + _REQUIRED + _OPTIONAL[1:]
    return json.dumps({k: row[k] for k in keys}, ensure_ascii=False)


def parse_jsonl(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Validate JSONL lines; return one normalised dict per non-blank line (all format keys present,
    `id` None when absent, `created_at` None when absent).

    Raises ValueError listing every bad line as "line N: problem" (first 20) when any line fails.
    """
    records, errors = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(_parse_line(line))
        except ValueError as exc:
            errors.append(f"line {number}: {exc}")
    if errors:
        more = f"\n… and {len(errors) - 20} more" if len(errors) > 20 else ""
        raise ValueError(f"{len(errors)} bad line(s) in tip file, nothing imported:\n" + "\n".join(errors[:20]) + more)
    return records


def refuse_partitions(lines: Sequence[str], records: Sequence[dict[str, Any]],
                      check: Callable[[str, int], str | None] | None) -> None:
    """Raise ValueError listing every tip of a parsed file (`records`, one per non-blank line of
    `lines`) whose (task, variation) `check` rejects (its message), so an import stores nothing rather
    than tips no episode can read. `check` None: nothing to check (the store does not know its env)."""
    if check is None:
        return
    numbers = [n for n, line in enumerate(lines, start=1) if line.strip()]
    errors = [f"line {n}: {why}" for n, r in zip(numbers, records) if (why := check(r["task"], r["variation"]))]
    if errors:
        more = f"\n… and {len(errors) - 20} more" if len(errors) > 20 else ""
        raise ValueError(f"{len(errors)} tip(s) name a task or variation this session's environment lacks, "
                         "nothing imported:\n" + "\n".join(errors[:20]) + more)


def _parse_line(line: str) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in _REQUIRED if k not in obj]
    extra = sorted(set(obj) - set(_REQUIRED) - set(_OPTIONAL))
    if missing or extra:
        parts = ([f"missing keys {missing}"] if missing else []) + ([f"unknown keys {extra}"] if extra else [])
        raise ValueError("; ".join(parts) + f" (valid keys: {list(_REQUIRED + _OPTIONAL)})")
    text = check_text(obj["text"])
    created_at = obj.get("created_at")
    if created_at is not None and (
        isinstance(created_at, bool) or not isinstance(created_at, (int, float)) or not created_at >= 0
    ):
        raise ValueError(f"created_at must be a number ≥ 0, got {created_at!r}")
    return {
        "id": None if obj.get("id") is None else check_tip_id(obj["id"]),
        "task": check_task(obj["task"]),
        "variation": check_variation(obj["variation"]),
        "text": text,
        "score": check_score(obj["score"]),
        "action": _optional_str(obj, "action", MAX_TIP_CHARS),
        "source_episode_id": _optional_str(obj, "source_episode_id", MAX_NAME_CHARS),
        "key_text": check_text(obj["key_text"], "key_text", MAX_KEY_CHARS) if "key_text" in obj else text,
        "created_at": None if created_at is None else float(created_at),
        "origin": check_origin(obj.get("origin", "imported")),
        "enabled": check_bool(obj.get("enabled", True), "enabled"),
        "edited": check_bool(obj.get("edited", False), "edited"),
    }


def _optional_str(obj: dict[str, Any], key: str, limit: int) -> str:
    value = obj.get(key, "")
    if not isinstance(value, str) or len(value) > limit:
        raise ValueError(f"{key} must be a string of ≤ {limit} chars, got {value!r:.80}")
    return value


def where_clause(
    *, task: str | None = None, variation: int | None = None, origin: str | None = None,
    enabled: bool | None = None, text_contains: str | None = None,
) -> Expr | None:
    """AND of the given filters, values validated and passed as literals (never spliced into SQL)."""
    parts: list[Expr] = []
    if task is not None:
        parts.append(col("task") == lit(check_task(task)))
    if variation is not None:
        parts.append(col("variation") == lit(check_variation(variation)))
    if origin is not None:
        parts.append(col("origin") == lit(check_origin(origin)))
    if enabled is not None:
        parts.append(col("enabled") == lit(check_bool(enabled, "enabled")))
    if text_contains is not None:
        if not isinstance(text_contains, str) or not text_contains:
            raise ValueError(f"text_contains must be a non-empty string, got {text_contains!r}")
        parts.append(col("text").lower().contains(lit(text_contains.lower())))
    if not parts:
        return None
    where = parts[0]
    for p in parts[1:]:
        where = where & p
    return where


def read_history(path: Path) -> list[dict[str, Any]]:
    f = path / EMBEDDER_FILE
    return json.loads(f.read_text(encoding="utf-8"))["history"] if f.is_file() else []


def write_history(path: Path, history: list[dict[str, Any]]) -> None:
    tmp = path / (EMBEDDER_FILE + ".tmp")
    tmp.write_text(json.dumps({"history": history}, indent=1), encoding="utf-8")
    tmp.replace(path / EMBEDDER_FILE)
