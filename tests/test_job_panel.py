"""The job-panel convention every job tab keeps (start / poll / stop / attach), torch-free."""

from __future__ import annotations

import threading

import gradio as gr
import pytest

from empo2_studio.app import job_panel as jp
from empo2_studio.app.jobs import JobRegistry


def _running(reg: JobRegistry, release: threading.Event, **kw):
    job = reg.start("demo", lambda j: release.wait(5), uses_model=False, **kw)
    while job.status != "running":
        release.wait(0.01)
    return job


def test_started_puts_id_status_timer_and_seen_first_then_the_extras():
    reg, release = JobRegistry(), threading.Event()
    job = _running(reg, release)
    try:
        job_id, status, timer, seen, run_id, md = jp.started(job, "run-a", "**md**")
        assert (job_id, seen, run_id, md) == ("demo-1", -1, "run-a", "**md**")
        assert "[running]" in status and timer.active
    finally:
        release.set()


def test_poll_draws_once_per_version_and_stops_the_timer_when_done():
    reg, release = JobRegistry(), threading.Event()
    job = _running(reg, release)
    drawn = []

    def draw(j):
        drawn.append(j.version)
        return f"view of v{j.version}", j.data.get("n", 0)

    status, view, n, timer, seen = jp.poll(reg, job.job_id, -1, 2, draw)
    assert "[running]" in status and (view, n) == (f"view of v{job.version}", 0) and timer.active
    assert seen == (job.version, job.data_version) and drawn == [job.version]
    # nothing changed since: every output skipped, the timer kept running, seen unchanged, no draw
    assert jp.poll(reg, job.job_id, seen, 2, draw)[:3] == (gr.skip(),) * 3
    *_, timer, again = jp.poll(reg, job.job_id, seen, 2, draw)
    assert timer.active and again == seen and len(drawn) == 1
    job.update(n=7)  # one data update: one version more, one redraw
    _, view, n, _, seen = jp.poll(reg, job.job_id, seen, 2, draw)
    assert (view, n) == (f"view of v{job.version}", 7) and len(drawn) == 2
    release.set()
    reg.wait(job.job_id, 5)
    status, _, _, timer, last = jp.poll(reg, job.job_id, seen, 2, draw)
    assert "[done]" in status and not timer.active and last == (job.version, job.data_version)
    assert len(drawn) == 3  # finishing redraws the views (a view may show the end)


def test_a_message_alone_redraws_the_status_line_not_the_views():
    """A lock-step's message ("step 4 of ≤ 8") moves every second or so; the charts stay as drawn."""
    reg, release = JobRegistry(), threading.Event()
    job = _running(reg, release)
    drawn = []
    try:
        *_, seen = jp.poll(reg, job.job_id, -1, 1, lambda j: drawn.append(j.version) or ("chart",))
        job.update(message="step 4 of ≤ 8", progress=0.5)
        status, view, timer, seen2 = jp.poll(reg, job.job_id, seen, 1, lambda j: drawn.append(j.version) or ("chart",))
        assert "step 4 of ≤ 8" in status and view == gr.skip() and timer.active and len(drawn) == 1
        assert seen2 == (seen[0] + 1, seen[1])
        job.append("rows", {"iteration": 1})
        assert jp.poll(reg, job.job_id, seen2, 1, lambda j: drawn.append(j.version) or ("chart",))[1] == "chart"
        assert len(drawn) == 2
    finally:
        release.set()


def test_poll_of_an_unknown_job_shows_idle_and_stops():
    reg = JobRegistry()
    status, a, b, timer, seen = jp.poll(reg, "train-99", 4, 2, lambda j: ("never", "drawn"))
    assert "idle" in status and (a, b) == (gr.skip(), gr.skip()) and not timer.active and seen == 4
    assert jp.poll(reg, None, -1, 0, lambda j: ())[0] == jp.job_status_html(None)


def test_a_draw_returning_another_count_than_declared_is_an_error():
    reg, release = JobRegistry(), threading.Event()
    job = _running(reg, release)
    try:
        with pytest.raises(ValueError, match="draws 3 views, got 2"):
            jp.poll(reg, job.job_id, -1, 3, lambda j: ("a", "b"))
    finally:
        release.set()


def test_stop_asks_the_job_and_returns_its_status():
    reg, release = JobRegistry(), threading.Event()
    job = _running(reg, release)
    html = jp.stop(reg, job.job_id)
    assert job.stop_requested and "stopping" in html
    release.set()
    assert reg.wait(job.job_id, 5).status == "stopped"
    assert "idle" in jp.stop(reg, "nope-1")


def test_the_panel_wires_every_tab_the_same_way():
    with gr.Blocks() as demo:
        panel = jp.JobPanel.create("xx")
        run_id, button, stop_button = gr.State("a"), gr.Button(), gr.Button()
        chart, table = gr.Plot(), gr.HTML()
        panel.on_start(button.click, lambda rid: None, [run_id], run_id)
        panel.on_poll(lambda *a: None, [chart, table], [run_id])
        panel.on_stop(stop_button, JobRegistry())
    start, tick, stop = list(demo.fns.values())[-3:]

    def ids(blocks):
        return [b._id for b in blocks]

    assert panel.status.elem_id == "xx-status"
    assert ids(start.outputs) == ids([panel.job_id, panel.status, panel.timer, panel.seen, run_id])
    assert ids(tick.inputs) == ids([panel.job_id, panel.seen, run_id])
    assert ids(tick.outputs) == ids([panel.status, chart, table, panel.timer, panel.seen])
    assert (ids(stop.inputs), ids(stop.outputs)) == (ids([panel.job_id]), ids([panel.status]))


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_job_with_known_step_times_shows_a_countdown_that_moves_between_updates():
    """A job of 3 steps, 20 s expected each from an earlier run, whose steps take 30, 30 and 12 s:
    every poll re-reads the countdown, so the status moves while nothing else changes."""
    from empo2_studio.lesson.timing import Countdown

    reg, release, clock = JobRegistry(), threading.Event(), _Clock()
    job = _running(reg, release)
    try:
        job.countdown = Countdown({"step": 3}, {"step": (20.0, "an earlier run")}, clock=clock)
        job.update(message="step 1 of 3")
        status, *_, seen = jp.poll(reg, job.job_id, -1, 0, lambda j: ())
        assert "[running] step 1 of 3 · 0:00 elapsed · about 1:00 left" in status
        texts = []
        for _ in range(3):  # 10 s apart, no job update: the status still counts down
            clock.now += 10
            status, timer, again = jp.poll(reg, job.job_id, seen, 0, lambda j: ())
            texts.append(status)
            assert again == seen and timer.active
        assert [t.split("· ", 1)[1].split("<")[0] for t in texts] == [
            "0:10 elapsed · about 0:50 left", "0:20 elapsed · about 0:40 left", "0:30 elapsed · about 0:30 left"]
        job.countdown.finished("step")  # measured 30 s: 2 × 30 s left
        job.update(message="step 2 of 3")
        assert "step 2 of 3 · 0:30 elapsed · about 1:00 left" in jp.poll(reg, job.job_id, seen, 0, lambda j: ())[0]
        clock.now += 30
        job.countdown.finished("step")
        clock.now += 12
        job.update(message="step 3 of 3")  # mean 30 s, 1 left, 12 s into it
        assert "1:12 elapsed · about 0:18 left" in jp.poll(reg, job.job_id, seen, 0, lambda j: ())[0]
    finally:
        release.set()
    reg.wait(job.job_id, 5)
    status = jp.poll(reg, job.job_id, -1, 0, lambda j: ())[0]
    assert "[done]" in status and "left" not in status  # a finished job shows its message only
