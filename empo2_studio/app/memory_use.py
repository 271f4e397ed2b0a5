"""What the studio process keeps in memory between jobs (issue 50: 3.04 GB of RSS after a class's work).

Two measures, both measured in docs/notebook/2026-12-06-studio-memory.md:

- `share_frozen_weights`: the shipped note writer (`policy.note_writer`) is a second copy of the
  embedded model with its own LoRA adapter: the same frozen base weights again, 0.54 GB in float32.
  Its base tensors are made to share the acting policy's storage (only tensors that are equal, frozen,
  of the same name, shape, dtype and device), so the process holds the base once. Nothing in the
  package writes base weights in place (LoRA training and `load_adapter` touch only the adapter), so
  the two models read the same numbers they read before.
- `IdleRelease`: glibc keeps the memory freed by a job (activations, KV caches, gradients) in its
  arenas instead of handing it back; once no job runs, a daemon thread collects garbage and calls
  `malloc_trim(0)`, once per batch of finished jobs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import threading
from typing import Any

IDLE_CHECK_S = 5.0
"""Seconds between two looks at the job registry (a release costs ~0.1 s of one core)."""


def share_frozen_weights(target: Any, source: Any) -> int:
    """Make each frozen parameter of `target` (a torch module) that equals `source`'s parameter of
    the same name (same shape, dtype, device, values) use `source`'s storage; the target's own copy is
    freed once nothing else holds it. LoRA tensors (names with "lora_") and parameters that require
    gradients are never shared. Returns the bytes no longer held twice (0 when nothing matched).

    Raises TypeError when either argument has no `named_parameters` (not a torch module)."""
    import torch

    for name, module in (("target", target), ("source", source)):
        if not hasattr(module, "named_parameters"):
            raise TypeError(f"{name} must be a torch module, got {type(module).__name__}")
    if target is source:
        return 0
    theirs = dict(source.named_parameters())
    shared = 0
    with torch.no_grad():
        for name, param in target.named_parameters():
            other = theirs.get(name)
            if (other is None or "lora_" in name or param.requires_grad or other.requires_grad
                    or param.shape != other.shape or param.dtype != other.dtype or param.device != other.device
                    or param.data_ptr() == other.data_ptr() or not torch.equal(param, other)):  # fmt: skip
                continue
            param.data = other.data
            shared += param.numel() * param.element_size()
    return shared


def share_note_writer(cfg: Any, policy: Any) -> int:
    """Load the note writer that runs of `cfg` use with `policy` (`policy.note_writer.load_note_writer`,
    cached once per process) and share its frozen base with `policy`'s (`share_frozen_weights`).
    Returns the bytes saved; 0 when `policy` writes its own tips (a test model, ScienceWorld).

    Raises what `load_note_writer` raises (FileNotFoundError for a missing writer adapter)."""
    from empo2_studio.policy.note_writer import load_note_writer

    writer, _ = load_note_writer(cfg, policy)
    if writer is policy or not hasattr(writer, "model") or not hasattr(policy, "model"):
        return 0
    return share_frozen_weights(writer.model, policy.model)


def release_freed_memory() -> bool:
    """Collect garbage, then hand the heap's free pages back to the OS (glibc `malloc_trim(0)`).
    Returns True when `malloc_trim` ran (False on a C library without it, e.g. musl or macOS)."""
    gc.collect()
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return False
    trim(0)
    return True


class IdleRelease:
    """A daemon thread that calls `release_freed_memory` once after jobs of `jobs` (a
    `jobs.JobRegistry`) have finished and none is running or waiting, then waits for the next job."""

    def __init__(self, jobs: Any, interval_s: float = IDLE_CHECK_S) -> None:
        """Raises ValueError for an `interval_s` ≤ 0."""
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0 seconds, got {interval_s!r}")
        self.jobs = jobs
        self.interval_s = interval_s
        self.releases = 0
        """How many releases have run (one per idle period after finished jobs)."""
        self._released_after: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="idle-release", daemon=True)
        self._thread.start()

    def check(self) -> bool:
        """Release once when some job finished since the last release and no job is unfinished now.
        Returns True when it released."""
        jobs = self.jobs.jobs()
        if any(not j.finished for j in jobs):
            return False
        finished = {j.job_id for j in jobs}
        if finished <= self._released_after:
            return False
        self._released_after = finished  # the registry forgets old jobs: keep only the ids it lists
        release_freed_memory()
        self.releases += 1
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.check()

    def close(self) -> None:
        """Stop the thread (it ends within `interval_s`)."""
        self._stop.set()
