"""Durable files: crash-safe JSONL appends and reads, atomic replacement (the session records).

Each append writes whole lines in one write, then flush + fsync. A kill -9 can leave at most one
partial last line; readers ignore it and the next append cuts it off before writing. So after a crash
every record completed before the kill is still there. JSON is strict: non-finite floats (NaN, ±inf)
are written as null (`finite`). A whole file is replaced atomically: written to a temporary file in
the same folder, fsynced, renamed over the old one, and the folder fsynced.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any


def append_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Append `rows` to the JSONL file at `path` (created when missing) in one durable write; a partial
    last line left by a crash is cut off first. Raises TypeError for a value JSON cannot hold."""
    if rows:
        _append_bytes(path, "".join(json.dumps(finite(r), allow_nan=False) + "\n" for r in rows).encode())


def _append_bytes(path: Path, data: bytes) -> None:
    with open(path, "ab+") as f:
        size = f.seek(0, os.SEEK_END)
        if size:
            f.seek(size - 1)
            if f.read(1) != b"\n":  # a partial line from a crash: cut it off first
                f.truncate(_last_newline_end(f, size))
                f.seek(0, os.SEEK_END)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _last_newline_end(f: Any, size: int) -> int:
    """Offset just after the last b"\\n" in the file (0 if none)."""
    pos = size
    while pos > 0:
        start = max(0, pos - 65536)
        f.seek(start)
        chunk = f.read(pos - start)
        i = chunk.rfind(b"\n")
        if i >= 0:
            return start + i + 1
        pos = start
    return 0


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete line of the JSONL file at `path` as a dict ([] when there is no file); a partial
    last line is ignored. Raises ValueError naming the file and line of a line that is not JSON."""
    if not path.is_file():
        return []
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]  # drop a trailing partial line
    rows = []
    for n, line in enumerate(complete.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not valid JSON ({e.msg})") from None
    return rows


def last_jsonl(path: Path) -> dict[str, Any]:
    """The last complete line of the JSONL file at `path` ({} when none), read from the file's end only."""
    if not path.is_file():
        return {}
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        end = _last_newline_end(f, size)
        if end == 0:
            return {}
        start = _last_newline_end(f, end - 1)
        f.seek(start)
        line = f.read(end - start)
    return json.loads(line) if line.strip() else {}


def atomic_write(path: Path, text: str) -> None:
    """Replace the file at `path` by `text` atomically: a reader sees the old file or the new one, whole."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Make a rename inside the folder `path` durable (a no-op where the filesystem refuses)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories; the rename is still atomic
    finally:
        os.close(fd)


def finite(value: Any) -> Any:
    """Replace non-finite floats by None (strict JSON), recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
