"""What a warm start saw, its `--init` adapter's data included: the `seen` and `lineage` fields that
make_warmstart.py and make_sw_warmstart.py write into warmstart.json.

A fine-tune from an init adapter keeps what the init learned, so an adapter has seen every task and
variation of its whole chain. `seen` is that union ({task: sorted variations}); `lineage` says in words
what each link trained on, newest first. tests/test_warm_start.py reads `seen` to prove no shipped
adapter saw a held-out task (issues 47 and 48).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path


def init_record(init: Path | None) -> dict:
    """The init adapter's warmstart.json ({} for no init). ValueError when it cannot say what it saw."""
    if init is None:
        return {}
    path = Path(init) / "warmstart.json"
    meta = json.loads(path.read_text()) if path.is_file() else {}
    if "seen" not in meta and not isinstance(meta.get("tasks"), dict):
        raise ValueError(f"--init {str(init)!r}: its warmstart.json does not say which variations it saw (no 'seen'"
                         f" field, and 'tasks' is {meta.get('tasks')!r}); give an adapter these scripts wrote")  # fmt: skip
    return meta


def merged_seen(own: Mapping[str, Iterable[int]], init: Path | None) -> dict[str, list[int]]:
    """`own` ({task: variations} this run trained on) joined with everything the init chain saw."""
    meta = init_record(init)
    seen = {task: set(vs) for task, vs in own.items()}
    for task, vs in (meta.get("seen") or meta.get("tasks") or {}).items():
        seen.setdefault(task, set()).update(vs)
    return {task: sorted(vs) for task, vs in sorted(seen.items())}


def lineage(own: str, init: Path | None) -> list[str]:
    """`own` (what this run trained on, in words), then the init chain's lines."""
    meta = init_record(init)
    before = meta.get("lineage") or ([f"{meta.get('trained_on', 'unknown')}"] if meta else [])
    return [own, *(f"init {Path(init).name}: {line}" if i == 0 else line for i, line in enumerate(before))]
