"""The studio's page: a start panel, seven tabs (each built by its own module), and the wiring that
joins them: the open session, the session switch, page load, and the named API.

Per-browser state (`gr.State`): the open session's run id, and each tab's own (job ids, shown rows).
Shared state (tips, runs, the model, jobs) lives in the `Studio`. A session switch (Sessions tab,
the start panel's ScienceWorld button, a Train start that created a session) refreshes every tab with
one `{component: value}` dict (see `page_refresh`), so no list has to stay aligned by position with
outputs declared in another file, and clears the Episodes tab's previous pair.

The page's own events are private (hidden from the API page, not callable by name); the scripting
surface is the named API of `app.api`, one endpoint per user action with JSON results.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Sequence

import gradio as gr

from empo2_studio.app import adapt_tab, api, episodes_tab, sessions_tab, tips_tab, train_tab
from empo2_studio.app import lesson_tab as ls
from empo2_studio.app import race_tab as rc
from empo2_studio.app.handlers import model_status, user_errors

if TYPE_CHECKING:
    from empo2_studio.app.studio import Studio

Refresh = tuple[Callable[[str], dict[Any, Any]], list[Any]]
"""(fn, outputs): `fn(run_id)` returns {component: value} for exactly the components in `outputs`."""

START = (
    "**Start here: the Lesson tab** (the first tab) shows the method on the trap env: an agent fails, "
    "curated tips rescue it, distillation makes it succeed without them. **Episodes** plays one naive and "
    "one memory episode of the open session side by side; **Tips**, **Train**, **Race**, **Adapt** and "
    "**Sessions** go further. ScienceWorld is one click away (right); the embedded 135M model rarely "
    "scores there on its own; on find-animal it follows the Lesson's tip, and after the Lesson it wins "
    "on test variations it never saw (the Episodes tab says what it plays)."
)


def build_blocks(studio: Studio) -> gr.Blocks:
    """The whole page bound to `studio`."""
    with gr.Blocks(title="empo2-studio") as demo:
        run_id = gr.State(studio.default_run_id)
        with gr.Row():
            gr.Markdown("## empo2-studio — EMPO² memory-augmented agents, side by side")
            session_md = gr.Markdown(elem_id="session-banner")
        model_md = gr.Markdown(elem_id="model-banner")
        with gr.Row(elem_id="start-panel"):
            gr.Markdown(START, elem_id="start-text")
            to_sw = gr.Button("Open a ScienceWorld session", size="sm", elem_id="start-scienceworld", scale=0)
        with gr.Tabs(selected="lesson") as tabs:
            with gr.Tab("Lesson", id="lesson", elem_id="tab-lesson"):
                lesson = ls.build_lesson_tab(studio)
            with gr.Tab("Episodes", id="episodes", elem_id="tab-episodes") as episodes_page:
                ep = episodes_tab.build_episodes_tab(studio, run_id)
            with gr.Tab("Tips", id="tips", elem_id="tab-tips") as tips_page:
                tips = tips_tab.build_tips_tab(studio, run_id)
            with gr.Tab("Train", id="train", elem_id="tab-train") as train_page:
                tr = train_tab.build_train_tab(studio, run_id)
            with gr.Tab("Race (EMPO² vs GRPO)", id="race", elem_id="tab-race"):
                race = rc.build_race_tab(studio, run_id)
            with gr.Tab("Adapt (OOD)", id="adapt", elem_id="tab-adapt"):
                ad = adapt_tab.build_adapt_tab(studio, run_id)
            with gr.Tab("Sessions", id="sessions", elem_id="tab-sessions"):
                ses = sessions_tab.build_sessions_tab(studio, run_id)

        model_timer = gr.Timer(1.0, active=True)
        model_timer.tick(partial(model_status, studio), None, [model_md, model_timer], show_progress="hidden")
        parts = [banner_refresh(studio, session_md), ep["refresh"], tr["refresh"], ad["refresh"], tips["refresh"],
                 race["refresh"]]  # fmt: skip
        refresh, refresh_outputs = page_refresh(parts)
        # a switch also renews the Sessions list: the session may have just been created
        switched, switched_outputs = page_refresh([*parts, ses["refresh"], ep["clear"]])  # one event: form and pair
        created, created_outputs = page_refresh([*parts, ses["refresh"]])
        demo.load(refresh, [run_id], refresh_outputs)
        demo.load(ses["listing"][0], [run_id], ses["listing"][1])
        # Episodes played elsewhere (Episodes tab, CLI) become distillable: list them when Train opens.
        train_page.select(
            lambda rid: (banner(studio, rid), gr.Dropdown(choices=train_tab.distill_choices(studio, rid))),
            [run_id], [session_md, tr["distill_ids"]], show_progress="hidden")  # fmt: skip
        # the header's checkpoint count follows a training or distill job while it saves: read after each
        # poll (a listing per tick), so the tick that sees the job finished also sees its last checkpoint
        tr["polled"].then(partial(banner, studio), [run_id], session_md, show_progress="hidden")
        tips_page.select(*tips["on_open"], show_progress="hidden")
        episodes_page.select(*ep["on_open"], show_progress="hidden")

        # Opening a session (Sessions tab, the start panel, a Train start that made one) switches this
        # browser's run id, then every tab follows it; the Episodes tab drops the previous session's pair.
        ses["opened"](switched, switched_outputs)
        tr["switched"](created, created_outputs)
        # The Episodes tab is selected only after the switch renewed its form: selected at once, its
        # open event read the task box while the switch replaced its choices, and Gradio refused the
        # stale "trap-light-bulb" against ScienceWorld's task list (an error toast, walkthrough of 2026-12-07).
        opened = to_sw.click(partial(open_env_session, studio, "scienceworld"), None, [run_id])
        opened.success(switched, [run_id], switched_outputs).then(
            lambda: gr.Tabs(selected="episodes"), None, tabs, show_progress="hidden")
        # A reloaded page picks up the work still running on its session (its timer starts polling).
        for tab, kinds in ((ep, ("episodes",)), (tr, ("train", "distill")), (ad, ("adapt",)), (race, ("race",))):
            tab["panel"].on_load_attach(demo, studio.jobs, kinds, run_id)
        lesson["on_load"](demo)  # the lesson's own session: its last results, and a lesson job still running
        api.register(studio)
        hide_page_events(demo)
    return demo


def banner(studio: Studio, rid: str) -> str:
    """The header's session line: run id, env, task, checkpoints."""
    cfg = studio.session(rid).config
    n = len(studio.session(rid).checkpoints())
    return f"**Session** `{rid}` · {cfg.env.name} · {cfg.env.task} · {n} checkpoint(s)"


def banner_refresh(studio: Studio, session_md: Any) -> Refresh:
    """What a session switch renews in the header."""
    return (lambda rid: {session_md: banner(studio, rid)}), [session_md]


@user_errors
def open_env_session(studio: Studio, env: str) -> str:
    """The start panel's button: open the studio's session of `env`; returns its run id (the page then
    renews every tab and shows the Episodes tab)."""
    return studio.env_session(env).dir.name


def page_refresh(parts: Sequence[Refresh]) -> Refresh:
    """The parts' refreshes as one: its fn merges their dicts, its outputs are theirs in order.
    ValueError (at the event, naming the tab's fn) when a part returns other components than it declared,
    which Gradio would otherwise report only as an unnamed output."""

    def refresh(rid: str) -> dict[Any, Any]:
        merged: dict[Any, Any] = {}
        for fn, outputs in parts:
            update = fn(rid)
            if set(update) != set(outputs):
                raise ValueError(f"{getattr(fn, '__qualname__', fn)} returned {len(update)} component(s), "
                                 f"declared {len(outputs)}")  # fmt: skip
            merged.update(update)
        return merged

    return refresh, [c for _, outputs in parts for c in outputs]


def hide_page_events(demo: gr.Blocks) -> None:
    """Make every event of the page private except the named API's endpoints: the page still calls
    them (by index), the API page and `gradio_client` see only `api.ENDPOINTS`."""
    for fn in demo.fns.values():
        if fn.api_name not in api.ENDPOINTS:
            fn.api_visibility = "private"
