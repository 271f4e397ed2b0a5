"""The package's shape, read from its source: data flows one way, modules stay small.

Every `import empo2_studio.…` (top level, inside functions and under TYPE_CHECKING alike) must point to
the module's own part or to a part in a lower layer; no two modules import each other, directly or
round a longer circle (top level or inside functions); no module is over 400 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "empo2_studio"

LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(layer.split())
    for layer in (
        "__init__ types",
        "config durable stopping",  # stopping: the per-thread stop scope every inner loop checks
        "envs algorithm sessions",
        "policy memory",  # prompts render env observations; reflection takes the policy as a Protocol
        "rollout",
        "update evaluation",
        "trainer",
        "lesson race scale",  # scale: the distributed trainer, vLLM sampler and Ray env pool
        "cli_commands cli_checks app",
        "cli_records",  # the model-free commands (tips, sessions)
        "cli",
        "__main__",
    )
)
"""Lowest first. A module may import its own part (`policy.loading` → `policy.tokens`) and any part of
a lower layer, never a part of its own layer or above (e.g. evaluation → trainer)."""

RANK = {part: i for i, layer in enumerate(LAYERS) for part in layer}

MAX_LINES = 400
"""No module is longer, without exception: a longer one is split along a line a reader would draw."""


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


def _module_name(path: Path, root: Path = PACKAGE) -> str:
    """empo2_studio/policy/loading.py → "empo2_studio.policy.loading"; a package's __init__ → the package."""
    parts = (root.name, *path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module → the modules of the package it imports (top level or inside functions; imports under
    `if TYPE_CHECKING:` never run, so they cannot close a circle and are left out). `from pkg import x`
    counts as importing `pkg.x` when that is a module, else `pkg`."""
    modules = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        hidden = {id(n) for node in ast.walk(tree) if _is_type_checking_block(node) for n in ast.walk(node)}
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in hidden:
                continue
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                            for a in node.names}  # fmt: skip
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _is_type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: each strongly connected set of 2+ modules, sorted (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(circles)


def test_no_import_circles():
    assert _circles(_import_graph()) == []


def test_the_circle_finder_sees_a_lazy_three_module_circle(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub import c\n")
    (pkg / "a.py").write_text("def f():\n    from pkg.sub.c import g\n")  # lazy: inside a function
    (pkg / "b.py").write_text("import pkg.a\n")
    (pkg / "sub" / "c.py").write_text("from pkg import b\nfrom typing import TYPE_CHECKING\n"
                                      "if TYPE_CHECKING:\n    from pkg import d\n")  # fmt: skip
    (pkg / "d.py").write_text("import pkg.sub.c\n")  # closes a circle with c only under TYPE_CHECKING
    graph = _import_graph(pkg)
    assert graph["pkg.sub"] == {"pkg.sub.c"} and graph["pkg.sub.c"] == {"pkg.b"}
    assert _circles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"]]


def test_memory_imports_no_policy_module():
    """Reflection takes the policy as a `TipWriter` Protocol; the conversation it reflects on is built
    in `rollout.conversation`. So memory/ works for any policy and any environment."""
    graph = _import_graph()
    assert {f"{m} imports {t}" for m, ts in graph.items() if m.startswith("empo2_studio.memory")
            for t in ts if t.startswith("empo2_studio.policy")} == set()  # fmt: skip
    assert all("policy" not in _imported_parts(p) for part, p in _modules() if part == "memory")


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


def _long_modules(root: Path = PACKAGE) -> list[str]:
    """"path: N lines" for every module of `root` over `MAX_LINES` lines."""
    lengths = {path: path.read_text(encoding="utf-8").count("\n") for path in sorted(root.rglob("*.py"))}
    return [f"{path.relative_to(root.parent)}: {n} lines" for path, n in lengths.items() if n > MAX_LINES]


def test_no_module_is_over_400_lines():
    assert _long_modules() == []


def test_a_note_does_not_excuse_a_long_module(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "long.py").write_text('"""Over 400 lines because it is one concept."""\n' + "x = 1\n" * 400)
    (pkg / "short.py").write_text("x = 1\n" * 400)
    assert _long_modules(pkg) == ["pkg/long.py: 401 lines"]
