"""Plotly figures of the Lesson and the Race (the other tabs' figures are in `app/figures.py`).

Pure functions from plain lists/dicts to `plotly.graph_objects.Figure`; no Gradio, no model.
Scores are on the −100 … 100 scale, success rates in %. Each stage / arm has its
own colour, marker and dash, so coinciding lines stay visible; axes of iterations, steps and trials
tick at whole numbers; a chart with nothing to draw says "no data yet".
"""

from __future__ import annotations

from typing import Mapping, Sequence

import plotly.graph_objects as go
from plotly.colors import hex_to_rgb

EMPTY_TEXT = "no data yet"
SCORE_AXIS = {"range": [-105, 105], "tick0": -100, "dtick": 50}
"""Every score axis: the env's whole −100 … 100 scale, so a flat line does not zoom into 24.5 … 25.5."""
INTEGER_TICKS_UP_TO = 30
"""Axes of iterations, steps or trials get a tick at every whole number up to this span."""


def _layout(fig: go.Figure, title: str, x_title: str, y_title: str, *, height: int = 300) -> go.Figure:
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        height=height,
        margin={"l": 50, "r": 10, "t": 40, "b": 40},
        xaxis_title=x_title,
        yaxis_title=y_title,
        legend={"orientation": "h", "y": -0.25},
        template="plotly_white",
    )
    return fig


def _points(fig: go.Figure) -> list[float]:
    return [x for trace in fig.data for x in (trace.x or ()) if isinstance(x, (int, float))]


def _finish(fig: go.Figure, *, integer_x: bool = True) -> go.Figure:
    """A chart without a single point says "no data yet" over blank axes; otherwise an axis of
    iterations / steps / trials (`integer_x`) ticks at whole numbers only."""
    xs = _points(fig)
    if not xs and not any(len(getattr(t, "y", None) or ()) for t in fig.data):
        fig.add_annotation(text=EMPTY_TEXT, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5,
                           font={"size": 16, "color": "#6b7280"})  # fmt: skip
        fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False)
        fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False)
    elif integer_x and xs:
        if max(xs) - min(xs) <= INTEGER_TICKS_UP_TO:
            fig.update_xaxes(tick0=round(min(xs)), dtick=1)
        else:
            fig.update_xaxes(tickformat="d")
    return fig


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _x(row: Mapping[str, object], i: int) -> float:
    it = row.get("iteration")
    return float(it) if _is_number(it) else float(i + 1)


LESSON_COLOURS = {"naive": "#9ca3af", "memory": "#2563eb", "naive_again": "#16a34a"}
PERCENT_AXIS = {"range": [-5, 115], "ticksuffix": "%", "tick0": 0, "dtick": 25}
"""Every success-rate axis of the studio: percent, 0 … 100 with room for labels above the bars."""


LESSON_BAR_BASE = -4.0
"""Percentage points: every Lesson bar starts this far below the 0 % line, so a 0 % bar shows as a
stub in its stage's colour (a bar from 0 to 0 is invisible, leaving only its label); each bar's top
is still its success rate."""


def lesson_figure(stages: Sequence[Mapping[str, object]]) -> go.Figure:
    """The Lesson's story in one chart: success rate (%) per playing stage (bars, in stage order).

    Each item: "stage" (naive / memory / naive_again), "title" (x label), "success_rate" (0 … 1),
    "successes", "episodes", "mean_score". Stages not played yet are left out. Each bar spans
    `LESSON_BAR_BASE` … its rate (a 0 % bar is a visible stub); its hover text gives the rate."""
    fig = go.Figure()
    xs = [str(s["title"]) for s in stages]
    rates = [100.0 * float(s["success_rate"]) for s in stages]  # type: ignore[arg-type]
    labels = [f"{s['successes']}/{s['episodes']} won · score {float(s['mean_score']):.0f}" for s in stages]  # type: ignore[arg-type]
    fig.add_trace(go.Bar(
        x=xs, y=[r - LESSON_BAR_BASE for r in rates], base=LESSON_BAR_BASE, customdata=rates,
        hovertemplate="%{x}: %{customdata:.0f}% success<extra></extra>",
        text=labels, textposition="outside", name="success rate",
        marker={"color": [LESSON_COLOURS.get(str(s["stage"]), "#6b7280") for s in stages]},
    ))  # fmt: skip
    if stages:
        fig.add_hline(y=0, line={"color": "#374151", "width": 1})  # the 0 % line the stubs hang below
    fig = _layout(fig, "Lesson: success rate per stage", "stage", "success rate (%)", height=320)
    fig.update_yaxes(**PERCENT_AXIS)
    fig.update_layout(showlegend=False)
    return _finish(fig, integer_x=False)


RACE_COLOURS = {"EMPO2": "#dc2626", "GRPO": "#2563eb"}
RACE_MARKERS = {"EMPO2": ("circle", 8, "solid"), "GRPO": ("square-open", 14, "dash")}
"""Per arm: marker symbol, size, dash. GRPO's open square is drawn larger around EMPO²'s dot, so
both arms stay visible when their lines coincide."""


RACE_BAND_ALPHA = 0.15


def _band_colour(hex_colour: str | None) -> str:
    r, g, b = hex_to_rgb(hex_colour or "#6b7280")
    return f"rgba({r},{g},{b},{RACE_BAND_ALPHA})"


def _over_seeds(rows: Sequence[Mapping[str, object]], key: str, scale: float) -> list[tuple[float, float, float, float, int]]:
    """(x, mean, lowest, highest, how many) of `key` × `scale` per iteration, over the rows there (one per seed)."""
    points: dict[float, list[float]] = {}
    for i, r in enumerate(rows):
        if _is_number(r.get(key)):
            points.setdefault(_x(r, i), []).append(scale * float(r[key]))  # type: ignore[arg-type]
    return [(x, sum(v) / len(v), min(v), max(v), len(v)) for x, v in sorted(points.items())]


def race_figure(
    rows: Mapping[str, Sequence[Mapping[str, object]]],
    labels: Mapping[str, str] | None = None,
    evals: Mapping[str, Sequence[Mapping[str, object]]] | None = None,
) -> go.Figure:
    """The race, one style per arm: training rollouts' success rate in % and mean score per
    iteration; with `evals` (arm → `Race.evals` rows), a third panel: the memory-free test success in %
    at every evaluation. Rows of several seeds (same "iteration") are averaged; where ≥ 2 seeds
    evaluated, a shaded band spans the lowest to the highest seed.

    The panels are named by their y-axis titles (no subplot titles to collide with the chart title)."""
    from plotly.subplots import make_subplots

    panels = [(1, "rollout/success_rate", 100.0, rows), (2, "rollout/score_mean", 1.0, rows)]
    if evals is not None:
        panels.append((3, "eval/success_rate", 100.0, evals))
    fig = make_subplots(rows=1, cols=len(panels), horizontal_spacing=0.08 if evals is not None else 0.12)
    arms = list(dict.fromkeys([*rows, *(evals or {})]))
    for arm in arms:
        name = (labels or {}).get(arm, arm)
        colour = RACE_COLOURS.get(arm)
        symbol, size, dash = RACE_MARKERS.get(arm, ("diamond", 10, "dot"))
        for col, key, scale, source in panels:
            pts = _over_seeds(source.get(arm, ()), key, scale)
            if col == 3 and any(n >= 2 for *_, n in pts):
                fig.add_trace(go.Scatter(
                    x=[p[0] for p in pts] + [p[0] for p in reversed(pts)], y=[p[3] for p in pts] + [p[2] for p in reversed(pts)],
                    mode="lines", fill="toself", fillcolor=_band_colour(colour), line={"width": 0}, hoverinfo="skip",
                    name=f"{name}: lowest–highest seed", legendgroup=arm, showlegend=False,
                ), row=1, col=col)  # fmt: skip
            fig.add_trace(go.Scatter(
                x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers", name=name, legendgroup=arm,
                showlegend=col == 1, line={"color": colour, "dash": dash},
                marker={"symbol": symbol, "size": size, "line": {"width": 2, "color": colour}},
            ), row=1, col=col)  # fmt: skip
    title = "EMPO² vs GRPO: training rollouts" + (" and memory-free test success" if evals is not None else " per iteration")
    fig = _layout(fig, title, "", "", height=340)
    fig.update_xaxes(title_text="iteration")
    fig.update_yaxes(title_text="training success (%)", row=1, col=1, **PERCENT_AXIS)
    fig.update_yaxes(title_text="training score (−100…100)", row=1, col=2, **SCORE_AXIS)
    if evals is not None:
        fig.update_yaxes(title_text="test success, no memory (%)", row=1, col=3, **PERCENT_AXIS)
    return _finish(fig)


def base_rate_figure(points: Sequence[Mapping[str, object]]) -> go.Figure:
    """EMPO²'s gain over GRPO against the naive base rate (issue 48 item 3), in two panels: left, each
    arm's memory-free test success after the race (%) against the starting weights' naive success on
    the training layouts (%); right, EMPO² − GRPO in percentage points. Seeds are small dots, their
    mean a line.

    Each point: "base_rate" (0 … 1), "seed", "EMPO2" and "GRPO" (memory-free test success, 0 … 1)."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12)
    rates = sorted({float(p["base_rate"]) for p in points})  # type: ignore[arg-type]

    def mean_at(rate: float, value) -> float:
        vs = [value(p) for p in points if float(p["base_rate"]) == rate]  # type: ignore[arg-type]
        return sum(vs) / len(vs)

    series = [(arm, 1, lambda p, a=arm: 100.0 * float(p[a])) for arm in ("EMPO2", "GRPO")]  # type: ignore[arg-type]
    series.append(("gain", 2, lambda p: 100.0 * (float(p["EMPO2"]) - float(p["GRPO"]))))  # type: ignore[arg-type]
    for arm, col, value in series:
        colour = RACE_COLOURS.get(arm, "#374151")
        name = {"EMPO2": "EMPO²", "gain": "EMPO² − GRPO"}.get(arm, arm)
        symbol, size, dash = RACE_MARKERS.get(arm, ("diamond", 10, "solid"))
        fig.add_trace(go.Scatter(
            x=[100.0 * float(p["base_rate"]) for p in points], y=[value(p) for p in points], mode="markers",  # type: ignore[arg-type]
            marker={"color": colour, "size": 6, "opacity": 0.45}, name=f"{name}, one seed", legendgroup=arm, showlegend=False,
            customdata=[p["seed"] for p in points], hovertemplate=f"{name}, seed %{{customdata}}: %{{y:.0f}}<extra></extra>",
        ), row=1, col=col)  # fmt: skip
        fig.add_trace(go.Scatter(
            x=[100.0 * r for r in rates], y=[mean_at(r, value) for r in rates], mode="lines+markers", name=name,
            legendgroup=arm, line={"color": colour, "dash": dash},
            marker={"symbol": symbol, "size": size, "line": {"width": 2, "color": colour}},
        ), row=1, col=col)  # fmt: skip
    fig = _layout(fig, "Where memory matters: EMPO² vs GRPO against the naive base rate", "", "", height=340)
    fig.update_xaxes(title_text="naive success of the starting weights, training layouts (%)", ticksuffix="%")
    fig.update_yaxes(title_text="test success after the race, no memory (%)", row=1, col=1, **PERCENT_AXIS)
    fig.update_yaxes(title_text="EMPO² − GRPO (points)", row=1, col=2, range=[-105, 105], dtick=50)
    if points:
        fig.add_hline(y=0, line={"color": "#374151", "width": 1}, row=1, col=2)
    return _finish(fig, integer_x=False)
