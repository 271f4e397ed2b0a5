"""Lock-step rollouts: N episodes played together, one batched `policy.sample` call per step.

Implements the acting half of one EMPO² iteration (paper §4.2, Algorithm 1; method.md §1.2 steps 2–3):
- every episode of a group starts the same task variation on its own env instance;
- at each step the still-running episodes are asked for their next action in ONE batched sampling
  call, then each env executes its action;
- memory-mode episodes retrieve tips at every step (query = the conversation so far, tip-free, plus the
  current observation; a structured memory is asked at the start and on entering a new place,
  `rollout.retrieval`) and see them appended to that turn's user message; earlier tips blocks stay in
  the history, as in the recipe;
- every step records both prompt variants (`Step.user_message` without tips, `Step.tips` to rebuild the
  with-tips one), the sampled tokens with their behaviour log-probs, the executed action, and the
  novelty bonus of the state it reached (paper §4.3, unscaled; the trainer applies the coefficient);
- `write_group_tips` (`rollout.tip_writing`) lets the policy write one tip per finished episode and
  stores it (one entry per step, paper §2).

Departures: the memory key and query texts are built from the tip-free conversation (so naive and memory
episodes share one key space and a retrieved block never makes the next query look like itself); the
novelty bonus is computed in every mode when a novelty memory is given (the paper describes it as part of
the EMPO² reward, not of the memory prompt).
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from empo2_studio.envs import TextEnv
from empo2_studio.policy import ActionRequest, Turn, prompts
from empo2_studio.rollout.conversation import step_turn, user_turn
from empo2_studio.rollout.retrieval import KEY_TAIL_CHARS, retrieve_tips  # noqa: F401  (KEY_TAIL_CHARS: re-exported)
from empo2_studio.rollout.tip_writing import forget_and_stop, key_text, write_group_tips  # noqa: F401  (re-exported)
from empo2_studio.stopping import stop_requested
from empo2_studio.types import (
    Episode, Observation, PromptStyle, RolloutMode, Split, Step, UpdateMode,
)  # fmt: skip

if TYPE_CHECKING:  # annotations only: the rollout runs on any object with these members
    from empo2_studio.algorithm import NoveltyReward
    from empo2_studio.memory import Embedder, TipMemory
    from empo2_studio.policy import Policy

StepCallback = Callable[[int, Step], None]
"""Called as `on_step(episode_index, step)` right after each step is executed."""
EndCallback = Callable[[int, bool], None]
"""Called as `on_end(episode_index, won)` right after an episode's last step."""


@dataclass
class Timings:
    """Seconds spent per phase, accumulated over calls (the trainer's `time/*` metrics)."""

    sampling: float = 0.0
    env: float = 0.0
    memory: float = 0.0

    def add(self, phase: str, since: float) -> None:
        setattr(self, phase, getattr(self, phase) + time.perf_counter() - since)


@dataclass
class _Live:
    """The mutable state of one episode while it is being played."""

    index: int
    env: TextEnv
    variation: int
    key: str
    """The policy's sampling-cache key, and the episode's `episode_id`."""
    rollout_mode: RolloutMode
    obs: Observation
    step_limit: int
    prompt_style: PromptStyle
    first: Observation
    """The observation at reset."""
    fewshot: tuple[str, ...]
    turns: list[Turn] = field(default_factory=list)
    """The conversation as the policy saw it (tips blocks included)."""
    pairs: list[tuple[str, str]] = field(default_factory=list)
    """(tip-free user message, action text) per finished turn: the memory key/query text."""
    steps: list[Step] = field(default_factory=list)
    done: bool = False
    place: str | None = None
    """Structured memory: the place the tips in `held` were fetched for (`rollout.retrieval`)."""
    held: tuple | None = None
    """The last (tips, skipped) the memory gave this episode."""
    won: bool = False


def play_group(
    envs: Sequence[TextEnv],
    policy: Policy,
    store: TipMemory | None,
    *,
    task: str,
    variation: int,
    split: Split,
    rollout_mode: RolloutMode,
    update_mode: UpdateMode | None,
    temperature: float,
    seed: int,
    embedder: Embedder | None = None,
    novelty: NoveltyReward | None = None,
    on_step: StepCallback | None = None,
    group_id: str | None = None,
    timings: Timings | None = None,
    keep_caches: bool = False,
) -> list[Episode]:
    """Play `len(envs)` episodes of one task variation in lock-step (the GRPO group).

    Args:
        envs: one env instance per episode (kept alive by the caller and reused across groups).
        policy: a `Policy` (batched `sample`, `forget`, `decoding`, `version`).
        store: the `TipStore` memory modes retrieve from (never written here; may be None for naive).
        task, variation, split: what to play; every episode resets to the same variation.
        rollout_mode: "naive" (plain prompt) or "memory" (tips retrieved every step).
        update_mode: recorded on the episodes (None for evaluation / demo / adaptation episodes).
        temperature: sampling temperature (train 1.0, eval 0.4).
        seed: recorded on the episodes; the caller seeds the sampler.
        embedder, novelty: embed each reached observation and score it with the novelty memory
            (`NoveltyReward.reward(vector)`, e.g. a `NoveltyMemory`, paper §4.3); both None disables
            the bonus (0.0).
        on_step: streaming callback `(episode_index, Step)`.
        group_id: shared by the episodes (a fresh id when None).
        timings: accumulates sampling / env / memory seconds.
        keep_caches: keep each episode's sampling KV cache (under its `episode_id`) after it ends, so
            `write_group_tips` right after feeds only the reflection prompt; otherwise dropped at once.

    Returns:
        The episodes in env order, each with `steps`, final `score` (−100 … 100) and `won`.

    Raises:
        ValueError: no envs, or memory mode without a store.
        StopRequested: the thread's stop event was set (`stopping.stop_scope`); checked every lock-step.
    """
    modes = [rollout_mode] * len(envs)
    return _play(
        envs, policy, store, modes, task=task, variations=[variation] * len(envs), split=split, update_mode=update_mode,
        temperature=temperature, seed=seed, embedder=embedder, novelty=novelty, on_step=on_step,
        group_id=group_id if group_id is not None else uuid.uuid4().hex[:12], timings=timings,
        keep_caches=keep_caches,
    )  # fmt: skip


def play_batch(
    envs: Sequence[TextEnv],
    policy: Policy,
    *,
    task: str,
    variations: Sequence[int],
    split: Split,
    temperature: float,
    seed: int,
    on_end: EndCallback | None = None,
    timings: Timings | None = None,
) -> list[Episode]:
    """Play naive episodes of several variations in lock-step, episode i on `variations[i]` with `envs[i]`.

    The memory-free evaluation's batch (paper §5 protocol): test layouts played together share each
    step's sampling call, as a training group does, instead of one small group per layout. Nothing is
    trained on these episodes (`update_mode` None) and no tip is read or written.

    Args:
        envs: at least `len(variations)` env instances (the first `len(variations)` are used).
        variations, task, split: what each episode plays.
        temperature, seed: as in `play_group` (the caller seeds the sampler).
        on_end: called as `on_end(episode_index, won)` as soon as an episode ends, so a page can count
            finished episodes while the batch still runs.

    Returns:
        The episodes in `variations` order, `group_id` "" (they form no GRPO group).

    Raises:
        ValueError: no variations, or fewer envs than variations.
        StopRequested: as in `play_group`.
    """
    if not variations or len(envs) < len(variations):
        raise ValueError(f"play_batch needs 1 to {len(envs)} variations (one env each), got {len(variations)}")
    n = len(variations)
    return _play(
        envs[:n], policy, None, ["naive"] * n, task=task, variations=variations, split=split, update_mode=None,
        temperature=temperature, seed=seed, embedder=None, novelty=None, on_step=None, group_id="", timings=timings,
        on_end=on_end,
    )  # fmt: skip


def play_side_by_side(
    envs: Sequence[TextEnv],
    policy: Policy,
    store: TipMemory,
    *,
    task: str,
    variation: int,
    split: Split,
    seed: int,
    temperature: float,
    on_step: Callable[[RolloutMode, Step], None] | None = None,
    write_tips: bool = True,
    timings: Timings | None = None,
    keep_caches: bool = False,
    step_limit: int | None = None,
) -> tuple[Episode, Episode]:
    """A naive and a memory episode of the same task/variation/seed, played at the same time.

    One batched sample call per step over both; each step is streamed as `on_step(side, step)` with
    side "naive" or "memory". Afterwards both episodes write their tips (when `write_tips`).
    `keep_caches` as in `play_group` (for a caller that writes the tips itself). `step_limit`: end
    both episodes after this many steps when it is below the envs' own limit (None: the envs').

    Returns:
        (naive_episode, memory_episode), `update_mode` None (demo episodes are not trained on).

    Raises:
        ValueError: fewer than 2 envs given.
    """
    if len(envs) < 2:
        raise ValueError(f"play_side_by_side needs 2 env instances, got {len(envs)}")
    modes: list[RolloutMode] = ["naive", "memory"]
    callback = None if on_step is None else (lambda i, step: on_step(modes[i], step))
    naive, memory = _play(
        envs[:2], policy, store, modes, task=task, variations=[variation] * 2, split=split, update_mode=None,
        temperature=temperature, seed=seed, embedder=None, novelty=None, on_step=callback,
        group_id="", timings=timings, keep_caches=keep_caches or write_tips, step_limit=step_limit,
    )  # fmt: skip
    if write_tips:
        naive, memory = write_group_tips(policy, store, [naive, memory], timings=timings)
    return naive, memory


def seed_policy(policy: Policy, seed: int) -> None:
    """Seed the policy's sampling generator (`HFPolicy.generator`; sampling never reads torch's global RNG)."""
    policy.generator.manual_seed(seed)


def _play(
    envs: Sequence[TextEnv],
    policy: Policy,
    store: TipMemory | None,
    modes: Sequence[RolloutMode],
    *,
    task: str,
    variations: Sequence[int],
    split: Split,
    update_mode: UpdateMode | None,
    temperature: float,
    seed: int,
    embedder: Embedder | None,
    novelty: NoveltyReward | None,
    on_step: StepCallback | None,
    group_id: str,
    timings: Timings | None,
    keep_caches: bool = False,
    step_limit: int | None = None,
    on_end: EndCallback | None = None,
) -> list[Episode]:
    if not envs:
        raise ValueError("play_group needs at least one env instance, got none")
    if "memory" in modes and store is None:
        raise ValueError("memory rollouts need a tip store; got store=None")
    timings = timings if timings is not None else Timings()
    live = _start(envs, modes, task, variations, timings, prefix=group_id or "ep", step_limit=step_limit)
    while running := [ep for ep in live if not ep.done]:
        if stop_requested():  # a job's Stop lands within one lock-step; the unfinished group is dropped
            forget_and_stop(policy, [ep.key for ep in live])
        _advance(running, policy, store, task, temperature, embedder, novelty, on_step, timings)
        for ep in running:
            if ep.done and not keep_caches:
                policy.forget(ep.key)
            if ep.done and on_end is not None:
                on_end(ep.index, ep.won)
    now = time.time()
    episodes = [
        Episode(
            episode_id=ep.key,
            env=envs[ep.index].name, task=task, variation=ep.variation, split=split,
            rollout_mode=ep.rollout_mode, update_mode=update_mode, decoding=policy.decoding,
            temperature=temperature, seed=seed, steps=tuple(ep.steps), score=ep.obs.score, won=ep.won,
            policy_version=policy.version, group_id=group_id, created_at=now,
            task_description=ep.first.task_description, prompt_style=ep.prompt_style, first_observation=ep.first.text,
        )  # fmt: skip
        for ep in live
    ]
    return [replace(e, record=ep.env.summarise_episode(e) or "") for e, ep in zip(episodes, live)]


def _start(
    envs: Sequence[TextEnv], modes: Sequence[RolloutMode], task: str, variations: Sequence[int], timings: Timings,
    prefix: str, step_limit: int | None = None,
) -> list[_Live]:  # fmt: skip
    t0 = time.perf_counter()
    live = []
    for i, (env, mode, variation) in enumerate(zip(envs, modes, variations, strict=True)):
        obs = env.reset(task, variation)
        live.append(
            _Live(
                index=i, env=env, variation=variation, key=f"{prefix}-{uuid.uuid4().hex[:8]}-{i}", rollout_mode=mode, obs=obs,
                step_limit=min(env.step_limit(task), step_limit or env.step_limit(task)),
                fewshot=tuple(env.fewshot_examples(task)),
                prompt_style=prompts.prompt_style(env.name), first=obs,
            )  # fmt: skip
        )
    timings.add("env", t0)
    return live


def _advance(
    running: list[_Live],
    policy: Policy,
    store: TipMemory | None,
    task: str,
    temperature: float,
    embedder: Embedder | None,
    novelty: NoveltyReward | None,
    on_step: StepCallback | None,
    timings: Timings,
) -> None:
    """One lock-step: prompt every running episode, sample once for all, execute, record."""
    messages = [prompts.first_user_message(ep.env.name, ep.obs, ep.fewshot) if not ep.steps
                else prompts.step_user_message(ep.obs, ep.env.name) for ep in running]  # fmt: skip
    tips, skipped = retrieve_tips(store, running, messages, task, timings)
    requests = [
        ActionRequest(key=ep.key, turns=(*ep.turns, user_turn(user, t, ep.prompt_style, ep.obs.valid_actions)))
        for ep, user, t in zip(running, messages, tips)
    ]
    t0 = time.perf_counter()
    samples = policy.sample(requests, temperature=temperature)
    timings.add("sampling", t0)
    t0 = time.perf_counter()
    results = [ep.env.step(s.text) for ep, s in zip(running, samples)]
    timings.add("env", t0)
    bonuses = _novelty(results, embedder, novelty, timings)
    rows = zip(running, messages, tips, skipped, samples, results, bonuses)
    for ep, user, t, miss, sample, result, bonus in rows:
        step = Step(
            index=len(ep.steps), user_message=user, tips=tuple(t), skipped_tips=tuple(miss),
            valid_actions=ep.obs.valid_actions,
            sample=sample, action=result.action, corrected=result.corrected, reward=result.reward,
            score=result.observation.score, observation=result.observation.text, intrinsic_reward=bonus,
        )  # fmt: skip
        ep.steps.append(step)
        ep.turns.append(step_turn(step, ep.prompt_style))
        ep.pairs.append((user, sample.text))
        ep.obs = result.observation
        ep.won = result.won
        if result.done or len(ep.steps) >= ep.step_limit:
            ep.done = True
        if on_step is not None:
            on_step(ep.index, step)


def _novelty(results: list, embedder: Embedder | None, novelty: NoveltyReward | None, timings: Timings) -> list[float]:
    """Novelty bonus per reached state: 1/n for a state unlike the n similar ones seen (paper §4.3).

    The states reached in one lock-step are scored against the memory as it was *before* that step
    (each on its own copy), then all are recorded. So identical trajectories in a group earn identical
    bonuses; scoring them one after another would pay the first 1 and its twin 1/2, an advantage
    that comes only from the processing order.
    """
    if embedder is None or novelty is None:
        return [0.0] * len(results)
    t0 = time.perf_counter()
    vectors = embedder.embed([r.observation.text for r in results])
    bonuses = [float(copy.deepcopy(novelty).reward(v)) for v in vectors]
    for v in vectors:
        novelty.reward(v)  # record the visits
    timings.add("memory", t0)
    return bonuses
