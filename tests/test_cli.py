"""The `empo2-studio` CLI: help, usage errors (exit 2), listing, tips, resume refusals; one real
training run as a subprocess (slow)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from empo2_studio.cli import main
from empo2_studio.config import RunConfig
from empo2_studio.sessions import Session

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def sessions(tmp_path, monkeypatch):
    monkeypatch.setenv("EMPO2_SESSIONS_DIR", str(tmp_path))
    return tmp_path


def test_overview_and_every_command_help(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("app", "train", "eval", "adapt", "distill", "tips", "sessions"):
        assert f"  {name} " in out
    for argv in (["train"], ["eval"], ["adapt"], ["distill"], ["tips"], ["tips", "list"], ["sessions"], ["app"]):
        assert main([*argv, "--help"]) == 0, argv
    out = capsys.readouterr().out
    assert "--algo.clip-low" in out and "--rollout.p-memory" in out and "--from" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--rollout.group-size", "1"], "--rollout.group-size must be a whole number in 2…256"),
        (["train", "--algo.low-prob-threshold", "0.5"], "--algo.low-prob-threshold"),
        (["train", "--rollout.p-memory", "1.5"], "--rollout.p-memory"),
        (["train", "--algo.adv-eps", "0"], "--algo.adv-eps is the ε added to the group std and must be a finite number > 0 (paper: 1e-6), got 0.0"),
        (["train", "--run-id", "../x"], "invalid run id"),
        (["train", "--resume", "nope"], "no session 'nope'"),
        (["train", "--more", "3"], "--more only applies with --resume; use --train.iterations for a new run"),
        (["train", "--env.task", "nope"], "unknown trap task 'nope'; valid tasks: trap-light-bulb"),
        (["train", "--env.variations", "0", "30"], "--env.variations [30] of 'trap-light-bulb' are outside its train split 0–23"),
        (["train", "--env.name", "scienceworld", "--env.task", "boil", "--env.variations", "9999"], "outside its train split 0–13"),
        (["train", "--env.name", "scienceworld"], "('trap-light-bulb' is a trap task, and --env.task's default when the flag is not given)"),
        (["eval", "--session", "nope"], "available: none"),
        (["eval", "--session", "nope", "--variations", "0"], "--variations must be ≥ 1, got 0"),
        (["eval", "--session", "nope", "--repeats", "101"], "--repeats must be ≤ 100, got 101"),
        (["distill", "--session", "x"], "exactly one of"),
        (["frobnicate"], "unknown command"),
    ],
)
def test_usage_errors_exit_2_without_traceback(sessions, capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert list(sessions.iterdir()) == []  # nothing was created


@pytest.mark.parametrize("flag, value, message", [
    ("--env.step-limit", "100000000", "--env.step-limit must be in 1…1000 (ScienceWorld's longest task needs 120) or None, got 100000000"),
    ("--train.iterations", "10001", "--train.iterations must be a positive integer ≤ 10000, got 10001"),
])  # fmt: skip
def test_sizes_past_the_caps_exit_2_with_one_line(sessions, capsys, flag, value, message):
    assert main(["train", flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert list(sessions.iterdir()) == []


@pytest.mark.parametrize("flags, error, shown", [
    (["--policy.lora-target-modules", "nonexistent"], ValueError("policy.lora_target_modules ['nonexistent'] not found in the model"),
     "--policy.lora-target-modules ['nonexistent'] not found in the model"),  # the field named as its flag
    (["--policy.model", "some/unknown-model"], FileNotFoundError("model 'some/unknown-model' is not in the offline cache"),
     "model 'some/unknown-model' is not in the offline cache"),
])  # fmt: skip
def test_train_config_the_model_rejects_or_a_model_not_found_exits_2_and_leaves_no_session(sessions, capsys, monkeypatch,
                                                                                           flags, error, shown):  # fmt: skip
    import empo2_studio.cli as cli

    def refuse(session, *, require_checkpoint):
        raise error

    monkeypatch.setattr(cli, "_load_trainer", refuse)
    assert main(["train", *flags]) == 2
    err = capsys.readouterr().err
    assert shown in err and "Traceback" not in err
    assert list(sessions.iterdir()) == []


def test_a_sessions_dir_that_is_a_file_exits_2_naming_it(sessions, capsys):
    (sessions / "notes.txt").write_text("x")
    assert main(["train", "--sessions-dir", str(sessions / "notes.txt")]) == 2
    assert f"the sessions folder '{sessions / 'notes.txt'}' is a file" in capsys.readouterr().err
    assert [p.name for p in sessions.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("more", ["0", "-1"])
def test_more_below_one_exits_2_before_anything_loads(sessions, capsys, more):
    Session.create(sessions, RunConfig(run_id="run-a"))
    before = sorted(p.name for p in (sessions / "run-a").iterdir())
    assert main(["train", "--resume", "run-a", "--more", more]) == 2
    assert f"--more is how many more iterations to train and must be ≥ 1, got {more}" in capsys.readouterr().err
    assert sorted(p.name for p in (sessions / "run-a").iterdir()) == before  # no resume row, no state


def test_a_warm_start_folder_that_is_not_an_adapter_exits_2_and_leaves_no_session(sessions, tmp_path, capsys):
    assert main(["train", "--policy.warm-start", str(tmp_path / "walkback")]) == 2
    err = capsys.readouterr().err
    assert f"--policy.warm-start: {tmp_path / 'walkback' / 'adapter_config.json'} is missing" in err
    assert "Traceback" not in err and list(sessions.iterdir()) == []


@pytest.mark.parametrize("value, message", [
    ("", "--policy.warm-start is empty ('')"),
    ("FILE", "is a file, not an adapter directory"),
])  # fmt: skip
def test_an_empty_or_file_warm_start_exits_2_naming_it(sessions, capsys, value, message):
    # "" was read as the working directory ("adapter_config.json is missing", the value unnamed)
    (sessions / "notes.txt").write_text("not an adapter")
    assert main(["train", "--policy.warm-start", str(sessions / "notes.txt") if value == "FILE" else value]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    assert [p.name for p in sessions.iterdir()] == ["notes.txt"]


def test_a_relative_adapter_or_warm_start_is_stored_absolute(tmp_path, monkeypatch):
    """A session's config.json must find its adapter when resumed from another working directory
    (a relative --policy.warm-start made `train --resume` exit 1 from anywhere else)."""
    from empo2_studio.config import PolicyConfig, RunConfig
    from empo2_studio.sessions import Session, absolute_paths

    monkeypatch.chdir(tmp_path)
    session = Session.create(tmp_path / "sessions", RunConfig(policy=PolicyConfig(warm_start="assets/ws", adapter="ckpt")))
    stored = Session.open(tmp_path / "sessions", session.run_id).config.policy
    assert (stored.warm_start, stored.adapter) == (str(tmp_path.resolve() / "assets/ws"), str(tmp_path.resolve() / "ckpt"))
    for keep in ("none", ""):  # a name, and the empty value the warm-start check refuses by name
        assert absolute_paths(RunConfig(policy=PolicyConfig(warm_start=keep))).policy.warm_start == keep


def test_auto_is_stored_as_the_folder_it_loads(tmp_path, monkeypatch):
    """A session made under one default keeps its weights after the default changes: config.json names the
    shipped folder, not "auto" (a checkpoint-less run would otherwise be re-evaluated from a newer adapter)."""
    import empo2_studio.sessions as sessions
    from empo2_studio.config import DEFAULT_WARM_START, WARM_START_DIR, PolicyConfig, RunConfig

    session = sessions.Session.create(tmp_path / "s", RunConfig())
    stored = sessions.Session.open(tmp_path / "s", session.run_id).config.policy.warm_start
    assert stored == str(WARM_START_DIR / DEFAULT_WARM_START) and (Path(stored) / "adapter_config.json").is_file()
    # "auto" stays "auto" where it loads nothing, or where the load must name the build command
    other = PolicyConfig(model="some/hub-model")
    assert sessions.absolute_paths(RunConfig(policy=other)).policy.warm_start == "auto"
    with_adapter = sessions.absolute_paths(RunConfig(policy=PolicyConfig(adapter=str(tmp_path)))).policy
    assert (with_adapter.warm_start, with_adapter.adapter) == ("auto", str(tmp_path.resolve()))
    monkeypatch.setattr(sessions, "WARM_START_DIR", tmp_path / "not-built")
    assert sessions.absolute_paths(RunConfig()).policy.warm_start == "auto"


def test_bad_flag_values_exit_2(sessions, capsys):
    assert main(["train", "--algo.loss-agg", "sum"]) == 2
    assert main(["train", "--no-such-flag", "1"]) == 2
    assert "token-mean" in capsys.readouterr().err


def test_config_file_then_flags_override(sessions, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"algo": {"nope": 1}}')
    assert main(["train", "--config", str(bad)]) == 2
    assert "unknown keys ['nope']" in capsys.readouterr().err
    # A valid file plus an invalid override: the flag wins and is rejected.
    good = tmp_path / "good.json"
    good.write_text(RunConfig().with_overrides(rollout={"group_size": 4}).to_json())
    assert main(["train", "--config", str(good), "--rollout.group-size", "1"]) == 2


def test_resume_refuses_other_model_and_other_settings(sessions, capsys):
    Session.create(sessions, RunConfig(run_id="run-a"))
    assert main(["train", "--resume", "run-a", "--policy.model", "Qwen/Qwen2.5-7B-Instruct"]) == 2
    err = capsys.readouterr().err
    assert "--policy.model: session has 'smollm2-135m-instruct', requested 'Qwen/Qwen2.5-7B-Instruct'" in err
    assert main(["train", "--resume", "run-a", "--train.learning-rate", "0.5"]) == 2
    assert "--train.learning-rate" in capsys.readouterr().err
    assert main(["train", "--resume", "run-a", "--config", "x.json"]) == 2
    # "auto" names the folder config.json stores: no change (refused only for having no checkpoint)
    assert main(["train", "--resume", "run-a", "--policy.warm-start", "auto"]) == 2
    assert "has no checkpoint to resume from" in capsys.readouterr().err
    # adapt checks the task before loading any model
    assert main(["adapt", "--from", "run-a", "--task", "nope"]) == 2
    assert "unknown task 'nope' for env 'trap'; valid: trap-light-bulb, trap-find-animal" in capsys.readouterr().err
    assert main(["adapt", "--from", "run-a", "--task", "trap-light-bulb"]) == 2
    assert "is the task the run trained on" in capsys.readouterr().err


def test_sessions_listing(sessions, capsys):
    assert main(["sessions"]) == 0
    assert "no sessions" in capsys.readouterr().out
    s = Session.create(sessions, RunConfig(run_id="run-a"))
    s.append_metrics({"iteration": 1, "kind": "train", "rollout/score_mean": 12.5, "loss/policy": -0.25})
    s.set_state({"iteration": 1})
    assert main(["sessions"]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("run-a")][0]
    assert "trap/trap-light-bulb" in line and "score_mean=12.5" in line and "policy=-0.25" in line
    assert main(["sessions", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["run_id"] == "run-a" and row["iteration"] == 1 and row["last_metrics"]["loss/policy"] == -0.25
    s.append_metrics({"iteration": 1, "kind": "eval", "eval/score_mean": -3.0, "eval/success_rate": 0.25})
    assert main(["sessions"]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("run-a")][0]
    assert line.endswith("kind=eval  eval/score_mean=-3  eval/success_rate=0.25")  # what the evaluation found


def test_tips_list_export_import_reembed(sessions, tmp_path, capsys):
    from empo2_studio.memory import TipStore, make_embedder

    cfg = RunConfig(run_id="run-a").with_overrides(memory={"embedder": "hash"})
    a = Session.create(sessions, cfg)
    assert main(["tips", "list", "--session", "run-a"]) == 0
    assert "no tips yet" in capsys.readouterr().out
    store = TipStore.open(a.tips_path, make_embedder("hash"), cfg.memory)
    store.add_tip("trap-light-bulb", 0, "the switch is in the hall", score=50.0)
    store.add_tip("trap-light-bulb", 1, "the bulb needs power", score=-10.0)
    assert main(["tips", "list", "--session", "run-a", "--variation", "1"]) == 0
    out = capsys.readouterr().out
    assert "the bulb needs power" in out and "hall" not in out and "trap-light-bulb#1" in out
    # a misspelt --task filter or an --out that cannot be written is a usage error, not "0 tips" (exit 2)
    assert main(["tips", "list", "--session", "run-a", "--task", "nope"]) == 2
    assert "--task 'nope' is not a trap task; valid tasks: trap-light-bulb, trap-find-animal" in capsys.readouterr().err
    assert main(["tips", "export", "--session", "run-a", "--task", "nope", "--out", str(tmp_path / "t.jsonl")]) == 2
    assert main(["tips", "export", "--session", "run-a", "--out", str(tmp_path / "missing" / "t.jsonl")]) == 2
    assert f"its folder {str(tmp_path / 'missing')!r} does not exist" in capsys.readouterr().err
    assert main(["tips", "export", "--session", "run-a", "--out", str(tmp_path)]) == 2
    assert "is a folder; give a file path" in capsys.readouterr().err
    assert not (tmp_path / "t.jsonl").exists() and not (tmp_path / "missing").exists()
    dump = tmp_path / "tips.jsonl"
    assert main(["tips", "export", "--session", "run-a", "--out", str(dump)]) == 0
    assert len(dump.read_text().splitlines()) == 2
    Session.create(sessions, RunConfig(run_id="run-b").with_overrides(memory={"embedder": "hash"}))
    assert main(["tips", "import", "--session", "run-b", "--file", str(dump)]) == 0
    assert "imported 2 tip(s), skipped 0" in capsys.readouterr().out
    assert main(["tips", "import", "--session", "run-b", "--file", str(dump)]) == 0
    assert "imported 0 tip(s), skipped 2" in capsys.readouterr().out
    assert main(["tips", "import", "--session", "run-b", "--file", str(tmp_path / "missing.jsonl")]) == 2
    bad = {
        "missing": '{"task": "trap-light-bulb", "variation": 0, "score": 5}',
        "score": '{"task": "trap-light-bulb", "variation": 0, "text": "t", "score": 500}',
        "extra": '{"task": "trap-light-bulb", "variation": 0, "text": "t", "score": 5, "colour": "red"}',
        "json": "not json",
        "task": '{"task": "trap-light-blub", "variation": 0, "text": "t", "score": 5}',  # a typo: no episode would read it
        "variation": '{"task": "trap-light-bulb", "variation": 99999, "text": "t", "score": 5}',
    }
    expected = {"missing": "missing keys ['text']", "score": "score must be in [-100, 100], got 500", "extra": "unknown keys ['colour']",
                "json": "not valid JSON", "task": "unknown trap task 'trap-light-blub'; valid tasks: trap-light-bulb,",
                "variation": "trap-light-bulb has no variation 99999; valid: 0–47"}  # fmt: skip
    capsys.readouterr()
    for name, line in bad.items():
        f = tmp_path / f"bad-{name}.jsonl"
        f.write_text(dump.read_text() + line + "\n")  # good lines first: still nothing is imported
        assert main(["tips", "import", "--session", "run-b", "--file", str(f)]) == 2, name
        err = capsys.readouterr().err
        assert f"line 3: {expected[name]}" in err and "Traceback" not in err, err
    for name, text in (("empty", ""), ("blank", "\n  \n")):  # nothing to import is bad input too (exit 2)
        (tmp_path / f"{name}.jsonl").write_text(text)
        assert main(["tips", "import", "--session", "run-b", "--file", str(tmp_path / f"{name}.jsonl")]) == 2, name
        assert "it holds no tips (no non-blank lines); nothing imported" in capsys.readouterr().err
    assert main(["tips", "list", "--session", "run-b"]) == 0
    assert "2 of 2 tip(s)" in capsys.readouterr().err
    # a tip holding a Unicode line separator exports raw (ensure_ascii off) and must import as one line
    sep = tmp_path / "separator.jsonl"
    sep.write_text('{"task": "trap-light-bulb", "variation": 2, "text": "first\u2028second", "score": 5}\n', encoding="utf-8")
    assert "\u2028" in sep.read_text(encoding="utf-8")
    assert main(["tips", "import", "--session", "run-b", "--file", str(sep)]) == 0, capsys.readouterr().err
    assert "imported 1 tip(s)" in capsys.readouterr().out
    assert main(["tips", "reembed", "--session", "run-b"]) == 0
    assert "re-embedded 3 tip(s)" in capsys.readouterr().out


def test_tips_import_of_a_structured_export_into_a_structured_session(sessions, tmp_path, capsys):
    """A structured export carries the structure keys (place, counts …); the CLI's check before the
    embedder loads reads it as the structured store does (it used to refuse them as unknown keys)."""
    from empo2_studio.memory import make_embedder, open_tip_store

    cfg = RunConfig(run_id="run-s").with_overrides(memory={"embedder": "hash", "structure": "structured"})
    a = Session.create(sessions, cfg)
    store = open_tip_store(a.tips_path, make_embedder("hash"), cfg.memory, env=cfg.env, verify_embedder=False)
    store.add_tip("trap-light-bulb", 0, "the green bulb is in the kitchen", score=50.0, place="kitchen")
    dump = tmp_path / "structured.jsonl"
    assert main(["tips", "export", "--session", "run-s", "--out", str(dump)]) == 0
    assert '"place": "kitchen"' in dump.read_text()
    Session.create(sessions, RunConfig(run_id="run-t").with_overrides(memory={"embedder": "hash", "structure": "structured"}))
    capsys.readouterr()
    assert main(["tips", "import", "--session", "run-t", "--file", str(dump)]) == 0, capsys.readouterr().err
    assert "imported 1 tip(s), skipped 0" in capsys.readouterr().out


def test_console_script_help_subprocess(tmp_path):
    exe = Path(sys.executable).parent / "empo2-studio"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "empo2_studio.cli"]
    env = {**os.environ, "EMPO2_SESSIONS_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([*cmd, "train", "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and "--algo.dual-clip" in done.stdout
    bad = subprocess.run([*cmd, "train", "--rollout.group-size", "1"], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "--rollout.group-size" in bad.stderr and "Traceback" not in bad.stderr
    # a reader that has gone away (`… | head -1`) is not an error: exit 0, nothing on stderr
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to the pipe now fails with EPIPE
    try:
        gone = subprocess.run([*cmd, "train", "--help"], stdout=write_end, stderr=subprocess.PIPE, text=True,
                              env=env, timeout=120)  # fmt: skip
    finally:
        os.close(write_end)
    assert gone.returncode == 0 and gone.stderr == ""


def _save_tiny_model(directory: Path) -> None:
    """A tiny random Llama + the real SmolLM2 tokenizer as a local model folder (`--policy.model DIR`)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from empo2_studio.policy.loading import embedded_tokenizer_dir, load_tokenizer

    tok = load_tokenizer(embedded_tokenizer_dir())
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=8192, tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(directory)
    tok.save_pretrained(directory)


@pytest.mark.slow
def test_train_ctrl_c_resume_eval_distill_subprocess(tmp_path, capsys, monkeypatch):
    """The real CLI end to end on the trap env: Ctrl-C stops after a step with a checkpoint, resume
    continues it, eval and distill run on the result."""
    import signal
    import time

    model = tmp_path / "tiny-model"
    _save_tiny_model(model)
    root = tmp_path / "sessions"
    env = {**os.environ, "EMPO2_SESSIONS_DIR": str(root), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1"}  # fmt: skip
    cli = [sys.executable, "-m", "empo2_studio.cli"]
    flags = [
        "--run-id", "cli-run", "--policy.model", str(model), "--policy.quantization", "none",
        "--policy.device", "cpu", "--policy.max-tip-tokens", "8", "--memory.embedder", "hash",
        "--rollout.group-size", "2", "--rollout.forced-mode", "off-policy", "--env.variations", "0",
        "--env.step-limit", "4", "--train.iterations", "1000", "--train.checkpoint-every", "1000",
    ]  # fmt: skip
    proc = subprocess.Popen([*cli, "train", *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    metrics = root / "cli-run" / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and metrics.read_text().count("\n") >= 1:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)  # stop after the current iteration
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "stopped by Ctrl-C" in out and "Traceback" not in err
    s = Session.open(root, "cli-run")
    done = s.state()["iteration"]
    assert 1 <= done < 1000 and s.latest_checkpoint()[0] == done
    assert len([m for m in s.metrics() if m.get("kind") == "train"]) == done

    resumed = subprocess.run([*cli, "train", "--resume", "cli-run", "--more", "1"], capture_output=True, text=True,
                             env=env, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert s.state()["iteration"] == done + 1 and s.latest_checkpoint()[0] == done + 1
    # the checkpoint is named inside the session folder, so a moved or copied session still tells the truth
    assert s.state()["checkpoint"] == f"adapters/iter_{done + 1:06d}" == s.latest_checkpoint()[1].relative_to(s.dir).as_posix()

    # eval and distill in-process (a subprocess mostly pays for importing torch again).
    monkeypatch.setenv("EMPO2_SESSIONS_DIR", str(root))
    assert main(["eval", "--session", "cli-run", "--variations", "1", "--repeats", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert any(k.startswith("eval/") for k in result)
    assert main(["distill", "--session", "cli-run", "--all-memory"]) == 0
    out = capsys.readouterr().out
    assert f"distilled {2 * (done + 1)} episode(s)" in out  # every iteration was off-policy, 2 episodes each
    assert s.latest_checkpoint()[0] == s.state()["iteration"] == done + 2  # distill is one more update


def test_auto_picks_the_warm_start_by_environment(tmp_path, monkeypatch):
    """A ScienceWorld session starts from the ScienceWorld adapter while it is there, the trap's from
    the route adapter; without the ScienceWorld folder both get the route adapter."""
    import empo2_studio.sessions as sessions
    from empo2_studio.config import DEFAULT_WARM_START, SCIENCEWORLD_WARM_START, EnvConfig, RunConfig

    for name in (DEFAULT_WARM_START, SCIENCEWORLD_WARM_START):
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_text("{}")
    monkeypatch.setattr(sessions, "WARM_START_DIR", tmp_path)
    sw = RunConfig(env=EnvConfig(name="scienceworld", task="power-component"))
    assert sessions.absolute_paths(sw).policy.warm_start == str(tmp_path / SCIENCEWORLD_WARM_START)
    assert sessions.absolute_paths(RunConfig()).policy.warm_start == str(tmp_path / DEFAULT_WARM_START)
    (tmp_path / SCIENCEWORLD_WARM_START / "adapter_config.json").unlink()
    assert sessions.absolute_paths(sw).policy.warm_start == str(tmp_path / DEFAULT_WARM_START)


@pytest.mark.parametrize("text, shown", [
    ("env.step_limit must be ≥ 1", "--env.step-limit must be ≥ 1"),
    ("memory.note_writer 'x' and algo.adv_eps", "--memory.note-writer 'x' and --algo.adv-eps"),
    ("cannot read train.jsonl or env.nope", "cannot read train.jsonl or env.nope"),  # not config fields
    ("use --train.iterations for a new run", "use --train.iterations for a new run"),  # already a flag
    ("no folder /home/u/env.name/x or ./policy.model", "no folder /home/u/env.name/x or ./policy.model"),  # paths
    ("set `env.task` (scale.vllm_urls)", "set `--env.task` (--scale.vllm-urls)"),
    ("cannot read config train.iterations.json", "cannot read config train.iterations.json"),  # relative paths
    ("train.iterations/adapter_config.json is missing", "train.iterations/adapter_config.json is missing"),
    ("'env.step_limit' is not a PEFT adapter directory", "'env.step_limit' is not a PEFT adapter directory"),
    ("it needs env.task.", "it needs --env.task."),  # the end of a sentence is not a path
])  # fmt: skip
def test_flag_names_rewrites_only_config_fields(text, shown):
    from empo2_studio.cli_checks import flag_names

    assert flag_names(text) == shown


@pytest.mark.parametrize("argv, message", [
    (["train", "--resume", ""], "--resume needs a run id, got ''"),
    (["train", "--config", " "], "--config needs a file, got ' '"),
    (["train", "--resume", "", "--more", "3"], "--resume needs a run id, got ''"),
    (["distill", "--session", "nope", "--episodes", ",,,"], "--episodes names no episode id, got ',,,'"),
    (["tips", "list", "--session", "nope", "--limit", "0"], "--limit must be ≥ 1, got 0"),
    (["tips", "list", "--session", "nope", "--variation", "-5"], "--variation must be ≥ 0, got -5"),
])  # fmt: skip
def test_empty_ids_and_bad_filters_exit_2_before_anything_opens(sessions, capsys, argv, message):
    assert main([*argv, "--sessions-dir", str(sessions)]) == 2
    assert message in capsys.readouterr().err
    assert list(sessions.iterdir()) == []  # no default run started, nothing written


@pytest.mark.parametrize("text, shown", [
    ('{"seed": "x"}', "seed must be a whole number ≥ 0, got 'x'"),
    ('{"env": {"variations": "abc"}}', "--env.variations must be whole numbers ≥ 0, got 'abc'"),
    ("[1, 2]", "it must be a JSON object of config sections, like a session's config.json (got list)"),
    ("null", "(got NoneType)"),
    ("xx", "not a JSON object (Expecting value: line 1 column 1 (char 0))"),
])  # fmt: skip
def test_a_config_file_of_the_wrong_shape_exits_2_naming_why(sessions, tmp_path_factory, capsys, text, shown):
    path = tmp_path_factory.mktemp("config") / "c.json"
    path.write_text(text)
    assert main(["train", "--config", str(path), "--sessions-dir", str(sessions)]) == 2
    err = capsys.readouterr().err
    assert shown in err and "Traceback" not in err, err
    assert list(sessions.iterdir()) == []
