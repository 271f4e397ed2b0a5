"""The Race tab's job: seeds of `race.Race`, its progress on the page, its countdown and closing line.

Times come from this machine: each kind of step (an EMPO² iteration, a GRPO iteration, one memory-free
test episode) is counted down from its own measured time (`lesson.timing.Countdown`): the steps of
the running race once measured, before that the race sessions this studio ran earlier (their
`time/iteration` and `time/eval` rows, per episode step, scaled to the form's group size and step
limit), else the lesson's naive-episode time, else the lesson's rough figure (both taken as an 8-step
episode and scaled the same way). The tab's "expected time" line and the
job's first estimate come from the same `race_countdown`, so they agree.

A Stop cuts the step in progress (`stopping`): every finished iteration and evaluation row stays, each
arm keeps the checkpoint of its last finished iteration, and the closing line says what ran and what
was saved ("no evaluation or iteration finished; nothing saved" when that is so).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from empo2_studio.app.jobs import Job
from empo2_studio.app.lesson_tab import measured_rates
from empo2_studio.lesson import minutes_text
from empo2_studio.lesson.timing import Countdown, rate, seconds_text
from empo2_studio.race import ARM_LABELS, ARMS, Race, lora_state, race_verdict
from empo2_studio.stopping import StopRequested

if TYPE_CHECKING:
    from empo2_studio.app.studio import Studio

ARM_UNIT = {arm: f"{ARM_LABELS.get(arm, arm)} iteration" for arm in ARMS}
"""The countdown kind of each arm's iteration (the arms' iterations differ in time: GRPO writes no tips)."""
EVAL_UNIT = "test episode"
TEST_LAYOUTS = 12
"""Test layouts of the trap's families (`TrapEnv.variations(task, "test")`), for the expected time
before a race has built its env."""


def evaluations_per_seed(iterations: int, eval_every: int) -> int:
    """Evaluations one seed plays: before the first iteration (shared by the arms, played once), and per
    arm after every `eval_every`-th iteration and after the last; 0 when `eval_every` is 0."""
    if not eval_every:
        return 0
    return 1 + len(ARMS) * (-(-iterations // eval_every))


def race_plan(iterations: int, eval_every: int, seeds: int, n_eval: int) -> dict[str, int]:
    """Countdown kinds → units of a race: each arm's iterations over all seeds, and its test episodes
    (`n_eval` per evaluation)."""
    plan = {ARM_UNIT[arm]: seeds * iterations for arm in ARMS}
    plan[EVAL_UNIT] = seeds * evaluations_per_seed(iterations, eval_every) * n_eval
    return plan


LESSON_EPISODE_STEPS = 8
"""The step limit the lesson's per-episode figures (measured or rough) stand for: an episode of the class
race's trap copy plays 8 steps, and its training episodes cost about a lesson's naive one (EMPO² 376.3 s
over 120 episodes = 3.1 s and GRPO 2.2 s in docs/benchmarks/race_studio.md, against the rough 3.0 s)."""


def earlier_race_rates(root: Path, step_limit: Callable[[str], int]) -> dict[str, float]:
    """Seconds per episode step (an episode's time over its session's `step_limit(run_id)`) of each arm's
    training episodes (keys `ARM_UNIT`) and of test episodes (`EVAL_UNIT`), from the newest race session
    of each arm under `root` that recorded them; absent when none did. Per step, so a race of another
    step limit scales them (episodes that fail run to the limit)."""
    out: dict[str, float] = {}
    for arm in ARMS:
        for path in sorted(root.glob(f"*-race*-{arm.lower()}/metrics.jsonl"), key=lambda p: p.stat().st_mtime):
            try:
                steps = step_limit(path.parent.name)
            except (OSError, ValueError, KeyError):  # no readable config: its times say nothing
                continue
            train, test = [], []
            for line in path.read_text(encoding="utf-8").splitlines():
                row = json.loads(line) if line.strip() else {}
                if row.get("kind") == "train" and row.get("time/iteration") and row.get("rollout/episodes"):
                    train.append(float(row["time/iteration"]) / float(row["rollout/episodes"]) / steps)
                if row.get("kind") == "eval" and row.get("time/eval") and row.get("eval/episodes"):
                    test.append(float(row["time/eval"]) / float(row["eval/episodes"]) / steps)
            if train:  # the newest session wins: the machine's load changes
                out[ARM_UNIT[arm]] = sum(train) / len(train)
            if test:
                out[EVAL_UNIT] = sum(test) / len(test)
    return out


def race_countdown(studio: Studio, cfg: Any, iterations: int, eval_every: int, seeds: int,
                   n_eval: int | None = None) -> Countdown:  # fmt: skip
    """The countdown of a race with these settings, its priors from this machine (module docstring).
    `n_eval`: test episodes per evaluation (default: `TEST_LAYOUTS` capped by `train.eval_variations`,
    × `train.eval_repeats`)."""
    if n_eval is None:
        n_eval = min(cfg.train.eval_variations, TEST_LAYOUTS) * cfg.train.eval_repeats
    episodes = cfg.rollout.group_size * cfg.rollout.variations_per_iteration

    def step_limit(env: Any) -> int:  # a session's: its own, else its task's
        return int(env.step_limit or studio.meta_env(env.name).step_limit(env.task))

    steps = step_limit(cfg.env)
    earlier = earlier_race_rates(Path(studio.root), lambda run_id: step_limit(studio.session(run_id).config.env))
    lesson, measured = rate(measured_rates(studio), "episode")
    fallback = (lesson / LESSON_EPISODE_STEPS, "from the lesson's naive episodes" if measured else "rough estimate")
    priors = {}
    for unit in (*ARM_UNIT.values(), EVAL_UNIT):
        per_step, label = (earlier[unit], "from an earlier race here") if unit in earlier else fallback
        priors[unit] = (per_step * steps * (1 if unit == EVAL_UNIT else episodes), label)
    return Countdown(race_plan(iterations, eval_every, seeds, n_eval), priors)


def expected_text(countdown: Countdown) -> str:
    """The tab's "expected time" line for a race's countdown (its estimate before it runs)."""
    left = countdown.estimate
    labels = sorted({label for _, label in countdown.priors.values()})
    total = minutes_text(left) if left is not None else "unknown"
    return (f"**Expected time** on this machine: {total} ({countdown.sources()}; {', '.join(labels)}). "
            "While it runs, the status line counts down from the steps measured so far.")


def eval_episodes(race: Race, cfg: Any) -> int:
    """Episodes one memory-free evaluation plays: test layouts (capped by `train.eval_variations`) × repeats."""
    env = next(iter(race.trainers.values())).pool.take(1)[0]
    return min(cfg.train.eval_variations, len(env.variations(cfg.env.task, "test"))) * cfg.train.eval_repeats


def run_race_job(studio: Studio, job: Job, *, run_id: str, cfg: Any, iterations: int, eval_every: int = 0,
                 seeds: int = 1) -> dict[str, Any]:  # fmt: skip
    """Job body: for each of `seeds` seeds (cfg.seed, cfg.seed + 1, …) both arms from the untrained
    adapter, `iterations` interleaved iterations, evaluated every `eval_every` (`Race.run`).
    `job.data`: "rows" = arm → metrics rows so far with their "seed" (updated as soon as an arm finishes
    an iteration), "evals" = arm → evaluation rows with their "seed", "sessions" = arm → run ids,
    "saved" = the checkpoints kept ("<session> (iteration k)"), and at the end "verdict"
    (`race_verdict`, "" without evaluations). `job.countdown` counts the race down. A Stop ends it
    within one lock-step (module docstring). Returns {"rows", "evals", "verdict", "saved", "stopped"}.
    Nothing of a race outlives the job but its rows and checkpoints (trainers, optimizers and tip
    stores are released after each seed)."""
    # counted from the click: the model's preparation is part of the wait (its time is no unit's)
    job.countdown = race_countdown(studio, cfg, iterations, eval_every, seeds)
    job.update(message="preparing the model")
    policy = studio.fresh_policy()
    initial = lora_state(policy)
    rows: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    evals: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    sessions: dict[str, list[str]] = {arm: [] for arm in ARMS}
    saved: list[str] = []
    now = {"doing": "preparing the model"}  # what runs now, for the closing line of a stopped race
    stopped = False
    try:
        for k in range(seeds):
            if job.stop_event.is_set():
                stopped = True
                break
            seed = cfg.seed + k
            race = Race.create(studio.root, replace(cfg, seed=seed), policy=policy, embedder=studio.embedder(),
                               run_id=run_id, initial_state=initial)  # fmt: skip
            try:
                for arm, t in race.trainers.items():
                    sessions[arm].append(t.session.run_id)
                n_eval = eval_episodes(race, cfg)  # the env's own count (a ScienceWorld target has its own)
                planned = seeds * evaluations_per_seed(iterations, eval_every) * n_eval
                if k == 0 and job.countdown.plan[EVAL_UNIT] != planned:
                    job.countdown.replan(EVAL_UNIT, planned)
                job.countdown.restart_unit()  # building the sessions is no step of the race
                job.update(sessions={a: list(v) for a, v in sessions.items()}, message=f"seed {seed}: sessions "
                           + ", ".join(t.session.run_id for t in race.trainers.values()))  # fmt: skip
                _run_one_seed(job, race, seed=seed, seeds=(cfg.seed, seeds), iterations=iterations,
                              eval_every=eval_every, rows=rows, evals=evals, now=now)  # fmt: skip
            except StopRequested:
                stopped = True
            finally:
                saved += [f"{race.trainers[a].session.run_id} (iteration {race.trainers[a].iteration})" for a in race.saved]
                race.close()
                for arm, run in drop_empty_sessions(race).items():
                    sessions[arm].remove(run)
                job.update(sessions={a: list(v) for a, v in sessions.items()})
                del race
            if stopped:
                break
        verdict = race_verdict({a: e for a, e in evals.items() if e})
        elapsed = job.countdown.elapsed
        stopped = stopped or job.stop_event.is_set()
        job.update(verdict=verdict, rows=_copy(rows), evals=_copy(evals), saved=list(saved),
                   message=closing_line(verdict, elapsed, rows, evals, saved, now["doing"] if stopped else None))  # fmt: skip
        return {"rows": _copy(rows), "evals": _copy(evals), "verdict": verdict, "saved": saved, "stopped": stopped}
    finally:
        studio.fresh_policy()  # leave the shared model as the studio expects it ("fresh")


def drop_empty_sessions(race: Race) -> dict[str, str]:
    """Remove the race's session folders when none of them recorded anything (no metrics row, episode,
    checkpoint or tip: a race stopped before its first evaluation finished), so a quick Start and Stop
    leaves no empty `-race-` sessions behind. A seed where any arm recorded something keeps both.
    Returns arm → run id of each folder actually removed."""
    sessions = {arm: t.session for arm, t in race.trainers.items()}
    # tips count too: an arm's own, or a user's added meanwhile in the Tips tab
    if any(t.session.metrics() or t.session.episodes() or t.session.checkpoints() or t.store.count()
           for t in race.trainers.values()):  # fmt: skip
        return {}
    for s in sessions.values():
        shutil.rmtree(s.dir, ignore_errors=True)
    return {arm: s.run_id for arm, s in sessions.items() if not s.dir.exists()}


def closing_line(verdict: str, elapsed: float, rows: dict[str, list[dict]], evals: dict[str, list[dict]],
                 saved: list[str], stopped_during: str | None) -> str:  # fmt: skip
    """The last status line: the verdict, how long, what ran (iterations per arm and seed, evaluations)
    and what was saved; for a stopped race (`stopped_during` = what was running) it starts "stopped"."""
    seeds = sorted({r["seed"] for v in rows.values() for r in v} | {r["seed"] for v in evals.values() for r in v})
    ran = []
    for seed in seeds:
        its = {ARM_LABELS.get(a, a): sum(1 for r in v if r["seed"] == seed) for a, v in rows.items()}
        n_evals = len({(a, r["iteration"]) for a, v in evals.items() for r in v if r["seed"] == seed and r["iteration"]})
        n_evals += any(r["seed"] == seed and not r["iteration"] for v in evals.values() for r in v)
        arms = ", ".join(f"{a} {n}" for a, n in its.items())
        ran.append(f"seed {seed}: iterations {arms}; {n_evals} evaluation(s)")
    what = "; ".join(ran)
    if saved:
        kept = "checkpoints saved: " + ", ".join(saved)
    elif ran:  # an evaluation finished: its rows and episodes are in the sessions, no weights changed
        kept = "no iteration finished: no checkpoint saved; the finished evaluations are kept in the race's sessions"
    else:
        kept = "no evaluation or iteration finished; nothing saved, no session kept"
    head = f"stopped during {stopped_during} after {minutes_text(elapsed)}" if stopped_during else (
        f"finished in {minutes_text(elapsed)}")  # fmt: skip
    return " · ".join(x for x in (verdict, head, what, kept) if x)


def _copy(by_arm: dict[str, list[dict]]) -> dict[str, list[dict]]:
    return {a: [dict(r) for r in v] for a, v in by_arm.items()}


def _run_one_seed(job: Job, race: Race, *, seed: int, seeds: tuple[int, int], iterations: int, eval_every: int,
                  rows: dict[str, list[dict]], evals: dict[str, list[dict]], now: dict[str, str]) -> None:  # fmt: skip
    """One seed's race, reporting every arm iteration, test layout and evaluation into `job` as it ends."""
    first, count = seeds
    where = f"seed {seed} ({seed - first + 1} of {count})" if count > 1 else f"seed {seed}"
    countdown: Countdown = job.countdown
    played = {"key": None, "n": 0}  # episodes of the running evaluation already counted down

    def say(line: str, **data: Any) -> None:
        now["doing"] = f"{where}, {line}"
        left = countdown.left()
        total = countdown.elapsed + left if left is not None else None
        job.update(progress=min(countdown.elapsed / total, 0.99) if total else None, message=f"{where} · {line}", **data)

    def on_phase(arm: str, line: str) -> None:
        say(f"iteration {race.iteration + 1} of {iterations} · {ARM_LABELS.get(arm, arm)} · {line}")

    def on_arm(arm: str, report: Any) -> None:
        countdown.finished(ARM_UNIT[arm])
        m = report.metrics
        rows[arm].append({"seed": seed, **race.rows[arm][-1]})
        say(f"{ARM_LABELS.get(arm, arm)} finished iteration {report.iteration} of {iterations}: success "
            f"{m.get('rollout/success_rate', 0):.0%}, score {m.get('rollout/score_mean', 0):.1f} "
            f"({seconds_text(float(m.get('time/iteration', 0.0)))})", rows=_copy(rows))  # fmt: skip

    def on_progress(arm: str | None, n: int, total: int, won: int) -> None:
        key = (race.iteration, arm)
        if played["key"] != key:
            played.update(key=key, n=0)
        countdown.finished(EVAL_UNIT, n - played["n"])
        played["n"] = n
        what = ("the evaluation before training (one for both arms: same weights)" if arm is None else
                f"{ARM_LABELS.get(arm, arm)}'s evaluation at iteration {race.iteration}")  # fmt: skip
        say(f"{what}: {n} of {total} test episodes played without memory, {won} won")

    def on_eval(arm: str, row: dict[str, float]) -> None:
        evals[arm].append({"seed": seed, **row})
        say(f"{ARM_LABELS.get(arm, arm)} without memory at iteration {int(row['iteration'])}: test success "
            f"{row['eval/success_rate']:.0%}", evals=_copy(evals))  # fmt: skip

    if eval_every:
        say("the evaluation before training (one for both arms: same weights): starting")
    race.run(iterations, stop=job.stop_event, on_phase=on_phase, on_arm=on_arm, eval_every=eval_every,
             on_eval=on_eval, on_progress=on_progress)  # fmt: skip


__all__ = ["ARM_UNIT", "EVAL_UNIT", "closing_line", "earlier_race_rates", "eval_episodes", "expected_text",
           "race_countdown", "race_plan", "run_race_job"]  # fmt: skip
