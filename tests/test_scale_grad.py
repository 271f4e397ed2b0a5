"""Data parallelism on CPU: two gloo processes, gradients reduced by DDP (through accelerate), give the
one-process gradient (design.md §11)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from scale_cases import ADVANTAGES, SHARDS, make_batch, perturb_lora, save_batch, update_gradient

REPO = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).parent / "scale_workers" / "grad_worker.py"


def torchrun(nproc: int, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m torch.distributed.run --standalone --nproc_per_node N …` with this repo importable."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def _flat(grads) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in grads])


@pytest.mark.slow  # two fresh processes import torch/transformers and build the tiny model
def test_two_gloo_processes_give_the_one_process_gradient(tmp_path, tiny_policy):
    perturb_lora(tiny_policy)
    episodes = make_batch(tiny_policy)
    save_batch(episodes, tmp_path / "batch.jsonl")
    one, m_one = update_gradient(tiny_policy, episodes, ADVANTAGES)
    # The batch is off-policy: tip-free current vs with-tips behaviour log-probs, ratio ≠ 1.
    assert abs(m_one["ratio/mean"] - 1.0) > 1e-3
    # Per shard: gradient sums g_r = mean_r · n_r (hand-worked reference of both normalisers).
    shard = [update_gradient(tiny_policy, [episodes[i] for i in s], [ADVANTAGES[i] for i in s]) for s in SHARDS]
    n = [m["train/tokens"] for _, m in shard]
    assert n[0] != n[1] and sum(n) == m_one["train/tokens"]
    g_sum = [_flat(g) * k for (g, _), k in zip(shard, n)]
    assert torch.allclose((g_sum[0] + g_sum[1]) / sum(n), _flat(one), atol=1e-6, rtol=0)

    proc = torchrun(2, str(WORKER), str(tmp_path / "batch.jsonl"), str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    # Two processes really ran: ranks 0 and 1 of a world of 2 on gloo, two different pids.
    assert [r["rank"] for r in results] == [0, 1] and {r["world"] for r in results} == {2}
    assert {r["backend"] for r in results} == {"gloo"}
    assert results[0]["pid"] != results[1]["pid"]
    for r in results:  # DDP reduced the gradients: scoring ran through it, its reducer all-reduced buckets
        assert r["engine"] == "DistributedDataParallel" and r["train_forward"]
        for normalizer in ("global", "per-rank"):  # rank 0: 1 micro-batch, rank 1: 3; one synced pass each
            assert r[f"{normalizer}/synced_passes"] == 1 and r[f"{normalizer}/bucket_allreduces"] >= 1
    diffs = [(_flat(r["global"]) - _flat(one)).abs().max().item() for r in results]
    print(f"max |DDP 2-process gradient - 1-process gradient| per rank: {diffs}")
    for r in results:  # every rank ends with the one-process gradient and metrics
        assert (_flat(r["global"]) - _flat(one)).abs().max().item() <= 1e-6
        m = r["global/metrics"]
        assert m["train/tokens"] == m_one["train/tokens"] and m["train/turns"] == m_one["train/turns"]
        assert m["loss/policy"] == pytest.approx(m_one["loss/policy"], abs=1e-6)
        assert m["ratio/mean"] == pytest.approx(m_one["ratio/mean"], abs=1e-6)
        assert m["ratio/max"] == pytest.approx(m_one["ratio/max"], abs=1e-6)
        assert m["ratio/min"] == pytest.approx(m_one["ratio/min"], abs=1e-6)
        assert m["grad/norm"] == pytest.approx(m_one["grad/norm"], rel=1e-5)
    # A per-rank normaliser (DDP's mean of local means) gives (g_0/n_0 + g_1/n_1)/2: another gradient.
    per_rank = (g_sum[0] / n[0] + g_sum[1] / n[1]) / 2
    print(f"max |per-rank normaliser - 1-process| per rank: {[(_flat(r['per-rank']) - _flat(one)).abs().max().item() for r in results]}")
    for r in results:
        got = _flat(r["per-rank"])
        assert (got - per_rank).abs().max().item() <= 1e-6
        assert (got - _flat(one)).abs().max().item() > 1e-4
    # Rank 0 with no episode at all: its zero-weight synced pass joins the reduction of rank 1's shard.
    alone, m_alone = shard[1]
    for r in results:
        assert r["empty-rank0/metrics"]["train/tokens"] == m_alone["train/tokens"]
        assert (_flat(r["empty-rank0"]) - _flat(alone)).abs().max().item() <= 1e-6
