"""One policy-gradient update from played episodes (paper §4.2 Eq. 1–2, App. C; method.md §1.2–1.3).

Given episodes with their group-relative advantages and the iteration's update mode, this module
re-scores the sampled action tokens with the current policy, builds the masks and applies the clipped
surrogate with AdamW on the LoRA parameters. The three update modes differ only in the conversation the
current log-probs are taken on:

| update mode         | current log-probs on            | old (behaviour) log-probs       |
|---------------------|---------------------------------|---------------------------------|
| on-policy           | the plain conversation          | `Step.sample.logprobs` (plain)  |
| on-policy-with-tips | the conversation with tips      | `Step.sample.logprobs` (tips)   |
| off-policy          | the tip-free conversation       | `Step.sample.logprobs` (tips)   |

Behaviour log-probs are always the ones recorded at sampling time (never a re-score), so an off-policy
ratio is visibly ≠ 1 from the first pass (design.md §11).

Temperature: the behaviour log-probs are those of softmax(logits / T) at the episode's sampling
temperature T (`Episode.temperature`; greedy T = 0 counts as 1), so every re-score here — the current
log-probs, the tip-free reference of the low-probability mask and the KL reference — divides the logits
by that same T (per episode: a Distill-now batch can mix training episodes at `train_temperature` with
side-by-side pairs played at another T). Before any weight change the on-policy and with-tips ratios
are then exactly 1 at every temperature, as in verl, where the old and the current log-probs are both
computed on logits divided by the rollout temperature; δ applies to these tempered log-probs.

Layout: each turn is one row (prompt = the whole history up to it, response = its action tokens). Under
causal attention, scoring an episode's whole conversation once yields every turn's log-probs exactly as
scoring each prefix separately would, so the policy is asked once per episode (`policy.score`, packed).
Episodes are scored in micro-batches and their losses accumulated: each micro-batch's loss is taken
as a *sum* (normaliser 1) and the gradients are divided by the global count at the end, so the result
equals one big batch under every `loss_agg`.

Low-probability mask: tokens whose reference log-prob is below δ are dropped, per token or per sequence
(`AlgoConfig.low_prob_mask`), in every update mode (the paper writes the indicator into the one loss of
Eq. 2; the recipe applies it to every batch when enabled). The reference (`AlgoConfig.low_prob_ref`) is
the behaviour log-probs recorded at sampling (recipe; the default) or the current *tip-free* log-probs
(paper text; in on-policy-with-tips mode this costs one extra no-grad scoring pass on the tip-free
conversation).

Length limit: turns whose prompt + response exceed `max_train_tokens` (recipe: 4500) are dropped from
training, as the recipe's `max_train_length` does; since the history only grows, that is every turn from
the first over-long one on. Lengths are counted in the policy's own chat-format token ids.

Guard: a non-finite loss or gradient skips the optimizer step, zeroes the gradients and reports
`guard/skipped = 1`; the weights are never touched.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from empo2_studio.algorithm import clipped_surrogate_loss, kl_penalty, low_prob_mask, tapered_off_policy_loss
from empo2_studio.config import AlgoConfig, TrainConfig
from empo2_studio.policy import Policy, Turn
from empo2_studio.rollout import conversation as played_conversation
from empo2_studio.stopping import raise_if_stopped
from empo2_studio.types import Episode, UpdateMode

MAX_TRAIN_TOKENS = TrainConfig.max_train_tokens
"""Turns whose prompt + response exceed this many tokens are not trained on (recipe `max_train_length`,
4500; the run's value is `train.max_train_tokens`)."""

@dataclass(frozen=True)
class UpdateSettings:
    """What an update needs from the run config (AlgoConfig plus the optimiser knobs)."""

    algo: AlgoConfig
    grad_clip: float = 1.0
    update_epochs: int = 1
    micro_batch_episodes: int = TrainConfig.micro_batch_episodes
    """Episodes scored per forward/backward; bounds activation memory (CPU laptops)."""
    max_train_tokens: int = MAX_TRAIN_TOKENS
    sync: Any = None
    """Data parallelism (`scale.sync.GradSync`): micro-batches run under its DDP `no_sync` but the
    last; counts and metrics are summed over the ranks so DDP's reduced gradient is divided by the
    *global* normaliser; None = one process."""

    @classmethod
    def from_config(cls, algo: AlgoConfig, train: TrainConfig) -> UpdateSettings:
        """The settings of a run: its `algo` section plus the optimiser knobs of its `train` section."""
        return cls(
            algo=algo, grad_clip=train.grad_clip, update_epochs=train.update_epochs,
            micro_batch_episodes=train.micro_batch_episodes, max_train_tokens=train.max_train_tokens,
        )  # fmt: skip


def conversation(episode: Episode, update_mode: UpdateMode, *, n_turns: int | None = None) -> list[Turn]:
    """The turns to score for `episode` (`rollout.conversation`): with tips only in on-policy-with-tips mode.

    Args:
        episode: a played episode. update_mode: which prompt variant the current log-probs use.
        n_turns: keep only the first n turns (the length limit); None = all.
    """
    return list(played_conversation(episode, with_tips=update_mode == "on-policy-with-tips", n_turns=n_turns))


def turn_ends(policy: Policy, episode: Episode, update_mode: UpdateMode) -> list[int]:
    """Each turn's prompt + response length in tokens, counted with the policy's own chat format: the
    end offset of each action in the packed conversation ids, or each turn's rendered prompt plus its
    action when the template is not packable. Non-decreasing (the history only grows)."""
    turns = conversation(episode, update_mode)
    fmt = policy.chat_format
    if fmt.packed:
        return [end for _, end in fmt.conversation_ids(turns)[1]]
    return [len(fmt.turn_prompt_ids(turns, i)) + len(t.action_ids) for i, t in enumerate(turns)]


def trainable_turns(policy: Policy, episode: Episode, update_mode: UpdateMode, max_tokens: int) -> int:
    """How many leading turns of `episode` fit in `max_tokens` (that turn's prompt + response tokens)."""
    return sum(1 for end in turn_ends(policy, episode, update_mode) if end <= max_tokens)


def policy_update(
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    episodes: Sequence[Episode],
    advantages: Sequence[float],
    update_mode: UpdateMode,
    settings: UpdateSettings,
    on_progress: Callable[[str], None] | None = None,
) -> dict[str, float]:
    """Run `settings.update_epochs` optimizer passes over the episodes' turns.

    Args:
        policy: a `Policy` (`score`, `trainable_parameters`, `chat_format`; `no_adapter` when kl_coef > 0).
        optimizer: AdamW over `policy.trainable_parameters()`.
        episodes: the played episodes (their steps carry the behaviour log-probs, sampled at
            `Episode.temperature`, which every re-score uses too).
        advantages: per episode (same order), one group-relative advantage for all its turns, or a
            sequence with one per turn (step-level credit, `AlgoConfig.step_advantage_coef`).
        update_mode: selects the conversation the current log-probs are taken on (module table).
        settings: clipping, mask, aggregation, grad clip, epochs, micro-batch size, length limit.
        on_progress: called with a line before each micro-batch's forward and its backward ("re-scoring
            episodes 3–4 of 8", "backward through episodes 3–4 of 8"): an update is tens of seconds on
            a CPU, and a page following it should move at least every 15 s (issue 50).

    Returns:
        Metrics (last epoch for loss/ratio/mask, summed times): `loss/policy`, `loss/kl`, `ratio/*`,
        `mask/low_prob_frac`, `grad/norm`, `guard/skipped` (1 if any pass was skipped),
        `train/optimizer_steps` (passes that changed the weights: 0 … `update_epochs`),
        `train/turns`, `train/tokens`, `train/dropped_turns`, `train/context_tokens` (tokens through
        the with-grad forward, all passes), `time/scoring`, `time/backward`.

    Raises:
        ValueError: `advantages` and `episodes` differ in length, or an episode's per-turn advantages
            do not number its turns.
        StopRequested: the thread's stop event was set (`stopping.stop_scope`) before the first optimizer
            step (checked at every micro-batch of the first pass); no weight has changed.
    """
    if len(advantages) != len(episodes):
        raise ValueError(f"need one advantage per episode, got {len(advantages)} for {len(episodes)} episodes")
    per_turn = [_per_turn(ep, a) for ep, a in zip(episodes, advantages)]
    ends = [turn_ends(policy, ep, update_mode) for ep in episodes]
    keep = [sum(1 for end in e if end <= settings.max_train_tokens) for e in ends]
    items = [(ep, a[:k], k) for ep, a, k in zip(episodes, per_turn, keep) if k > 0]
    metrics: dict[str, float] = {
        "train/dropped_turns": float(sum(len(ep.steps) for ep in episodes) - sum(keep)),
        # tokens through the graded (with-grad) forward, every pass: what the CPU pays per update
        "train/context_tokens": float(settings.update_epochs * sum(e[k - 1] for e, k in zip(ends, keep) if k)),
        "time/scoring": 0.0,
        "time/backward": 0.0,
        "guard/skipped": 0.0,
        "train/optimizer_steps": 0.0,
    }
    signal = bool(items) and (any(x != 0.0 for _, a, _ in items for x in a) or settings.algo.kl_coef != 0.0)
    if settings.sync is not None:  # every rank must agree, or the collectives of one pass would hang
        signal = settings.sync.any(signal)
        metrics["train/dropped_turns"] = settings.sync.sum(metrics["train/dropped_turns"])
    if not signal:
        # Every advantage is 0 (all returns equal): the loss is identically 0, nothing to learn.
        metrics.update({"loss/policy": 0.0, "loss/kl": 0.0, "mask/low_prob_frac": 0.0, "train/turns": 0.0})
        metrics.update({"train/tokens": 0.0, "grad/norm": 0.0, "train/no_signal": 1.0, "train/context_tokens": 0.0})
        return metrics
    for k in range(settings.update_epochs):
        epoch = _one_pass(policy, optimizer, items, update_mode, settings, stoppable=k == 0, on_progress=on_progress)
        metrics["time/scoring"] += epoch.pop("time/scoring")
        metrics["time/backward"] += epoch.pop("time/backward")
        skipped = epoch.pop("guard/skipped")
        metrics["guard/skipped"] = max(metrics["guard/skipped"], skipped)
        metrics["train/optimizer_steps"] += 1.0 - skipped
        metrics.update(epoch)
    return metrics


def _one_pass(
    policy: Policy, optimizer: torch.optim.Optimizer, items: list, update_mode: UpdateMode, settings: UpdateSettings,
    stoppable: bool = True, on_progress: Callable[[str], None] | None = None,
) -> dict[str, float]:
    a = settings.algo
    params = [p for p in policy.trainable_parameters() if p.requires_grad]
    optimizer.zero_grad(set_to_none=True)
    sums = _Sums()
    tapered = update_mode == "off-policy" and a.off_policy_loss == "tapered"
    t_score = t_back = 0.0
    finite = True
    sync = settings.sync
    step = settings.micro_batch_episodes
    starts = range(0, len(items), step)
    for start in starts:
        if stoppable:  # only before the first optimizer step: a stopped update changes no weight
            raise_if_stopped()
        chunk = items[start : start + step]
        first, last = start + 1, start + len(chunk)
        which = f"episodes {first}–{last} of {len(items)}" if last > first else f"episode {last} of {len(items)}"
        if on_progress is not None:
            on_progress(f"re-scoring {which}")
        # Data parallelism: every micro-batch but the last accumulates without a collective, so each
        # rank runs one synchronised backward per pass however many micro-batches it has (scale.sync).
        with sync.micro_batch(start == starts[-1]) if sync is not None else contextlib.nullcontext():
            t0 = time.perf_counter()
            logps, old, adv, mask = _score_chunk(policy, chunk, update_mode)
            if a.low_prob_ref == "behaviour":
                ref = old
            elif update_mode == "on-policy-with-tips":
                ref = _tip_free_logps(policy, chunk, mask)
            else:
                ref = logps.detach()
            kept = low_prob_mask(ref, threshold=a.low_prob_threshold, rule=a.low_prob_mask, loss_mask=mask)
            surrogate = tapered_off_policy_loss if tapered else clipped_surrogate_loss
            loss, m = surrogate(
                logps, old, adv, kept, clip_low=a.clip_low, clip_high=a.clip_high, dual_clip=a.dual_clip,
                loss_agg=a.loss_agg, normalizer=1.0,
            )  # fmt: skip
            kl = _kl_sum(policy, chunk, update_mode, logps, kept, a) if a.kl_coef > 0 else logps.new_zeros(())
            t_score += time.perf_counter() - t0
            total = loss + a.kl_coef * kl
            if not torch.isfinite(total):
                finite = False
                break
            sums.add(m, kept, mask, a.loss_agg, float(loss.detach()), float(kl.detach()))
            if sync is not None and start == starts[-1]:
                sync.before_synced_backward(sums.count)
            if stoppable:  # between the forward and the backward: each is seconds on a loaded CPU
                raise_if_stopped()
            if on_progress is not None:
                on_progress(f"backward through {which}")
            t0 = time.perf_counter()
            total.backward()
            t_back += time.perf_counter() - t0
    if sync is not None and (not finite or not items):
        sync.zero_pass()  # this rank's share of the gradient all-reduce (its peers wait on it)
    t0 = time.perf_counter()
    grad_norm = float("nan")
    if sync is not None:  # global counts and metric sums; gradients made global sums (same on every rank)
        finite = sync.reduce_pass(sums, params, finite)
    if finite:
        count = sums.count
        for p in params:
            if p.grad is not None:
                p.grad.div_(max(count, 1.0))
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, settings.grad_clip))
        finite = math.isfinite(grad_norm)
    if finite:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    t_back += time.perf_counter() - t0
    out = sums.metrics()
    out.update({"grad/norm": grad_norm, "guard/skipped": 0.0 if finite else 1.0})
    out.update({"time/scoring": t_score, "time/backward": t_back})
    return out


def _score_chunk(
    policy: Policy, chunk: list, update_mode: UpdateMode
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Current log-probs (B, T) with grad, behaviour log-probs (B, T), advantages (B,), loss mask (B, T)."""
    convs = [conversation(ep, update_mode, n_turns=k) for ep, _, k in chunk]
    scored = policy.score(convs, temperature=_temperatures(chunk))
    rows, old_rows, adv_rows = [], [], []
    for (ep, adv, k), per_turn in zip(chunk, scored, strict=True):
        for step, lp, a in zip(ep.steps[:k], per_turn, adv, strict=True):
            rows.append(lp)
            old_rows.append(torch.tensor(step.sample.logprobs, dtype=torch.float32))
            adv_rows.append(a)
    logps = _pad(rows)
    device = logps.device
    old = _pad(old_rows).to(device)
    lengths = torch.tensor([r.shape[0] for r in rows], device=device)
    mask = torch.arange(logps.shape[1], device=device)[None, :] < lengths[:, None]
    return logps.float(), old, torch.tensor(adv_rows, dtype=torch.float32, device=device), mask


def _per_turn(episode: Episode, advantage: float | Sequence[float]) -> list[float]:
    """One advantage per turn of `episode`: an episode-level value repeated, or the given sequence."""
    if isinstance(advantage, (int, float)):
        return [float(advantage)] * len(episode.steps)
    values = [float(a) for a in advantage]
    if len(values) != len(episode.steps):
        raise ValueError(f"episode {episode.episode_id}: {len(values)} per-turn advantages for {len(episode.steps)} turns")
    return values


def _tip_free_logps(policy: Policy, chunk: list, mask: torch.Tensor) -> torch.Tensor:
    """Detached current log-probs on the tip-free conversation at each episode's sampling temperature
    (the paper's reference for the δ rule)."""
    with torch.no_grad():
        scored = policy.score(
            [conversation(ep, "off-policy", n_turns=k) for ep, _, k in chunk], temperature=_temperatures(chunk)
        )
    return _pad([lp for per_turn in scored for lp in per_turn]).float().to(mask.device)


def _kl_sum(policy: Policy, chunk: list, update_mode: UpdateMode, logps, kept, a: AlgoConfig) -> torch.Tensor:
    """Summed k3 KL against the adapter-free base model on the same conversations (β·KL, paper Eq. 1)."""
    with torch.no_grad(), policy.no_adapter():
        scored = policy.score(
            [conversation(ep, update_mode, n_turns=k) for ep, _, k in chunk], temperature=_temperatures(chunk)
        )
    ref = _pad([lp for per_turn in scored for lp in per_turn]).float().to(logps.device)
    kl_mean = kl_penalty(logps, ref, kept, loss_agg=a.loss_agg)
    return kl_mean * _local_count(kept, a.loss_agg)


def _temperatures(chunk: list) -> list[float]:
    """Each episode's sampling temperature: scoring divides the logits by it (module docstring)."""
    return [ep.temperature for ep, _, _ in chunk]


def _pad(rows: list[torch.Tensor]) -> torch.Tensor:
    return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=0.0)


def _local_count(kept: torch.Tensor, loss_agg: str) -> float:
    """The denominator `aggregate` uses for this chunk: valid tokens, or rows with ≥ 1 valid token."""
    if loss_agg == "token-mean":
        return float(kept.sum())
    return float((kept.sum(dim=1) > 0).sum())


class _Sums:
    """Accumulates counts and count-weighted metrics over micro-batches."""

    def __init__(self) -> None:
        self.count = 0.0
        self.loss_sum = self.kl_sum = 0.0
        self.tokens = self.dropped = self.valid = self.rows = 0
        self.ratio: dict[str, float] = {}
        self.weight = 0.0

    def add(self, m: dict, kept, mask, loss_agg: str, loss_sum: float, kl_sum: float) -> None:
        n = _local_count(kept, loss_agg)
        self.count += n
        self.loss_sum += loss_sum
        self.kl_sum += kl_sum
        self.valid += int(mask.sum())
        self.dropped += int((mask & ~kept).sum())
        self.tokens += int(kept.sum())
        self.rows += int(mask.shape[0])
        w = float(kept.sum())
        for k, v in m.items():
            if not k.startswith("ratio/"):
                continue
            if k == "ratio/max":
                self.ratio[k] = max(self.ratio.get(k, -math.inf), v)
            elif k == "ratio/min":
                self.ratio[k] = min(self.ratio.get(k, math.inf), v)
            else:
                self.ratio[k] = self.ratio.get(k, 0.0) + v * w
        self.weight += w

    def metrics(self) -> dict[str, float]:
        c = max(self.count, 1.0)
        out = {
            "loss/policy": self.loss_sum / c,
            "loss/kl": self.kl_sum / c,
            "mask/low_prob_frac": self.dropped / self.valid if self.valid else 0.0,
            "train/turns": float(self.rows),
            "train/tokens": float(self.tokens),
        }
        for k, v in self.ratio.items():
            out[k] = v if k in ("ratio/max", "ratio/min") else v / max(self.weight, 1.0)
        return out
