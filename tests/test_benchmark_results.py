"""Issue 48 (4): the numbers in docs/benchmarks/*.md come from committed result files.

A benchmark run with `--result NAME` writes benchmarks/results/NAME.json (benchmarks/_results.py). A table
in docs/benchmarks/*.md marked by `<!-- result: NAME -->` on the line above it (blank lines between are
allowed; several names: `<!-- result: A, B -->`) is traced: every number in its data cells must be in
one of those files. A table with numbers and no such marker must say so where a reader sees it: the line
above it begins "*Untraced:" (a run from before result files were kept; `pytest -s` lists them), or, for
a table whose numbers are not measurements (an index), `<!-- not a result: WHY -->`. An unmarked table
with numbers fails. In README.md a marker sits inline after a claim: the numbers from the start of its
paragraph, bullet or sentence run (or the previous marker) up to the marker must be in the named files.
The rule, for a number written with d decimals, is in `matches`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from empo2_studio.config import DEFAULT_WARM_START, WARM_START_DIR

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks"
RESULTS = ROOT / "benchmarks" / "results"
MARKER = re.compile(r"^<!--\s*result:\s*(.+?)\s*-->\s*$")
INLINE = re.compile(r"<!--\s*result:\s*(.+?)\s*-->", re.DOTALL)
UNTRACED = re.compile(r"^\*Untraced:")
NOT_A_RESULT = re.compile(r"^<!--\s*not a result:")
"""Allowed only on docs/benchmarks/README.md (its index of pages): numbers that are no measurement."""
NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(%?)(?!\w)")
"""A number standing alone: 0.50, 1,464, 92%, 3.1× (not the 32 of fp32, the 1 of 1k or the 30 of ws30)."""
NOT_NUMBERS = [
    re.compile(r"`[^`]*`"),  # code: flags and commands
    re.compile(r"\]\([^)]*\)"),  # link targets
    re.compile(r"\d{4}-\d{2}-\d{2}"),  # dates
]
KEYS = ("command", "commit", "date", "machine", "seconds", "seeds", "results")


@dataclass
class Table:
    page: Path
    line: int  # 1-based line of the header row
    header: str
    rows: list[list[str]]  # data cells
    names: list[str]  # result files named by its marker, [] when untraced
    labelled: bool = False  # untraced, and the page says so above it ("*Untraced: …" or not a result)

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line} (table {self.header[:60]!r})"


def cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def tables(page: Path) -> list[Table]:
    """Every markdown table of `page` (a header row, a |---| row, data rows), with its marker's names."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        if lines[i].lstrip().startswith("|") and i + 1 < len(lines) and re.match(r"^\s*\|\s*:?-{3,}", lines[i + 1]):
            j = i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            k = i - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            marker = MARKER.match(lines[k].strip()) if k >= 0 else None
            names = [n.strip() for n in marker.group(1).split(",")] if marker else []
            above = lines[k].strip() if k >= 0 else ""
            labelled = bool(UNTRACED.match(above) or (page.name == "README.md" and NOT_A_RESULT.match(above)))
            found.append(Table(page, i + 1, lines[i].strip(), [cells(row) for row in lines[i + 2 : j]], names, labelled))
            i = j
        else:
            i += 1
    return found


def numbers_in_text(text: str) -> list[tuple[str, float, int, bool]]:
    """(as written, value, decimals, is a percentage) for every number in `text`."""
    for pattern in NOT_NUMBERS:
        text = pattern.sub(" ", text)
    out = []
    for m in NUMBER.finditer(text):
        whole, frac, pct = m.groups()
        out.append((m.group(0), float(whole.replace(",", "") + (frac or "")), len(frac or ".") - 1, bool(pct)))
    return out


def result_values(data) -> list[float]:
    """Every number a result file holds: its numbers, the numbers written in its strings and keys (a
    run's printed table, its command), and the mean of every list of numbers (a mean over seeds)."""
    out: list[float] = []

    def walk(x) -> None:
        if isinstance(x, bool) or x is None:
            return
        if isinstance(x, (int, float)):
            out.append(float(x))
        elif isinstance(x, str):
            out.extend(v for _, v, _, _ in numbers_in_text(x))
        elif isinstance(x, dict):
            for key, value in x.items():
                walk(key)
                walk(value)
        elif isinstance(x, list):
            for value in x:
                walk(value)
            nums = [float(v) for v in x if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if len(nums) >= 2 and len(nums) == len(x):
                out.append(statistics.fmean(nums))

    walk(data)
    return out


def matches(value: float, decimals: int, percent: bool, held: list[float]) -> bool:
    """A number written with d decimals is held when a value rounds to it: |v - x| <= half a unit of its
    last digit. Signs are ignored (a table may write −0.3); x% also matches the fraction x / 100."""
    tol = 0.5 * 10**-decimals + 1e-9
    scales = (1, 100) if percent else (1,)
    return any(abs(abs(v) * k - value) <= tol for v in held for k in scales)


def missing_numbers(table: Table, held: list[float]) -> list[str]:
    header = cells(table.header)
    missing = []
    for r, row in enumerate(table.rows, 1):
        for c, cell in enumerate(row):
            for written, value, decimals, percent in numbers_in_text(cell):
                if not matches(value, decimals, percent, held):
                    column = header[c] if c < len(header) else f"column {c + 1}"
                    missing.append(f"{written} (data row {r}, column {column!r})")
    return missing


def load_result(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))


def all_tables() -> list[Table]:
    return [t for page in sorted(DOCS.glob("*.md")) for t in tables(page)]


def test_every_result_file_says_what_ran():
    for path in sorted(RESULTS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        missing = [k for k in KEYS if k not in data]
        assert not missing, f"{path.relative_to(ROOT)} lacks {missing}"
        script = data["command"].split()[0]
        assert re.fullmatch(r"benchmarks/bench_\w+\.py", script) and (ROOT / script).is_file(), data["command"]
        assert data["seconds"] >= 0 and isinstance(data["seeds"], list)


def test_every_traced_table_holds_only_numbers_its_result_files_hold():
    problems, untraced = [], []
    traced = 0
    for table in all_tables():
        if not table.names:
            if any(numbers_in_text(cell) for row in table.rows for cell in row):  # a table of links is no claim
                untraced.append(table.where())
                if not table.labelled:
                    problems.append(f"{table.where()}: numbers without a result marker and without an "
                                    "'*Untraced: …' line above the table")
            continue
        traced += 1
        absent = [n for n in table.names if not (RESULTS / f"{n}.json").is_file()]
        if absent:
            problems.append(f"{table.where()}: no benchmarks/results/{', '.join(absent)}.json")
            continue
        held = [v for n in table.names for v in result_values(load_result(n))]
        for number in missing_numbers(table, held):
            problems.append(f"{table.where()}: {number} is in no value of results/{', '.join(table.names)}.json")
    print(f"\n{traced} traced table(s); {len(untraced)} untraced (labelled so on the page):")
    print("\n".join(f"  untraced: {where}" for where in untraced))
    assert not problems, "\n".join(problems)


def inline_claims(text: str) -> list[tuple[int, str, list[str]]]:
    """(line, claim text, result names) for every inline `<!-- result: … -->` in `text` (it may wrap):
    the claim is what runs up to the marker from the latest of: the start of its paragraph or bullet (a
    blank line, "- ", "#" or "|" starts one), the end of the sentence before it (". ", so not the dot of
    0.50), the previous marker."""
    claims, prev = [], 0
    for m in INLINE.finditer(text):
        claim = re.split(r"\n\s*\n|\n(?=\s*(?:- |#|\|))", text[prev : m.start()])[-1]
        claim = re.split(r"[.!?]\s", claim)[-1]
        names = [name.strip() for name in m.group(1).split(",")]
        claims.append((text.count("\n", 0, m.start()) + 1, claim, names))
        prev = m.end()
    return claims


def subtrees(data, path: str) -> list:
    """The parts of a result file at `path`: keys joined by ".", "*" for every key or item, a number
    for a list's item ("results.adapt.*.3": trial 3 of every task); [] when nothing is there."""
    found = [data]
    for key in path.split("."):
        nxt = []
        for part in found:
            if isinstance(part, dict):
                nxt += list(part.values()) if key == "*" else [part[key]] if key in part else []
            elif isinstance(part, list):
                nxt += part if key == "*" else [part[int(key)]] if key.isdigit() and int(key) < len(part) else []
        found = nxt
    return found


def claim_values(entry: str) -> list[float]:
    """What a README marker entry vouches for: `NAME#PATH#PATH…`, the values under each path of
    results/NAME.json (`subtrees`); a bare NAME is the whole file. AssertionError when a path holds nothing."""
    name, *paths = [x.strip() for x in entry.split("#")]
    data = load_result(name)
    out = []
    for path in paths or [""]:
        parts = subtrees(data, path) if path else [data]
        assert parts, f"results/{name}.json has nothing at {path!r}"
        out += [v for part in parts for v in result_values(part)]
        nums = [float(p) for p in parts if isinstance(p, (int, float)) and not isinstance(p, bool)]
        if len(nums) >= 2:  # a wildcard over seeds: their mean too, as for a list
            out.append(statistics.fmean(nums))
    return out


def test_every_marked_readme_claim_holds_only_numbers_its_result_files_hold():
    problems = []
    claims = inline_claims((ROOT / "README.md").read_text(encoding="utf-8"))
    for line, claim, names in claims:
        absent = [n for n in names if not (RESULTS / f"{n.split('#')[0].strip()}.json").is_file()]
        if absent:
            problems.append(f"README.md:{line}: no benchmarks/results/{', '.join(absent)}.json")
            continue
        assert all("#" in n for n in names), f"README.md:{line}: name the part of the file a claim reads (NAME#PATH)"
        held = [v for n in names for v in claim_values(n)]
        problems += [f"README.md:{line}: {written} ({claim.strip()[-80:]!r}) is in no value of {', '.join(names)}"
                     for written, value, decimals, percent in numbers_in_text(claim)
                     if not matches(value, decimals, percent, held)]  # fmt: skip
    assert len(claims) >= 5, "the README's headline numbers carry result markers"
    assert not problems, "\n".join(problems)


def test_inline_claims_run_from_the_bullet_or_the_previous_marker():
    text = ("Intro 7.\n\n- **Race**: EMPO² 0.92 against GRPO 0.00 <!-- result: race --> after 60\n"
            "  iterations <!-- result: a, b -->; more 5.\n- next 3 <!-- result: c -->\n\nSeen 9 times. Then 0.50 "
            "<!-- result: d -->\n")
    assert inline_claims(text) == [(3, "- **Race**: EMPO² 0.92 against GRPO 0.00 ", ["race"]),
                                   (4, " after 60\n  iterations ", ["a", "b"]), (5, "- next 3 ", ["c"]),
                                   (7, "Then 0.50 ", ["d"])]  # fmt: skip
    assert inline_claims("x 1 <!-- result: a,\n  b -->") == [(1, "x 1 ", ["a", "b"])]  # a marker may wrap


def test_a_claim_reads_only_the_part_of_the_file_its_path_names():
    data = {"command": "x --iterations 8", "results": {"adapt": {"a": [[0.0, 0.0], [0.5, 1.0]], "b": [[0.0], [0.25]]},
                                                       "p": [0.16, 0.85]}}  # fmt: skip
    assert subtrees(data, "results.adapt.*.1") == [[0.5, 1.0], [0.25]]
    assert subtrees(data, "results.adapt.a.5") == [] and subtrees(data, "results.nope") == []
    held = [v for part in subtrees(data, "results.adapt.*.1") for v in result_values(part)]
    assert matches(0.75, 2, False, held) and not matches(0.85, 2, False, held)  # 0.85 is elsewhere in the file


def test_a_wildcard_over_seeds_also_holds_their_mean(monkeypatch, tmp_path):
    (tmp_path / "race.json").write_text(json.dumps({"results": {"0": {"eval": 0.917}, "1": {"eval": 1.0}, "2": {"eval": 0.792}}}))
    monkeypatch.setattr(sys.modules[__name__], "RESULTS", tmp_path)
    held = claim_values("race#results.*.eval")
    assert matches(0.90, 2, False, held) and matches(0.79, 2, False, held) and not matches(0.95, 2, False, held)


def test_the_check_names_the_page_the_table_and_the_number(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n<!-- result: run-a -->\n\n| rows M | dtype | s per pass | time |\n|---|---|---|---|\n"
                    "| 8 | fp32 | 0.027 | 3.1× |\n| 256 | bf16 | 0.13 | 92% |\n\n| untraced | 5 |\n|---|---|\n| x | 7 |\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found = tables(page)
    assert [t.names for t in found] == [["run-a"], []]
    assert found[0].rows[0] == ["8", "fp32", "0.027", "3.1×"]
    held = result_values({"command": "x --rows 8 256", "results": [{"s": 0.0271}, {"s": [0.12, 0.14]}, 3.08, 0.921]})
    assert missing_numbers(found[0], held) == []  # 0.13: the mean of 0.12 and 0.14; 92%: 0.921
    assert missing_numbers(found[0], held[:-1]) == ["92% (data row 2, column 'time')"]
    assert found[0].where() == "page.md:5 (table '| rows M | dtype | s per pass | time |')"
    assert [n[0] for n in numbers_in_text("fp32 1k ws30 `--seeds 0 1` 2026-12-06 [x](a/2026-12-03-b.md) 1,464 (0.44–0.56)")] == [
        "1,464", "0.44", "0.56"]  # fmt: skip
    assert matches(0.5, 2, False, [0.504]) and not matches(0.5, 2, False, [0.506]) and matches(1.0, 1, False, [0.96])


def test_every_benchmark_takes_result_and_writes_the_shared_file(tmp_path, monkeypatch):
    for script in sorted((ROOT / "benchmarks").glob("bench_*.py")):
        text = script.read_text(encoding="utf-8")
        assert "add_result_option(" in text and "write_result(" in text, f"{script.name} has no --result NAME"
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import _results

    monkeypatch.setattr(_results, "RESULTS", tmp_path)
    path = _results.write_result("probe", str(ROOT / "benchmarks" / "bench_gemm.py"), ["--repeats", "1"], 0.0, [0],
                                 [{"rows": 1, "s": 0.01}], seconds=2.5, repeats=1)  # fmt: skip
    data = json.loads(path.read_text())
    assert data["command"] == "benchmarks/bench_gemm.py --repeats 1" and data["seconds"] == 2.5
    assert all(k in data for k in KEYS) and data["repeats"] == 1 and data["results"] == [{"rows": 1, "s": 0.01}]
    assert _results.write_result(None, "x", [], 0.0, [], {}) is None
    for bad in ("../x", "a/b", "x.json", ""):
        with pytest.raises(Exception, match="--result takes a name"):
            _results.result_name(bad)


def test_merged_learning_runs_leave_one_result(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_learning_results", ROOT / "benchmarks" / "bench_learning.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    monkeypatch.setattr(sys.modules["_results"], "RESULTS", tmp_path / "results")
    rows = [{"rollout/success_rate": s, "rollout/score_mean": 10 * s} for s in (0.0, 0.5)]
    for arm, seed in (("EMPO2", 0), ("GRPO", 0)):
        folder = tmp_path / arm
        folder.mkdir()
        run = {"rows": rows, "eval": {"eval/success_rate": 0.25, "eval/score_mean": 2.0}, "eval_start": {},
               "time": 30.0, "evals": []}  # fmt: skip
        (folder / "learning.json").write_text(json.dumps({arm: {str(seed): run}}))
    assert bench.merge([tmp_path / "EMPO2", tmp_path / "GRPO"], "race-probe", ["--merge", "a", "b"]) == 0
    data = json.loads((tmp_path / "results" / "race-probe.json").read_text())
    assert data["seconds"] == 60.0 and data["seeds"] == [0]
    assert data["results"]["trap"]["GRPO"]["0"]["success_rate"] == [0.0, 0.5]
    assert data["results"]["trap"]["EMPO2"]["0"]["eval"]["eval/success_rate"] == 0.25


def test_the_learning_race_on_scienceworld_starts_from_the_scienceworld_adapter():
    spec = importlib.util.spec_from_file_location("bench_learning_env", ROOT / "benchmarks" / "bench_learning.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    bench_args = argparse.Namespace(env="scienceworld", warm_start="auto", decoding="constrained", choice_norm="word",
                                    choice_pmi=False)  # fmt: skip
    assert bench.policy_config(bench_args).warm_start == str(WARM_START_DIR / "smollm2-135m-instruct-scienceworld")
    assert bench.policy_config(argparse.Namespace(**{**vars(bench_args), "env": "trap"})).warm_start == str(
        WARM_START_DIR / DEFAULT_WARM_START)
    assert bench.policy_config(argparse.Namespace(**{**vars(bench_args), "warm_start": "none"})).warm_start == "none"
