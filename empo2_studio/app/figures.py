"""Plotly figures of the Episodes, Train, Adapt and Sessions tabs, drawn for a class to read.

Pure functions from plain lists/dicts to `plotly.graph_objects.Figure`; no Gradio, no model. Every
chart has axis titles; steps, iterations and trials get whole-number ticks; rates (keys ending in
`_rate` / `_frac`) are drawn in % (0 … 100), the unit the Lesson uses; scores are on the −100 … 100
scale. Each mode has its own colour, marker and dash, and the second of two lines is drawn with
smaller markers, so two lines that coincide stay visible. A chart with nothing to draw says
"no data yet" instead of showing empty axes.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

import plotly.graph_objects as go

from empo2_studio.types import UPDATE_MODES

STYLES: dict[str, dict[str, object]] = {
    "naive": {"color": "#6b7280", "symbol": "circle-open", "size": 12, "dash": "dash"},
    "memory": {"color": "#2563eb", "symbol": "diamond", "size": 7, "dash": "solid"},
    "on-policy": {"color": "#6b7280", "symbol": "circle-open", "size": 12, "dash": "dot"},
    "on-policy-with-tips": {"color": "#16a34a", "symbol": "square", "size": 9, "dash": "dot"},
    "off-policy": {"color": "#2563eb", "symbol": "diamond", "size": 7, "dash": "dot"},
}
"""Colour, marker and dash per episode side / update mode."""
PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#6b7280", "#ca8a04")
SYMBOLS = ("circle-open", "diamond", "square", "x", "triangle-up", "star", "cross", "hexagon")
SIZES = (12, 7, 8, 8, 8, 9, 8, 8)
NO_DATA = "no data yet"

TRAIN_PANELS: dict[str, tuple[tuple[str, ...], str]] = {
    "Losses": (("loss/",), "loss"),
    "Clip fraction": (("ratio/clip",), "tokens clipped (%)"),
    "Masked fraction": (("mask/",), "tokens masked (%)"),
    "Tips in memory": (("memory/",), "tips"),
}
"""The training panels after the score chart: title → (metric-key prefixes, y-axis title)."""


def is_rate(key: str) -> bool:
    """Metric keys drawn in %: success rates and fractions (stored 0 … 1)."""
    return key.endswith("_rate") or "_frac" in key


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _style(i: int, name: str) -> dict[str, object]:
    return STYLES.get(name) or {"color": PALETTE[i % len(PALETTE)], "symbol": SYMBOLS[i % len(SYMBOLS)],
                                "size": SIZES[i % len(SIZES)], "dash": "solid"}  # fmt: skip


def _line(xs: Sequence[float], ys: Sequence[float], name: str, i: int, style: str | None = None) -> go.Scatter:
    """A line with markers in the style of `style` (a `STYLES` key), else of `name`, else the i-th."""
    s = _style(i, style or name)
    return go.Scatter(x=list(xs), y=list(ys), mode="lines+markers", name=name,
                      line={"color": s["color"], "dash": s["dash"], "width": 2},
                      marker={"color": s["color"], "symbol": s["symbol"], "size": s["size"],
                              "line": {"width": 2}})  # fmt: skip


SCORE_RANGE = [-105, 105]
"""The y range of every score chart (scores are −100 … 100): equal scores are not blown up to ±1."""


def _layout(fig: go.Figure, title: str, x_title: str, y_title: str, *, height: int = 300,
            y_range: list[float] | None = None) -> go.Figure:  # fmt: skip
    """Title, axis titles, whole-number x ticks, `y_range` when given; "no data yet" when the figure
    has no point."""
    fig.update_layout(
        title={"text": title, "font": {"size": 14}}, height=height, template="plotly_white",
        margin={"l": 60, "r": 10, "t": 40, "b": 50}, legend={"orientation": "h", "y": -0.3},
        xaxis_title=x_title, yaxis_title=y_title,
    )  # fmt: skip
    xs = [x for trace in fig.data for x in (trace.x or ()) if _is_number(x)]
    if not xs:
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        fig.add_annotation(text=NO_DATA, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                           font={"size": 16, "color": "#6b7280"})  # fmt: skip
        return fig
    if y_range is not None:
        fig.update_yaxes(range=y_range)
    span = max(xs) - min(xs)
    fig.update_xaxes(tickmode="linear", tick0=min(xs), dtick=max(1, math.ceil(span / 10)), tickformat="d")
    return fig


def episode_scores_figure(scores: Mapping[str, Sequence[float]]) -> go.Figure:
    """Running score after each step, one line per side ("naive", "memory"); x = step (1-based)."""
    fig = go.Figure()
    for i, (side, ys) in enumerate(scores.items()):
        if ys:
            fig.add_trace(_line(range(1, len(ys) + 1), ys, side, i))
    return _layout(fig, "Running score", "step", "score (−100 … 100)", y_range=SCORE_RANGE)


def metric_keys(rows: Iterable[Mapping[str, object]], prefixes: Sequence[str]) -> list[str]:
    """Numeric keys of `rows` starting with any of `prefixes`, in first-seen order."""
    keys: dict[str, None] = {}
    for row in rows:
        for k, v in row.items():
            if _is_number(v) and any(k.startswith(p) for p in prefixes):
                keys.setdefault(k, None)
    return list(keys)


def _x(row: Mapping[str, object], i: int) -> float:
    it = row.get("iteration")
    return float(it) if _is_number(it) else float(i + 1)


def _points(rows: Sequence[Mapping[str, object]], key: str) -> tuple[list[float], list[float]]:
    """(iterations, values) of `key`, a rate scaled to %."""
    scale = 100.0 if is_rate(key) else 1.0
    pts = [(_x(r, i), scale * float(r[key]))  # type: ignore[arg-type]
           for i, r in enumerate(rows) if _is_number(r.get(key))]
    return [p[0] for p in pts], [p[1] for p in pts]


def metrics_figure(
    rows: Sequence[Mapping[str, object]], keys: Sequence[str], title: str, y_title: str = ""
) -> go.Figure:
    """One line per key against the row's "iteration" (rows missing a key leave a gap; rates in %)."""
    fig = go.Figure()
    top = 0.0
    for i, key in enumerate(keys):
        xs, ys = _points(rows, key)
        if xs:
            fig.add_trace(_line(xs, ys, key, i))
            top = max(top, *ys)
    rates = bool(keys) and all(is_rate(k) for k in keys)
    return _layout(fig, title, "iteration", y_title, y_range=[0, max(5.0, 1.15 * top)] if rates else None)


MODE_NAMES = UPDATE_MODES
"""`rollout/update_mode` codes of the trainer's metrics rows: 0, 1, 2."""


def _mode_of(row: Mapping[str, object]) -> str:
    code = row.get("rollout/update_mode")
    if _is_number(code) and 0 <= int(code) < len(MODE_NAMES):  # type: ignore[arg-type]
        return MODE_NAMES[int(code)]  # type: ignore[arg-type]
    return "other"


def score_by_mode_figure(rows: Sequence[Mapping[str, object]], score_key: str = "rollout/score_mean") -> go.Figure:
    """Mean rollout score per iteration, one colour and marker per update mode (`rollout/update_mode`)."""
    fig = go.Figure()
    by_mode: dict[str, list[tuple[float, float]]] = {}
    for i, r in enumerate(rows):
        if _is_number(r.get(score_key)):
            by_mode.setdefault(_mode_of(r), []).append((_x(r, i), float(r[score_key])))  # type: ignore[arg-type]
    for i, (mode, pts) in enumerate(by_mode.items()):
        fig.add_trace(_line([p[0] for p in pts], [p[1] for p in pts], mode, i))
    return _layout(fig, "Score by update mode", "iteration", "mean score (−100 … 100)", y_range=SCORE_RANGE)


def train_figures(rows: Sequence[Mapping[str, object]], score_key: str = "rollout/score_mean") -> list[go.Figure]:
    """The Train tab's panels: score by mode, then one figure per `TRAIN_PANELS` entry (training and
    distillation rows only; evaluation/adaptation rows share the file but not these charts)."""
    rows = [r for r in rows if r.get("kind", "train") in ("train", "distill")]
    figs = [score_by_mode_figure(rows, score_key)]
    for title, (prefixes, y_title) in TRAIN_PANELS.items():
        figs.append(metrics_figure(rows, metric_keys(rows, prefixes), title, y_title))
    return figs


def adapt_figure(trials: Sequence[Mapping[str, float]], score_key: str = "adapt/score_mean") -> go.Figure:
    """Score per adaptation trial; trial 0 is the no-memory baseline, drawn as a dashed line."""
    fig = go.Figure()
    xs = list(range(len(trials)))
    ys = [float(t.get(score_key, 0.0)) for t in trials]
    if ys:
        fig.add_trace(_line(xs, ys, "with memory", 1, style="memory"))
        base = _line([0, max(xs[-1], 1)], [ys[0], ys[0]], "trial 0 (no memory)", 0, style="naive")
        base.update(mode="lines", line={"dash": "dash"})
        fig.add_trace(base)
    return _layout(fig, "Adaptation: score per trial", "trial", "mean score (−100 … 100)", y_range=SCORE_RANGE)


def compare_runs_figure(runs: Mapping[str, Sequence[Mapping[str, object]]], key: str) -> go.Figure:
    """One line per run of metric `key` against iteration (a rate in %)."""
    fig = go.Figure()
    for i, (run_id, rows) in enumerate(runs.items()):
        xs, ys = _points(rows, key)
        fig.add_trace(_line(xs, ys, run_id, i))
    y_range = [-5, 105] if is_rate(key) else (SCORE_RANGE if key.endswith("score_mean") else None)
    fig = _layout(fig, f"Compare runs: {key}", "iteration", f"{key} (%)" if is_rate(key) else key, y_range=y_range)
    ys = [float(y) for trace in fig.data for y in (trace.y or ()) if _is_number(y)]
    if ys and y_range is None and all(y.is_integer() for y in ys):  # a count (episodes, tips): whole ticks
        fig.update_yaxes(tickmode="linear", tick0=0, dtick=whole_tick_step(max(ys) - min(ys)), tickformat="d")
    return fig.update_layout(showlegend=bool(fig.data))  # the run's name even when it is the only line


def whole_tick_step(span: float, ticks: int = 5) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, … that splits `span` into at most about `ticks` steps."""
    step = 1
    while span / step > ticks:
        step = step * 5 // 2 if str(step)[0] == "2" else step * 2
    return step
