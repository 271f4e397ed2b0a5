"""A two-process training run (gloo, tiny model, trap env) writes one consistent session and resumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from empo2_studio import cli
from empo2_studio.memory import TipStore, make_embedder
from empo2_studio.memory.tip_store import entry_text
from empo2_studio.sessions import Session
from test_scale_grad import torchrun

WORKER = Path(__file__).parent / "scale_workers" / "train_worker.py"


def _ranks(root: Path, mode: str) -> list[dict]:
    return [json.loads((root / f"rank{r}-{mode}.json").read_text()) for r in (0, 1)]


@pytest.mark.slow  # two fresh processes, three iterations of the tiny model
def test_two_process_training_writes_one_session_and_resumes(tmp_path, capsys):
    root = tmp_path / "sessions"
    proc = torchrun(2, str(WORKER), str(root), "new", "2")
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = _ranks(root, "new")
    assert ranks[0]["pid"] != ranks[1]["pid"]  # two processes ran
    assert ranks[0]["reports"] == ranks[1]["reports"] == [1, 2] and ranks[0]["modes"] == ranks[1]["modes"]
    assert ranks[0]["lora"] == ranks[1]["lora"] and ranks[0]["lora_abs"] == ranks[1]["lora_abs"]  # in sync
    assert ranks[0]["released"] and ranks[1]["released"]  # close() unwrapped DDP before the group went

    session = Session.open(root, "dp")
    assert session.config.scale.processes == 2
    rows = session.metrics()
    assert [(r["iteration"], r["kind"]) for r in rows] == [(1, "train"), (2, "train")]  # one row each
    assert all(r["scale/processes"] == 2 and r["rollout/episodes"] == 4 for r in rows)
    episodes = session.episodes()
    ids = [ep.episode_id for ep in episodes]
    assert len(ids) == 8 == len(set(ids))  # 2 iterations × 2 groups × 2 episodes, none twice
    groups = {ep.group_id for ep in episodes}
    assert len(groups) == 4 and all(sum(ep.group_id == g for ep in episodes) == 2 for g in groups)
    # Tips of both ranks' groups are in the one table (rank 0 stored rank 1's from the gathered episodes).
    store = TipStore.open(session.tips_path, make_embedder("hash"), session.config.memory)
    stored = {t.text for t in store.list_tips()}
    expected = {entry_text(ep.tip, s.action or s.sample.text, ep.score) for ep in episodes if ep.tip.strip() for s in ep.steps}
    assert stored == expected and len(expected) >= 6  # every episode's entries, each text once
    for it in (ids[0:4], ids[4:8]):  # the two groups of an iteration played different episodes
        a, b = (tuple(tuple(s.action for s in ep.steps) for ep in episodes if ep.episode_id in it[k:k + 2]) for k in (0, 2))
        assert a != b
    assert [i for i, _ in session.checkpoints()] == [1, 2]

    # One process cannot resume a two-process run (the novelty memories are per rank).
    assert cli.main(["train", "--resume", "dp", "--sessions-dir", str(root)]) == cli.USAGE
    assert "2 process(es) but 1 were launched" in capsys.readouterr().err

    proc = torchrun(2, str(WORKER), str(root), "resume", "1")
    assert proc.returncode == 0, proc.stderr[-4000:]
    again = _ranks(root, "resume")
    assert again[0]["reports"] == again[1]["reports"] == [3] and again[0]["lora"] == again[1]["lora"]
    rows = Session.open(root, "dp").metrics(superseded=True)
    assert [(r["iteration"], r["kind"]) for r in rows] == [(1, "train"), (2, "train"), (2, "resume"), (3, "train")]
    assert len(Session.open(root, "dp").episodes()) == 12
    assert [i for i, _ in session.checkpoints()] == [1, 2, 3]
