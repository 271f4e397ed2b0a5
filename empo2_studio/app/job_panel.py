"""One job tab's start / poll / stop / status wiring, written once for every tab that runs a job.

A job tab (Episodes, Train with Distill, Adapt, Lesson, Race) follows one job at a time with four
components: a status line, two per-browser states (the id of the job it follows and the job version
it last drew) and a timer that polls while the job runs. `JobPanel.create` makes the four and its
`on_*` methods wire them the same way in every tab; the plain functions below are what those events
call, so a tab's handlers are built from them and tested without a page.

The convention every tab's handlers keep (the outputs `JobPanel` declares):

- start: `started(job, *extra)` → (job id, status html, timer on, seen = -1, *extra);
- poll: `poll(jobs, job_id, seen, n_views, render)` → (status html, *n_views views, timer, seen), each
  output `gr.skip()` when nothing it shows changed since the versions the page last drew (`seen`);
- stop: `stop(jobs, job_id)` → status html; page load: `attach(jobs, current, kinds)` → (job id, timer, seen).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Sequence

import gradio as gr

from empo2_studio.app import render
from empo2_studio.app.jobs import Job, JobRegistry

POLL_S = 1.0
"""Seconds between two polls of a running job: the countdown's resolution. Each tick costs the browser
CPU that a 2-core machine takes from training: during a class race with the page open, Chromium used
30 % of a core at 0.5 s and 17 % at 1 s, and EMPO²'s first iterations took 46–51 s and 33–41 s (25–35 s
with no page watching; docs/notebook/2026-12-06-class-race-in-the-studio.md)."""


def job_status_html(job: Job | None) -> str:
    """The status line of a job: a progress bar with "[status]" and its message (while it runs, then
    its countdown's elapsed and left time, read now), or its error for a failed or refused job (one
    line, never a traceback); "idle" for None."""
    if job is None:
        return render.progress_html(0.0, "idle")
    text = {"failed": job.error, "refused": job.error, "waiting": job.message or "waiting"}.get(job.status, job.message)
    countdown = job.countdown
    if job.status == "running" and countdown is not None:
        text = f"{text} · {countdown.line()}" if text else countdown.line()
    return render.progress_html(job.progress, f"[{job.status}] {text}")


def timer_for(job: Job | None) -> gr.Timer:
    """Keep polling while the job runs; stop the timer once it has finished (or is unknown)."""
    return gr.Timer(active=job is not None and not job.finished)


def started(job: Job, *extra: Any) -> tuple[Any, ...]:
    """What a start handler returns: (job id, status html, timer on, seen = -1, *extra). seen = -1
    is below every job version, so the first tick draws the job whatever it has done by then."""
    return (job.job_id, job_status_html(job), gr.Timer(active=True), -1, *extra)


def poll(
    jobs: JobRegistry, job_id: str | None, seen: Any, n_views: int, draw: Callable[[Job], Sequence[Any]]
) -> tuple[Any, ...]:
    """One timer tick: (status html, *views, timer, seen), 3 + n_views values.

    `seen` is what the page last drew: -1 (nothing yet) or the job's (version, data_version) then.
    `draw(job)` returns the tab's `n_views` views of the job (ValueError if it returns another count);
    it runs only when the job's data changed (`Job.data_version`), so a message moving at every
    lock-step redraws the status line, not the charts. An unknown job (None id, or dropped from the
    registry) shows "idle" and stops the timer; a job unchanged since `seen` skips every view, and its
    status too unless it runs with a countdown. The versions, the timer and the status are read BEFORE
    `draw`: read after, a job finishing mid-draw would switch the timer off under a page showing it
    still running, and nothing would poll again; read before, a change during the draw costs one
    more tick, which redraws.
    """
    job = jobs.get(job_id)
    if job is None:
        return (job_status_html(None), *[gr.skip()] * n_views, gr.Timer(active=False), seen)
    now = (job.version, job.data_version)
    if now == seen:  # a counting job's status still moves: its clock runs between updates
        status = job_status_html(job) if job.countdown is not None and not job.finished else gr.skip()
        return (status, *[gr.skip()] * n_views, timer_for(job), seen)
    timer, status = timer_for(job), job_status_html(job)
    if seen != -1 and now[1] == seen[1]:
        return (status, *[gr.skip()] * n_views, timer, now)
    views = tuple(draw(job))
    if len(views) != n_views:
        raise ValueError(f"a poll of {job.kind} jobs draws {n_views} views, got {len(views)}")
    return (status, *views, timer, now)


def stop(jobs: JobRegistry, job_id: str | None) -> str:
    """Ask the job to stop at its next lock-step (`JobRegistry.stop`); returns its status html (idle for
    an unknown id)."""
    jobs.stop(job_id)
    return job_status_html(jobs.get(job_id))


def attach(jobs: JobRegistry, current: str | None, kinds: Sequence[str], run_id: str | None = None) -> tuple[Any, ...]:
    """On page load: the newest unfinished job of `kinds` (on session `run_id`, or any session when
    None), so a reloaded page keeps showing (and can stop) the work it started. Returns
    (job id, timer on, seen = -1), or three skips when there is none or the tab already follows a job
    (a click can land before this load event runs)."""
    running = [j for j in jobs.running(run_id=run_id) if j.kind in kinds]  # oldest first
    if not running or current is not None:
        return gr.skip(), gr.skip(), gr.skip()
    return running[-1].job_id, gr.Timer(active=True), -1


@dataclass(frozen=True)
class JobPanel:
    """The status line, job id / seen states and poll timer of one job tab, and their wiring."""

    status: gr.HTML
    job_id: gr.State
    seen: gr.State
    timer: gr.Timer

    @classmethod
    def create(cls, prefix: str) -> JobPanel:
        """Make the four components inside the current Blocks context: the status line (elem_id
        `<prefix>-status`, placed where this is called) and the invisible states and timer."""
        status = gr.HTML(render.progress_html(0.0, "idle"), elem_id=f"{prefix}-status")
        return cls(status=status, job_id=gr.State(None), seen=gr.State(-1), timer=gr.Timer(POLL_S, active=False))

    @property
    def attach_outputs(self) -> list[Any]:
        """What `attach` returns into: [job id, timer, seen]."""
        return [self.job_id, self.timer, self.seen]

    def on_start(self, trigger: Callable[..., Any], fn: Callable[..., Any], inputs: Sequence[Any],
                 *extra_outputs: Any) -> Any:  # fmt: skip
        """Wire a start event (e.g. `button.click`) to `fn`, which returns `started(job, *extra)`
        with one value per `extra_outputs`. Returns the event, for `.then`."""
        return trigger(fn, list(inputs), [self.job_id, self.status, self.timer, self.seen, *extra_outputs])

    def on_poll(self, fn: Callable[..., Any], views: Sequence[Any], extra_inputs: Sequence[Any] = ()) -> Any:
        """Wire the timer to `fn(job_id, seen, *extra_inputs)`, which returns `poll(...)`'s tuple
        for `views`. Runs with no concurrency limit: a poll only reads, and a queued tick would lag."""
        return self.timer.tick(fn, [self.job_id, self.seen, *extra_inputs], [self.status, *views, self.timer, self.seen],
                               show_progress="hidden", concurrency_limit=None)  # fmt: skip

    def on_stop(self, button: Any, jobs: JobRegistry) -> Any:
        """Wire a Stop button: ask the followed job to stop, show its status."""
        return button.click(partial(stop, jobs), [self.job_id], self.status)

    def on_load_attach(self, demo: gr.Blocks, jobs: JobRegistry, kinds: Sequence[str],
                       run_id: gr.State | None = None) -> None:  # fmt: skip
        """On page load, follow the newest running job of `kinds` on the page's session (`run_id`),
        or of any session when `run_id` is None (the lesson runs on its own session)."""
        kinds = tuple(kinds)
        if run_id is None:
            demo.load(lambda current: attach(jobs, current, kinds), [self.job_id], self.attach_outputs)
        else:
            demo.load(lambda rid, current: attach(jobs, current, kinds, run_id=rid), [run_id, self.job_id],
                      self.attach_outputs)  # fmt: skip
