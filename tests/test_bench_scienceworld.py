"""benchmarks/bench_scienceworld.py: P(gold action) under action decoding, read off the step's categorical
scored in chunks on one KV cache per path, equals `policy.score`'s (the packed forward it replaces)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def test_action_decoding_probs_in_chunks_on_one_cache_equal_policy_score(monkeypatch):
    import bench_scienceworld as bench

    from empo2_studio.policy import Turn, build_tiny_policy

    torch.set_num_threads(1)
    policy = build_tiny_policy(decoding="action", seed=0)
    fmt = policy.chat_format
    actions = tuple(f"go to room {i}" for i in range(7)) + ("focus on red box", "focus on blue box", "look around")

    def turn(k: int, action: str) -> Turn:
        return Turn(f"You are in room {k}. A red box and a blue box.", fmt.encode(action) + (fmt.eot_id,), actions)

    gold = ["go to room 0", "focus on red box", "look around"]
    turns = [turn(k, a) for k, a in enumerate(gold)]
    monkeypatch.setattr(bench, "CHOICE_CHUNK", 3)  # several chunks per step, the cache cropped between them
    with torch.no_grad():
        reference = [float(lp.exp()) for lp in policy.score([turns])[0]]
        blue = float(policy.score([[turns[0], turn(1, "focus on blue box")]])[0][1].exp())
    assert bench.gold_probs(policy, turns, gold) == pytest.approx(reference, abs=1e-5)
    wrong, p_wrong = bench.wrong_focus(policy, turns, 1, "focus on red box")
    assert wrong == "focus on blue box" and p_wrong == pytest.approx(blue, abs=1e-5)
