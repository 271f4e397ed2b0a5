"""The job registry's bound (finished jobs pruned, running ones kept) and `Job.claim` (torch-free)."""

from __future__ import annotations

import threading

from empo2_studio.app.jobs import JobRegistry


def test_finished_jobs_beyond_the_newest_are_pruned_running_ones_kept():
    reg = JobRegistry(keep_finished=2)
    release = threading.Event()
    blocking = reg.start("demo", lambda j: release.wait(5), uses_model=False)  # demo-1, runs throughout
    for _ in range(3):  # demo-2 … demo-4, each finished before the next starts
        reg.wait(reg.start("demo", lambda j: None, uses_model=False).job_id, 5)
    # Starting demo-5 sees 3 finished jobs (2, 3, 4) with room for 2: demo-2 goes.
    last = reg.start("demo", lambda j: None, uses_model=False)
    assert [j.job_id for j in reg.jobs()] == ["demo-1", "demo-3", "demo-4", "demo-5"]
    reg.wait(last.job_id, 5)
    reg.start("demo", lambda j: None, uses_model=False)  # demo-6: finished 3, 4, 5 → demo-3 goes
    assert [j.job_id for j in reg.jobs()][:3] == ["demo-1", "demo-4", "demo-5"]
    assert reg.get("demo-2") is None and reg.get(blocking.job_id) is blocking
    release.set()
    assert reg.wait(blocking.job_id, 5).result is True


def test_claim_is_true_once_per_job_and_key():
    reg = JobRegistry()
    job = reg.wait(reg.start("demo", lambda j: None, uses_model=False).job_id, 5)
    assert [job.claim("_listed"), job.claim("_listed"), job.claim("other")] == [True, False, True]
    assert job.snapshot() == {"_listed": True, "other": True}
