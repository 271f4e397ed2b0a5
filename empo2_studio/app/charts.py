"""Plotly figures of the studio: episode scores, training metrics, adaptation trials, run comparison.

Pure functions from plain lists/dicts to `plotly.graph_objects.Figure`; no Gradio, no model.
Scores are on the −100 … 100 scale.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import plotly.graph_objects as go

from empo2_studio.types import UPDATE_MODES

SIDE_COLOURS = {"naive": "#6b7280", "memory": "#2563eb"}
MODE_COLOURS = {"on-policy": "#6b7280", "on-policy-with-tips": "#16a34a", "off-policy": "#2563eb"}

# The training panels: title -> metric-key predicates. Keys follow the trainer's namespaced metrics
# (rollout/…, loss/…, ratio/…, mask/…, memory/…); a panel plots every key it matches.
TRAIN_PANELS: dict[str, tuple[str, ...]] = {
    "Losses": ("loss/",),
    "Clip fraction": ("ratio/clip",),
    "Masked fraction": ("mask/",),
    "Tips in memory": ("memory/",),
}


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


def episode_scores_figure(scores: Mapping[str, Sequence[float]]) -> go.Figure:
    """Running score after each step, one line per side ("naive", "memory"); x = step (1-based)."""
    fig = go.Figure()
    for side, ys in scores.items():
        fig.add_trace(
            go.Scatter(
                x=list(range(1, len(ys) + 1)), y=list(ys), mode="lines+markers", name=side,
                line={"color": SIDE_COLOURS.get(side), "dash": "dash" if side == "naive" else "solid"},
            )
        )
    return _layout(fig, "Running score", "step", "score")


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


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


def metrics_figure(rows: Sequence[Mapping[str, object]], keys: Sequence[str], title: str) -> go.Figure:
    """One line per key against the row's "iteration" (rows missing a key leave a gap)."""
    fig = go.Figure()
    for key in keys:
        pts = [(_x(r, i), float(r[key])) for i, r in enumerate(rows) if _is_number(r.get(key))]
        fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers", name=key))
    return _layout(fig, title, "iteration", "")


MODE_NAMES = UPDATE_MODES
"""`rollout/update_mode` codes of the trainer's metrics rows: 0, 1, 2."""


def _mode_of(row: Mapping[str, object]) -> str:
    code = row.get("rollout/update_mode")
    if _is_number(code) and 0 <= int(code) < len(MODE_NAMES):
        return MODE_NAMES[int(code)]
    return "other"


def score_by_mode_figure(rows: Sequence[Mapping[str, object]], score_key: str = "rollout/score_mean") -> go.Figure:
    """Mean rollout score per iteration, one colour per update mode (`rollout/update_mode` code)."""
    fig = go.Figure()
    by_mode: dict[str, list[tuple[float, float]]] = {}
    for i, r in enumerate(rows):
        if _is_number(r.get(score_key)):
            by_mode.setdefault(_mode_of(r), []).append((_x(r, i), float(r[score_key])))
    for mode, pts in by_mode.items():
        fig.add_trace(
            go.Scatter(
                x=[p[0] for p in pts], y=[p[1] for p in pts], mode="markers+lines", name=mode,
                marker={"color": MODE_COLOURS.get(mode), "size": 9}, line={"dash": "dot"},
            )
        )
    return _layout(fig, "Score by update mode", "iteration", "score")


def train_figures(rows: Sequence[Mapping[str, object]], score_key: str = "rollout/score_mean") -> list[go.Figure]:
    """The Train tab's panels: score by mode, then one figure per `TRAIN_PANELS` entry (training and
    distillation rows only; evaluation/adaptation rows share the file but not these charts)."""
    rows = [r for r in rows if r.get("kind", "train") in ("train", "distill")]
    figs = [score_by_mode_figure(rows, score_key)]
    for title, prefixes in TRAIN_PANELS.items():
        figs.append(metrics_figure(rows, metric_keys(rows, prefixes), title))
    return figs


def adapt_figure(trials: Sequence[Mapping[str, float]], score_key: str = "adapt/score_mean") -> go.Figure:
    """Score per adaptation trial; trial 0 is the no-memory baseline, drawn as a dashed line."""
    fig = go.Figure()
    xs = list(range(len(trials)))
    ys = [float(t.get(score_key, 0.0)) for t in trials]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name="with memory",
                             line={"color": SIDE_COLOURS["memory"]}))
    if ys:
        fig.add_trace(go.Scatter(x=[0, max(xs[-1], 1)], y=[ys[0], ys[0]], mode="lines",
                                 name="trial 0 (no memory)", line={"color": SIDE_COLOURS["naive"], "dash": "dash"}))
    return _layout(fig, "Adaptation: score per trial", "trial", "score")


def compare_runs_figure(runs: Mapping[str, Sequence[Mapping[str, object]]], key: str) -> go.Figure:
    """One line per run of metric `key` against iteration."""
    fig = go.Figure()
    for run_id, rows in runs.items():
        pts = [(_x(r, i), float(r[key])) for i, r in enumerate(rows) if _is_number(r.get(key))]
        fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers", name=run_id))
    return _layout(fig, f"Compare runs: {key}", "iteration", key)


LESSON_COLOURS = {"naive": "#9ca3af", "memory": "#2563eb", "naive_again": "#16a34a"}


def lesson_figure(stages: Sequence[Mapping[str, object]]) -> go.Figure:
    """The Lesson's story in one chart: success rate per playing stage (bars, in stage order).

    Each item: "stage" (naive / memory / naive_again), "title" (x label), "success_rate" (0 … 1),
    "successes", "episodes", "mean_score". Stages not played yet are left out."""
    fig = go.Figure()
    xs = [str(s["title"]) for s in stages]
    ys = [100.0 * float(s["success_rate"]) for s in stages]  # type: ignore[arg-type]
    labels = [f"{s['successes']}/{s['episodes']} won · score {float(s['mean_score']):.0f}" for s in stages]  # type: ignore[arg-type]
    fig.add_trace(go.Bar(
        x=xs, y=ys, text=labels, textposition="outside", name="success rate",
        marker={"color": [LESSON_COLOURS.get(str(s["stage"]), "#6b7280") for s in stages]},
    ))  # fmt: skip
    fig = _layout(fig, "Lesson: success rate per stage", "", "success rate (%)", height=320)
    fig.update_yaxes(range=[0, 115])
    fig.update_layout(showlegend=False)
    return fig


RACE_COLOURS = {"EMPO2": "#dc2626", "GRPO": "#2563eb"}


def race_figure(rows: Mapping[str, Sequence[Mapping[str, object]]], labels: Mapping[str, str] | None = None) -> go.Figure:
    """The race: success rate (left) and mean score (right) per iteration, one colour per arm."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("success rate", "mean score"), horizontal_spacing=0.1)
    for arm, arm_rows in rows.items():
        name = (labels or {}).get(arm, arm)
        for col, key in ((1, "rollout/success_rate"), (2, "rollout/score_mean")):
            pts = [(_x(r, i), float(r[key])) for i, r in enumerate(arm_rows) if _is_number(r.get(key))]
            fig.add_trace(go.Scatter(
                x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers", name=name, legendgroup=arm,
                showlegend=col == 1, line={"color": RACE_COLOURS.get(arm)},
            ), row=1, col=col)  # fmt: skip
    fig = _layout(fig, "EMPO² vs GRPO: training rollouts per iteration", "", "", height=340)
    fig.update_xaxes(title_text="iteration", dtick=1)
    fig.update_yaxes(range=[-0.05, 1.05], row=1, col=1)
    fig.update_yaxes(range=[-105, 105], row=1, col=2)
    return fig
