"""The studio's named API: one endpoint per user action, typed parameters, JSON results.

`register(studio)` (called inside the page's `gr.Blocks`) adds the endpoints with `gr.api`, which
types each parameter from the function's hints; docs/api.md lists them with a `gradio_client`
example. Every endpoint goes through the same handlers as the page, so a refused input is refused
the same way (a `gr.Error` titled "Refused", which `gradio_client` raises as `AppError`), and work
runs as the same jobs. Endpoints that start work take `wait`: True returns when the job has finished
(at most `timeout_s` seconds), False returns at once; either way `job` polls it by id.

Results are plain JSON: a job is `{"job_id", "kind", "label", "run_id", "status", "progress",
"message", "error", "result"}` (result only once finished), an episode is `Episode.to_dict()`.
"""

from __future__ import annotations

import time
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import gradio as gr

from empo2_studio.app import adapt_tab, episodes_tab, pair_memory, sessions_tab, tips_tab, train_tab
from empo2_studio.app import lesson_tab as ls
from empo2_studio.app import race_tab as rc
from empo2_studio.app.handlers import user_errors
from empo2_studio.lesson import LESSON_TASKS, lesson_env

if TYPE_CHECKING:
    from empo2_studio.app.jobs import Job
    from empo2_studio.app.studio import Studio

ENDPOINTS = ("sessions", "session_info", "run_pair", "job", "stop_job", "play_lesson", "train", "distill",
             "adapt", "race", "tips", "add_tip", "offered_tip", "metrics")  # fmt: skip
"""The API's endpoint names (`/sessions`, …); every other event of the page is private."""

Split = Literal["train", "dev", "test"]
LessonStage = Literal["all", "naive", "tips", "memory", "distill", "naive_again"]
RaceTarget = Literal["auto", "open", "trap"]  # race_tab.TARGETS
POLL_S = 0.1


def jsonable(value: Any) -> Any:
    """`value` as JSON-ready data: dataclasses as dicts, tuples as lists, paths as strings."""
    if is_dataclass(value) and not isinstance(value, type):
        return jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def job_json(job: Job | None) -> dict[str, Any]:
    """A job's state as JSON (`result` only once it has finished); {"status": "unknown"} for None."""
    if job is None:
        return {"status": "unknown"}
    out = {"job_id": job.job_id, "kind": job.kind, "label": job.label, "run_id": job.run_id, "status": job.status,
           "progress": job.progress, "message": job.message, "error": job.error}  # fmt: skip
    if job.finished:
        out["result"] = jsonable(job.result)
    return out


def _await(studio: Studio, job_id: str, wait: bool, timeout_s: float) -> Job:
    """The job, once finished when `wait` (or when `timeout_s` has passed)."""
    job = studio.jobs.get(job_id)
    assert job is not None, job_id  # just started: still in the registry
    deadline = time.monotonic() + timeout_s
    while wait and not job.finished and time.monotonic() < deadline:
        time.sleep(POLL_S)
    return job


def register(studio: Studio) -> None:
    """Add the named endpoints (`ENDPOINTS`) to the `gr.Blocks` being built."""

    @user_errors
    def sessions() -> list[dict[str, Any]]:
        """Every session: run id, env, task, model, iteration, checkpoints, last score, p, q, lr, created."""
        frame = sessions_tab.sessions_frame(studio)
        return [jsonable(row) for row in frame.to_dict("records")]

    @user_errors
    def session_info(run_id: str) -> dict[str, Any]:
        """What the Episodes form plays for the session: env, task, its tasks, train variations, step limit."""
        env = studio.session(run_id).config.env
        return {"run_id": run_id, "env": env.name, "task": env.task,
                "tasks": list(studio.meta_env(env.name).task_names()),
                "train_variations": episodes_tab.variation_choices(studio, env.name, env.task, "train", run_id),
                "step_limit": env.step_limit if env.step_limit is not None
                else studio.meta_env(env.name).step_limit(env.task)}  # fmt: skip

    @user_errors
    def run_pair(run_id: str, task: str, variation: int, split: Split = "train", seed: int = 0,
                 temperature: float = 0.4, checkpoint: str = "current", wait: bool = True,
                 timeout_s: float = 600.0) -> dict[str, Any]:  # fmt: skip
        """Play a naive and a memory episode side by side on the session's env; returns the job and,
        once done, both episodes ("naive", "memory")."""
        job_id = episodes_tab.start_side_by_side(studio, run_id, None, task, variation, split, seed, temperature,
                                                 checkpoint)[0]  # fmt: skip
        job = _await(studio, job_id, wait, timeout_s)
        out = {"job": job_json(job)}
        if job.status in ("done", "stopped") and job.result:
            out["naive"], out["memory"] = (jsonable(e) for e in job.result)
        return out

    def job(job_id: str) -> dict[str, Any]:
        """Poll a job: status, progress, message, error, and its result once finished."""
        return job_json(studio.jobs.get(job_id))

    def stop_job(job_id: str) -> dict[str, Any]:
        """Ask a job to stop after its current step; returns its state."""
        studio.jobs.stop(job_id)
        return job_json(studio.jobs.get(job_id))

    @user_errors
    def play_lesson(stage: LessonStage = "all", task: str = "trap-light-bulb",
                    variations: list[int] = [0, 1],  # noqa: B006 - read only; gr.api shows the default
                    episodes: int = 8, distill_steps: int = 5, wait: bool = True,
                    timeout_s: float = 3600.0) -> dict[str, Any]:  # fmt: skip
        """Play the whole lesson or one stage with the curated tips; returns the job and, once done,
        each played stage's result (its per-variation rows, distill steps or stored tips)."""
        from empo2_studio.lesson import curated_tip

        settings = ls.settings_from_form(task, variations, episodes, distill_steps)  # refused before the tips
        tips = [curated_tip(task, v) for v in settings.variations]
        job_id = ls.start_lesson(studio, stage, task, list(map(str, variations)), episodes, distill_steps, *tips)[0]
        job = _await(studio, job_id, wait, timeout_s)
        return {"job": job_json(job), "stages": jsonable(job.result) if job.finished else []}

    @user_errors
    def train(run_id: str, iterations: int = 1, wait: bool = True, timeout_s: float = 3600.0) -> dict[str, Any]:
        """Train the session for `iterations` iterations with its own config; returns the job and,
        once done, one report (iteration, update mode, metrics) per iteration."""
        values = train_tab.config_form_values(studio, run_id)
        values[train_tab.TRAIN_FIELDS.index(("train", "iterations"))] = iterations
        job_id = train_tab.start_training(studio, run_id, *values)[0]
        return {"job": job_json(_await(studio, job_id, wait, timeout_s))}

    @user_errors
    def distill(run_id: str, episode_ids: list[str], wait: bool = True, timeout_s: float = 600.0) -> dict[str, Any]:
        """One off-policy distillation update on the session's memory episodes `episode_ids`."""
        job_id = train_tab.start_distill(studio, run_id, episode_ids)[0]
        return {"job": job_json(_await(studio, job_id, wait, timeout_s))}

    @user_errors
    def adapt(run_id: str, task: str, trials: int = 3, checkpoint: str = "current", wait: bool = True,
              timeout_s: float = 3600.0) -> dict[str, Any]:  # fmt: skip
        """Adapt to an unseen task with frozen weights: trial 0 without memory, then `trials` with it;
        returns the job and, once done, one row per trial."""
        job_id = adapt_tab.start_adapt(studio, run_id, checkpoint, task, trials)[0]
        return {"job": job_json(_await(studio, job_id, wait, timeout_s))}

    @user_errors
    def race(run_id: str, iterations: int = 1, group_size: int = 2, step_limit: int = 4, target: RaceTarget = "auto",
             eval_every: int = 0, seeds: int = 1, wait: bool = True, timeout_s: float = 3600.0) -> dict[str, Any]:  # fmt: skip
        """EMPO² vs GRPO from the same starting weights, once per seed (1 … 10); `target` "auto" races a
        fixed-family trap session itself and anything else on a trap copy on the fixed family ("open": the
        open session, "trap": the copy). `eval_every` > 0: memory-free test evaluations. Returns the job
        and, once done, each arm's rows (with their seed), evaluations and the verdict sentence."""
        job_id = rc.start_race(studio, run_id, iterations, group_size, step_limit, target, eval_every, seeds)[0]
        return {"job": job_json(_await(studio, job_id, wait, timeout_s))}

    @user_errors
    def tips(run_id: str, task: str = "", variation: int = -1) -> list[dict[str, Any]]:
        """The session's tips, optionally of one task and variation (-1 = every variation)."""
        rows = studio.store(run_id).list_tips(**({"task": task} if task else {}),
                                              **({"variation": variation} if variation >= 0 else {}))  # fmt: skip
        return [jsonable(t) for t in rows]

    @user_errors
    def add_tip(run_id: str, task: str, variation: int, text: str, score: float = 100.0) -> str:
        """Store a manual tip for (task, variation) of the session's env; returns the status line."""
        return tips_tab.add_tip(studio, run_id, task, variation, text, score)

    @user_errors
    def offered_tip(run_id: str, task: str, variation: int) -> str:
        """The Lesson's curated tip the Episodes tab offers for (task, variation) of the session's env
        (`pair_memory.tip_offer`); store it with `/add_tip` (score 100, as the tab's button does).
        Refused for a task or variation with no offer: only the Lesson tasks of the session's env have one."""
        studio.session(run_id)  # an unknown session is refused by name first
        text = pair_memory.tip_offer(studio, run_id, task, variation)
        if text is None:
            env = studio.session(run_id).config.env.name
            own = sorted(t for t in LESSON_TASKS if lesson_env(t) == env)
            raise ValueError(f"no tip is offered for {task!r} variation {variation} on a {env} session; the "
                             f"Episodes tab offers one for the Lesson's tasks there ({', '.join(own)}) and their variations")
        return text

    @user_errors
    def metrics(run_id: str) -> list[dict[str, Any]]:
        """The session's metrics.jsonl rows (training, distillation, evaluation, lesson, adaptation)."""
        return jsonable(studio.session(run_id).metrics())

    for fn in (sessions, session_info, run_pair, job, stop_job, play_lesson, train, distill, adapt, race, tips,
               add_tip, offered_tip, metrics):  # fmt: skip
        gr.api(fn, api_name=fn.__name__)
