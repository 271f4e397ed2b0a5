"""The warm-start adapter: where it is found, and clear errors when it is missing or does not fit."""

from __future__ import annotations

import json

import pytest

from empo2_studio.config import EMBEDDED_MODEL, PolicyConfig
from empo2_studio.policy.loading import (
    DEFAULT_WARM_START,
    WARM_START_COMMAND,
    WARM_START_DIR,
    resolve_quantization,
    warm_start_dir,
)


def test_auto_is_the_route_adapter_for_the_embedded_model_only():
    shipped = WARM_START_DIR / DEFAULT_WARM_START
    assert DEFAULT_WARM_START == f"{EMBEDDED_MODEL}-route"
    assert warm_start_dir(PolicyConfig()) == shipped
    assert (shipped / "adapter_model.safetensors").is_file() and (shipped / "warmstart.json").is_file()
    meta = json.loads((shipped / "warmstart.json").read_text())
    assert meta["base_model"] == EMBEDDED_MODEL and "dev" in meta["trained_on"]
    assert json.loads((shipped / "adapter_config.json").read_text())["base_model_name_or_path"] == EMBEDDED_MODEL
    assert warm_start_dir(PolicyConfig(model="/some/other/model")) is None
    assert warm_start_dir(PolicyConfig(warm_start="none")) is None
    assert warm_start_dir(PolicyConfig(adapter="/an/adapter")) is None  # an explicit adapter wins


def test_missing_warm_start_names_the_file_and_the_setup_command(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        warm_start_dir(PolicyConfig(warm_start=str(tmp_path)))
    assert str(tmp_path / "adapter_config.json") in str(err.value)
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="adapter_model.safetensors"):
        warm_start_dir(PolicyConfig(warm_start=str(tmp_path)))


def test_missing_shipped_warm_start_names_the_build_command(tmp_path, monkeypatch):
    import empo2_studio.policy.loading as loading

    monkeypatch.setattr(loading, "WARM_START_DIR", tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        loading.warm_start_dir(PolicyConfig())
    assert WARM_START_COMMAND in str(err.value) and "--policy.warm-start none" in str(err.value)


def test_quantization_auto_is_4bit_on_cuda_and_float32_on_cpu():
    assert resolve_quantization("auto", "cuda") == "4bit"
    assert resolve_quantization("auto", "cpu") == "none"
    assert resolve_quantization("8bit", "cpu") == "8bit"
    with pytest.raises(ValueError, match="policy.quantization"):
        resolve_quantization("3bit", "cpu")


def shipped_adapters() -> list[str]:
    """The adapter folders under assets/warmstart that git tracks (what a clone ships); folders there that
    git does not track (a local rebuild, an experiment) ship nothing. Without git: every folder there."""
    import subprocess

    try:
        out = subprocess.run(["git", "ls-files", "--", "."], cwd=WARM_START_DIR, capture_output=True, text=True,
                             check=True).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return sorted(p.name for p in WARM_START_DIR.iterdir() if p.is_dir())
    return sorted({line.split("/")[0] for line in out.splitlines() if "/" in line})


def test_only_the_adapters_a_default_loads_ship():
    """Issue 48 (5): assets/warmstart holds what a default loads: the trap's warm start ("auto"), the
    ScienceWorld session's (`sessions.auto_warm_start`) and the note writer (`memory.note_writer` "auto").
    The adapters they replaced are rebuilt from their commands (docs/notebook/2026-12-06-only-what-runs-ships.md)."""
    from empo2_studio.config import SCIENCEWORLD_WARM_START
    from empo2_studio.policy.note_writer import NOTE_WRITER
    from empo2_studio.sessions import auto_warm_start

    loaded = {auto_warm_start("trap"), auto_warm_start("scienceworld"), NOTE_WRITER}
    assert loaded == {DEFAULT_WARM_START, SCIENCEWORLD_WARM_START, NOTE_WRITER}
    shipped = set(shipped_adapters())
    assert not shipped - loaded, (f"assets/warmstart ships {sorted(shipped - loaded)}, which no default loads: "
                                  "git rm -r it and give its build command on a notebook page")
    assert not loaded - shipped, f"a default loads {sorted(loaded - shipped)}, which assets/warmstart does not ship"


def test_every_shipped_adapter_fits_the_embedded_model_and_the_default_says_how_it_was_built():
    from empo2_studio.policy.adapter_check import adapter_last_layers, check_adapter

    default = WARM_START_DIR / DEFAULT_WARM_START
    for folder in (WARM_START_DIR / name for name in shipped_adapters()):
        assert warm_start_dir(PolicyConfig(warm_start=str(folder))) == folder
        check_adapter(folder, PolicyConfig())  # raises on another base, rank, targets or shapes
        assert adapter_last_layers(folder) == 12  # the same layout: runs from any of them cost the same per step
    meta = json.loads((default / "warmstart.json").read_text())
    assert (meta["recipe"], meta["plan_share"], meta["focus_weight"], meta["splits"]) == ("wordings", 0.2, 3.0, ["dev"])
    assert (meta["per_layout"], meta["epochs"], meta["lr"], meta["negation"]) == (4, 1, 3e-4, 0.15)
    assert meta["init"] == f"assets/warmstart/{EMBEDDED_MODEL}-walk-back" and meta["return_trips"] and meta["return_weight"]
    for flag in ("--recipe wordings", "--per-layout 4", "--epochs 1", "--focus-weight 3", "--plan-share 0.2",
                 f"--init assets/warmstart/{EMBEDDED_MODEL}-walk-back", "--return-trips", "--return-weight",
                 "--negation 0.15", "--lr 3e-4"):  # fmt: skip
        assert flag in WARM_START_COMMAND, flag
    card = " ".join((default / "README.md").read_text().replace("\\\n", " ").split())
    assert " ".join(WARM_START_COMMAND.replace(".venv/bin/python ", "").split()) in card


def test_the_learning_benchmark_starts_both_arms_from_the_warm_start_it_is_given():
    import argparse
    import importlib.util
    import sys

    path = WARM_START_DIR.parents[1] / "benchmarks" / "bench_learning.py"
    spec = importlib.util.spec_from_file_location("bench_learning_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    other = WARM_START_DIR / f"{EMBEDDED_MODEL}-scienceworld"  # not the default: the option must carry it through
    args = argparse.Namespace(decoding="constrained", choice_norm="word", choice_pmi=False, warm_start=str(other), env="trap")
    assert warm_start_dir(mod.policy_config(args)) == other
    auto = mod.policy_config(argparse.Namespace(**{**vars(args), "warm_start": "auto"}))  # "auto": the env's shipped one
    assert warm_start_dir(auto) == warm_start_dir(PolicyConfig()) == WARM_START_DIR / DEFAULT_WARM_START


def test_no_shipped_adapter_saw_a_held_out_scienceworld_task():
    from empo2_studio.envs.scienceworld import HELD_OUT_TASKS

    folders = sorted(p.parent for p in WARM_START_DIR.glob("*/warmstart.json"))
    assert len(folders) >= 3
    for folder in folders:
        meta = json.loads((folder / "warmstart.json").read_text())
        if "scienceworld" in meta.get("envs", []):
            assert meta["tasks"], f"{folder.name} names no ScienceWorld task it saw"
        seen = set(meta["seen"])  # its whole init chain's tasks (scripts/warmstart_record.py)
        assert not seen & set(HELD_OUT_TASKS), f"{folder.name} saw held-out task(s) {sorted(seen & set(HELD_OUT_TASKS))}"
    assert "find-animal" in HELD_OUT_TASKS and len(HELD_OUT_TASKS) == 7


def test_the_scienceworld_warm_start_script_refuses_a_held_out_task_by_name(capsys):
    import sys

    sys.path.insert(0, str(WARM_START_DIR.parents[1] / "scripts"))
    from make_sw_warmstart import main

    with pytest.raises(SystemExit) as exit_:
        main(["--tasks", "power-component", "find-animal", "--out", "/nonexistent/never-written"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "held-out task(s) find-animal may not enter a warm start's data" in err
    with pytest.raises(SystemExit):
        main(["--tasks", "power-componnet"])
    assert "unknown ScienceWorld task(s) power-componnet" in capsys.readouterr().err
    for bad in ("0", "9"):  # plan-following on none of the variations, or on more than --variations 8 plays
        with pytest.raises(SystemExit):
            main(["--variations", "8", "--follow-variations", bad, "--out", "/nonexistent/never-written"])
        assert f"--follow-variations must be in 1…--variations (8), got {bad}" in capsys.readouterr().err


def test_no_shipped_adapter_saw_a_task_the_adaptation_benchmark_adapts_on():
    """Issue 48 (1): adaptation is measured on trap tasks absent from every shipped adapter's data. Each
    trap adapter's warmstart.json names the tasks it trained on (`tasks`, written by make_warmstart.py:
    the search family; the fixed and chain families never enter it), and bench_lesson.py adapts by
    default on tasks outside all of them."""
    import importlib.util

    from empo2_studio.envs.trap_world import TASKS

    spec = importlib.util.spec_from_file_location("bench_lesson_defaults", WARM_START_DIR.parents[1] / "benchmarks" / "bench_lesson.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    defaults = bench.ADAPT_TASKS
    assert defaults and all(task in TASKS for task in defaults)
    for name in shipped_adapters():
        meta = json.loads((WARM_START_DIR / name / "warmstart.json").read_text())
        seen = set(meta["seen"])  # every task of its whole init chain, ScienceWorld's adapter included
        assert seen, f"{name}/warmstart.json names no task it trained on"
        assert not seen & set(defaults), f"{name} trained on {sorted(seen & set(defaults))}, which the adaptation benchmark adapts on"


def test_every_shipped_adapter_lists_what_its_whole_init_chain_saw():
    """A fine-tune keeps what its init learned: `seen` holds the chain's tasks and variations and
    `lineage` one line per link (the ScienceWorld adapter started from the trap's route adapter, so it
    saw the trap's search family too)."""
    for name in shipped_adapters():
        meta = json.loads((WARM_START_DIR / name / "warmstart.json").read_text())
        seen, tasks = meta["seen"], meta["tasks"]
        assert set(tasks) <= set(seen) and all(seen[t] == sorted(set(seen[t])) for t in seen)
        assert len(meta["lineage"]) >= (3 if meta.get("init") else 1), name
    route = json.loads((WARM_START_DIR / DEFAULT_WARM_START / "warmstart.json").read_text())
    assert route["seen"]["trap-water-plant"] == [1, 2, 3, 4, 15, 17, 20, *range(24, 36)]  # dev + --return-trips
    assert route["seen"]["trap-light-bulb"] == list(range(24, 36))
    sw = json.loads((WARM_START_DIR / f"{EMBEDDED_MODEL}-scienceworld" / "warmstart.json").read_text())
    assert {t: sw["seen"][t] for t in route["seen"]} == route["seen"]


def test_the_record_joins_an_init_chain_and_refuses_an_init_that_cannot_say(tmp_path):
    import sys

    sys.path.insert(0, str(WARM_START_DIR.parents[1] / "scripts"))
    from warmstart_record import lineage, merged_seen

    first = tmp_path / "first"
    first.mkdir()
    (first / "warmstart.json").write_text(json.dumps({"seen": {"a": [3, 1]}, "lineage": ["first: a 1, 3"]}))
    assert merged_seen({"a": [2], "b": [5, 4]}, first) == {"a": [1, 2, 3], "b": [4, 5]}
    assert merged_seen({"b": [1]}, None) == {"b": [1]}
    assert lineage("second: b", first) == ["second: b", "init first: first: a 1, 3"]
    old = tmp_path / "old"
    old.mkdir()
    (old / "warmstart.json").write_text(json.dumps({"tasks": ["a"]}))  # names tasks, not variations
    with pytest.raises(ValueError, match="does not say which variations it saw"):
        merged_seen({}, old)
    with pytest.raises(ValueError, match="does not say which variations it saw"):
        merged_seen({}, tmp_path / "no-record")  # a folder with no warmstart.json at all
