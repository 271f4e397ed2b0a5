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


def test_a_refused_job_ends_refused_with_one_line_and_logs_no_traceback(caplog):
    from empo2_studio.app import job_panel as jp
    from empo2_studio.app.jobs import Refused

    def stage(j):
        raise Refused("nothing to distill yet: play the memory stage (3) first")

    reg = JobRegistry()
    with caplog.at_level("INFO", logger="empo2_studio.app.jobs"):
        job = reg.wait(reg.start("demo", stage, uses_model=False).job_id, 5)
    assert (job.status, job.finished) == ("refused", True)
    assert job.error == job.message == "nothing to distill yet: play the memory stage (3) first"
    assert "[refused] nothing to distill yet" in jp.job_status_html(job) and "failed" not in jp.job_status_html(job)
    assert [r.getMessage() for r in caplog.records] == [
        "job demo-1 refused: nothing to distill yet: play the memory stage (3) first"]
    assert all(r.exc_info is None for r in caplog.records)


def test_a_failed_job_says_its_error_once():
    from empo2_studio.app import job_panel as jp

    def boom(j):
        raise ZeroDivisionError("division by zero")

    reg = JobRegistry()
    job = reg.wait(reg.start("demo", boom, uses_model=False).job_id, 5)
    assert job.status == "failed" and "[failed] ZeroDivisionError: division by zero" in jp.job_status_html(job)
    assert "failed: " not in jp.job_status_html(job)
