"""HTML for the side-by-side episode columns and small status widgets (pure functions, escaped text)."""

from __future__ import annotations

from html import escape
from typing import Sequence

from empo2_studio.types import Episode, Step

_OBS_CHARS = 600


def plural(n: int, noun: str) -> str:
    """"1 tip", "2 tips", "0 tips"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _clip(text: str, n: int = _OBS_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= n else text[: n - 1] + "…"


def step_html(step: Step, side: str) -> str:
    """One step card: executed action (marked when corrected), raw model text, reward, running
    score, the observation after the action and, for the memory side, the tips with similarity (and,
    from a structured memory, why each was chosen: group, rank, counts) and the nearest tips that were not shown with the reason (disabled, below the threshold, outside top-k)."""
    corrected = (
        ' <span class="e2-badge e2-corrected" title="the model text was mapped to the closest valid action">'
        "corrected</span>"
        if step.corrected
        else ""
    )
    reward_cls = "e2-pos" if step.reward > 0 else ("e2-neg" if step.reward < 0 else "")
    parts = [
        f'<div class="e2-step" data-side="{side}" data-index="{step.index}">',
        f'<div class="e2-step-head"><b>step {step.index + 1}</b> · '
        f'<span class="e2-action">{escape(step.action or "(no action)")}</span>{corrected}'
        f'<span class="e2-score">reward <span class="{reward_cls}">{step.reward:+g}</span> · '
        f"score <b>{step.score:g}</b></span></div>",
        f'<div class="e2-raw">model: <code>{escape(step.sample.text)}</code></div>',
    ]
    if step.tips:
        items = "".join(
            f'<li><span class="e2-sim">{t.similarity:.2f}</span> <span class="e2-tipscore">[{t.score:g}]</span> '
            f'<span class="e2-tiptext">{escape(_clip(t.text, 240))}</span>'
            + (f' <span class="e2-why">({escape(t.why)})</span>' if t.why else "") + "</li>"
            for t in step.tips
        )
        parts.append(f'<details class="e2-tips" open><summary>{plural(len(step.tips), "tip")} retrieved</summary>'
                     f"<ul>{items}</ul></details>")
    elif side == "memory":
        parts.append('<div class="e2-tips e2-muted">no tips retrieved</div>')
    if step.skipped_tips:
        items = "".join(
            f'<li><span class="e2-sim">{t.similarity:.2f}</span> <span class="e2-why">{escape(t.reason)}</span>: '
            f'<span class="e2-tiptext">{escape(_clip(t.text, 160))}</span></li>'
            for t in step.skipped_tips
        )
        parts.append(f'<details class="e2-skipped"><summary>{plural(len(step.skipped_tips), "nearest tip")} not shown, and why'
                     f"</summary><ul>{items}</ul></details>")
    parts.append(f'<pre class="e2-obs">{escape(_clip(step.observation))}</pre></div>')
    return "".join(parts)


def column_html(side: str, steps: Sequence[Step], *, header: str = "", finished: Episode | None = None) -> str:
    """A whole column: title, optional header (task text), its steps, and the final result."""
    title = "Naive (no tips)" if side == "naive" else "Memory (with tips)"
    score = steps[-1].score if steps else 0.0
    state = (
        f'<span class="{_finished_class(finished)}">finished · score {finished.score:g}{" · won" if finished.won else ""}</span>'
        if finished is not None
        else (f'<span class="e2-live">playing · score {score:g}</span>' if steps else '<span class="e2-muted">idle</span>')
    )
    body = "".join(step_html(s, side) for s in steps)
    head = f'<div class="e2-task">{escape(_clip(header, 400))}</div>' if header else ""
    return (
        f'<div class="e2-column" id="e2-col-{side}" data-steps="{len(steps)}">'
        f'<div class="e2-col-title">{title} {state}</div>{head}{body}</div>'
    )


def _finished_class(episode: Episode) -> str:
    """The finished header's classes: green when won, red when it failed the task (−100), else grey."""
    if episode.won:
        return "e2-done"
    return "e2-done e2-failed" if episode.score <= -100 else "e2-done e2-unwon"


def progress_html(fraction: float, text: str) -> str:
    """A labelled progress bar (0 … 1)."""
    pct = max(0.0, min(1.0, fraction)) * 100
    return (
        f'<div class="e2-progress"><div class="e2-progress-bar" style="width:{pct:.0f}%"></div>'
        f'<span class="e2-progress-text">{escape(text)}</span></div>'
    )


CSS = """
.e2-column { font-size: 13px; }
.e2-col-title { font-weight: 600; font-size: 15px; margin-bottom: 6px; }
.e2-step { border: 1px solid var(--border-color-primary); border-radius: 6px; padding: 6px 8px; margin: 6px 0; }
.e2-step-head { display: flex; gap: 6px; align-items: baseline; flex-wrap: wrap; }
.e2-action { font-family: var(--font-mono); background: var(--background-fill-secondary); padding: 0 4px; border-radius: 3px; }
.e2-score { margin-left: auto; color: var(--body-text-color-subdued); }
.e2-badge { font-size: 11px; border-radius: 8px; padding: 0 6px; }
.e2-corrected { background: #fef3c7; color: #92400e; }
.e2-pos { color: #16a34a; font-weight: 600; } .e2-neg { color: #dc2626; font-weight: 600; }
.e2-raw { color: var(--body-text-color-subdued); margin: 2px 0; }
.e2-obs { white-space: pre-wrap; font-size: 12px; margin: 4px 0 0; max-height: 140px; overflow: auto; }
.e2-tips ul, .e2-skipped ul { margin: 2px 0 2px 16px; padding: 0; } .e2-skipped { color: var(--body-text-color-subdued); }
.e2-why { font-style: italic; } .e2-sim { font-family: var(--font-mono); color: #2563eb; }
.e2-muted { color: var(--body-text-color-subdued); } .e2-done { color: #16a34a; font-size: 13px; }
.e2-done.e2-failed { color: #dc2626; } .e2-done.e2-unwon { color: var(--body-text-color-subdued); }
.e2-live { color: #2563eb; font-size: 13px; } .e2-task { font-style: italic; margin-bottom: 4px; }
.e2-progress { position: relative; min-height: 22px; border-radius: 4px; background: var(--background-fill-secondary); overflow: hidden; }
.e2-progress-bar { position: absolute; inset: 0 auto 0 0; background: #93c5fd; transition: width .3s; }
.e2-progress-text { position: relative; display: block; padding: 0 8px; line-height: 22px; font-size: 13px; }  /* a long closing line wraps, never cut */
"""
