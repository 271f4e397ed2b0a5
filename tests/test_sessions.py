"""Session folders: layout, crash-safe appends (kill -9), resume checks."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from empo2_studio.config import RunConfig
from empo2_studio.sessions import (
    Session,
    SessionNotFoundError,
    default_sessions_root,
    fresh_dir,
    list_sessions,
    make_run_id,
    validate_run_id,
)
from empo2_studio.types import ActionSample, Episode, RetrievedTip, Step


def make_episode(eid: str, score: float = 10.0) -> Episode:
    step = Step(
        index=0,
        user_message="You are in a room. Task: turn on the bulb.",
        tips=(RetrievedTip(tip_id="t1", text="try the switch", score=50.0, similarity=0.7),),
        valid_actions=("look around", "flip switch"),
        sample=ActionSample(text="flip switch", token_ids=(5, 6, 2), logprobs=(-0.1, -0.2, -0.05)),
        action="flip switch",
        corrected=False,
        reward=score,
        score=score,
        observation="The bulb is on.",
        intrinsic_reward=1.0,
    )
    return Episode(
        episode_id=eid, env="trap", task="trap-light-bulb", variation=0, split="train",
        rollout_mode="memory", update_mode="off-policy", decoding="constrained", temperature=1.0,
        seed=3, steps=(step,), score=score, won=score >= 100, group_id="g0", tip="a tip", created_at=1.5,
    )  # fmt: skip


def cfg(run_id="run-a", **policy):
    c = RunConfig(run_id=run_id)
    return c.with_overrides(policy=policy) if policy else c


def test_create_layout_and_roundtrip(tmp_path):
    s = Session.create(tmp_path, cfg())
    assert s.dir == tmp_path / "run-a" and s.run_id == "run-a"
    assert RunConfig.from_json((s.dir / "config.json").read_text()) == s.config
    assert s.tips_path == s.dir / "tips.lance"
    s.append_metrics({"iteration": 1, "loss/policy": 0.5, "ratio/max": float("nan")})
    s.append_metrics({"iteration": 2, "loss/policy": 0.25})
    eps = [make_episode("e1"), make_episode("e2", 100.0)]
    s.append_episodes(eps)
    reopened = Session.open(tmp_path, "run-a")
    assert reopened.config == s.config
    assert reopened.metrics() == [
        {"iteration": 1, "loss/policy": 0.5, "ratio/max": None},  # NaN stored as strict-JSON null
        {"iteration": 2, "loss/policy": 0.25},
    ]
    assert reopened.last_metrics() == {"iteration": 2, "loss/policy": 0.25}
    assert reopened.episodes() == eps
    assert [e.episode_id for e in reopened.episodes(["e2", "e1"])] == ["e2", "e1"]
    with pytest.raises(KeyError, match="nope"):
        reopened.episodes(["e1", "nope"])
    # Readable without the studio: plain JSON lines.
    first = json.loads((s.dir / "episodes.jsonl").read_text().splitlines()[0])
    assert first["steps"][0]["sample"]["token_ids"] == [5, 6, 2]


def test_generated_run_id_and_validation(tmp_path):
    c = RunConfig().with_overrides(env={"task": "power/component x"})
    assert make_run_id(c, now=0.0) == "19700101-000000-trap-power-component-x"
    a = Session.create(tmp_path, c)
    b = Session.create(tmp_path, c)
    assert a.run_id != b.run_id and b.config.run_id == b.run_id
    for bad in ("../x", "a/b", "", "-x", "a..b", "é"):
        with pytest.raises(ValueError, match="invalid run id"):
            validate_run_id(bad)
    with pytest.raises(ValueError, match="invalid run id"):
        Session.create(tmp_path, RunConfig(run_id="../escape"))
    assert not (tmp_path.parent / "escape").exists()


def test_create_refuses_existing_and_invalid_config(tmp_path):
    Session.create(tmp_path, cfg())
    with pytest.raises(FileExistsError, match="run-a"):
        Session.create(tmp_path, cfg())
    with pytest.raises(ValueError, match="group_size"):
        Session.create(tmp_path, RunConfig(run_id="bad").with_overrides(rollout={"group_size": 1}))
    assert not (tmp_path / "bad").exists()


def test_open_missing_lists_available(tmp_path):
    Session.create(tmp_path, cfg("run-a"))
    Session.create(tmp_path, cfg("run-b"))
    with pytest.raises(SessionNotFoundError, match="run-a, run-b"):
        Session.open(tmp_path, "run-c")


def test_check_compatible(tmp_path):
    s = Session.create(tmp_path, cfg())
    s.check_compatible(RunConfig(run_id="run-a").with_overrides(train={"learning_rate": 1e-3}))
    with pytest.raises(ValueError, match="policy.model: session has 'smollm2-135m-instruct', requested 'Qwen/x'"):
        s.check_compatible(cfg(model="Qwen/x"))


def test_state_atomic_and_checkpoints(tmp_path):
    s = Session.create(tmp_path, cfg())
    assert s.state() == {} and s.latest_checkpoint() is None
    s.set_state({"iteration": 5, "rng": [3, [1, 2], None]})
    assert s.state() == {"iteration": 5, "rng": [3, [1, 2], None]}
    assert not [p for p in s.dir.iterdir() if p.name.startswith(".state")]  # no temp left behind

    def save(d: Path) -> None:
        (d / "adapter_config.json").write_text("{}")

    assert s.adapter_dir(5) == s.dir / "adapters" / "iter_000005"
    s.write_checkpoint(5, save)
    s.write_checkpoint(12, save)
    s.write_checkpoint(12, save)  # re-save replaces
    (s.dir / "adapters" / "iter_000020").mkdir()  # half-written: no adapter_config.json
    (s.dir / "adapters" / ".tmp-iter_000030-x").mkdir()
    assert s.checkpoints() == [(5, s.adapter_dir(5)), (12, s.adapter_dir(12))]
    assert s.latest_checkpoint() == (12, s.adapter_dir(12))

    def crash(d: Path) -> None:
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        s.write_checkpoint(13, crash)
    assert s.latest_checkpoint()[0] == 12
    with pytest.raises(ValueError):
        s.adapter_dir(-1)


def test_partial_trailing_line_ignored_then_repaired(tmp_path):
    s = Session.create(tmp_path, cfg())
    s.append_metrics({"iteration": 1})
    with open(s.dir / "metrics.jsonl", "ab") as f:
        f.write(b'{"iteration": 2, "loss/po')  # what kill -9 mid-write leaves
    assert s.metrics() == [{"iteration": 1}]
    assert s.last_metrics() == {"iteration": 1}
    s.append_metrics({"iteration": 2})
    assert s.metrics() == [{"iteration": 1}, {"iteration": 2}]
    assert (s.dir / "metrics.jsonl").read_text() == '{"iteration": 1}\n{"iteration": 2}\n'


def test_list_sessions_scans(tmp_path, monkeypatch):
    assert list_sessions(tmp_path / "none") == []
    a = Session.create(tmp_path, cfg("run-a"))
    a.append_metrics({"iteration": 1, "rollout/score_mean": 3.0})
    a.set_state({"iteration": 1})
    (tmp_path / "not-a-run").mkdir()
    rows = list_sessions(tmp_path)
    assert [r.run_id for r in rows] == ["run-a"]
    assert rows[0].iteration == 1 and rows[0].last_metrics["rollout/score_mean"] == 3.0
    monkeypatch.setenv("EMPO2_SESSIONS_DIR", str(tmp_path))
    assert default_sessions_root() == tmp_path


WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from test_sessions import make_episode
    from empo2_studio.config import RunConfig
    from empo2_studio.sessions import Session
    s = Session.create({root!r}, RunConfig(run_id="crash"))
    i = 0
    while True:
        s.append_episodes([make_episode(f"e{{i}}-{{k}}") for k in range(4)])
        s.append_metrics({{"iteration": i, "pad": "x" * 2000}})
        s.set_state({{"iteration": i}})
        print(i, flush=True)  # step i is complete
        i += 1
    """
)


def test_sigkill_mid_loop_loses_nothing_completed(tmp_path):
    code = WRITER.format(tests=str(Path(__file__).parent), root=str(tmp_path))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    last = -1
    try:
        for line in proc.stdout:
            last = int(line)
            if last >= 30:
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert last >= 30, "writer did not get going"
    s = Session.open(tmp_path, "crash")
    its = [m["iteration"] for m in s.metrics()]
    assert its[: last + 1] == list(range(last + 1))  # every completed step is there, in order
    assert its == list(range(len(its)))
    eps = s.episodes()
    assert len(eps) >= 4 * (last + 1)
    assert s.state()["iteration"] >= last
    s.append_metrics({"iteration": "after"})  # appending after the crash works and repairs
    assert s.metrics()[-1] == {"iteration": "after"}


def test_current_history_drops_rows_a_resume_superseded():
    from empo2_studio.sessions import current_history

    rows = [{"iteration": 1, "kind": "train"}, {"iteration": 2, "kind": "train"}, {"iteration": 3, "kind": "train"},
            {"iteration": 3, "kind": "eval"}, {"iteration": 1, "kind": "resume"}, {"iteration": 2, "kind": "train"},
            {"iteration": 2, "kind": "resume"}, {"iteration": 3, "kind": "distill"}]  # fmt: skip
    assert [(r["kind"], r["iteration"]) for r in current_history(rows)] == [
        ("train", 1), ("resume", 1), ("train", 2), ("resume", 2), ("distill", 3)]
    assert current_history([]) == []


def test_episodes_saved_before_the_new_fields_read_back_with_their_prompt_style():
    from dataclasses import replace

    ep = replace(make_episode("e1"), task_description="Turn on the bulb.", prompt_style="compact",
                 first_observation="A room.", record="[from the record] x")  # fmt: skip
    assert Episode.from_dict(ep.to_dict()) == ep
    old = {k: v for k, v in ep.to_dict().items() if k not in ("task_description", "prompt_style", "first_observation", "record")}
    back = Episode.from_dict(old)
    assert (back.prompt_style, back.task_description, back.first_observation, back.record) == ("compact", "", "", "")
    assert Episode.from_dict({**old, "env": "scienceworld"}).prompt_style == "paper"


def test_runs_started_in_the_same_second_get_their_own_folders(tmp_path):
    # Two benchmark processes started in one second once wrote into one folder and the second crashed on
    # its first session (bench_lesson, 2026-12-05): fresh_dir never hands out a name twice.
    got = [fresh_dir(tmp_path / "runs", "bench_lesson-20261205-173725") for _ in range(3)]
    names = ["bench_lesson-20261205-173725", "bench_lesson-20261205-173725-2", "bench_lesson-20261205-173725-3"]
    assert [run_id for run_id, _ in got] == names
    assert [d for _, d in got] == [tmp_path / "runs" / n for n in names]
    assert sorted(d.name for d in (tmp_path / "runs").iterdir()) == names


def test_a_session_made_for_another_env_loads_that_envs_shipped_adapter():
    from dataclasses import replace

    from empo2_studio.config import DEFAULT_WARM_START, SCIENCEWORLD_WARM_START, WARM_START_DIR, EnvConfig
    from empo2_studio.sessions import absolute_paths, on_env

    route, sw = str(WARM_START_DIR / DEFAULT_WARM_START), str(WARM_START_DIR / SCIENCEWORLD_WARM_START)
    trap = absolute_paths(RunConfig())  # what a trap studio session stores: the route adapter's folder
    assert trap.policy.warm_start == route
    to_sw = absolute_paths(on_env(trap, EnvConfig(name="scienceworld", task="find-animal")))
    assert (to_sw.env.name, to_sw.env.task, to_sw.policy.warm_start) == ("scienceworld", "find-animal", sw)
    back = absolute_paths(on_env(to_sw, EnvConfig(name="trap", task="trap-light-bulb")))
    assert back.policy.warm_start == route
    for chosen in ("/somewhere/my-adapter", "none"):  # a warm start the user chose stays
        own = replace(trap, policy=replace(trap.policy, warm_start=chosen))
        assert on_env(own, EnvConfig(name="scienceworld", task="find-animal")).policy.warm_start == chosen


def test_the_start_panels_scienceworld_session_does_not_inherit_the_trap_adapter(tmp_path):
    from empo2_studio.app.studio import Studio
    from empo2_studio.config import DEFAULT_WARM_START, SCIENCEWORLD_WARM_START, WARM_START_DIR

    studio = Studio(tmp_path, policy="tiny", embedder="hash")  # the trap session stores the route adapter
    assert studio.session(studio.default_run_id).config.policy.warm_start == str(WARM_START_DIR / DEFAULT_WARM_START)
    sw = studio.env_session("scienceworld")  # what "Open a ScienceWorld session" opens
    assert sw.config.policy.warm_start == str(WARM_START_DIR / SCIENCEWORLD_WARM_START)
