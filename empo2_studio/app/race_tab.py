"""The Race tab: EMPO² vs GRPO from the same starting weights, interleaved iterations (see `race.py`).

Arm "EMPO²" trains with the open session's config, arm "GRPO" with the same config minus memory
rollouts and the novelty bonus. Each arm gets its own session (`<session>-race-empo2` / `-race-grpo`,
listed in the Sessions tab for comparison) and optimizer; both share the one loaded model, whose LoRA
weights are swapped between iterations. The job is `race_job.run_race_job`: Stop ends it within one
lock-step in any phase (each arm keeps the checkpoint of its last finished iteration, so the arms may
end one apart); each arm's row appears as soon as that arm finishes an iteration, each test layout of
an evaluation as it ends, and the status line counts the race down from the step times measured here.
Two presets fill the form: the class race (the defaults: the shortest race whose verdict matched the
60-iteration one on 3 of 3 seeds, 12–15 min on a 2-core CPU) and the benchmark race.

What it races by default: the benchmark race's setting (`RACE_ENV`, docs/benchmarks/learning.md), the
trap's fixed family, where every layout hides the target in the same room and what varies is which
object to act on — the structure of the paper's tasks. The open session is raced itself when it is
already such a session, or when the form asks for it. With several seeds the arms are raced once per
seed (seed, seed + 1, …, each pair from the same starting weights); with "evaluate every" > 0 each
arm's memory-free test success is measured before the first iteration, every so many iterations and
after the last, drawn with its spread over the seeds, and a finished race says who won
(`race.race_verdict`).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

import gradio as gr
import pandas as pd

from empo2_studio.app import base_rate, charts
from empo2_studio.app import job_panel as jp
from empo2_studio.app.handlers import user_errors, whole_number
from empo2_studio.app.job_panel import JobPanel
from empo2_studio.app.jobs import readable_error
from empo2_studio.app.race_job import expected_text, race_countdown, run_race_job
from empo2_studio.config import EMBEDDED_MODEL, MAX_EVAL_REPEATS, MAX_GROUP_SIZE, MAX_ITERATIONS, MAX_STEP_LIMIT, EnvConfig
from empo2_studio.envs.trap import TrapEnv
from empo2_studio.race import ARM_LABELS, arm_rows_summary
from empo2_studio.sessions import on_env

if TYPE_CHECKING:
    from empo2_studio.app.studio import Studio

JOB_KIND = "race"
TABLE_HEADERS = ["seed", "iteration", "arm", "update mode", "success rate", "mean score", "tips written", "seconds"]
RACE_ENV = EnvConfig(name="trap", task="trap-light-bulb-fixed", variations=(0, 1, 2, 3, 4), step_limit=8)
"""The race's default setting, as in the benchmark race: the fixed family's first 5 training layouts, one
per iteration, step limit 8."""
RACE_TRAP_TASK = RACE_ENV.task
RACE_LEARNING_RATE = 1e-3
"""The LoRA learning rate of a race on the trap copy (the benchmark race's; the session's own rate
is kept when it races itself)."""
RACE_ALGO = {"skip_flat_groups": True}
"""The algorithm options of a race on the trap copy: no update from a group whose task returns are all
equal. Measured from the template warm start of 2026-12-04 (same seeds and code): 0.64 against GRPO's 0.00
(3 seeds) with them, 0.00 against 0.00 with the paper's config, an all-winning group told apart only by the
novelty bonus undoing what a seed had learned (docs/departures.md, "Skipping flat groups"). From today's
default warm start the race with them reaches 0.92. A session racing itself keeps its own."""
PRESETS: dict[str, dict[str, int]] = {
    "class": {"iterations": 15, "group_size": 8, "eval_every": 15, "seeds": 1, "eval_repeats": 1},
    "benchmark": {"iterations": 60, "group_size": 8, "eval_every": 10, "seeds": 1, "eval_repeats": 4},
}
"""The form's two settings, one click each. "class": sized to decide the race within a lesson period
on a 2-core CPU (docs/notebook/2026-12-06-class-race.md: what it keeps of the benchmark's verdict);
"benchmark": the benchmark race of docs/benchmarks/learning.md for one seed."""
RACE_FORM = PRESETS["class"]
"""The form's defaults: the class race."""
MAX_SEEDS = 10
TARGETS = ("auto", "open", "trap")
"""What the race plays: "open" the open session's config, "trap" a copy of it on `RACE_ENV`, "auto"
the open session when it is a fixed-family trap session, else the trap copy."""


def races_itself(cfg: Any) -> bool:
    """Whether "auto" races a session of `cfg` itself: a trap session of the fixed family."""
    return cfg.env.name == "trap" and TrapEnv().family(cfg.env.task) == "fixed"


def race_target(studio: Studio, run_id: str, target: str | None = "auto") -> tuple[str, Any]:
    """(base run id of the arms' sessions, base config) for `target` (one of `TARGETS`).

    Raises:
        ValueError: an unknown target.
    """
    target = target or "auto"
    if target not in TARGETS:
        raise ValueError(f"unknown race target {target!r}; valid: {list(TARGETS)}")
    cfg = studio.session(run_id).config
    if target == "open" or (target == "auto" and races_itself(cfg)):
        return run_id, cfg
    # the race's env over the session's (its other env settings, e.g. the record line, kept); on_env: a
    # ScienceWorld session's copy starts from the trap's shipped adapter, not its own
    env = replace(cfg.env, name=RACE_ENV.name, task=RACE_ENV.task, variations=RACE_ENV.variations,
                  step_limit=RACE_ENV.step_limit, simplification=RACE_ENV.simplification)
    return f"{run_id}-trap", on_env(cfg, env).with_overrides(
        rollout={"group_size": RACE_FORM["group_size"], "variations_per_iteration": 1},
        train={"learning_rate": RACE_LEARNING_RATE}, algo=RACE_ALGO,
    )  # fmt: skip


def race_note(studio: Studio, run_id: str) -> str:
    """What to expect from racing the open session (empty for a fixed-family trap session that skips
    flat groups)."""
    cfg = studio.session(run_id).config
    if races_itself(cfg):
        if cfg.algo.skip_flat_groups:
            return ""
        return ("**This session updates on flat groups** (`algo.skip_flat_groups` off, as in the paper). In "
                "the benchmark race that config ended at 0.00 against GRPO's 0.00: an all-winning group, told "
                "apart only by the novelty bonus, undid what a seed had learned. With the option on, 0.64 "
                "against 0.00 from the same (template) warm start; from today's default warm start, 0.92 "
                "against 0.00 (docs/benchmarks/learning.md).")  # fmt: skip
    copy = (f"The race therefore runs on a trap copy of its config: `{RACE_TRAP_TASK}`, training layouts "
            f"{RACE_ENV.variations[0]}–{RACE_ENV.variations[-1]}, step limit {RACE_ENV.step_limit}, lr "
            f"{RACE_LEARNING_RATE:g}, no update from a group whose returns are all equal (the benchmark race of "
            "docs/benchmarks/learning.md), where the bulb is always in the workshop and what varies is which "
            "bulb: the structure of the paper's tasks. Pick *the open session* to race it anyway.")  # fmt: skip
    if cfg.env.name == "trap":
        return (f"**The open session plays the trap's search family** (`{cfg.env.task}`): its test layouts hide the "
                "target in rooms training never used, so a memory-free policy must search, a question the "
                f"paper's tasks never ask. {copy}")  # fmt: skip
    if cfg.policy.model == EMBEDDED_MODEL:
        measured = ("With the embedded 135M model and the shipped ScienceWorld adapter, races of 30 iterations on "
                    "find-animal with the search record on (the rooms searched and the next to try, then the "
                    "winning plan) ended at 0.00 memory-free dev success for both arms (2 seeds): both learned to "
                    "walk into the kitchen, the box's room, for 25 points of partial credit; only twice did a note "
                    "send EMPO²'s memory groups outside to look around, and none won; and at lr 1e-3 the updates "
                    "erased the adapter's plan reading (P(whole plan, plan pinned) 0.93 → 0.00), while at 1e-4 "
                    "(EMPO², one seed) it kept the reading and learned nothing measurable "
                    "(docs/notebook/2026-12-08-sw-race-record-line.md). With frozen weights the same record took "
                    "memory groups to the animals in about half the dev searches (docs/benchmarks/sw_search.md). An "
                    "iteration took about 0.3–2.5 minutes per arm (typically 1) on a 2-core CPU.")  # fmt: skip
    else:
        measured = (f"With `{cfg.policy.model}` nothing is measured here yet; an iteration takes minutes per arm on a CPU.")
    return f"**The open session is a {cfg.env.name} session** (`{run_id}`, task `{cfg.env.task}`). {measured} {copy}"


def race_config(studio: Studio, run_id: str, iterations: Any, group_size: Any, step_limit: Any,
                target: str | None = "auto", eval_repeats: Any = None) -> Any:  # fmt: skip
    """The EMPO² arm's config: the target's (`race_target`), with the form's group size, step limit,
    iterations and test episodes per layout (a blank step limit or `eval_repeats` keeps the target's).
    ValueError names a bad value."""
    cfg = race_target(studio, run_id, target)[1]
    limit = cfg.env.step_limit if step_limit in (None, "") else whole_number(step_limit, "step limit", 1, MAX_STEP_LIMIT)
    repeats = cfg.train.eval_repeats if eval_repeats in (None, "") else whole_number(eval_repeats, "test episodes per layout", 1, MAX_EVAL_REPEATS)
    return cfg.with_overrides(
        rollout={"group_size": whole_number(group_size, "group size", 2, MAX_GROUP_SIZE)}, env={"step_limit": limit},
        train={"iterations": whole_number(iterations, "iterations", 1, MAX_ITERATIONS), "eval_repeats": repeats},
    ).validate()  # fmt: skip


def race_counts(eval_every: Any, seeds: Any) -> tuple[int, int]:
    """(evaluate every, seeds) from the form; ValueError names a bad one (seeds: 1 … `MAX_SEEDS`)."""
    return whole_number(eval_every, "evaluate every", 0), whole_number(seeds, "seeds", 1, MAX_SEEDS)


def race_expected(studio: Studio, run_id: str, iterations: Any, group_size: Any, step_limit: Any,
                  target: str | None = "auto", eval_every: Any = 0, seeds: Any = 1, eval_repeats: Any = None) -> str:  # fmt: skip
    """The "expected time" line for the form's values (`race_job.race_countdown`, the same figures
    the job starts from), or what is wrong with a value."""
    try:
        cfg = race_config(studio, run_id, iterations, group_size, step_limit, target, eval_repeats)
        every, n_seeds = race_counts(eval_every, seeds)
    except (ValueError, KeyError) as exc:  # a half-typed form or a session not made yet: say so, no error
        return f"**Expected time**: — ({readable_error(exc)})"
    return expected_text(race_countdown(studio, cfg, cfg.train.iterations, every, n_seeds))


def race_defaults(studio: Studio, run_id: str) -> tuple[int, int, Any]:
    """(iterations, group size, step limit) shown for the session: `RACE_FORM`'s iterations, the group
    size and step limit of what "auto" races (`race_target`)."""
    cfg = race_target(studio, run_id)[1]
    return RACE_FORM["iterations"], cfg.rollout.group_size, cfg.env.step_limit


@user_errors
def start_race(studio: Studio, run_id: str, iterations: Any, group_size: Any, step_limit: Any,
               target: str | None = "auto", eval_every: Any = 0, seeds: Any = 1,
               eval_repeats: Any = None) -> tuple[Any, ...]:  # fmt: skip
    """Start the race of `target` (`TARGETS`) as a job: `seeds` races (1 … `MAX_SEEDS`), a
    memory-free evaluation every `eval_every` iterations (0 = none) of `eval_repeats` episodes per test
    layout (None: the target's). Returns `job_panel.started(job)`."""
    if studio.jobs.running(JOB_KIND):
        raise ValueError("a race is already running; stop it first")
    cfg = race_config(studio, run_id, iterations, group_size, step_limit, target, eval_repeats)
    every, n_seeds = race_counts(eval_every, seeds)
    base = race_target(studio, run_id, target)[0]
    studio.check_compatible(cfg)
    n = cfg.train.iterations
    job = studio.jobs.start(
        JOB_KIND, lambda j: run_race_job(studio, j, run_id=base, cfg=cfg, iterations=n, eval_every=every, seeds=n_seeds),
        label=f"race EMPO² vs GRPO on {base} ({cfg.env.task})", run_id=run_id,
    )  # fmt: skip
    return jp.started(job)


def race_view(data: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(chart, table, verdict markdown) from a race job's data."""
    rows = data.get("rows", {})
    table = [[r.get("seed", ""), *arm_rows_summary({arm: [r]})[0]] for arm, arm_rows in rows.items() for r in arm_rows]
    frame = pd.DataFrame(sorted(table, key=lambda x: (str(x[0]), x[1], x[2])), columns=TABLE_HEADERS)
    verdict = data.get("verdict") or ""
    return charts.race_figure(rows, ARM_LABELS, data.get("evals", {})), frame, f"**{verdict}**" if verdict else ""


def poll_race(studio: Studio, job_id: str | None, seen: Any) -> tuple[Any, ...]:
    """Timer tick: (status html, chart, table, verdict, timer, seen)."""
    return jp.poll(studio.jobs, job_id, seen, 3, lambda job: race_view(job.snapshot()))


INTRO = (
    "**EMPO² vs GRPO.** Two runs from the same starting weights (the model as loaded, with its warm start, "
    "before any RL), trained side by side with interleaved iterations: **EMPO²** with the raced config, "
    "**GRPO** the same without memory rollouts (p = 0) and without the novelty bonus; GRPO never reads tips, so it writes none. The claim to check "
    "is the paper's: after training, EMPO²'s policy *without memory* solves more unseen layouts than GRPO's. "
    "*Evaluate every* plays every test layout without tips (*test episodes per layout* times each, T = 0.4) "
    "before the first iteration, every so many iterations and after the last: the chart's third panel "
    "(\"test success, no memory\", drawn once the first evaluation ends), with the "
    "lowest–highest band once several seeds have run. Each arm has its own session (`<session>-race-empo2`, "
    "`-race-grpo`; `-race2-…`, `-race3-…` for the next seed or the next race: compare them in the Sessions "
    "tab). **Class race** (the defaults) is the shortest race whose verdict matched the 60-iteration one on "
    "3 of 3 seeds (12–15 min on a 2-core CPU with this page open: 702 s, 738 s and 879 s on three such "
    "machines); "
    "**Benchmark race** is the "
    "benchmark's 60 iterations for one seed. ■ Stop ends the race within one lock-step, keeping every finished row and each arm's last finished "
    "iteration."
)


def target_choices(studio: Studio, run_id: str) -> list[tuple[str, str]]:
    """The "Race on" choices for the open session, as (label, value): "auto"'s pick first."""
    cfg = studio.session(run_id).config
    own = (f"the open session ({run_id}, {cfg.env.task})", "open")
    if races_itself(cfg):
        return [own]
    return [(f"a trap copy on the fixed family ({RACE_TRAP_TASK})", "trap"), own]


def build_race_tab(studio: Studio, run_id: gr.State) -> dict[str, Any]:
    """Components and wiring of the Race tab."""
    gr.Markdown(INTRO, elem_id="rc-intro")
    rid0 = studio.default_run_id
    iterations0, group0, limit0 = race_defaults(studio, rid0)
    note = gr.Markdown(race_note(studio, rid0), elem_id="rc-note")
    with gr.Accordion("Where memory matters: the race against the naive base rate (measured)", open=False,
                      elem_id="rc-base-rate"):  # fmt: skip
        gr.Markdown(base_rate.EXPLANATION, elem_id="rc-base-rate-text")
        gr.Plot(value=charts.base_rate_figure(base_rate.POINTS), show_label=False, elem_id="rc-base-rate-chart")
    choices0 = target_choices(studio, rid0)
    with gr.Row():
        target = gr.Radio(choices0, value=choices0[0][1], label="Race on", elem_id="rc-target")
        iterations = gr.Number(iterations0, label="Iterations", precision=None, elem_id="rc-iterations")
        group = gr.Number(group0, label="Group size N", precision=None, elem_id="rc-group")
        limit = gr.Number(limit0, label="Step limit (blank = the task's)", precision=None, elem_id="rc-step-limit")
        every = gr.Number(RACE_FORM["eval_every"], label="Evaluate every (iterations; 0 = never)", precision=None,
                          elem_id="rc-eval-every")  # fmt: skip
        repeats = gr.Number(RACE_FORM["eval_repeats"], label="Test episodes per layout (blank = the config's)", precision=None,
                            elem_id="rc-eval-repeats")  # fmt: skip
        seeds = gr.Number(RACE_FORM["seeds"], label=f"Seeds (1–{MAX_SEEDS})", precision=None, elem_id="rc-seeds")
    form = [run_id, iterations, group, limit, target, every, seeds, repeats]
    with gr.Row():
        class_preset = gr.Button("Class race", size="sm", elem_id="rc-preset-class")
        bench_preset = gr.Button("Benchmark race", size="sm", elem_id="rc-preset-benchmark")
    expected = gr.Markdown(race_expected(studio, rid0, iterations0, group0, limit0, choices0[0][1], RACE_FORM["eval_every"],
                                         RACE_FORM["seeds"], RACE_FORM["eval_repeats"]), elem_id="rc-expected")  # fmt: skip
    with gr.Row():
        start = gr.Button("▶ Start the race", variant="primary", elem_id="rc-start")
        stop = gr.Button("■ Stop", elem_id="rc-stop")
    panel = JobPanel.create("rc")
    verdict = gr.Markdown("", elem_id="rc-verdict")
    chart = gr.Plot(value=charts.race_figure({}, evals={}), show_label=False, elem_id="rc-chart")
    table = gr.Dataframe(headers=TABLE_HEADERS, value=[], interactive=False, label="Per iteration",
                         elem_id="rc-table", max_height=480)  # fmt: skip
    panel.on_start(start.click, partial(start_race, studio), form)
    panel.on_poll(partial(poll_race, studio), [chart, table, verdict])
    panel.on_stop(stop, studio.jobs)
    for box in (iterations, group, limit, target, every, seeds, repeats):
        # One queue for all seven: each change's line is computed from the form as it was sent, so they
        # must finish in the order they were sent, or a page load's late estimate overwrites the line for
        # the value typed after it (a loaded machine: a typed -1 said nothing in 240 s).
        box.change(partial(race_expected, studio), form, expected, show_progress="hidden",
                   concurrency_limit=1, concurrency_id="rc-expected")

    def preset(name: str, rid: str, picked: str) -> list[Any]:
        """A preset's values into the form, the step limit the target's own (so a preset also undoes a
        mistyped one); the expected time follows through the change events."""
        p = PRESETS[name]
        try:
            limit_value: Any = race_target(studio, rid, picked)[1].env.step_limit
        except (ValueError, KeyError):  # no such session any more: leave the field as it is
            limit_value = gr.skip()
        return [p["iterations"], p["group_size"], p["eval_every"], p["seeds"], p["eval_repeats"], limit_value]

    for button, name in ((class_preset, "class"), (bench_preset, "benchmark")):
        button.click(partial(preset, name), [run_id, target], [iterations, group, every, seeds, repeats, limit])

    def pick(rid: str, picked: str) -> dict[Any, Any]:
        """Another target picked: its group size and step limit."""
        cfg = race_target(studio, rid, picked)[1]
        return {group: gr.Number(value=cfg.rollout.group_size), limit: gr.Number(value=cfg.env.step_limit)}

    target.input(pick, [run_id, target], [group, limit])

    def refresh(rid: str) -> dict[Any, Any]:
        """A page load or session switch: the class race for what the session races by default (its
        group size and step limit), what to expect, and its expected time, from the races this machine
        has run by now."""
        it, g, s = race_defaults(studio, rid)
        choices = target_choices(studio, rid)
        f = RACE_FORM
        return {group: gr.Number(value=g), limit: gr.Number(value=s), note: gr.Markdown(race_note(studio, rid)),
                target: gr.Radio(choices=choices, value=choices[0][1]), iterations: gr.Number(value=it),
                every: gr.Number(value=f["eval_every"]), seeds: gr.Number(value=f["seeds"]),
                repeats: gr.Number(value=f["eval_repeats"]),
                expected: gr.Markdown(race_expected(studio, rid, it, g, s, choices[0][1], f["eval_every"], f["seeds"],
                                                    f["eval_repeats"]))}  # fmt: skip

    return {"panel": panel, "refresh": (refresh, [group, limit, note, target, iterations, every, seeds, repeats, expected])}
