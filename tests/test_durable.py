"""Durable files: a crash's partial last line is ignored by readers and cut off by the next append."""

from __future__ import annotations

import math

from empo2_studio.durable import append_jsonl, atomic_write, last_jsonl, read_jsonl


def test_append_repairs_a_partial_line_and_writes_strict_json(tmp_path):
    path = tmp_path / "rows.jsonl"
    assert read_jsonl(path) == [] and last_jsonl(path) == {}
    append_jsonl(path, [{"a": 1}, {"a": math.nan}])
    with open(path, "ab") as f:
        f.write(b'{"a": 3')  # a kill -9 mid-line
    assert read_jsonl(path) == [{"a": 1}, {"a": None}] and last_jsonl(path) == {"a": None}
    append_jsonl(path, [{"a": 4}])
    assert path.read_text() == '{"a": 1}\n{"a": null}\n{"a": 4}\n'
    atomic_write(path, '{"b": 5}\n')
    assert read_jsonl(path) == [{"b": 5}] and sorted(p.name for p in tmp_path.iterdir()) == ["rows.jsonl"]
