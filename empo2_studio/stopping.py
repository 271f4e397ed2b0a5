"""Stop requests that reach inside a step: a scope per thread, checked at every lock-step and micro-batch.

A studio job is stopped cooperatively, and its steps are long on a CPU (an evaluation plays 48
episodes; one update re-scores a whole group), so checking the job's stop event only between steps
made Stop wait minutes. Instead the job runs inside `stop_scope(event)`, and the inner loops call
`raise_if_stopped()` at their cheap boundaries (each lock-step of `play_group`, before a group's tips
are written, before each micro-batch's forward and backward in an update's first pass): once the event
is set it raises `StopRequested`, which unwinds the step. What is left uncut is one batched call: a
lock-step's sampling, a group's note writing, one micro-batch's forward or backward. Every boundary comes before anything of the step is kept (the episodes are not yet in the
session, the optimizer has not stepped), so a stopped step leaves no half-written result, and the
caller keeps what earlier steps finished. Outside a scope (the CLI, tests, benchmarks) the check does
nothing. The scope is a `contextvars.ContextVar`, so it is per thread: one job's Stop never touches
another's.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

_EVENT: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("empo2_stop_event", default=None)


class StopRequested(Exception):
    """Raised by `raise_if_stopped` inside a `stop_scope` whose event is set: the step in progress is
    abandoned; whoever runs the job keeps the results of the steps that finished before it."""


@contextlib.contextmanager
def stop_scope(event: threading.Event | None) -> Iterator[None]:
    """Run the body with `event` as this thread's stop event (None: no checks); the previous scope is
    restored on exit."""
    token = _EVENT.set(event)
    try:
        yield
    finally:
        _EVENT.reset(token)


def stop_requested() -> bool:
    """Whether this thread's scope has a stop event that is set."""
    event = _EVENT.get()
    return event is not None and event.is_set()


def raise_if_stopped() -> None:
    """A step boundary: raises `StopRequested` when this thread's stop event is set; else nothing."""
    if stop_requested():
        raise StopRequested("stopped by request")


@contextlib.contextmanager
def rollback_on_stop(obj: Any, *attrs: str, rng: random.Random | None = None,
                     undo: Callable[[], Any] | None = None) -> Iterator[None]:  # fmt: skip
    """Run the body; if it raises `StopRequested`, put `obj`'s `attrs` and `rng`'s state back as they
    were before it and call `undo` (then re-raise): a trainer's stopped iteration leaves its counter,
    draw sequence and tips as if it never began, so its next iteration and checkpoint are those of the
    finished ones."""
    saved = {name: getattr(obj, name) for name in attrs}
    state = rng.getstate() if rng is not None else None
    try:
        yield
    except StopRequested:
        for name, value in saved.items():
            setattr(obj, name, value)
        if rng is not None:
            rng.setstate(state)
        if undo is not None:
            try:
                undo()
            except Exception as exc:  # the stop is what happened: a failed undo must not turn it into a failure
                logging.getLogger(__name__).warning("undoing a stopped step failed: %s", exc)
        raise


__all__ = ["StopRequested", "raise_if_stopped", "rollback_on_stop", "stop_requested", "stop_scope"]
