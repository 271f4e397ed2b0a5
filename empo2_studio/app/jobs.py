"""Long-running work of the studio: one thread per job, a registry, and one model lock.

The browser never runs a rollout or a training step inside a request: a handler starts a `Job`
here and returns at once, and a `gr.Timer` polls the job's progress and live data. Jobs that touch
the model (episodes, training, distillation, adaptation) take the registry's `model_lock`, so two
browser tabs can never interleave steps on one KV cache or one optimizer. A job is stopped
cooperatively: `stop()` sets its event, and the job's function runs inside `stopping.stop_scope` of
that event, so the inner loops (every lock-step of a rollout or an evaluation, every micro-batch of an
update) raise `StopRequested` at their next boundary: Stop lands within one lock-step, and the step it
cuts is dropped whole, so the session keeps only finished steps. A job body that must say what it
kept catches `StopRequested` itself; one that does not ends "stopped" here.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from empo2_studio.stopping import StopRequested, stop_scope

log = logging.getLogger(__name__)

JobStatus = Literal["waiting", "running", "done", "failed", "stopped", "refused"]
FINISHED: tuple[JobStatus, ...] = ("done", "failed", "stopped", "refused")


class Refused(ValueError):
    """Raised by a job body that declines its input once it runs (e.g. a stage whose precondition is
    not met): the job ends "refused" with the message as one line, and the log gets no traceback."""


@dataclass
class Job:
    """A unit of background work and everything the UI reads about it while it runs."""

    job_id: str
    kind: str
    """"episodes", "train", "distill", "adapt", "model", …"""
    label: str
    run_id: str | None = None
    """The session the job works on (None for the model preparation)."""
    status: JobStatus = "waiting"
    progress: float = 0.0
    """Fraction done, 0 … 1."""
    message: str = ""
    """One line for the status box (what the job is doing now)."""
    error: str | None = None
    """A readable error (type and message, never a traceback) when status is "failed"."""
    result: Any = None
    stop_event: threading.Event = field(default_factory=threading.Event)
    data: dict[str, Any] = field(default_factory=dict)
    """Live, job-specific state (streamed steps, reports) the UI renders; written under `lock`."""
    version: int = 0
    """Bumped on every update so pollers can skip re-rendering when nothing changed."""
    data_version: int = 0
    """Bumped when `data`, the status or the result changes, not on a message or progress alone: what a
    tab's views (charts, tables) draw. A running job's message moves at every lock-step, and a poll
    redraws only the status line for it (`job_panel.poll`)."""
    countdown: Any = None
    """While it runs: the job's `lesson.timing.Countdown` (elapsed and time left, read at every poll,
    so the status line moves while a long step runs); None for a job with nothing to count."""
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def stop_requested(self) -> bool:
        return self.stop_event.is_set()

    def update(self, *, progress: float | None = None, message: str | None = None, **data: Any) -> None:
        """Record progress / a status line / live data (thread-safe)."""
        with self.lock:
            if progress is not None:
                self.progress = min(max(float(progress), 0.0), 1.0)
            if message is not None:
                self.message = message
            self.data.update(data)
            self.version += 1
            if data:
                self.data_version += 1

    def append(self, key: str, item: Any) -> None:
        """Append `item` to the list `data[key]` (thread-safe), e.g. one streamed step."""
        with self.lock:
            self.data.setdefault(key, []).append(item)
            self.version += 1
            self.data_version += 1

    def claim(self, key: str) -> bool:
        """True the first time it is called with `key` on this job, False after (thread-safe): for a
        follow-up that must run once per job however many pollers see it finish. Marks `data[key]`."""
        with self.lock:
            if self.data.get(key):
                return False
            self.data[key] = True
            return True

    def snapshot(self) -> dict[str, Any]:
        """A consistent copy of the live data (lists copied) for rendering."""
        with self.lock:
            return {k: list(v) if isinstance(v, list) else v for k, v in self.data.items()}


KEEP_FINISHED = 32
"""Finished jobs a registry keeps (the newest); older ones are dropped as new jobs start."""


class JobRegistry:
    """Starts jobs in threads, finds them by id, stops them, and owns the model lock.

    The registry is bounded: when a job starts, finished jobs beyond the newest `keep_finished` are
    dropped (with their data: streamed steps, reports), so a studio left running for days does not
    keep every episode it ever streamed. Unfinished jobs are never dropped; a poller holding the id of
    a dropped job gets None from `get`, as for any stale id.
    """

    def __init__(self, keep_finished: int = KEEP_FINISHED) -> None:
        self.keep_finished = keep_finished
        self._jobs: dict[str, Job] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.model_lock = threading.Lock()
        """Held by every job that uses the shared model (sampling or training)."""

    def start(
        self,
        kind: str,
        fn: Callable[[Job], Any],
        *,
        label: str = "",
        uses_model: bool = True,
        run_id: str | None = None,
    ) -> Job:
        """Run `fn(job)` in a new daemon thread and return the job at once.

        With `uses_model` the job first waits (status "waiting") for `model_lock`; a stop request
        while waiting ends it without running. `fn`'s return value becomes `job.result`; an
        exception marks the job "failed" with a one-line readable error (the traceback goes to the
        log only); a `Refused` marks it "refused" (one line, no traceback).
        """
        with self._lock:
            job = Job(job_id=f"{kind}-{next(self._ids)}", kind=kind, label=label or kind, run_id=run_id)
            self._jobs[job.job_id] = job
            finished = [j.job_id for j in self._jobs.values() if j.finished]  # oldest first
            for old_id in finished[: max(len(finished) - self.keep_finished, 0)]:
                del self._jobs[old_id]
        threading.Thread(target=self._run, args=(job, fn, uses_model), name=job.job_id, daemon=True).start()
        return job

    def _run(self, job: Job, fn: Callable[[Job], Any], uses_model: bool) -> None:
        lock = self.model_lock if uses_model else None
        if lock is not None:
            job.update(message="waiting for the model (another job is using it)")
            while not lock.acquire(timeout=0.2):
                if job.stop_requested:
                    self._finish(job, "stopped", message="stopped before it started")
                    return
        try:
            with job.lock:
                job.status = "running"
                job.version += 1
                job.data_version += 1
            with stop_scope(job.stop_event):
                result = fn(job)
        except StopRequested:  # a body that keeps nothing of its own: what it ran is in its last message
            head = job.message.removesuffix(" — stopping")
            self._finish(job, "stopped", message=f"{head} — stopped; the step in progress was dropped" if head else "stopped")
        except Refused as exc:
            log.info("job %s refused: %s", job.job_id, exc)
            self._finish(job, "refused", error=readable_error(exc))
        except Exception as exc:  # noqa: BLE001 - every failure must reach the UI as a message
            log.exception("job %s failed", job.job_id)
            self._finish(job, "failed", error=readable_error(exc))
        else:
            job.result = result
            self._finish(job, "stopped" if job.stop_requested else "done", progress=1.0)
        finally:
            if lock is not None:
                lock.release()

    @staticmethod
    def _finish(job: Job, status: JobStatus, *, error: str | None = None, message: str | None = None,
                progress: float | None = None) -> None:
        with job.lock:
            job.status = status
            job.error = error
            if message is not None:
                job.message = message
            elif status in ("failed", "refused"):
                job.message = error or status
            elif status == "stopped" and not job.message.startswith("stopped"):  # a body's own closing line says it
                job.message = job.message + " — stopped" if job.message else "stopped"
            if progress is not None and status == "done":
                job.progress = progress
            job.finished_at = time.time()
            job.version += 1
            job.data_version += 1

    def get(self, job_id: str | None) -> Job | None:
        """The job with this id, or None (unknown ids are not an error: a poller may be stale)."""
        if not job_id:
            return None
        with self._lock:
            return self._jobs.get(job_id)

    def jobs(self) -> list[Job]:
        """All jobs, oldest first."""
        with self._lock:
            return list(self._jobs.values())

    def running(self, kind: str | None = None, *, run_id: str | None = None) -> list[Job]:
        """Unfinished jobs (oldest first), optionally of one kind and/or of one session."""
        return [
            j for j in self.jobs()
            if not j.finished and (kind is None or j.kind == kind) and (run_id is None or j.run_id == run_id)
        ]  # fmt: skip

    def stop(self, job_id: str | None) -> bool:
        """Ask a job to stop at its next lock-step or micro-batch (module docstring); False if there is
        no such unfinished job."""
        job = self.get(job_id)
        if job is None or job.finished:
            return False
        job.stop_event.set()
        job.update(message=(job.message + " — stopping") if job.message else "stopping")
        return True

    def wait(self, job_id: str, timeout: float = 60.0) -> Job:
        """Block until the job finishes (for tests and the CLI); raises TimeoutError."""
        job = self.get(job_id)
        if job is None:
            raise KeyError(f"unknown job {job_id!r}")
        deadline = time.time() + timeout
        while not job.finished:
            if time.time() > deadline:
                raise TimeoutError(f"job {job_id} still {job.status} after {timeout} s")
            time.sleep(0.02)
        return job


def readable_error(exc: BaseException, max_chars: int = 800) -> str:
    """The error as one line for the user: the message of a ValueError/KeyError, else the type and
    message. A multi-line message (e.g. every bad line of an import) is joined with "; ", whole."""
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], str) else str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    text = " ".join(lines[:1] + ["; ".join(lines[1:])]).strip() if lines else type(exc).__name__
    if len(text) > max_chars:
        text = text[: max_chars - 1] + "…"
    if isinstance(exc, (ValueError, KeyError)):
        return text
    return f"{type(exc).__name__}: {text}"
