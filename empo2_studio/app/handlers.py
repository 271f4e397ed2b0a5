"""What several studio tabs share: reading a whole number from a form, turning a refused input into
a one-line warning, and the model banner.

A refused input (a `ValueError`, `KeyError`, … raised by a handler before any work starts) reaches the
page as a `gr.Error` titled "Refused" with one readable line, and the server log gets no traceback
(`print_exception=False`): it is the user's input, not a fault of the studio.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, Callable

import gradio as gr

from empo2_studio.app.jobs import readable_error

if TYPE_CHECKING:
    from empo2_studio.app.studio import Studio

REFUSED = "Refused"
"""Title of the toast a refused input shows."""


def refused(message: str) -> gr.Error:
    """The error a handler raises for input it refuses: a one-line toast, no traceback in the log."""
    return gr.Error(message, title=REFUSED, print_exception=False)


def whole_number(value: Any, what: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """A form value (a number, or its text) as an int. ValueError naming `what`, the valid range and
    the value when it is empty, not a number, fractional (1.5 is not rounded), below `minimum` or above
    `maximum`."""
    if minimum is not None and maximum is not None:
        bound = f" in {minimum}…{maximum}"
    else:
        bound = f" ≥ {minimum}" if minimum is not None else (f" ≤ {maximum}" if maximum is not None else "")
    if value is None or not str(value).strip():
        raise ValueError(f"{what} is empty; enter a whole number{bound}")
    try:
        number = float(str(value).strip())
    except ValueError:
        number = math.nan
    if (not number.is_integer() or (minimum is not None and number < minimum)
            or (maximum is not None and number > maximum)):  # fmt: skip
        raise ValueError(f"{what} must be a whole number{bound}, got {value!r}")
    return int(number)


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn ValueError/KeyError/RuntimeError/OSError/TypeError into `refused(...)` (a one-line toast
    titled "Refused", no traceback in the server log)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except (ValueError, KeyError, RuntimeError, OSError, TypeError) as exc:
            raise refused(readable_error(exc)) from exc

    return wrapper


def kept_on_refusal(outputs: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator for a handler that redraws shown data (a table and its selection): a refused input
    (`refused`, e.g. from `user_errors`) shows a toast titled "Refused" (`gr.Warning`) and leaves all
    `outputs` components as they were (`gr.skip()` each) instead of Gradio's red error badges."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except gr.Error as exc:
                if exc.title != REFUSED:
                    raise
                gr.Warning(exc.message, title=REFUSED)
                return (gr.skip(),) * outputs

        return wrapper

    return decorate


def model_status(studio: Studio) -> tuple[str, Any]:
    """Banner polled at start-up: (markdown, timer) while the model is being prepared."""
    jobs = [j for j in studio.jobs.jobs() if j.kind == "model"]
    job = jobs[-1] if jobs else None
    if job is None:
        return "", gr.Timer(active=False)
    if job.status == "failed":
        return f"**Model error:** the model could not be prepared: {job.error}", gr.Timer(active=False)
    if job.finished:
        return f"Model: {job.message}", gr.Timer(active=False)
    return f"**Preparing the model…** {job.message} ({job.progress:.0%})", gr.Timer(active=True)
