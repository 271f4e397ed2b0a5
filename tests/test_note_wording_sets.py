"""The trap's two note wording sets (issue 48 item 2, docs/benchmarks/README.md "Choose on dev, report
test once"): `benchmarks/data/dev_notes.json`, the wordings adapters are chosen on, and
`benchmarks/data/test_notes.json`, written on 2026-12-06 and scored for the shipped default only.

The test set stays a test set: no training code names it, and none of its wordings equals or nearly
duplicates (word Jaccard ≥ 0.8, whole note or one sentence) a dev wording or a training wording, filled
for the same layout."""

from __future__ import annotations

import importlib.util
import json
import random
import re
import sys
from pathlib import Path

import pytest

from empo2_studio.envs.trap import TASKS, TrapEnv

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"
SEARCH = [t for t in TASKS if TASKS[t].family == "search"]
NEAR = 0.8  # word Jaccard at or above this is a near duplicate


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench():
    return _load(ROOT / "benchmarks" / "bench_notes.py", "bench_notes_sets_under_test")


@pytest.fixture(scope="module")
def wordings_mod():
    sys.path.insert(0, str(ROOT / "scripts"))
    return _load(ROOT / "scripts" / "note_wordings.py", "note_wordings")


def words(text: str) -> frozenset[str]:
    return frozenset(re.findall(r"[a-z0-9']+", text.lower()))


def sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.?!])\s+|\n", text) if words(s)]


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b)


def training_texts(wm, env: TrapEnv, task: str, v: int, n: int = 200) -> list[str]:
    """What the warm start trains on for layout `v`, sampled: the random training notes, the note
    writer's answers and observation notes, the negation notes, distractors, the teacher's template and
    the record line (scripts/note_wordings.py, TrapEnv.curated_tip, TrapEnv.gold_record)."""
    lay, rng = env.layout(task, v), random.Random(v)
    out = [env.curated_tip(task, v), env.gold_record(task, v)]
    rooms = ["hallway", "kitchen", lay.target_room]
    can = lay.objects.get("watering can")
    for _ in range(n):
        out.append(wm.training_note(lay, rng))
        out.append(wm.with_distractor(wm.training_note(lay, rng), lay, rng))
        out.append(wm.reflection_answer(lay, rooms, can, rng))
        out.append(wm.observation_note(lay, rng))
        out.append(wm.negation_note(lay, rng)[0])
    out.append(wm.reflection_answer(lay, rooms, can, rng, form="rooms"))
    return out


def test_no_training_code_names_the_test_file():
    # every file under scripts/ and empo2_studio/ (the package, the warm-start and few-shot builders)
    names = ("test_notes", "heldout_notes")
    sources = [p for d in ("scripts", "empo2_studio") for p in (ROOT / d).rglob("*")
               if p.is_file() and p.suffix in (".py", ".sh", ".json", ".toml", ".yaml", ".md", ".txt")]  # fmt: skip
    assert len(sources) > 20
    readers = [str(p.relative_to(ROOT)) for p in sources for n in names if n in p.read_text(errors="replace")]
    assert readers == [], f"training code names a held-out wording file: {readers}"


def test_both_sets_have_twelve_fillable_wordings_per_task_and_no_style_in_common(bench):
    dev, test = bench.load_wordings("dev"), bench.load_wordings("test")
    assert set(dev) == set(test) == set(SEARCH) == set(bench.SEARCH_TASKS)
    assert bench.WORDING_SETS == {"dev": DATA / "dev_notes.json", "test": DATA / "test_notes.json"}
    assert "written on 2026-12-06" in json.loads((DATA / "test_notes.json").read_text())["about"]
    env = TrapEnv()
    for task in SEARCH:
        styles = [w["style"] for w in test[task]]
        assert len(styles) >= 12 and len(set(styles)) == len(styles)
        assert not set(styles) & {w["style"] for w in dev[task]}, task
        for v in env.variations(task, "test"):
            for w in test[task]:
                note = bench.fill(w, task, v)
                assert "{" not in note.replace('{"', "") and env.layout(task, v).target_room in note, (task, v, note)


def test_no_test_wording_nearly_duplicates_a_dev_or_training_wording(bench, wordings_mod):
    env = TrapEnv()
    dev, test = bench.load_wordings("dev"), bench.load_wordings("test")
    worst = (0.0, "", "")
    for task in SEARCH:
        for v in env.variations(task, "test"):  # the same layout, so an equal wording gives an equal text
            others = [bench.fill(w, task, v) for w in dev[task]] + training_texts(wordings_mod, env, task, v)
            whole = {words(t) for t in others}
            parts = {words(s) for t in others for s in sentences(t)}
            for w in test[task]:
                note = bench.fill(w, task, v)
                for mine, theirs in [(words(note), whole)] + [(words(s), parts) for s in sentences(note)]:
                    best = max(theirs, key=lambda t: jaccard(mine, t))
                    if jaccard(mine, best) > worst[0]:
                        worst = (jaccard(mine, best), " ".join(sorted(mine)), " ".join(sorted(best)))
    assert worst[0] < NEAR, worst


def test_jaccard_catches_a_copied_wording(bench):
    # the check above would fail on a dev wording copied with one word changed
    dev = bench.fill(bench.load_wordings("dev")["trap-light-bulb"][2], "trap-light-bulb", 36)
    assert jaccard(words(dev), words(dev.replace("over", "across"))) >= NEAR


def test_the_benchmarks_switch_sets_and_keep_the_test_set_for_the_shipped_default(bench, tmp_path, capsys):
    assert bench.WORDING_LABELS["test"] == "test (held out; scored for the shipped default only)"
    assert bench.load_wordings() == bench.load_wordings("dev")
    with pytest.raises(SystemExit):  # refused before a model loads or a folder is written
        bench.main(["--parts", "probs", "--wordings", "test", "--warm-start", str(tmp_path), "--root", str(tmp_path)])
    assert "--wordings test is scored for the shipped default only" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    sys.path.insert(0, str(ROOT / "benchmarks"))
    lesson = _load(ROOT / "benchmarks" / "bench_lesson.py", "bench_lesson_sets_under_test")
    assert lesson.lesson_tip("trap-light-bulb", 36, 0, "test") == bench.fill(
        bench.load_wordings("test")["trap-light-bulb"][0], "trap-light-bulb", 36)
    with pytest.raises(SystemExit):
        lesson.main(["--parts", "distill", "--tip-wording", "0", "--wordings", "test", "--warm-start", str(tmp_path),
                     "--root", str(tmp_path)])  # fmt: skip
    assert "--wordings test is scored for the shipped default only" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
