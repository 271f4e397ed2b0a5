"""The documentation's links: every relative link in README.md and docs/**/*.md resolves to a file (and a
`#anchor` to one of its headings), the README stays short, and every benchmark page and every page that
holds a table moved out of the README is one click from the README.

The checker (`broken_links`) reads Markdown links `[text](target)` and images `![alt](target)` outside
code blocks and inline code; absolute URLs (`http:`, `https:`, `mailto:`) are not checked. Anchors are
compared with GitHub's heading slugs (`slug`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_LINES = 250

MOVED_TABLE_PAGES = (
    "docs/configuration.md",
    "docs/metrics.md",
    "docs/scale-out.md",
    "docs/notebook/2026-12-02-warm-start-v3-and-plans.md",
    "docs/notebook/2026-12-02-distill-setups.md",
    "docs/notebook/2026-12-02-learning-runs.md",
    "docs/notebook/2026-12-03-lesson-speed-changes.md",
    "docs/notebook/2026-12-03-adaptation-record-lines.md",
    "docs/notebook/2026-12-03-learning-variants.md",
)
"""Pages that received tables from the README (besides docs/benchmarks/, checked per script)."""

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def markdown_files(root: Path = ROOT) -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def prose_lines(text: str) -> list[str]:
    """The text's lines outside fenced code blocks, inline code removed."""
    lines, in_fence = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            lines.append(INLINE_CODE.sub("", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").replace("*", "").lower().strip()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (repeated headings get -1, -2, … as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    """The link targets written in a Markdown file, in order (code excluded)."""
    return [m.group(1) for line in prose_lines(path.read_text(encoding="utf-8")) for m in LINK.finditer(line)]


def broken_links(path: Path) -> list[str]:
    """`"target: reason"` for every relative link of `path` that does not resolve."""
    bad = []
    for target in links(path):
        if EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{target}: no such file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    return bad


def linked_from(path: Path) -> set[Path]:
    """The files `path` links to directly (resolved, anchors dropped)."""
    out = set()
    for target in links(path):
        file_part = target.partition("#")[0]
        if file_part and not EXTERNAL.match(target):
            out.add((path.parent / file_part).resolve())
    return out


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_readme_is_short():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES}); move detail to docs/"


def test_every_benchmark_script_has_a_page_one_click_from_the_readme():
    scripts = sorted((ROOT / "benchmarks").glob("bench_*.py"))
    assert len(scripts) >= 6
    direct = linked_from(README)
    for script in scripts:
        page = ROOT / "docs" / "benchmarks" / f"{script.stem.removeprefix('bench_')}.md"
        assert page.exists(), f"{script.name} has no page {page.relative_to(ROOT)}"
        assert page.resolve() in direct, f"README.md does not link {page.relative_to(ROOT)}"
        assert f"benchmarks/{script.name}" in page.read_text(encoding="utf-8"), f"{page.name} gives no command"


def test_every_page_with_a_moved_table_is_one_click_from_the_readme():
    direct = linked_from(README)
    for rel in MOVED_TABLE_PAGES:
        page = ROOT / rel
        assert "|---" in page.read_text(encoding="utf-8"), f"{rel} holds no table"
        assert page.resolve() in direct, f"README.md does not link {rel}"


def test_slug_matches_github_anchors():
    assert slug("Note's plan from its first unplayed step") == "notes-plan-from-its-first-unplayed-step"
    assert slug("Tips written greedily, capped") == "tips-written-greedily-capped"
    assert slug("Step-level credit (option)") == "step-level-credit-option"
    assert slug("How it works (`empo2_studio/scale/`)") == "how-it-works-empo2_studioscale"
    assert slug("[Departures](departures.md) in **bold**") == "departures-in-bold"


def test_checker_flags_broken_links(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other page\n\n## A section\n\ntext\n## A section\n")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# Page\n\n"
        "[fine](other.md) [fine anchor](other.md#a-section) [repeated heading](other.md#a-section-1)\n"
        "[own heading](#page) ![an image](missing.png) [web](https://example.com/nowhere.md)\n"
        "[gone](nowhere.md) and [bad anchor](other.md#no-such-section) and [own bad](#nope)\n"
        "`[in code](not-checked.md)`\n\n```\n[in a fence](not-checked-either.md)\n```\n"
    )  # fmt: skip
    bad = broken_links(page)
    assert [b.split(":")[0] for b in bad] == ["missing.png", "nowhere.md", "other.md#no-such-section", "#nope"]
