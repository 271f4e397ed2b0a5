"""Job bodies: what the studio's background threads do (episodes, training, distillation, adaptation).

Each function takes the `Studio` and the running `Job`, drives the env / policy / memory / trainer
APIs, and streams what the UI shows into `job.data`. They run with the model lock held (see
`jobs.JobRegistry.start`). A Stop cuts the lock-step or micro-batch in progress (`stopping`); each body
keeps what finished before it and says so. Each sets `job.countdown` (`lesson.timing.Countdown`) over
its units, counted down from the unit times measured here: for training this session's earlier
iterations, else the lesson's episode time × episodes per iteration; for a distill step the lesson's;
for a pair's lock-steps and adaptation trials, the job's own first unit.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from empo2_studio.app.jobs import Job
from empo2_studio.app.pair_memory import lesson_step_limit
from empo2_studio.lesson.timing import Countdown
from empo2_studio.stopping import StopRequested
from empo2_studio.types import Split

if TYPE_CHECKING:
    from empo2_studio.app.studio import Studio


def side_by_side(
    studio: Studio,
    job: Job,
    *,
    run_id: str,
    env_name: str,
    task: str,
    variation: int,
    split: Split,
    seed: int,
    temperature: float,
    checkpoint: str | None,
) -> tuple[Any, Any]:
    """Play a naive and a memory episode at once, stream their steps, save both to the session.

    `job.data`: "naive"/"memory" → list[Step] as they happen; "played" → (naive, memory) once both
    episodes have ended (before their tips are written); "episodes" → the saved (naive, memory) at the end.
    The pair is saved with a shared `group_id` ("side-…") so the Episodes tab can reopen it.
    A ScienceWorld Lesson task plays the Lesson's step limit (`pair_memory.lesson_step_limit`).
    Stop: while the episodes play, the pair is cut within one lock-step and nothing of it is saved; once
    both have ended, the tip writing is skipped and the episodes are still saved.
    """
    from empo2_studio.policy.note_writer import load_note_writer
    from empo2_studio.rollout import play_side_by_side, write_group_tips

    job.update(message="preparing the model", header=f"{task} · variation {variation} ({split}) · seed {seed}")
    policy = studio.policy()
    studio.use_checkpoint(run_id, checkpoint)
    store = studio.store(run_id)
    envs = studio.episode_envs(run_id, env_name)
    lesson_limit = lesson_step_limit(studio.session(run_id).config.env, task)  # find-animal on ScienceWorld: 10
    limit = min(envs[0].step_limit(task), lesson_limit) if lesson_limit else envs[0].step_limit(task)
    studio.seed(seed)
    job.countdown = Countdown({"lock-step": limit})  # a step limit: an upper bound, episodes may end sooner

    def on_step(side: str, step: Any) -> None:
        if step.index + 1 > job.countdown.done["lock-step"]:  # the first side to reach a step times it
            job.countdown.finished("lock-step")
        job.append(side, step)
        done = max(len(job.data.get("naive", ())), len(job.data.get("memory", ())))
        job.update(progress=done / limit, message=f"step {done} of at most {limit}")

    job.update(message="playing")
    try:
        naive, memory = play_side_by_side(
            envs, policy, store, task=task, variation=variation, split=split, seed=seed,
            temperature=temperature, on_step=on_step, write_tips=False, keep_caches=True, step_limit=limit,
        )  # fmt: skip
    except StopRequested:
        job.update(message=f"stopped at step {job.countdown.done['lock-step']} of the episodes: nothing of the pair saved")
        return None
    job.update(played=(naive, memory))  # both columns say "finished" while the tips are written
    # Reflection is a separate phase so the UI can say what the model is doing meanwhile, and so a
    # Stop pressed while the episodes play (they cannot be cut mid-run) skips it.
    if job.stop_requested:
        for episode in (naive, memory):
            policy.forget(episode.episode_id)  # the caches kept for the tips that are not written
        job.update(message="episodes saved, no tips written")
    else:
        job.update(message="both episodes finished; the model is writing their tips")
        writer, context = load_note_writer(studio.session(run_id).config, policy)
        naive, memory = write_group_tips(policy, store, [naive, memory], writer=writer, note_context=context)
    group = f"side-{uuid.uuid4().hex[:10]}"
    naive, memory = replace(naive, group_id=group), replace(memory, group_id=group)
    studio.session(run_id).append_episodes([naive, memory])
    if not job.stop_requested:
        job.update(message=f"finished: naive {naive.score:g} · memory {memory.score:g}")
    job.update(episodes=(naive, memory))
    return naive, memory


def train(studio: Studio, job: Job, *, run_id: str, iterations: int) -> list[Any]:
    """Run `iterations` trainer iterations; stop after the current one when asked.

    `job.data["reports"]` grows by one `IterationReport` per iteration. A checkpoint is saved at the
    end (also after a stop) so the session stays consistent and nothing trained is lost.
    """
    job.update(message="preparing the trainer")
    trainer = studio.trainer(run_id)
    start = trainer.iteration
    earlier = [float(r["time/iteration"]) for r in trainer.session.metrics()
               if r.get("kind") == "train" and r.get("time/iteration")]  # fmt: skip
    if earlier:
        prior = (sum(earlier) / len(earlier), "this session's earlier iterations")
    else:  # nothing trained here yet: the lesson's naive episodes on this machine × episodes per iteration
        from empo2_studio.app.lesson_tab import measured_rates  # late: the lesson tab builds on the studio
        from empo2_studio.lesson.timing import rate

        per, measured = rate(measured_rates(studio), "episode")
        r = trainer.cfg.rollout
        prior = (per * r.group_size * r.variations_per_iteration, "the lesson's episodes" if measured else "rough estimate")
    job.countdown = Countdown({"iteration": iterations}, {"iteration": prior})

    def on_report(report: Any) -> None:
        job.countdown.finished("iteration")
        job.append("reports", report)
        done = report.iteration - start
        job.update(progress=done / iterations,
                   message=f"iteration {report.iteration} ({done}/{iterations}) · {report.update_mode}"
                           + _no_signal_note(report.metrics, "its group"))

    job.update(message=f"iteration {start + 1} ({0}/{iterations})")
    # what the current iteration is doing (it can take minutes on a CPU)
    trainer.on_phase = lambda line: job.update(
        message=f"iteration {trainer.iteration} ({trainer.iteration - start - 1}/{iterations}) · {line}")
    cut = False
    try:
        trainer.train(iterations, stop=job.stop_event, on_report=on_report)
    except StopRequested:  # the iteration in progress is dropped (the trainer rolled it back)
        cut = True
    finally:
        trainer.on_phase = None
    reports = list(job.snapshot().get("reports", []))
    if not reports:
        job.update(message=f"stopped during iteration {start + 1}: no iteration finished; nothing saved")
        return reports
    job.update(message=f"saving checkpoint after iteration {trainer.iteration}")
    path = trainer.save_checkpoint()
    head = f"stopped during iteration {trainer.iteration + 1}: " if cut or job.stop_requested else ""
    job.update(checkpoint=str(path), message=f"{head}{len(reports)} iteration(s) done · checkpoint {path.name}")
    return reports


def distill(studio: Studio, job: Job, *, run_id: str, episode_ids: list[str]) -> Any:
    """One off-policy distillation update on the chosen (memory) episodes, then a checkpoint."""
    job.update(message=f"distilling {len(episode_ids)} episode(s)")
    trainer = studio.trainer(run_id)
    from empo2_studio.app.lesson_tab import measured_rates  # late: the lesson tab builds on the studio
    from empo2_studio.lesson.timing import rate

    per, measured = rate(measured_rates(studio), "distill_episode")
    job.countdown = Countdown({"distill step": 1}, {"distill step": (
        per * len(episode_ids), "the lesson's distill steps here" if measured else "rough estimate")})
    try:
        report = trainer.distill(episode_ids)
    except StopRequested:
        job.update(message="stopped during the distill step: the weights are unchanged; nothing saved")
        return None
    job.append("reports", report)
    path = trainer.save_checkpoint()
    note = _no_signal_note(report.metrics, "their groups (pick episodes that scored differently from their group)")
    job.update(progress=1.0, checkpoint=str(path), message=f"distilled{note} · checkpoint {path.name}")
    return report


def _no_signal_note(metrics: dict, whose: str) -> str:
    """Why an update left the weights as they were: every advantage was 0 (GRPO needs returns that
    differ within a group), so there was nothing to learn."""
    if metrics.get("train/no_signal"):
        return f" · no learning signal: every episode's return equals the mean of {whose}; weights unchanged"
    return ""


def adapt(studio: Studio, job: Job, *, run_id: str, checkpoint: str | None, task: str, trials: int) -> list[dict]:
    """Trial 0 without memory, then `trials` memory trials on an unseen task with frozen weights
    (`evaluation.adapt`); records the adapter checksum before and after (equal = weights untouched).

    `job.data`: "trials" → the per-trial rows (`adapt/trial`, `adapt/score_mean`, …);
    "checksum_before"/"checksum_after". A stop request ends the run at the next trial boundary.
    """
    from empo2_studio import evaluation
    from empo2_studio.policy.note_writer import load_note_writer

    session = studio.session(run_id)
    iteration = studio.use_checkpoint(run_id, checkpoint)
    before = studio.adapter_checksum()
    job.update(checksum_before=before, message=f"trial 0 of {trials} (no-memory baseline)")
    job.countdown = Countdown({"trial": trials + 1})

    def on_trial(row: dict) -> None:
        job.countdown.finished("trial")
        job.append("trials", dict(row))
        done = len(job.data["trials"])
        job.update(progress=done / (trials + 1), message=f"trial {done - 1} of {trials} done")

    writer, context = load_note_writer(session.config, studio.policy())
    try:
        result = evaluation.adapt(
            studio.policy(), studio.env_pool(run_id), studio.store(run_id), session.config, session, task,
            iteration=iteration, trials=trials, on_trial=on_trial, stop=job.stop_event, writer=writer,
            note_context=context,
        )  # fmt: skip
    except StopRequested:  # the trial in progress is dropped; the finished ones are in the session
        done = len(job.snapshot().get("trials", []))
        job.update(message=f"stopped during trial {done}: {done} trial(s) finished and saved in {run_id}"
                           if done else "stopped during trial 0: no trial finished; nothing saved")  # fmt: skip
        return list(job.snapshot().get("trials", []))
    after = studio.adapter_checksum()
    verdict = "weights untouched" if after == before else "WEIGHTS CHANGED"
    job.update(checksum_after=after, message=f"{verdict} · adapter checksum {after[:12]}")
    return result
