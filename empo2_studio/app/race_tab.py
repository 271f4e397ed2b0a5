"""The Race tab: EMPO² vs GRPO from the same untrained weights, interleaved iterations (see `race.py`).

Arm "EMPO²" trains with the open session's config, arm "GRPO" with the same config minus memory
rollouts and the novelty bonus. Each arm gets its own session (`<session>-race-empo2` / `-race-grpo`,
listed in the Sessions tab for comparison) and optimizer; both share the one loaded model, whose LoRA
weights are swapped between iterations. Stop acts after the current iteration (both arms always
have played the same number); each arm's checkpoint is saved at the end. Each arm's row appears as
soon as that arm finishes an iteration, with the elapsed and expected time of the race.

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

from empo2_studio.app import charts
from empo2_studio.app import job_panel as jp
from empo2_studio.app.handlers import user_errors, whole_number
from empo2_studio.app.job_panel import JobPanel
from empo2_studio.app.jobs import Job
from empo2_studio.app.lesson_tab import measured_rates
from empo2_studio.config import EMBEDDED_MODEL, EnvConfig
from empo2_studio.lesson import Eta, minutes_text
from empo2_studio.lesson.timing import rate
from empo2_studio.envs.trap import TrapEnv
from empo2_studio.race import ARM_LABELS, ARMS, Race, arm_rows_summary, lora_state, race_verdict

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
equal. The benchmark race with them: 0.64 against GRPO's 0.00 (3 seeds); the paper's config: 0.00 against
0.00, an all-winning group told apart only by the novelty bonus undoing what a seed had learned
(docs/departures.md, "Skipping flat groups"). A session racing itself keeps its own."""
RACE_FORM = {"iterations": 60, "group_size": 8, "eval_every": 10, "seeds": 1}
"""The form's defaults: the benchmark race for one seed (about 45 min on a 2-core CPU)."""
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
    env = RACE_ENV
    return f"{run_id}-trap", cfg.with_overrides(
        env={"name": env.name, "task": env.task, "variations": env.variations, "step_limit": env.step_limit,
             "simplification": env.simplification},
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
    model = "the embedded 135M model" if cfg.policy.model == EMBEDDED_MODEL else f"`{cfg.policy.model}`"
    return (f"**The open session is a {cfg.env.name} session** (`{run_id}`, task `{cfg.env.task}`). With {model} "
            "episodes there rarely score, so both arms usually tie (the lines coincide) and one iteration takes "
            f"minutes per arm on a CPU. {copy}")  # fmt: skip


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
    """(iterations, group size, step limit) shown for the session: `RACE_FORM`'s iterations, the group
    size and step limit of what "auto" races (`race_target`)."""
    cfg = race_target(studio, run_id)[1]
    return RACE_FORM["iterations"], cfg.rollout.group_size, cfg.env.step_limit


@user_errors
def start_race(studio: Studio, run_id: str, iterations: Any, group_size: Any, step_limit: Any,
               target: str | None = "auto", eval_every: Any = 0, seeds: Any = 1) -> tuple[Any, ...]:  # fmt: skip
    """Start the race of `target` (`TARGETS`) as a job: `seeds` races (1 … `MAX_SEEDS`), a
    memory-free evaluation every `eval_every` iterations (0 = none). Returns `job_panel.started(job)`."""
    if studio.jobs.running(JOB_KIND):
        raise ValueError("a race is already running; stop it first")
    cfg = race_config(studio, run_id, iterations, group_size, step_limit, target)
    every = whole_number(eval_every, "evaluate every", 0)
    n_seeds = whole_number(seeds, "seeds", 1)
    if n_seeds > MAX_SEEDS:
        raise ValueError(f"seeds must be 1 … {MAX_SEEDS}, got {n_seeds}")
    base = race_target(studio, run_id, target)[0]
    studio.check_compatible(cfg)
    n = cfg.train.iterations
    job = studio.jobs.start(
        JOB_KIND, lambda j: run_race_job(studio, j, run_id=base, cfg=cfg, iterations=n, eval_every=every, seeds=n_seeds),
        label=f"race EMPO² vs GRPO on {base} ({cfg.env.task})", run_id=run_id,
    )  # fmt: skip
    return jp.started(job)


def run_race_job(studio: Studio, job: Job, *, run_id: str, cfg: Any, iterations: int, eval_every: int = 0,
                 seeds: int = 1) -> dict[str, Any]:  # fmt: skip
    """Job body: for each of `seeds` seeds (cfg.seed, cfg.seed + 1, …) both arms from the untrained
    adapter, `iterations` interleaved iterations, evaluated every `eval_every` (`Race.run`).
    `job.data`: "rows" = arm → metrics rows so far with their "seed" (updated as soon as an arm finishes
    an iteration), "evals" = arm → evaluation rows with their "seed", "sessions" = arm → run ids, and
    at the end "verdict" (`race_verdict`, "" without evaluations). Returns {"rows", "evals", "verdict"}.
    Nothing of a race outlives the job but its rows (trainers, optimizers and tip stores are released
    after each seed)."""
    job.update(message="preparing the model")
    policy = studio.fresh_policy()
    initial = lora_state(policy)
    rows: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    evals: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    sessions: dict[str, list[str]] = {arm: [] for arm in ARMS}
    per_iteration = cfg.rollout.group_size * cfg.rollout.variations_per_iteration
    eta: Eta | None = None
    try:
        for k in range(seeds):
            if job.stop_event.is_set():
                break
            seed = cfg.seed + k
            race = Race.create(studio.root, replace(cfg, seed=seed), policy=policy, embedder=studio.embedder(),
                               run_id=run_id, initial_state=initial)  # fmt: skip
            try:
                for arm, t in race.trainers.items():
                    sessions[arm].append(t.session.run_id)
                if eta is None:  # in episodes: an evaluation plays every test layout × repeats
                    n_eval = eval_episodes(race, cfg)
                    evals_per_seed = 0 if not eval_every else 1 + len(ARMS) * (-(-iterations // eval_every))
                    units = seeds * (len(ARMS) * iterations * per_iteration + evals_per_seed * n_eval)
                    per_episode = iteration_prior(studio, cfg)
                    eta = Eta(units, (per_episode[0] / per_iteration, per_episode[1]))
                job.update(sessions={a: list(v) for a, v in sessions.items()}, rows=_copy(rows), evals=_copy(evals),
                           message=f"seed {seed}: iteration 1 of {iterations} · sessions " + ", ".join(
                               t.session.run_id for t in race.trainers.values()))  # fmt: skip
                _run_one_seed(job, race, eta, seed=seed, seeds=(cfg.seed, seeds), iterations=iterations,
                              eval_every=eval_every, rows=rows, evals=evals, n_eval=n_eval, per_iteration=per_iteration)  # fmt: skip
            finally:
                race.close()
                del race
        verdict = race_verdict({a: e for a, e in evals.items() if e})
        job.update(verdict=verdict, rows=_copy(rows), evals=_copy(evals),
                   message=(verdict + " · " if verdict else "") + f"finished in {minutes_text(eta.elapsed if eta else 0.0)}"
                   " · checkpoints saved in " + ", ".join(r for v in sessions.values() for r in v))  # fmt: skip
        return {"rows": _copy(rows), "evals": _copy(evals), "verdict": verdict}
    finally:
        studio.fresh_policy()  # leave the shared model as the studio expects it ("fresh")


def _copy(by_arm: dict[str, list[dict]]) -> dict[str, list[dict]]:
    return {a: [dict(r) for r in v] for a, v in by_arm.items()}


def _run_one_seed(job: Job, race: Race, eta: Eta, *, seed: int, seeds: tuple[int, int], iterations: int,
                  eval_every: int, rows: dict[str, list[dict]], evals: dict[str, list[dict]], n_eval: int,
                  per_iteration: int) -> None:  # fmt: skip
    """One seed's race, reporting every arm iteration and evaluation into `job` as it ends."""
    first, count = seeds
    where = f"seed {seed} ({seed - first + 1} of {count})" if count > 1 else f"seed {seed}"

    def on_phase(arm: str, line: str) -> None:
        job.update(message=f"{where} · iteration {race.iteration + 1} of {iterations} · {ARM_LABELS.get(arm, arm)} · "
                           f"{line} · {eta.line()}")  # fmt: skip

    def on_arm(arm: str, report: Any) -> None:
        eta.finished(per_iteration)
        m = report.metrics
        rows[arm].append({"seed": seed, **race.rows[arm][-1]})
        job.update(progress=eta.done / eta.units, rows=_copy(rows),
                   message=f"{where} · {ARM_LABELS.get(arm, arm)} finished iteration {report.iteration} of {iterations}: "
                           f"success {m.get('rollout/success_rate', 0):.0%}, score {m.get('rollout/score_mean', 0):.1f}"
                           f" · {eta.line()}")  # fmt: skip

    def on_eval(arm: str, row: dict[str, float]) -> None:
        if row["iteration"] > 0 or arm == next(iter(race.trainers)):  # the shared start is played once
            eta.finished(n_eval)
        evals[arm].append({"seed": seed, **row})
        job.update(progress=eta.done / eta.units, evals=_copy(evals),
                   message=f"{where} · {ARM_LABELS.get(arm, arm)} without memory at iteration {int(row['iteration'])}: "
                           f"test success {row['eval/success_rate']:.0%} · {eta.line()}")  # fmt: skip

    race.run(iterations, stop=job.stop_event, on_phase=on_phase, on_arm=on_arm, eval_every=eval_every, on_eval=on_eval)


def eval_episodes(race: Race, cfg: Any) -> int:
    """Episodes one memory-free evaluation plays: test layouts (capped by `train.eval_variations`) × repeats."""
    env = next(iter(race.trainers.values())).pool.take(1)[0]
    return min(cfg.train.eval_variations, len(env.variations(cfg.env.task, "test"))) * cfg.train.eval_repeats


def iteration_prior(studio: Studio, cfg: Any) -> tuple[float, str]:
    """Expected seconds of one arm's iteration before one is measured: the lesson's seconds per
    episode (measured, or the labelled rough estimate) × episodes per iteration."""
    per_episode, measured = rate(measured_rates(studio), "episode")
    episodes = cfg.rollout.group_size * cfg.rollout.variations_per_iteration
    return per_episode * episodes, ("from the lesson's episode time" if measured else "rough estimate")


def race_view(data: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(chart, table, verdict markdown) from a race job's data."""
    rows = data.get("rows", {})
    table = [[r.get("seed", ""), *arm_rows_summary({arm: [r]})[0]] for arm, arm_rows in rows.items() for r in arm_rows]
    frame = pd.DataFrame(sorted(table, key=lambda x: (str(x[0]), x[1], x[2])), columns=TABLE_HEADERS)
    verdict = data.get("verdict") or ""
    return charts.race_figure(rows, ARM_LABELS, data.get("evals", {})), frame, f"**{verdict}**" if verdict else ""


def poll_race(studio: Studio, job_id: str | None, seen: int) -> tuple[Any, ...]:
    """Timer tick: (status html, chart, table, verdict, timer, seen version)."""
    return jp.poll(studio.jobs, job_id, seen, 3, lambda job: race_view(job.snapshot()))


INTRO = (
    "**EMPO² vs GRPO.** Two runs from the same untrained weights, trained side by side with interleaved "
    "iterations: **EMPO²** with the raced config, **GRPO** the same without memory rollouts "
    "(p = 0) and without the novelty bonus; GRPO never reads tips, so it writes none. The claim to check "
    "is the paper's: after training, EMPO²'s policy *without memory* solves more unseen layouts than GRPO's. "
    "*Evaluate every* plays every test layout without tips (4 times each, T = 0.4) before the first "
    "iteration, every so many iterations and after the last: the right-hand panel, with the lowest–highest "
    "band once several seeds have run. Each arm has its own session (`<session>-race-empo2`, `-race-grpo`, "
    "`-race2-…` for the next seed: compare them in the Sessions tab). The defaults are the benchmark race for "
    "one seed, about 45 min on a 2-core CPU; Stop acts after the current iteration."
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
    choices0 = target_choices(studio, rid0)
    with gr.Row():
        target = gr.Radio(choices0, value=choices0[0][1], label="Race on", elem_id="rc-target")
        iterations = gr.Number(iterations0, label="Iterations", precision=0, elem_id="rc-iterations")
        group = gr.Number(group0, label="Group size N", precision=0, elem_id="rc-group")
        limit = gr.Number(limit0, label="Step limit (blank = the task's)", precision=0, elem_id="rc-step-limit")
        every = gr.Number(RACE_FORM["eval_every"], label="Evaluate every (iterations; 0 = never)", precision=0,
                          elem_id="rc-eval-every")  # fmt: skip
        seeds = gr.Number(RACE_FORM["seeds"], label=f"Seeds (1–{MAX_SEEDS})", precision=0, elem_id="rc-seeds")
    with gr.Row():
        start = gr.Button("▶ Start the race", variant="primary", elem_id="rc-start")
        stop = gr.Button("■ Stop after this iteration", elem_id="rc-stop")
    panel = JobPanel.create("rc")
    verdict = gr.Markdown("", elem_id="rc-verdict")
    chart = gr.Plot(value=charts.race_figure({}, evals={}), show_label=False, elem_id="rc-chart")
    table = gr.Dataframe(headers=TABLE_HEADERS, value=[], interactive=False, label="Per iteration",
                         elem_id="rc-table", max_height=480)  # fmt: skip
    panel.on_start(start.click, partial(start_race, studio), [run_id, iterations, group, limit, target, every, seeds])
    panel.on_poll(partial(poll_race, studio), [chart, table, verdict])
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
