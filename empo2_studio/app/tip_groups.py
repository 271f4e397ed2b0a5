"""The Tips tab's groups view: a structured memory's groups, and a teacher's pin / merge / retire.

Shown under the tip table (`tips_tab.build_tips_tab`). For a session whose `memory.structure` is
"structured" (docs/memory-structure.md) it lists every group (task · variation · place: what the tips are
about), how many live and retired tips it holds, its running mean score and its best tips with their
used/helped counts; picking a group lists its tips, and the selected ones can be pinned, unpinned,
retired, brought back, or merged into the first selected (counts summed, text kept). A tip can be added
straight into a group; a place the environment does not know is refused naming the valid groups. For a
flat session it says the memory has no groups. Handlers are plain functions; a refused value is a toast.
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import TYPE_CHECKING, Any, Sequence

import gradio as gr
import pandas as pd

from empo2_studio.app.handlers import user_errors, whole_number

if TYPE_CHECKING:
    from empo2_studio.app.studio import Studio

GROUP_COLUMNS = ["group", "tips", "retired", "pinned", "episodes", "mean score", "best tips (used/helped)"]
GROUP_WIDTHS = ["230px", "56px", "80px", "72px", "92px", "108px", "45%"]
"""Widths of `GROUP_COLUMNS`: each header on one line, the rest of the row to the best tips."""
TIP_COLUMNS = ["id", "text", "used", "helped", "pinned", "retired", "why retired", "source episode", "merged from (episode × entries)"]
FLAT = ("This session's memory is **flat** (`memory.structure = flat`, the paper's): one list per variation, "
        "no groups. A session created with `--memory.structure structured` groups its tips by place.")  # fmt: skip


def _structured(studio: Studio, run_id: str) -> Any | None:
    store = studio.store(run_id)
    return store if callable(getattr(store, "groups", None)) else None


def _key(label: str) -> tuple[str, int, str]:
    """"task · v0 · place" → (task, 0, place); ValueError for anything else."""
    parts = [p.strip() for p in str(label or "").split(" · ")]
    if len(parts) != 3 or not parts[1].startswith("v"):
        raise ValueError(f"pick a group first (task · vN · place), got {label!r}")
    return parts[0], whole_number(parts[1][1:], "the group's variation", 0), parts[2]


@user_errors
def groups_view(studio: Studio, run_id: str) -> tuple[pd.DataFrame, Any, str]:
    """(groups table, group picker update, status) of the session's memory."""
    store = _structured(studio, run_id)
    if store is None:
        return pd.DataFrame(columns=GROUP_COLUMNS), gr.Dropdown(choices=[], value=None), FLAT
    groups = store.groups()
    rows = [[g.label, g.tips, g.retired, g.pinned, g.episodes, round(g.mean_score, 1),
             " | ".join(f"{b['text'][:48]} ({b['used']}/{b['helped']}){' [pinned]' if b['pinned'] else ''}" for b in g.best)]
            for g in groups]  # fmt: skip
    labels = [g.label for g in groups]
    status = f"{len(groups)} group(s), {sum(g.tips for g in groups)} live tip(s), {sum(g.retired for g in groups)} retired"
    return pd.DataFrame(rows, columns=GROUP_COLUMNS), gr.Dropdown(choices=labels, value=labels[0] if labels else None), status


def merged_text(sources: str) -> str:
    """`merged_sources` for reading: each episode once, with how many of its entries were merged in
    (an episode stores one entry per step, so one episode often merges several times): "a ×3, b"."""
    return ", ".join(e if n == 1 else f"{e} ×{n}" for e, n in Counter(sources.split()).items())


@user_errors
def group_tips(studio: Studio, run_id: str, label: str | None) -> tuple[pd.DataFrame, Any]:
    """(tips of the picked group, selection update): pinned first, then the best record."""
    store = _structured(studio, run_id)
    if store is None or not label:
        return pd.DataFrame(columns=TIP_COLUMNS), gr.Dropdown(choices=[], value=[], multiselect=True)
    rows = store.group_rows(*_key(label))
    data = [[r["id"], r["text"], r["used"], r["helped"], r["pinned"], r["retired"], r["retired_reason"],
             r["source_episode_id"], merged_text(r["merged_sources"])] for r in rows]  # fmt: skip
    choices = [(f"{r['id'][:8]} · {r['text'][:50]}", r["id"]) for r in rows]
    return pd.DataFrame(data, columns=TIP_COLUMNS), gr.Dropdown(choices=choices, value=[], multiselect=True)


@user_errors
def act(studio: Studio, run_id: str, tip_ids: Sequence[str] | None, action: str) -> str:
    """Pin, unpin, retire, unretire or merge the selected tips of a group; returns the status line."""
    store = _structured(studio, run_id)
    if store is None:
        raise ValueError("this session's memory is flat: it has no groups to pin, merge or retire in")
    ids = list(tip_ids or [])
    if not ids:
        raise ValueError("select tips of the group first")
    if action == "merge":
        if len(ids) < 2:
            raise ValueError("select two or more tips: the first selected keeps its text, the others merge into it")
        kept = store.merge(ids[0], ids[1:])
        return f"merged {len(ids) - 1} tip(s) into {kept.tip_id[:8]} (its text kept, counts summed)"
    n = {"pin": lambda: store.pin(ids), "unpin": lambda: store.pin(ids, False), "retire": lambda: store.retire(ids),
         "unretire": lambda: store.unretire(ids)}[action]()  # fmt: skip
    return f"{action}ned {n} tip(s)" if action in ("pin", "unpin") else f"{action}d {n} tip(s)"


@user_errors
def add_to_group(studio: Studio, run_id: str, label: str | None, place: str | None, text: str, score: Any) -> str:
    """Add a teacher's tip to the picked group's task and variation, in `place` (default: the group's)."""
    store = _structured(studio, run_id)
    if store is None:
        raise ValueError("this session's memory is flat: add tips with 'Add a tip' above")
    task, variation, own = _key(label or "")
    tip = store.add_tip(task, variation, text, place=(place or "").strip() or own, score=float(score or 0.0))
    return f"added tip {tip.tip_id[:8]} to the group of {(place or '').strip() or own}"


def build_groups_panel(studio: Studio, run_id: gr.State) -> dict[str, Any]:
    """The groups accordion (components and wiring). Returns its refresh for a session switch."""
    with gr.Accordion("Groups (structured memory)", open=False, elem_id="tips-groups-panel"):
        with gr.Row():
            show = gr.Button("Show groups", elem_id="tips-groups-show")
            g_status = gr.Markdown(elem_id="tips-groups-status")
        groups = gr.Dataframe(headers=GROUP_COLUMNS, interactive=False, wrap=True, column_widths=GROUP_WIDTHS,
                              elem_id="tips-groups", max_height=300)  # fmt: skip
        pick = gr.Dropdown(label="Group", choices=[], elem_id="tips-group-pick")
        tips = gr.Dataframe(headers=TIP_COLUMNS, interactive=False, wrap=True, elem_id="tips-group-tips", max_height=300)
        with gr.Row():
            chosen = gr.Dropdown(label="Selected tips of the group", multiselect=True, choices=[],
                                 elem_id="tips-group-selected", scale=4)  # fmt: skip
            buttons = {a: gr.Button(a.capitalize(), elem_id=f"tips-group-{a}") for a in ("pin", "unpin", "merge", "retire", "unretire")}
        with gr.Row():
            place = gr.Textbox(label="Place (empty: the group's)", elem_id="tips-group-place")
            text = gr.Textbox(label="Tip text", elem_id="tips-group-text", scale=3)
            score = gr.Number(0, label="Score", elem_id="tips-group-score")
            add = gr.Button("Add to group", elem_id="tips-group-add")

    def redraw(rid: str, label: str | None) -> tuple[Any, ...]:
        """(groups, picker, the picked group's tips, selection, status), keeping the picked group."""
        frame, _, msg = groups_view(studio, rid)
        labels = list(frame["group"])
        keep = label if label in labels else (labels[0] if labels else None)
        listed, sel = group_tips(studio, rid, keep)
        return frame, gr.Dropdown(choices=labels, value=keep), listed, sel, msg

    view = [groups, pick, tips, chosen]
    show.click(redraw, [run_id, pick], [*view, g_status])
    pick.input(partial(group_tips, studio), [run_id, pick], [tips, chosen])

    def after(rid: str, label: str | None) -> tuple[Any, ...]:
        return redraw(rid, label)[:4]  # the status line keeps what the action said

    for action, button in buttons.items():
        button.click(partial(act, studio, action=action), [run_id, chosen], g_status).then(after, [run_id, pick], view)
    add.click(partial(add_to_group, studio), [run_id, pick, place, text, score], g_status).then(after, [run_id, pick], view)

    def refresh_for(rid: str) -> dict[Any, Any]:
        return dict(zip([*view, g_status], redraw(rid, None)))

    return {"refresh": (refresh_for, [*view, g_status])}
