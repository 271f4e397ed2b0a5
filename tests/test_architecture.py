"""The package's shape, read from its source: data flows one way, modules stay small.

Every `import empo2_studio.…` (top level, inside functions and under TYPE_CHECKING alike) must point to
the module's own part or to a part in a lower layer; a module over ~400 lines says at its top why.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "empo2_studio"

LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(layer.split())
    for layer in (
        "__init__ types",
        "config",
        "envs algorithm sessions",
        "policy",  # prompts render env observations
        "memory",  # reflection asks the policy for tips
        "rollout",
        "update evaluation",
        "trainer",
        "lesson race scale",  # scale: the distributed trainer, vLLM sampler and Ray env pool
        "cli_commands app",
        "cli",
        "__main__",
    )
)
"""Lowest first. A module may import its own part (`policy.loading` → `policy.tokens`) and any part of
a lower layer, never a part of its own layer or above (e.g. evaluation → trainer)."""

RANK = {part: i for i, layer in enumerate(LAYERS) for part in layer}

MAX_LINES = 400
REASON_MARK = "Over 400 lines because"
"""What a longer module's docstring says, followed by why."""


def _part(dotted: str) -> str:
    """"empo2_studio.policy.loading" → "policy"; "empo2_studio" → "__init__"."""
    pieces = dotted.split(".")
    return pieces[1] if len(pieces) > 1 else "__init__"


def _imported_parts(path: Path) -> set[str]:
    parts = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            parts |= {_part(a.name) for a in node.names if a.name.split(".")[0] == "empo2_studio"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "empo2_studio":  # `from empo2_studio import evaluation` names a part
                parts |= {a.name if a.name in RANK else "__init__" for a in node.names}
            elif node.module.split(".")[0] == "empo2_studio":
                parts.add(_part(node.module))
    return parts


def _modules() -> list[tuple[str, Path]]:
    return [(_part("empo2_studio." + ".".join(p.relative_to(PACKAGE).with_suffix("").parts)), p)
            for p in sorted(PACKAGE.rglob("*.py"))]  # fmt: skip


def test_every_part_has_a_layer():
    assert {part for part, _ in _modules()} <= set(RANK)


def test_no_module_imports_a_part_above_or_beside_it():
    upward = []
    for part, path in _modules():
        for target in _imported_parts(path) - {part}:
            if RANK[target] >= RANK[part]:
                upward.append(f"{path.relative_to(PACKAGE.parent)} ({part}) imports {target}")
    assert upward == []


def test_the_checker_sees_an_upward_import(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from empo2_studio.trainer import Trainer\n")
    assert _imported_parts(probe) == {"trainer"} and RANK["trainer"] > RANK["evaluation"]


def test_long_modules_say_why():
    unexplained = []
    for _, path in _modules():
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MAX_LINES and REASON_MARK not in (ast.get_docstring(ast.parse(text)) or ""):
            unexplained.append(f"{path.relative_to(PACKAGE.parent)}: {text.count(chr(10))} lines")
    assert unexplained == []
