"""What the studio keeps in memory between jobs (issue 50): the note writer's base shared with the
policy's, and the heap handed back once no job runs (`app.memory_use`)."""

from __future__ import annotations

import threading

import pytest
import torch

from empo2_studio.app.jobs import JobRegistry
from empo2_studio.app.memory_use import IdleRelease, release_freed_memory, share_frozen_weights
from empo2_studio.policy import build_tiny_policy

# The tiny Llama's frozen base, by hand: vocabulary 49,152 (SmolLM2's tokenizer), hidden 64,
# intermediate 128, 2 layers, 4 query heads of 16 and 2 key/value heads (k, v: 64 × 32).
# Per layer: q 64·64 + k 64·32 + v 64·32 + o 64·64 + gate, up, down 3 · 64·128 + 2 norms of 64 = 36,992.
# Embeddings 49,152·64 = 3,145,728 (lm_head is tied to them: one tensor); final norm 64.
TINY_BASE_BYTES = 4 * (49_152 * 64 + 2 * 36_992 + 64)  # float32: 12,879,104
TINY_NORM_BYTES = 4 * (2 * 2 + 1) * 64
"""The RMSNorm weights (2 per layer and the final one), which start at 1 in any model: 1,280 bytes."""


def _logits(policy, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return policy.model(input_ids=ids).logits


def test_a_writer_on_the_same_base_shares_it_and_answers_the_same():
    torch.set_num_threads(1)
    actor, writer = build_tiny_policy(seed=0), build_tiny_policy(seed=0)
    with torch.no_grad():  # the writer's own adapter: its LoRA differs from the actor's, its base does not
        for name, p in writer.model.named_parameters():
            if "lora_B" in name:
                p.fill_(0.01)
    ids = torch.tensor([[1, 20, 300, 4000]])
    before = _logits(writer, ids)
    assert not torch.equal(before, _logits(actor, ids))  # two different models on one base

    assert share_frozen_weights(writer.model, actor.model) == TINY_BASE_BYTES == 12_879_104
    theirs = dict(actor.model.named_parameters())
    for name, p in writer.model.named_parameters():
        assert (p.data_ptr() == theirs[name].data_ptr()) == ("lora_" not in name), name
    assert torch.equal(_logits(writer, ids), before)  # the writer reads the same numbers
    assert share_frozen_weights(writer.model, actor.model) == 0  # already shared
    # training the actor's adapter leaves the writer as it was
    for p in actor.model.parameters():
        if p.requires_grad:
            p.data.add_(0.5)
    assert torch.equal(_logits(writer, ids), before)


def test_only_equal_tensors_of_another_base_are_shared():
    actor, other = build_tiny_policy(seed=0), build_tiny_policy(seed=1)
    # another random base: only the norms are equal (all ones), every other tensor stays its own
    assert share_frozen_weights(other.model, actor.model) == TINY_NORM_BYTES == 1_280
    assert share_frozen_weights(actor.model, actor.model) == 0
    with pytest.raises(TypeError, match="target must be a torch module, got str"):
        share_frozen_weights("model", actor.model)


def test_the_heap_is_released_once_after_jobs_end_and_not_while_one_runs():
    assert release_freed_memory() is True  # glibc: malloc_trim ran
    jobs = JobRegistry()
    idle = IdleRelease(jobs, interval_s=3600)  # the test calls `check` itself
    try:
        assert idle.check() is False and idle.releases == 0  # no job has run yet
        go = threading.Event()
        job = jobs.start("t", lambda j: go.wait(60), uses_model=False)
        assert idle.check() is False  # a job runs: nothing is released under it
        go.set()
        jobs.wait(job.job_id, 60)
        assert (idle.check(), idle.check(), idle.releases) == (True, False, 1)  # once per idle period
        jobs.wait(jobs.start("t", lambda j: None, uses_model=False).job_id, 60)
        assert (idle.check(), idle.releases) == (True, 2)
    finally:
        idle.close()
    with pytest.raises(ValueError, match="interval_s must be > 0 seconds, got 0"):
        IdleRelease(jobs, interval_s=0)


def test_a_studio_on_a_model_that_writes_its_own_tips_shares_nothing(tmp_path, studio_cfg):
    from empo2_studio.app.studio import Studio

    studio = Studio(tmp_path, policy="tiny", embedder="hash", config=studio_cfg)
    try:
        assert studio.share_note_writer() == 0  # the tiny test model writes its own tips: no second model
        assert isinstance(studio.idle_release, IdleRelease)
    finally:
        studio.close()
