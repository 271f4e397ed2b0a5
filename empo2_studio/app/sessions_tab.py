"""The Sessions tab: list runs, open/resume one, compare runs' curves, export an adapter or the tips.

Handlers first (plain functions), then the tab's layout and wiring (`build_sessions_tab`).
"""

from __future__ import annotations

import shutil
import tempfile
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import gradio as gr
import numpy as np
import pandas as pd

from empo2_studio.app import figures
from empo2_studio.app.handlers import kept_on_refusal, user_errors
from empo2_studio.app.tips_tab import export_tips

if TYPE_CHECKING:
    from empo2_studio.app.studio import Studio

LIST_COLUMNS = ["run_id", "env", "task", "model", "iteration", "checkpoints", "last score", "p", "q", "lr", "created"]
COLUMN_WIDTHS = ["12%", "9%", "12%", "10%", "9%", "11%", "8%", "5%", "6%", "5%", "13%"]
DEFAULT_COMPARE_KEY = "rollout/score_mean"
SCORE_KEYS = ("rollout/score_mean", "eval/score_mean", "adapt/score_mean")
"""Metrics that hold a mean score (−100 … 100), newest row first decides the "last score"."""


def last_score(session: Any) -> float | None:
    """The session's latest mean score: the newest metrics row holding one (training, evaluation,
    adaptation, or a lesson stage: the mean over its variations), else the newest saved episode's
    score; None for a session that has played nothing."""
    for row in reversed(session.metrics()):
        for key in SCORE_KEYS:
            if isinstance(row.get(key), (int, float)):
                return float(row[key])
        lesson = [v for k, v in row.items() if k.startswith("lesson/v") and k.endswith("/score_mean")]
        if lesson:
            return sum(lesson) / len(lesson)
    episodes = session.episodes()
    return max(episodes, key=lambda e: e.created_at).score if episodes else None


def sessions_frame(studio: Studio) -> pd.DataFrame:
    """One row per session: its config essentials and last metrics (the learning rate as "1e-4", which
    fits its narrow column where "0.0001" wrapped)."""
    from empo2_studio.sessions import list_sessions

    rows = []
    for info in list_sessions(studio.root):
        session = studio.session(info.run_id)
        cfg = session.config
        score = last_score(session)
        rows.append([
            info.run_id, info.env, info.task, info.model, info.iteration, info.checkpoints,
            "" if score is None else f"{score:.1f}", cfg.rollout.p_memory, round(cfg.rollout.q_off_policy, 3),
            np.format_float_scientific(cfg.train.learning_rate, trim="-", exp_digits=1), pd.Timestamp(info.created_at, unit="s").strftime("%Y-%m-%d %H:%M"),
        ])  # fmt: skip
    return pd.DataFrame(rows, columns=LIST_COLUMNS)


@user_errors
def open_session(studio: Studio, run_id: str | None) -> tuple[str, str]:
    """Switch this browser to session `run_id` (its trainer resumes from its latest checkpoint when
    training starts). Returns (run id, status)."""
    if not run_id:
        raise ValueError("pick a session to open")
    session = studio.session(run_id)
    return run_id, f"opened `{run_id}` ({session.config.env.name} · {session.config.env.task})"


def metric_choices(studio: Studio, run_ids: Sequence[str]) -> list[str]:
    """Numeric metric keys present in any of the runs."""
    keys: dict[str, None] = {}
    for rid in run_ids:
        for k in figures.metric_keys(studio.session(rid).metrics(), ("",)):
            if k != "iteration":
                keys.setdefault(k, None)
    return sorted(keys)


@kept_on_refusal(2)
@user_errors
def compare(studio: Studio, run_ids: Sequence[str] | None, key: str | None) -> tuple[Any, Any]:
    """Curves of one metric for one or more runs. Returns (figure, metric dropdown update); with no run
    picked, a "Refused" toast and both left as they were (no red error badges on the plot)."""
    ids = list(run_ids or [])
    if len(ids) < 1:
        raise ValueError("pick the runs to compare")
    keys = metric_choices(studio, ids)
    key = key if key in keys else (DEFAULT_COMPARE_KEY if DEFAULT_COMPARE_KEY in keys else (keys[0] if keys else ""))
    fig = figures.compare_runs_figure({rid: studio.session(rid).metrics() for rid in ids}, key)
    return fig, gr.Dropdown(choices=keys, value=key or None)


@user_errors
def export_adapter(studio: Studio, run_id: str | None) -> tuple[str, str]:
    """Zip the session's latest adapter checkpoint for download. Returns (zip path, status)."""
    if not run_id:
        raise ValueError("pick a session")
    latest = studio.session(run_id).latest_checkpoint()
    if latest is None:
        raise ValueError(f"session {run_id!r} has no checkpoint yet; train or distill first")
    iteration, path = latest
    out = Path(tempfile.mkdtemp(prefix="empo2-adapter-")) / f"{run_id}-iter{iteration:06d}"
    archive = shutil.make_archive(str(out), "zip", root_dir=path)
    return archive, f"adapter of iteration {iteration} → {Path(archive).name}"


def build_sessions_tab(studio: Studio, run_id: gr.State) -> dict[str, Any]:
    """Components and wiring of the Sessions tab."""
    table = gr.Dataframe(headers=LIST_COLUMNS, interactive=False, label="Runs", elem_id="ses-table", wrap=True,
                         column_widths=COLUMN_WIDTHS, max_height=360)
    refresh = gr.Button("Refresh list", elem_id="ses-refresh")
    with gr.Row():
        pick = gr.Dropdown(label="Session", choices=[], elem_id="ses-pick", scale=3)
        open_btn = gr.Button("Open / resume", variant="primary", elem_id="ses-open")
        export_a = gr.Button("Export adapter (zip)", elem_id="ses-export-adapter")
        export_t = gr.Button("Export tips (JSONL)", elem_id="ses-export-tips")
    status = gr.Markdown(elem_id="ses-status")
    download = gr.File(label="Download", interactive=False, visible=False, elem_id="ses-download")
    with gr.Row():
        runs = gr.Dropdown(label="Compare runs", multiselect=True, choices=[], elem_id="ses-compare-runs", scale=3)
        key = gr.Dropdown(label="Metric", choices=[DEFAULT_COMPARE_KEY], value=DEFAULT_COMPARE_KEY,
                          allow_custom_value=True, elem_id="ses-compare-key")
        compare_btn = gr.Button("Compare", elem_id="ses-compare")
    plot = gr.Plot(figures.compare_runs_figure({}, DEFAULT_COMPARE_KEY), show_label=False, elem_id="ses-compare-plot")

    def listing(rid: str) -> tuple[Any, ...]:
        frame = sessions_frame(studio)
        ids = list(frame["run_id"])
        return frame, gr.Dropdown(choices=ids, value=rid), gr.Dropdown(choices=ids, value=[rid] if rid in ids else [])

    refresh.click(listing, [run_id], [table, pick, runs])
    opened = open_btn.click(partial(open_session, studio), [pick], [run_id, status])
    compare_btn.click(partial(compare, studio), [runs, key], [plot, key])
    def shown(export: Callable[..., tuple[str, str]]) -> Callable[[str | None], tuple[Any, str]]:
        """The export's file in the (until then hidden) download box."""
        def fn(rid: str | None) -> tuple[Any, str]:
            path, msg = export(studio, rid)
            return gr.File(value=path, visible=True), msg

        return fn

    export_a.click(shown(export_adapter), [pick], [download, status])
    export_t.click(shown(export_tips), [pick], [download, status])

    def on_opened(fn: Callable[[str], list[Any]], outputs: list[Any]) -> None:
        opened.success(fn, [run_id], outputs)

    def refresh(rid: str) -> dict[Any, Any]:
        """A session switch (or one created from the page): the list with it, picked; the compare
        selection is kept."""
        frame = sessions_frame(studio)
        ids = list(frame["run_id"])
        return {table: frame, pick: gr.Dropdown(choices=ids, value=rid), runs: gr.Dropdown(choices=ids)}

    return {"opened": on_opened, "listing": (listing, [table, pick, runs]), "refresh": (refresh, [table, pick, runs])}
