"""The studio's page: seven tabs, components first, event wiring at the bottom of each tab.

Per-browser state (`gr.State`): the open session's run id, each tab's job id and last rendered job
version, the Tips tab's shown rows and pending deletion. Shared state (tips, runs, the model, jobs)
lives in the `Studio`. Long work runs in `Studio.jobs`; each job tab follows its job through a
`job_panel.JobPanel` (status line, job id and seen states, a timer active only while the job runs).
A session switch refreshes every tab with one `{component: value}` dict (see `page_refresh`), so no
list has to stay aligned by position with outputs declared in another file.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Sequence

import gradio as gr

from empo2_studio.app import handlers as h
from empo2_studio.app.job_panel import JobPanel
from empo2_studio.app import lesson_tab as ls
from empo2_studio.app import race_tab as rc
from empo2_studio.app import sessions_tab as s
from empo2_studio.app import tips_handlers as t
from empo2_studio.config import LOW_PROB_RULES
from empo2_studio.types import ENV_NAMES

Refresh = tuple[Callable[[str], dict[Any, Any]], list[Any]]
"""(fn, outputs): `fn(run_id)` returns {component: value} for exactly the components in `outputs`."""


def build_blocks(studio: Any) -> gr.Blocks:
    """The whole page bound to `studio`."""
    with gr.Blocks(title="empo2-studio") as demo:
        run_id = gr.State(studio.default_run_id)
        with gr.Row():
            gr.Markdown("## empo2-studio — EMPO² memory-augmented agents, side by side")
            session_md = gr.Markdown(elem_id="session-banner")
        model_md = gr.Markdown(elem_id="model-banner")
        model_timer = gr.Timer(1.0, active=True)
        model_timer.tick(partial(h.model_status, studio), None, [model_md, model_timer], show_progress="hidden")

        with gr.Tabs():
            with gr.Tab("Episodes", id="episodes", elem_id="tab-episodes"):
                ep = _episodes_tab(studio, run_id)
            with gr.Tab("Lesson", id="lesson", elem_id="tab-lesson"):
                lesson = ls.build_lesson_tab(studio)
            with gr.Tab("Tips", id="tips", elem_id="tab-tips") as tips_tab:
                tips = t.build_tips_tab(studio, run_id)
            with gr.Tab("Train", id="train", elem_id="tab-train") as train_tab:
                tr = _train_tab(studio, run_id)
            with gr.Tab("Race (EMPO² vs GRPO)", id="race", elem_id="tab-race"):
                race = rc.build_race_tab(studio, run_id)
            with gr.Tab("Adapt (OOD)", id="adapt", elem_id="tab-adapt"):
                ad = _adapt_tab(studio, run_id)
            with gr.Tab("Sessions", id="sessions", elem_id="tab-sessions"):
                ses = s.build_sessions_tab(studio, run_id)

        refresh, refresh_outputs = page_refresh(
            [session_refresh(studio, session_md, ep, tr, ad), tips["refresh"], race["refresh"]])
        demo.load(refresh, [run_id], refresh_outputs)
        demo.load(ses["listing"][0], [run_id], ses["listing"][1])
        # Episodes played elsewhere (Episodes tab, CLI) become distillable: list them when Train opens.
        train_tab.select(lambda rid: (_banner(studio, rid), gr.Dropdown(choices=h.distill_choices(studio, rid))),
                         [run_id], [session_md, tr["distill_ids"]], show_progress="hidden")
        tips_tab.select(*tips["on_open"], show_progress="hidden")
        # Opening a session in the Sessions tab switches this browser's run id, then refreshes every tab.
        ses["opened"](refresh, refresh_outputs)
        tr["switched"](refresh, refresh_outputs)
        demo.load(partial(h.env_changed, studio), [ep["env"], ep["split"], run_id], [ep["task"], ep["variation"]])
        # A reloaded page picks up the work still running on its session (its timer starts polling).
        for tab, kinds in ((ep, ("episodes",)), (tr, ("train", "distill")), (ad, ("adapt",)), (race, ("race",))):
            tab["panel"].on_load_attach(demo, studio.jobs, kinds, run_id)
        lesson["on_load"](demo)  # the lesson's own session: its last results, and a lesson job still running
    return demo


def _banner(studio: Any, rid: str) -> str:
    cfg = studio.session(rid).config
    n = len(studio.session(rid).checkpoints())
    return f"**Session** `{rid}` · {cfg.env.name} · {cfg.env.task} · {n} checkpoint(s)"


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


def session_refresh(studio: Any, session_md: Any, ep: dict, tr: dict, ad: dict) -> Refresh:
    """What a session switch renews in the banner and the Episodes, Train and Adapt tabs."""

    def refresh(rid: str) -> dict[Any, Any]:
        ckpts = h.checkpoint_choices(studio, rid)
        tasks = h.unseen_tasks(studio, rid)
        return {
            session_md: _banner(studio, rid),
            ep["checkpoint"]: gr.Dropdown(choices=ckpts, value="current"),
            ep["saved"]: gr.Dropdown(choices=h.saved_pairs(studio, rid), value=None),
            # both follow `h.TRAIN_FIELDS` / `charts.train_figures`; strict: a changed count fails here
            **dict(zip(tr["form"], h.config_form_values(studio, rid), strict=True)),
            **dict(zip(tr["plots"], h.train_charts(studio, rid), strict=True)),
            tr["distill_ids"]: gr.Dropdown(choices=h.distill_choices(studio, rid), value=[]),
            ad["checkpoint"]: gr.Dropdown(choices=ckpts, value=ckpts[-1][1] if len(ckpts) > 1 else "current"),
            ad["task"]: gr.Dropdown(choices=tasks, value=tasks[0] if tasks else None),
        }

    outputs = [session_md, ep["checkpoint"], ep["saved"], *tr["form"], *tr["plots"], tr["distill_ids"],
               ad["checkpoint"], ad["task"]]  # fmt: skip
    return refresh, outputs


def _episodes_tab(studio: Any, run_id: gr.State) -> dict[str, Any]:
    env_default = studio.session(studio.default_run_id).config.env.name
    with gr.Row():
        env = gr.Radio(list(ENV_NAMES), value=env_default, label="Environment", elem_id="ep-env")
        task = gr.Dropdown(label="Task", choices=[], elem_id="ep-task", scale=2)
        split = gr.Radio(list(h.SPLITS), value="train", label="Split", elem_id="ep-split")
        variation = gr.Dropdown(label="Variation (split)", choices=[], elem_id="ep-variation")
    with gr.Row():
        seed = gr.Number(0, label="Seed", precision=0, elem_id="ep-seed")
        temperature = gr.Slider(0.05, 2.0, value=0.4, step=0.05, label="Temperature", elem_id="ep-temperature")
        checkpoint = gr.Dropdown(label="Adapter / checkpoint", choices=[("current weights", "current")],
                                 value="current", elem_id="ep-checkpoint")
        run = gr.Button("▶ Run side by side", variant="primary", elem_id="ep-run")
        stop = gr.Button("■ Stop", elem_id="ep-stop")
    panel = JobPanel.create("ep")
    with gr.Row(equal_height=False):
        naive = gr.HTML(elem_id="ep-naive")
        memory = gr.HTML(elem_id="ep-memory")
    chart = gr.Plot(show_label=False, elem_id="ep-chart")
    with gr.Row():
        saved = gr.Dropdown(label="Saved episode pairs of this session", choices=[], elem_id="ep-saved", scale=3)
        reopen = gr.Button("Reopen", elem_id="ep-reopen")

    env.input(partial(h.env_changed, studio), [env, split, run_id], [task, variation])
    task.change(partial(h.task_changed, studio), [env, task, split], [variation])
    split.change(partial(h.task_changed, studio), [env, task, split], [variation])
    panel.on_start(run.click, partial(h.start_side_by_side, studio),
                   [run_id, env, task, variation, split, seed, temperature, checkpoint])
    panel.on_poll(partial(h.poll_side_by_side, studio), [naive, memory, chart]).then(
        _refresh_saved_when_done(studio), [run_id, panel.job_id], saved, show_progress="hidden")
    panel.on_stop(stop, studio.jobs)
    reopen.click(partial(h.open_pair, studio), [run_id, saved], [naive, memory, chart, panel.status])
    return {"env": env, "split": split, "task": task, "variation": variation, "checkpoint": checkpoint, "saved": saved,
            "panel": panel}


def _refresh_saved_when_done(studio: Any) -> Any:
    def fn(rid: str, job_id: str | None) -> Any:
        job = studio.jobs.get(job_id)
        if job is None or job.status != "done" or not job.claim("_listed"):
            return gr.skip()
        return gr.Dropdown(choices=h.saved_pairs(studio, rid))

    return fn


def _train_tab(studio: Any, run_id: gr.State) -> dict[str, Any]:
    gr.Markdown("Changing anything but *Iterations* starts a **new session** with that config "
                "(each session's config.json is what trained it). The LoRA rank and alpha are fixed "
                "while the studio runs (one loaded model); the env and step limit are the session's.")
    # Number boxes carry no min/max: out-of-range values reach the config's validation, whose message
    # names the field and the valid range (Gradio's own says only "Value 1 is less than minimum value 2").
    with gr.Row():
        p_memory = gr.Slider(0, 1, step=0.05, label="p (memory rollout probability)", elem_id="tr-p")
        q_off = gr.Slider(0, 1, step=0.01, label="q (off-policy | memory)", elem_id="tr-q")
        group = gr.Number(label="Group size N", precision=0, elem_id="tr-group")
        lora_r = gr.Number(label="LoRA rank", precision=0, elem_id="tr-lora-r")
        lora_alpha = gr.Number(label="LoRA alpha", precision=0, elem_id="tr-lora-alpha")
    with gr.Row():
        lr = gr.Number(label="Learning rate", elem_id="tr-lr")
        mask = gr.Dropdown(list(LOW_PROB_RULES), label="Low-prob masking rule", elem_id="tr-mask")
        delta = gr.Number(label="δ (log-prob threshold ≤ 0)", elem_id="tr-delta")
        intrinsic = gr.Number(label="Intrinsic reward coef", elem_id="tr-intrinsic")
        iterations = gr.Number(label="Iterations", precision=0, elem_id="tr-iterations")
    by_field = {("rollout", "p_memory"): p_memory, ("rollout", "q_off_policy"): q_off, ("rollout", "group_size"): group,
                ("policy", "lora_r"): lora_r, ("policy", "lora_alpha"): lora_alpha, ("train", "learning_rate"): lr,
                ("algo", "low_prob_mask"): mask, ("algo", "low_prob_threshold"): delta,
                ("algo", "intrinsic_coef"): intrinsic, ("train", "iterations"): iterations}  # fmt: skip
    form = [by_field[f] for f in h.TRAIN_FIELDS]  # the order `config_form_values` / `start_training` use
    with gr.Row():
        start = gr.Button("▶ Start training", variant="primary", elem_id="tr-start")
        stop = gr.Button("■ Stop after this iteration", elem_id="tr-stop")
    panel = JobPanel.create("tr")
    with gr.Row():
        plots = [gr.Plot(show_label=False, elem_id=e) for e in ("tr-score", "tr-loss", "tr-clip")]
    with gr.Row():
        plots += [gr.Plot(show_label=False, elem_id=e) for e in ("tr-mask-frac", "tr-tips")]
    with gr.Accordion("Distill now (curate tips → run memory episodes → distill)", open=True):
        with gr.Row():
            distill_ids = gr.Dropdown(label="Memory episodes to distill", multiselect=True, choices=[],
                                      elem_id="tr-distill-ids", scale=4)
            distill = gr.Button("Distill now", elem_id="tr-distill")

    started = panel.on_start(start.click, partial(h.start_training, studio), [run_id, *form], run_id)
    panel.on_start(distill.click, partial(h.start_distill, studio), [run_id, distill_ids])
    panel.on_poll(partial(h.poll_training, studio), plots, [run_id])
    panel.on_stop(stop, studio.jobs)

    def switched(fn: Any, outputs: list[Any]) -> None:
        started.then(fn, [run_id], outputs)

    return {"form": form, "plots": plots, "distill_ids": distill_ids, "switched": switched, "panel": panel}


def _adapt_tab(studio: Any, run_id: gr.State) -> dict[str, Any]:
    gr.Markdown("Adapt a trained checkpoint to a task it was **not** trained on: trial 0 plays without "
                "memory (the baseline), later trials retrieve the tips written by earlier ones. "
                "The weights stay frozen — the adapter checksum is shown before and after.")
    with gr.Row():
        checkpoint = gr.Dropdown(label="Checkpoint", choices=[], elem_id="ad-checkpoint")
        task = gr.Dropdown(label="Unseen task", choices=[], elem_id="ad-task")
        trials = gr.Slider(1, 20, value=5, step=1, label="Trials K", elem_id="ad-trials")
        start = gr.Button("▶ Adapt", variant="primary", elem_id="ad-start")
        stop = gr.Button("■ Stop", elem_id="ad-stop")
    panel = JobPanel.create("ad")
    chart = gr.Plot(show_label=False, elem_id="ad-chart")
    checksum = gr.Markdown(elem_id="ad-checksum")
    panel.on_start(start.click, partial(h.start_adapt, studio), [run_id, checkpoint, task, trials])
    panel.on_poll(partial(h.poll_adapt, studio), [chart, checksum])
    panel.on_stop(stop, studio.jobs)
    return {"checkpoint": checkpoint, "task": task, "panel": panel}
