"""The Tips tab: the session's tip table, curated in place (handlers first, then the tab's layout and wiring).

Every edit goes straight to the session's `TipStore` (LanceDB; each write is a table version), so
what the table shows is what the next memory episode retrieves. Handlers are plain functions
(values in, values/updates out); a bad value raises `gr.Error` and leaves the table unchanged.
"""

from __future__ import annotations

import tempfile
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import gradio as gr
import pandas as pd

from empo2_studio.app.handlers import kept_on_refusal, refused, user_errors, whole_number
from empo2_studio.app.tip_groups import build_groups_panel
from empo2_studio.envs import partition_check

if TYPE_CHECKING:
    from empo2_studio.app.studio import Studio

COLUMNS = ["id", "task", "variation", "text", "score", "enabled", "origin", "edited", "similarity"]
DATATYPES = ["str", "str", "number", "str", "number", "bool", "str", "bool", "str"]
EDITABLE = ("text", "score", "enabled")
STATIC_COLUMNS = [i for i, c in enumerate(COLUMNS) if c not in EDITABLE]
ALL = "(all)"
COLUMN_WIDTHS = ["80px", "140px", "100px", "35%", "72px", "92px", "88px", "84px", "108px"]
"""Widths of `COLUMNS`: fixed pixels wide enough for each header on one line (a share of the page let
"variation" wrap letter by letter), the rest of the row to the text."""


def _frame(rows: Sequence[tuple[Any, float | None]]) -> pd.DataFrame:
    data = [
        [t.tip_id, t.task, t.variation, t.text, t.score, t.enabled, t.origin, t.edited,
         "" if sim is None else f"{sim:.3f}"]
        for t, sim in rows
    ]  # fmt: skip
    return pd.DataFrame(data, columns=COLUMNS)


def _check_partition(studio: Studio, run_id: str, task: str, variation: Any) -> int:
    """The variation as an int once (task, variation) is checked against the session's environment, so
    a tip is never stored where no episode can retrieve it. ValueError names the valid tasks / range."""
    number = whole_number(variation, "the variation", 0)
    with partition_check(studio.session(run_id).config.env) as check:
        why = check(task, number)
    if why:
        raise ValueError(why)
    return number


def _filters(task: str | None, variation: Any, origin: str | None, enabled: str | None, contains: str | None) -> dict:
    out: dict[str, Any] = {}
    if task and task != ALL:
        out["task"] = task
    if variation not in (None, "", ALL):
        out["variation"] = whole_number(variation, "the Variation filter", 0)
    if origin and origin != ALL:
        out["origin"] = origin
    if enabled and enabled != ALL:
        out["enabled"] = enabled == "enabled"
    if contains and contains.strip():
        out["text_contains"] = contains.strip()
    return out


@user_errors
def list_tips(studio: Studio, run_id: str, task: str | None, variation: Any, origin: str | None,
              enabled: str | None, contains: str | None) -> tuple[pd.DataFrame, Any, str]:
    """The filtered table. Returns (frame, selection dropdown update, status)."""
    tips = studio.store(run_id).list_tips(**_filters(task, variation, origin, enabled, contains))
    frame = _frame([(t, None) for t in tips])
    return frame, _selection(frame), f"{len(tips)} tip(s) shown · {studio.store(run_id).count()} in memory"


@user_errors
def search_tips(studio: Studio, run_id: str, query: str, task: str | None) -> tuple[pd.DataFrame, Any, str]:
    """Semantic search over the tips' keys (enabled or not), most similar first."""
    if not query or not query.strip():
        raise ValueError("type something to search for")
    kw = {"task": task} if task and task != ALL else {}
    found = studio.store(run_id).search(query.strip(), limit=50, **kw)
    frame = _frame(found)
    return frame, _selection(frame), f"{len(found)} tip(s) most similar to {query.strip()!r}"


@kept_on_refusal(5)
def filter_table(studio: Studio, run_id: str, *filters: Any) -> tuple[Any, ...]:
    """The Filter button / filter boxes: (table, shown frame, selection, versions, status) under the
    filters (`list_tips`' order); a refused filter value leaves all five as they were ("Refused" toast)."""
    frame, sel, msg = list_tips(studio, run_id, *filters)
    return frame, frame, sel, version_choices(studio, run_id), msg


@kept_on_refusal(4)
def search_table(studio: Studio, run_id: str, query: str, task: str | None) -> tuple[Any, ...]:
    """The Search button: (table, shown frame, selection, status); a refused query leaves them as they were."""
    frame, sel, msg = search_tips(studio, run_id, query, task)
    return frame, frame, sel, msg


def _selection(frame: pd.DataFrame) -> Any:
    choices = [(f"{r.id[:8]} · {str(r.text)[:50]}", r.id) for r in frame.itertuples()]
    return gr.Dropdown(choices=choices, value=[])


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        if value.strip().lower() in ("true", "1", "yes"):
            return True
        if value.strip().lower() in ("false", "0", "no", ""):
            return False
        raise ValueError(f"enabled must be true or false, got {value!r}")
    return bool(value)


def table_edits(before: pd.DataFrame, after: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """The per-tip changes of the editable columns between two frames: {tip_id: {field: value}}.

    Raises ValueError for a non-numeric score or non-boolean enabled value (naming the tip)."""
    old = {str(r["id"]): r for r in before.to_dict("records")}
    changes: dict[str, dict[str, Any]] = {}
    for row in after.to_dict("records"):
        tip_id = str(row["id"])
        if tip_id not in old:
            continue
        prev, diff = old[tip_id], {}
        if str(row["text"]) != str(prev["text"]):
            diff["text"] = str(row["text"])
        try:
            score = float(row["score"])
        except (TypeError, ValueError):
            raise ValueError(f"score of tip {tip_id[:8]} must be a number in [-100, 100], got {row['score']!r}") from None
        if score != float(prev["score"]):
            diff["score"] = score
        if _as_bool(row["enabled"]) != _as_bool(prev["enabled"]):
            diff["enabled"] = _as_bool(row["enabled"])
        if diff:
            changes[tip_id] = diff
    return changes


def apply_table_edits(studio: Studio, run_id: str, before: pd.DataFrame, after: pd.DataFrame) -> tuple[Any, str]:
    """Persist inline edits at once. Returns (frame to show, status). A bad value is reported and
    the row shows the stored value again; the other edits are kept."""
    store = studio.store(run_id)
    try:
        changes = table_edits(before, after)
    except ValueError as exc:
        gr.Warning(str(exc))
        return before, f"not saved: {exc}"
    saved, errors = [], []
    for tip_id, diff in changes.items():
        try:
            store.update_tip(tip_id, **diff)
            saved.append(tip_id)
        except (ValueError, KeyError) as exc:
            errors.append(str(exc).strip("'\""))
    frame = before.copy()
    ids = list(frame["id"])
    for tip_id in saved:
        tip = store.get(tip_id)
        i = ids.index(tip_id)
        frame.loc[i, ["text", "score", "enabled", "edited"]] = [tip.text, tip.score, tip.enabled, tip.edited]
    for e in errors:
        gr.Warning(e)
    status = f"saved {len(saved)} edit(s)" + (f"; {len(errors)} refused: {errors[0]}" if errors else "")
    return frame, status


@user_errors
def add_tip(studio: Studio, run_id: str, task: str, variation: Any, text: str, score: Any) -> str:
    """Add a manual tip (its retrieval key is its own text); an empty task means the session's task."""
    task = (task or "").strip() or studio.session(run_id).config.env.task
    if variation in (None, ""):
        raise ValueError("give the variation the tip belongs to (an integer ≥ 0)")
    variation = _check_partition(studio, run_id, task, variation)
    tip = studio.store(run_id).add_tip(task, variation, text, score=float(score or 0.0))
    return f"added tip {tip.tip_id[:8]} to ({tip.task}, {tip.variation})"


@user_errors
def set_enabled(studio: Studio, run_id: str, tip_ids: Sequence[str] | None, enabled: bool) -> str:
    """Bulk enable / disable the selected tips."""
    if not tip_ids:
        raise ValueError("select tips first (click rows or pick them in 'Selected tips')")
    n = studio.store(run_id).set_enabled(list(tip_ids), enabled)
    return f"{'enabled' if enabled else 'disabled'} {n} tip(s)"


def ask_delete(tip_ids: Sequence[str] | None) -> tuple[Any, str]:
    """First click on Delete: show the confirmation row."""
    if not tip_ids:
        raise refused("select tips to delete first")
    return gr.Row(visible=True), f"**Delete {len(tip_ids)} tip(s)?** This makes a new table version (restorable)."


@user_errors
def confirm_delete(studio: Studio, run_id: str, tip_ids: Sequence[str] | None) -> tuple[Any, str]:
    """Second click: delete; hide the confirmation row."""
    n = studio.store(run_id).delete(list(tip_ids or []))
    return gr.Row(visible=False), f"deleted {n} tip(s)"


def select_row(frame: pd.DataFrame, selected: Sequence[str] | None, evt: gr.SelectData) -> Any:
    """Clicking a row adds its tip to the selection."""
    row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
    tip_id = str(frame.iloc[row]["id"])
    chosen = list(selected or [])
    return gr.Dropdown(value=chosen if tip_id in chosen else [*chosen, tip_id])


@user_errors
def export_tips(studio: Studio, run_id: str) -> tuple[str, str]:
    """Write every tip to a JSONL file for download. Returns (path, status)."""
    out = Path(tempfile.mkdtemp(prefix="empo2-tips-")) / f"{run_id}-tips-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    n = studio.store(run_id).export_jsonl(out)
    return str(out), f"exported {n} tip(s) to {out.name}"


@user_errors
def import_tips(studio: Studio, run_id: str, path: str | None) -> str:
    """Import an uploaded JSONL tip file (all lines valid, or nothing is imported)."""
    if not path:
        raise ValueError("choose a .jsonl file to import")
    with partition_check(studio.session(run_id).config.env) as check:
        result = studio.store(run_id).import_jsonl(path, check=check)
    return f"imported {result.added} tip(s), skipped {result.skipped_duplicates} duplicate(s)"


VERSION_MARKS = (" · current", " · before the last change")
"""What the restore list says of its first two entries: Restore on the preselected second one undoes the
last change, and the label says so (a bare "v7 · 6 rows" beside a memory of 5 looked like a stale list)."""


def version_choices(studio: Studio, run_id: str) -> Any:
    """Table versions, newest first, for the restore dropdown: the current one and the one before the
    last change marked (`VERSION_MARKS`); the latter preselected, so Restore is one-click undo."""
    versions = list(reversed(studio.store(run_id).versions()))
    choices = [(f"v{v.version} · {v.timestamp:%Y-%m-%d %H:%M:%S} · {v.rows} rows" + (VERSION_MARKS[i] if i < 2 else ""),
                v.version) for i, v in enumerate(versions)]  # fmt: skip
    return gr.Dropdown(choices=choices, value=choices[1][1] if len(choices) > 1 else None)


@user_errors
def restore_version(studio: Studio, run_id: str, version: Any) -> str:
    """Make an earlier table version current again (as a new version, so it can be undone)."""
    if version in (None, ""):
        raise ValueError("pick a version to restore")
    new = studio.store(run_id).restore(int(version))
    return f"restored version {int(version)} as new version {new}"


def task_choices(studio: Studio, run_id: str) -> Any:
    """Filter choices: (all) plus the tasks that have tips and the session's own task."""
    tasks = {t.task for t in studio.store(run_id).list_tips()} | {studio.session(run_id).config.env.task}
    return gr.Dropdown(choices=[ALL, *sorted(tasks)], value=ALL)


# ---- layout and wiring ---------------------------------------------------------------------------------------
def build_tips_tab(studio: Studio, run_id: gr.State) -> dict[str, Any]:
    """Components and wiring of the Tips tab. Returns what the page refreshes on a session switch."""
    with gr.Row():
        f_task = gr.Dropdown([ALL], value=ALL, label="Task", elem_id="tips-task")
        f_var = gr.Textbox(label="Variation", placeholder="all", elem_id="tips-variation")
        f_origin = gr.Dropdown([ALL, "generated", "manual", "imported"], value=ALL, label="Origin")
        f_enabled = gr.Dropdown([ALL, "enabled", "disabled"], value=ALL, label="Enabled")
        f_text = gr.Textbox(label="Text contains", elem_id="tips-contains")
        refresh = gr.Button("Filter / refresh", elem_id="tips-refresh")
    with gr.Row():
        query = gr.Textbox(label="Semantic search", placeholder="e.g. how to turn the light on",
                           elem_id="tips-query", scale=4)
        search = gr.Button("Search", elem_id="tips-search")
    status = gr.Markdown(elem_id="tips-status")
    table = gr.Dataframe(headers=COLUMNS, datatype=DATATYPES, interactive=True, static_columns=STATIC_COLUMNS,
                         wrap=True, column_widths=COLUMN_WIDTHS,
                         label="Tips (edit text, score, enabled inline; changes are saved at once)",
                         elem_id="tips-table", max_height=420)
    shown = gr.State(pd.DataFrame(columns=COLUMNS))
    with gr.Row():
        selected = gr.Dropdown(label="Selected tips", multiselect=True, choices=[], elem_id="tips-selected", scale=4)
        enable = gr.Button("Enable selected", elem_id="tips-enable")
        disable = gr.Button("Disable selected", elem_id="tips-disable")
        delete = gr.Button("Delete selected…", variant="stop", elem_id="tips-delete")
    with gr.Row(visible=False) as confirm_row:
        confirm_md = gr.Markdown()
        confirm = gr.Button("Confirm delete", variant="stop", elem_id="tips-confirm-delete")
        cancel = gr.Button("Cancel", elem_id="tips-cancel-delete")
    with gr.Accordion("Add a tip", open=False):
        with gr.Row():
            a_task = gr.Textbox(label="Task (blank = the session's task)", elem_id="tips-add-task")
            a_var = gr.Number(0, label="Variation", precision=None, elem_id="tips-add-variation")
            a_score = gr.Number(0, label="Score (−100…100)", elem_id="tips-add-score")
        a_text = gr.Textbox(label="Tip text", lines=2, elem_id="tips-add-text")
        add = gr.Button("Add tip", elem_id="tips-add")
    grouped = build_groups_panel(studio, run_id)
    with gr.Accordion("Import / export / versions", open=False):
        with gr.Row():
            upload = gr.File(label="Import JSONL", file_types=[".jsonl"], type="filepath", elem_id="tips-import")
            export = gr.Button("Export all tips as JSONL", elem_id="tips-export")
            download = gr.File(label="Exported file", interactive=False, elem_id="tips-download")
        with gr.Row():
            versions = gr.Dropdown(label="Table version", choices=[], elem_id="tips-versions", scale=3)
            restore = gr.Button("Restore this version", elem_id="tips-restore")

    filters = [run_id, f_task, f_var, f_origin, f_enabled, f_text]
    show = partial(list_tips, studio)

    def reload(*args: Any) -> tuple[Any, ...]:
        frame, sel, msg = show(*args)
        return frame, frame, sel, version_choices(studio, args[0])

    listing = [table, shown, selected, versions]

    def then_reload(event: Any) -> None:
        # keeps the status line: it reports the action that caused the reload
        event.then(reload, filters, listing, show_progress="hidden")

    reload_with_count = partial(filter_table, studio)
    refresh.click(reload_with_count, filters, [*listing, status])
    for box in (f_task, f_origin, f_enabled):
        box.input(reload_with_count, filters, [*listing, status])

    do_search = partial(search_table, studio)
    search.click(do_search, [run_id, query, f_task], [table, shown, selected, status])
    query.submit(do_search, [run_id, query, f_task], [table, shown, selected, status])

    def edited(rid: str, before: pd.DataFrame, after: pd.DataFrame) -> tuple[Any, ...]:
        frame, msg = apply_table_edits(studio, rid, before, after)
        return frame, frame, msg, version_choices(studio, rid)

    table.input(edited, [run_id, shown, table], [table, shown, status, versions])
    table.select(select_row, [shown, selected], selected)
    then_reload(enable.click(partial(set_enabled, studio, enabled=True), [run_id, selected], status))
    then_reload(disable.click(partial(set_enabled, studio, enabled=False), [run_id, selected], status))
    delete.click(ask_delete, [selected], [confirm_row, confirm_md])
    then_reload(confirm.click(partial(confirm_delete, studio), [run_id, selected], [confirm_row, status]))
    cancel.click(lambda: (gr.Row(visible=False), "deletion cancelled"), None, [confirm_row, status])
    then_reload(add.click(partial(add_tip, studio), [run_id, a_task, a_var, a_text, a_score], status))
    export.click(partial(export_tips, studio), [run_id], [download, status])
    then_reload(upload.upload(partial(import_tips, studio), [run_id, upload], status))
    then_reload(restore.click(partial(restore_version, studio), [run_id, versions], status))

    def refresh_for(rid: str) -> dict[Any, Any]:
        """A session switch: that session's tips, unfiltered, its task in the Add form, its groups."""
        frame, sel, msg = show(rid, ALL, "", ALL, ALL, "")
        return {f_task: task_choices(studio, rid), table: frame, shown: frame, selected: sel, status: msg,
                versions: version_choices(studio, rid), a_task: studio.session(rid).config.env.task,
                **grouped["refresh"][0](rid)}  # fmt: skip

    return {"refresh": (refresh_for, [f_task, table, shown, selected, status, versions, *grouped["refresh"][1], a_task]),
            # opening the tab shows what episodes and training wrote meanwhile, under the current filters
            "on_open": (reload_with_count, filters, [*listing, status])}
