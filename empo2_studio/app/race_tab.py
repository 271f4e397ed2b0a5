"""The Race tab: EMPO² vs GRPO from the same untrained weights, interleaved iterations (see `race.py`).

Arm "EMPO²" trains with the open session's config, arm "GRPO" with the same config minus memory
rollouts and the novelty bonus. Each arm gets its own session (`<session>-race-empo2` / `-race-grpo`,
listed in the Sessions tab for comparison) and optimizer; both share the one loaded model, whose LoRA
weights are swapped between iterations. Stop acts after the current iteration (both arms always
have played the same number); each arm's checkpoint is saved at the end. Each arm's row appears as
soon as that arm finishes an iteration, with the elapsed and expected time of the race.

What it races: the open session when it is a trap session; otherwise (a ScienceWorld session, where
the embedded model rarely scores and both arms tend to tie) a trap copy of its config on
`RACE_TRAP_TASK`, unless the form asks for the open session.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import gradio as gr
import pandas as pd

from empo2_studio.app import charts
from empo2_studio.app import job_panel as jp
from empo2_studio.app.handlers import user_errors, whole_number
from empo2_studio.app.job_panel import JobPanel
from empo2_studio.app.jobs import Job
from empo2_studio.app.lesson_tab import measured_rates
from empo2_studio.config import EMBEDDED_MODEL, EnvConfig
from empo2_studio.lesson import Eta, minutes_text
from empo2_studio.lesson.timing import rate
from empo2_studio.race import ARM_LABELS, ARMS, Race, arm_rows_summary, lora_state

if TYPE_CHECKING:
    from empo2_studio.app.studio import Studio

JOB_KIND = "race"
TABLE_HEADERS = ["iteration", "arm", "update mode", "success rate", "mean score", "tips written", "seconds"]
RACE_TRAP_TASK = "trap-light-bulb"
"""The task of the trap race offered when the open session is not a trap session."""
TARGETS = ("auto", "open", "trap")
"""What the race plays: "open" the open session's config, "trap" a trap copy of it on
`RACE_TRAP_TASK`, "auto" the open session when it is a trap session, else the trap copy."""


def race_target(studio: Studio, run_id: str, target: str | None = "auto") -> tuple[str, Any]:
    """(base run id of the arms' sessions, base config) for `target` (one of `TARGETS`).

    Raises:
        ValueError: an unknown target.
    """
    target = target or "auto"
    if target not in TARGETS:
        raise ValueError(f"unknown race target {target!r}; valid: {list(TARGETS)}")
    cfg = studio.session(run_id).config
    if target == "open" or cfg.env.name == "trap":  # a trap session races itself
        return run_id, cfg
    env = EnvConfig(name="trap", task=RACE_TRAP_TASK, variations=(0, 1))
    return f"{run_id}-trap", cfg.with_overrides(env={"name": env.name, "task": env.task, "variations": env.variations,
                                                    "step_limit": None, "simplification": env.simplification})  # fmt: skip


def race_note(studio: Studio, run_id: str) -> str:
    """What to expect from racing the open session (empty for a trap session)."""
    cfg = studio.session(run_id).config
    if cfg.env.name == "trap":
        return ""
    model = "the embedded 135M model" if cfg.policy.model == EMBEDDED_MODEL else f"`{cfg.policy.model}`"
    return (f"**The open session is a {cfg.env.name} session** (`{run_id}`, task `{cfg.env.task}`). With {model} "
            "episodes there rarely score, so both arms usually tie (the lines coincide) and one iteration takes "
            "minutes per arm on a CPU. The race therefore runs on a trap copy of its config "
            f"(`{RACE_TRAP_TASK}`, variations 0–1), where EMPO²'s memory makes a difference within a few "
            "iterations; pick *the open session* to race it anyway.")  # fmt: skip


def race_config(studio: Studio, run_id: str, iterations: Any, group_size: Any, step_limit: Any,
                target: str | None = "auto") -> Any:  # fmt: skip
    """The EMPO² arm's config: the target's (`race_target`), with the form's group size, step limit and
    iterations (a blank step limit keeps the target's). ValueError names a bad value."""
    cfg = race_target(studio, run_id, target)[1]
    limit = cfg.env.step_limit if step_limit in (None, "") else whole_number(step_limit, "step limit", 1)
    return cfg.with_overrides(
        rollout={"group_size": whole_number(group_size, "group size", 2)}, env={"step_limit": limit},
        train={"iterations": whole_number(iterations, "iterations", 1)},
    ).validate()  # fmt: skip


def race_defaults(studio: Studio, run_id: str) -> tuple[int, int, Any]:
    """(iterations, group size, step limit) shown for the session: 2 iterations, the group size and
    step limit of what "auto" races (`race_target`)."""
    cfg = race_target(studio, run_id)[1]
    return 2, cfg.rollout.group_size, cfg.env.step_limit


@user_errors
def start_race(studio: Studio, run_id: str, iterations: Any, group_size: Any, step_limit: Any,
               target: str | None = "auto") -> tuple[Any, ...]:  # fmt: skip
    """Start the race of `target` (`TARGETS`) as a job. Returns `job_panel.started(job)`."""
    if studio.jobs.running(JOB_KIND):
        raise ValueError("a race is already running; stop it first")
    cfg = race_config(studio, run_id, iterations, group_size, step_limit, target)
    base = race_target(studio, run_id, target)[0]
    studio.check_compatible(cfg)
    n = cfg.train.iterations
    job = studio.jobs.start(JOB_KIND, lambda j: run_race_job(studio, j, run_id=base, cfg=cfg, iterations=n),
                            label=f"race EMPO² vs GRPO on {base} ({cfg.env.task})", run_id=run_id)  # fmt: skip
    return jp.started(job)


def run_race_job(studio: Studio, job: Job, *, run_id: str, cfg: Any, iterations: int) -> dict[str, list[dict]]:
    """Job body: both arms from the untrained adapter, `iterations` interleaved iterations;
    `job.data["rows"]` = arm → metrics rows so far (updated as soon as an arm finishes an
    iteration), `job.data["sessions"]` = arm → run id. Nothing of the race outlives the job but
    its rows (the arms' trainers, optimizers and tip stores are released when it returns)."""
    job.update(message="preparing the model")
    policy = studio.fresh_policy()
    race = None
    try:
        race = Race.create(studio.root, cfg, policy=policy, embedder=studio.embedder(), run_id=run_id,
                           initial_state=lora_state(policy))  # fmt: skip
        sessions = {arm: t.session.run_id for arm, t in race.trainers.items()}
        eta = Eta(iterations * len(race.trainers), iteration_prior(studio, cfg))
        job.update(sessions=sessions, rows={arm: [] for arm in ARMS},
                   message=f"iteration 1 of {iterations} · sessions " + ", ".join(sessions.values()))

        def on_phase(arm: str, line: str, race: Race = race) -> None:
            job.update(message=f"iteration {race.iteration + 1} of {iterations} · {ARM_LABELS.get(arm, arm)} · {line} · {eta.line()}")

        def on_arm(arm: str, report: Any, race: Race = race) -> None:
            eta.finished()
            m = report.metrics
            job.update(progress=eta.done / eta.units, rows={a: list(r) for a, r in race.rows.items()},
                       message=f"{ARM_LABELS.get(arm, arm)} finished iteration {report.iteration} of {iterations}: "
                               f"success {m.get('rollout/success_rate', 0):.0%}, score {m.get('rollout/score_mean', 0):.1f}"
                               f" · {eta.line()}")  # fmt: skip

        done = race.run(iterations, stop=job.stop_event, on_phase=on_phase, on_arm=on_arm)
        job.update(message=f"{done} iteration(s) per arm in {minutes_text(eta.elapsed)} · checkpoints saved in "
                           + ", ".join(sessions.values()))  # fmt: skip
        return {a: list(r) for a, r in race.rows.items()}
    finally:
        if race is not None:
            race.close()
        del race
        studio.fresh_policy()  # leave the shared model as the studio expects it ("fresh")


def iteration_prior(studio: Studio, cfg: Any) -> tuple[float, str]:
    """Expected seconds of one arm's iteration before one is measured: the lesson's seconds per
    episode (measured, or the labelled rough estimate) × episodes per iteration."""
    per_episode, measured = rate(measured_rates(studio), "episode")
    episodes = cfg.rollout.group_size * cfg.rollout.variations_per_iteration
    return per_episode * episodes, ("from the lesson's episode time" if measured else "rough estimate")


def race_view(data: dict[str, Any]) -> tuple[Any, Any]:
    """(chart, table) from a race job's data."""
    rows = data.get("rows", {})
    frame = pd.DataFrame(arm_rows_summary(rows), columns=TABLE_HEADERS)
    return charts.race_figure(rows, ARM_LABELS), frame


def poll_race(studio: Studio, job_id: str | None, seen: int) -> tuple[Any, ...]:
    """Timer tick: (status html, chart, table, timer, seen version)."""
    return jp.poll(studio.jobs, job_id, seen, 2, lambda job: race_view(job.snapshot()))


INTRO = (
    "**EMPO² vs GRPO.** Two runs from the same untrained weights, trained side by side with interleaved "
    "iterations: **EMPO²** with this session's config, **GRPO** the same without memory rollouts "
    "(p = 0) and without the novelty bonus. Each arm has its own session (`<session>-race-empo2`, "
    "`-race-grpo`: compare them in the Sessions tab) and optimizer; they share the one loaded model, "
    "whose LoRA weights are swapped between iterations; GRPO never reads tips, so it writes none. "
    "Stop acts after the current iteration. Each arm's row appears as soon as it finishes an iteration. "
    "On a CPU with the embedded model an iteration takes minutes: try group 2, step limit 4, 1 iteration."
)


def target_choices(studio: Studio, run_id: str) -> list[tuple[str, str]]:
    """The "Race on" choices for the open session, as (label, value)."""
    cfg = studio.session(run_id).config
    if cfg.env.name == "trap":
        return [(f"the open session ({run_id}, {cfg.env.task})", "open")]
    return [(f"a trap copy of it ({RACE_TRAP_TASK})", "trap"), (f"the open session ({run_id}, {cfg.env.name})", "open")]


def build_race_tab(studio: Studio, run_id: gr.State) -> dict[str, Any]:
    """Components and wiring of the Race tab."""
    gr.Markdown(INTRO, elem_id="rc-intro")
    rid0 = studio.default_run_id
    iterations0, group0, limit0 = race_defaults(studio, rid0)
    note = gr.Markdown(race_note(studio, rid0), elem_id="rc-note")
    choices0 = target_choices(studio, rid0)
    with gr.Row():
        target = gr.Radio(choices0, value=choices0[0][1], label="Race on", elem_id="rc-target")
        iterations = gr.Number(iterations0, label="Iterations", precision=0, elem_id="rc-iterations")
        group = gr.Number(group0, label="Group size N", precision=0, elem_id="rc-group")
        limit = gr.Number(limit0, label="Step limit (blank = the task's)", precision=0, elem_id="rc-step-limit")
        start = gr.Button("▶ Start the race", variant="primary", elem_id="rc-start")
        stop = gr.Button("■ Stop after this iteration", elem_id="rc-stop")
    panel = JobPanel.create("rc")
    chart = gr.Plot(value=charts.race_figure({}), show_label=False, elem_id="rc-chart")
    table = gr.Dataframe(headers=TABLE_HEADERS, value=[], interactive=False, label="Per iteration",
                         elem_id="rc-table", max_height=480)  # fmt: skip
    panel.on_start(start.click, partial(start_race, studio), [run_id, iterations, group, limit, target])
    panel.on_poll(partial(poll_race, studio), [chart, table])
    panel.on_stop(stop, studio.jobs)

    def pick(rid: str, picked: str) -> dict[Any, Any]:
        """Another target picked: its group size and step limit."""
        cfg = race_target(studio, rid, picked)[1]
        return {group: gr.Number(value=cfg.rollout.group_size), limit: gr.Number(value=cfg.env.step_limit)}

    target.input(pick, [run_id, target], [group, limit])

    def refresh(rid: str) -> dict[Any, Any]:
        """A session switch: what it races by default, its group size and step limit, what to expect
        (the iteration count is kept)."""
        _, g, s = race_defaults(studio, rid)
        choices = target_choices(studio, rid)
        return {group: gr.Number(value=g), limit: gr.Number(value=s), note: gr.Markdown(race_note(studio, rid)),
                target: gr.Radio(choices=choices, value=choices[0][1])}  # fmt: skip

    return {"panel": panel, "refresh": (refresh, [group, limit, note, target])}
