"""`update.policy_update` against values worked out by hand, on a one-parameter scoring fake.

The fake scores every sampled token id t at log-prob −t/10 + w, and the episodes record the behaviour
log-prob −t/10, so every ratio is exp(w) = 1 at w = 0 and each token's surrogate loss is −A with
gradient −A (ratio 1 is inside every clip). Three episodes:

| episode | turns (token ids)  | advantage | per-token loss |
|---------|--------------------|-----------|----------------|
| e1      | (1, 2), (3,)       | +1        | −1             |
| e2      | (4, 5, 6)          | −0.5      | +0.5           |
| e3      | (7, 8)             | +2        | −2             |

token-mean: (−1·3 + 0.5·3 − 2·2) / 8 tokens = −5.5 / 8 = −0.6875.
seq-mean-token-mean: rows −1, −1, +0.5, −2 → −3.5 / 4 = −0.875.
seq-mean-token-sum: rows −2, −1, +1.5, −4 → −5.5 / 4 = −1.375.
The loss is linear in the ratio here, so dL/dw equals the loss and SGD (lr 0.1) moves w by −0.1 × it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math

import pytest
import torch

from empo2_studio.config import AlgoConfig
from empo2_studio.types import ActionSample, Episode, Step
from empo2_studio.update import UpdateSettings, policy_update, trainable_turns

PROMPT_TOKENS = 100
"""The fake chat format gives every user turn this many tokens."""


class _Format:
    """Per-turn chat format: turn i's prompt is the whole history, 100 tokens per user turn."""

    def __init__(self, packed: bool) -> None:
        self.packed = packed

    def turn_prompt_ids(self, turns, i):
        history = sum(PROMPT_TOKENS + len(t.action_ids) for t in turns[:i])
        return [0] * (history + PROMPT_TOKENS)

    def conversation_ids(self, turns):
        spans, end = [], 0
        for t in turns:
            start = end + PROMPT_TOKENS
            end = start + len(t.action_ids)
            spans.append((start, end))
        return [0] * end, spans


class ScoringFake:
    """log π(t) = −t/10 + w for every sampled token id t; `poison` makes every log-prob NaN."""

    def __init__(self, *, packed: bool = False, poison: bool = False) -> None:
        self.w = torch.zeros((), requires_grad=True)
        self.chat_format = _Format(packed)
        self.poison = poison
        self.score_calls = 0
        self._base = False

    @contextlib.contextmanager
    def no_adapter(self):
        """The adapter-free base: log π(t) = −t/10, no w."""
        self._base = True
        try:
            yield
        finally:
            self._base = False

    def trainable_parameters(self):
        return [self.w]

    def score(self, conversations, *, temperature=1.0):
        self.score_calls += 1
        shift = self.w * math.nan if self.poison else self.w
        if self._base:
            shift = torch.zeros(())
        return [[torch.tensor([-t / 10 for t in turn.action_ids]) + shift for turn in conv] for conv in conversations]


def _episode(name: str, turns: list[tuple[int, ...]]) -> Episode:
    steps = tuple(
        Step(
            index=i, user_message=f"{name} turn {i}", tips=(), valid_actions=(),
            sample=ActionSample(text="a", token_ids=ids, logprobs=tuple(-t / 10 for t in ids)),
            action="a", corrected=False, reward=0.0, score=0.0, observation="",
        )  # fmt: skip
        for i, ids in enumerate(turns)
    )
    return Episode(
        episode_id=name, env="trap", task="trap-light-bulb", variation=0, split="train", rollout_mode="naive",
        update_mode="on-policy", decoding="constrained", temperature=1.0, seed=0, steps=steps, score=0.0, won=False,
    )  # fmt: skip


EPISODES = [_episode("e1", [(1, 2), (3,)]), _episode("e2", [(4, 5, 6)]), _episode("e3", [(7, 8)])]
ADVANTAGES = [1.0, -0.5, 2.0]
EXPECTED_LOSS = {"token-mean": -5.5 / 8, "seq-mean-token-mean": -3.5 / 4, "seq-mean-token-sum": -5.5 / 4}


def _update(policy, *, loss_agg="token-mean", micro=2, max_tokens=4500, advantages=ADVANTAGES, episodes=EPISODES,
            kl_coef=0.0, on_progress=None):
    settings = UpdateSettings(
        AlgoConfig(loss_agg=loss_agg, kl_coef=kl_coef), grad_clip=100.0, micro_batch_episodes=micro,
        max_train_tokens=max_tokens,
    )
    optimizer = torch.optim.SGD(policy.trainable_parameters(), lr=0.1)
    return policy_update(policy, optimizer, episodes, advantages, "on-policy", settings, on_progress=on_progress)


@pytest.mark.parametrize("loss_agg", sorted(EXPECTED_LOSS))
def test_hand_worked_loss_gradient_and_step(loss_agg):
    policy = ScoringFake()
    m = _update(policy, loss_agg=loss_agg)
    expected = EXPECTED_LOSS[loss_agg]
    assert m["loss/policy"] == pytest.approx(expected, abs=1e-6)
    assert m["grad/norm"] == pytest.approx(abs(expected), abs=1e-6)
    assert float(policy.w.detach()) == pytest.approx(-0.1 * expected, abs=1e-6)
    assert m["ratio/mean"] == m["ratio/min"] == m["ratio/max"] == 1.0
    assert m["train/turns"] == 4.0 and m["train/tokens"] == 8.0 and m["train/dropped_turns"] == 0.0
    assert m["guard/skipped"] == 0.0 and m["mask/low_prob_frac"] == 0.0


def test_per_turn_advantages_weight_each_turn():
    # e1's turns get 1 (2 tokens) and 3 (1 token), e2 −0.5 (3 tokens), e3 2 (2 tokens), every ratio 1:
    # token-mean loss = −(2·1 + 1·3 − 3·0.5 + 2·2) / 8 = −7.5 / 8.
    m = _update(ScoringFake(), advantages=[[1.0, 3.0], [-0.5], [2.0]])
    assert m["loss/policy"] == pytest.approx(-7.5 / 8, abs=1e-6)
    # A scalar per episode is the same as that value at every turn.
    a, b = ScoringFake(), ScoringFake()
    assert _update(a)["loss/policy"] == _update(b, advantages=[[1.0, 1.0], [-0.5], [2.0]])["loss/policy"]
    with pytest.raises(ValueError, match="episode e1: 1 per-turn advantages for 2 turns"):
        _update(ScoringFake(), advantages=[[1.0], [-0.5], [2.0]])


@pytest.mark.parametrize("loss_agg", sorted(EXPECTED_LOSS))
def test_micro_batches_equal_one_batch(loss_agg):
    runs = []
    for micro in (1, 2, 3):
        policy = ScoringFake()
        m = _update(policy, loss_agg=loss_agg, micro=micro)
        runs.append((policy.score_calls, m["loss/policy"], m["grad/norm"], m["train/tokens"], float(policy.w.detach())))
    assert [r[0] for r in runs] == [3, 2, 1]  # episodes scored 1, 2 and 3 at a time
    for r in runs[1:]:
        assert r[1:] == pytest.approx(runs[0][1:], abs=1e-7)


def test_progress_names_each_micro_batch_before_its_forward_and_its_backward():
    lines = []
    _update(ScoringFake(), micro=2, on_progress=lines.append)
    assert lines == ["re-scoring episodes 1–2 of 3", "backward through episodes 1–2 of 3",
                     "re-scoring episode 3 of 3", "backward through episode 3 of 3"]  # fmt: skip


@pytest.mark.parametrize("packed", [False, True])
def test_length_cut_drops_every_turn_from_the_first_too_long(packed):
    """Turn ends: e1 102 and 203 (the second turn's prompt holds the first), e2 103, e3 102.
    A 150-token limit keeps e1's first turn only: 3 rows, 2 + 3 + 2 = 7 tokens, 1 turn dropped."""
    policy = ScoringFake(packed=packed)
    assert [trainable_turns(policy, ep, "on-policy", 150) for ep in EPISODES] == [1, 1, 1]
    assert [trainable_turns(policy, ep, "on-policy", 203) for ep in EPISODES] == [2, 1, 1]
    assert trainable_turns(policy, EPISODES[1], "on-policy", 102) == 0
    m = _update(policy, max_tokens=150)
    assert m["train/dropped_turns"] == 1.0 and m["train/turns"] == 3.0 and m["train/tokens"] == 7.0
    assert m["loss/policy"] == pytest.approx((-2.0 + 1.5 - 4.0) / 7, abs=1e-6)


@pytest.mark.parametrize("packed", [False, True])
def test_context_tokens_count_every_kept_conversation(packed):
    """Kept conversations end at 203 (e1), 103 (e2), 102 (e3): 408 tokens through the graded forward;
    under a 150-token limit e1 keeps its first turn (102): 102 + 103 + 102 = 307."""
    assert _update(ScoringFake(packed=packed))["train/context_tokens"] == 408.0
    assert _update(ScoringFake(packed=packed), max_tokens=150)["train/context_tokens"] == 307.0


def test_an_episode_with_no_turn_left_is_not_scored():
    policy = ScoringFake()
    m = _update(policy, max_tokens=102)  # e2's only turn ends at 103
    assert m["train/dropped_turns"] == 2.0 and m["train/turns"] == 2.0 and m["train/tokens"] == 4.0
    assert m["loss/policy"] == pytest.approx((-2.0 - 4.0) / 4, abs=1e-6)


def test_non_finite_loss_skips_the_step_and_leaves_the_weights():
    policy = ScoringFake(poison=True)
    m = _update(policy)
    assert m["guard/skipped"] == 1.0 and math.isnan(m["grad/norm"])
    assert float(policy.w.detach()) == 0.0 and policy.w.grad is None


def test_all_zero_advantages_are_no_signal_and_nothing_is_scored():
    policy = ScoringFake()
    m = _update(policy, advantages=[0.0, 0.0, 0.0])
    assert m["train/no_signal"] == 1.0 and m["train/tokens"] == 0.0 and m["loss/policy"] == 0.0
    assert policy.score_calls == 0 and float(policy.w.detach()) == 0.0


def test_advantages_must_match_the_episodes():
    with pytest.raises(ValueError, match="one advantage per episode"):
        _update(ScoringFake(), advantages=[1.0])


def test_kl_reference_is_the_adapter_free_base():
    """With w = 0.5 the current log-probs sit 0.5 above the base's on every token, so the k3 estimate
    per token is e^(−0.5) − 1 + 0.5 = 0.10653 (`kl_penalty` of ref − logp = −0.5), the same in every
    micro-batch split; the policy loss is unchanged by the KL term's presence."""
    runs = []
    for micro in (1, 3):
        policy = ScoringFake()
        with torch.no_grad():
            policy.w.fill_(0.5)
        runs.append(_update(policy, micro=micro, kl_coef=0.1))
    k3 = math.exp(-0.5) - 1 + 0.5
    assert runs[0]["loss/kl"] == pytest.approx(k3, abs=1e-5) and runs[1]["loss/kl"] == pytest.approx(k3, abs=1e-5)
    assert runs[0]["loss/policy"] == pytest.approx(runs[1]["loss/policy"], abs=1e-6)


def test_hf_policy_no_adapter_scores_the_base_model():
    from empo2_studio.policy import Turn, build_tiny_policy

    policy = build_tiny_policy("free", seed=2, max_action_tokens=6)
    conv = [[Turn("hello", (5, 6, 7), ())]]
    with torch.no_grad():
        base = policy.score(conv)[0][0]
        for p in policy.trainable_parameters():
            p.add_(0.05)
        moved = policy.score(conv)[0][0]
        with policy.no_adapter():
            again = policy.score(conv)[0][0]
    assert not torch.allclose(moved, base) and torch.equal(again, base)


def _tipped_episode(name: str, token: int, tip_gain: float) -> Episode:
    """One one-token turn whose behaviour log-prob (sampled with tips) is log(tip_gain) above the
    tip-free one: the ratio tip-free current / behaviour is 1 / tip_gain at w = 0."""
    ep = _episode(name, [(token,)])
    step = ep.steps[0]
    sample = ActionSample(text="a", token_ids=(token,), logprobs=(-token / 10 + math.log(tip_gain),))
    return dataclasses.replace(ep, steps=(dataclasses.replace(step, sample=sample),), rollout_mode="memory")


@pytest.mark.parametrize(
    ("loss", "advantage", "expected_grad"),
    [
        # tapered, A > 0: −A·log π whatever the ratio → dL/dw = −A = −1
        ("tapered", 1.0, -1.0),
        # clipped, A > 0, ρ = 0.01 < 1 − ε_low: −A·ρ → dL/dw = −A·ρ = −0.01
        ("clipped", 1.0, -0.01),
        # tapered, A < 0: −A·min(ρ, 1)·log π with ρ = 0.01 (detached) → dL/dw = −A·0.01 = +0.01
        ("tapered", -1.0, 0.01),
    ],
)
def test_off_policy_loss_choice_by_hand(loss, advantage, expected_grad):
    policy = ScoringFake()
    settings = UpdateSettings(AlgoConfig(off_policy_loss=loss), grad_clip=100.0)
    optimizer = torch.optim.SGD(policy.trainable_parameters(), lr=0.1)
    m = policy_update(policy, optimizer, [_tipped_episode("t", 1, 100.0)], [advantage], "off-policy", settings)
    assert m["ratio/mean"] == pytest.approx(0.01, rel=1e-5)
    assert m["grad/norm"] == pytest.approx(abs(expected_grad), rel=1e-5)
    assert float(policy.w.detach()) == pytest.approx(-0.1 * expected_grad, rel=1e-5)


def test_on_policy_updates_ignore_the_off_policy_loss_choice():
    runs = []
    for loss in ("tapered", "clipped"):
        policy = ScoringFake()
        settings = UpdateSettings(AlgoConfig(off_policy_loss=loss), grad_clip=100.0)
        optimizer = torch.optim.SGD(policy.trainable_parameters(), lr=0.1)
        policy_update(policy, optimizer, EPISODES, ADVANTAGES, "on-policy", settings)
        runs.append(float(policy.w.detach()))
    assert runs[0] == runs[1] == pytest.approx(-0.1 * EXPECTED_LOSS["token-mean"], abs=1e-6)
