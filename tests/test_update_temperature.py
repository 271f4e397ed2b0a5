"""Behaviour log-probs at a temperature T ≠ 1 equal training's re-score (issue 13).

Sampling records the log-probs of softmax(logits / T); `policy_update` re-scores at each episode's
`temperature`, so with unchanged weights (learning rate 0) the importance ratio is exactly 1 in every
decoding mode and update mode. Off-policy's ratio is ≠ 1 by design (tip-free current vs with-tips
behaviour): its check is the with-tips re-score of the same episodes. Trap env, tiny random policy.
"""

from __future__ import annotations

import pytest
import torch

from empo2_studio.config import AlgoConfig, MemoryConfig
from empo2_studio.envs.trap import TrapEnv
from empo2_studio.memory import TipStore, make_embedder
from empo2_studio.policy import build_tiny_policy, logprob_temperature
from empo2_studio.rollout import play_group, play_side_by_side, seed_policy
from empo2_studio.update import UpdateSettings, policy_update

torch.set_num_threads(1)  # the CI machine has 2 shared cores

TASK = "trap-light-bulb"


@pytest.fixture
def store(tmp_path):
    # Threshold −1: every tip of the partition is retrieved, so memory prompts really carry tips.
    s = TipStore.open(tmp_path / "tips.lance", make_embedder("hash"), MemoryConfig(embedder="hash", similarity_threshold=-1.0))
    s.add_tip(TASK, 0, "The green light bulb is in the workshop, not the hallway.", score=50.0)
    s.add_tip(TASK, 0, "Open the doors first and look around each room.", score=25.0)
    return s


def _group(policy, store, mode, temperature, *, n=2, limit=3):
    seed_policy(policy, 1)
    return play_group(
        [TrapEnv(step_limit=limit) for _ in range(n)], policy, store, task=TASK, variation=0, split="train",
        rollout_mode=mode, update_mode="on-policy" if mode == "naive" else "off-policy",
        temperature=temperature, seed=3,
    )  # fmt: skip


def _update_lr0(policy, episodes, mode, **algo):
    """One update with learning rate 0 and the low-prob mask off: the ratios of unchanged weights."""
    before = [p.detach().clone() for p in policy.trainable_parameters()]
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=0.0)
    settings = UpdateSettings(AlgoConfig(**{"low_prob_mask": "off", **algo}))
    advantages = [1.0 if i % 2 == 0 else -1.0 for i in range(len(episodes))]
    metrics = policy_update(policy, optimizer, episodes, advantages, mode, settings)
    assert all(torch.equal(b, p) for b, p in zip(before, policy.trainable_parameters()))
    return metrics


def _assert_ratio_one(m):
    assert m["train/tokens"] > 0
    assert abs(m["ratio/min"] - 1.0) <= 1e-5 and abs(m["ratio/max"] - 1.0) <= 1e-5, (m["ratio/min"], m["ratio/max"])


@pytest.mark.parametrize("decoding,temperature", [("constrained", 0.7), ("constrained", 0.4), ("free", 0.7), ("free", 1.5)])
def test_ratio_is_one_before_an_update_at_every_temperature(decoding, temperature, store):
    policy = build_tiny_policy(decoding, seed=2, max_action_tokens=6)
    naive = _group(policy, store, "naive", temperature)
    assert {ep.temperature for ep in naive} == {temperature}
    _assert_ratio_one(_update_lr0(policy, naive, "on-policy"))
    memory = _group(policy, store, "memory", temperature)
    assert all(s.tips for ep in memory for s in ep.steps)  # the behaviour prompts carried tips
    _assert_ratio_one(_update_lr0(policy, memory, "on-policy-with-tips"))
    # Off-policy trains tip-free against the with-tips behaviour: ratio ≠ 1 by design, but finite.
    off = _update_lr0(policy, memory, "off-policy")
    assert off["train/tokens"] > 0 and off["ratio/max"] < float("inf")


def test_mixed_temperatures_in_one_update_each_scored_at_its_own(store):
    """A Distill-now batch can mix training episodes (T = 1) with side-by-side pairs played at the
    Episodes tab's default T = 0.4: each episode is re-scored at its own temperature."""
    policy = build_tiny_policy("constrained", seed=5, max_action_tokens=6)
    trained = _group(policy, store, "memory", 1.0)
    seed_policy(policy, 2)
    pair = play_side_by_side(
        [TrapEnv(step_limit=3), TrapEnv(step_limit=3)], policy, store, task=TASK, variation=0, split="train",
        seed=4, temperature=0.4, write_tips=False,
    )  # fmt: skip
    assert [ep.temperature for ep in pair] == [0.4, 0.4]
    _assert_ratio_one(_update_lr0(policy, [*trained, *pair], "on-policy-with-tips"))


def test_low_prob_mask_reads_the_tempered_logprobs(store):
    """With unchanged weights the on-policy current log-probs equal the behaviour ones at T, so the
    δ rule must drop exactly the tokens whose *recorded* (tempered) log-prob is below δ."""
    policy = build_tiny_policy("constrained", seed=6, max_action_tokens=6)
    episodes = _group(policy, store, "naive", 0.5, n=3, limit=4)
    lps = sorted({lp for ep in episodes for s in ep.steps for lp in s.sample.logprobs if lp < -0.05})
    gaps = [(b - a, (a + b) / 2) for a, b in zip(lps, lps[1:])]
    _, delta = max(gaps)  # a δ half-way between two recorded log-probs: no token sits near it
    tokens = [lp for ep in episodes for s in ep.steps for lp in s.sample.logprobs]
    expected = sum(lp < delta for lp in tokens) / len(tokens)
    assert 0 < expected < 1
    m = _update_lr0(policy, episodes, "on-policy", low_prob_mask="per-token", low_prob_threshold=delta)
    assert m["mask/low_prob_frac"] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("decoding", ["constrained", "free"])
def test_score_divides_logits_by_the_sampling_temperature(decoding):
    """Hand check on one token: score at T equals log_softmax(logits / T) of the unmasked (free) or
    trie-masked (constrained) logits; greedy (T = 0) scores at T = 1; a per-conversation list works."""
    from empo2_studio.policy import ActionRequest, Turn

    policy = build_tiny_policy(decoding, seed=8, max_action_tokens=4)
    valid = ("go to kitchen", "look around")
    first = (Turn("Your task: look around.", None, valid),)
    s = policy.sample([ActionRequest("a", first)], temperature=0.5)[0]
    conv = [Turn(first[0].user_text, s.token_ids, valid)]
    with torch.no_grad():
        at_half = torch.cat(policy.score([conv], temperature=0.5)[0])
        at_one = torch.cat(policy.score([conv])[0])
        greedy = torch.cat(policy.score([conv], temperature=0)[0])
        both = policy.score([conv, conv], temperature=[0.5, 1.0])
        prompt = policy.prompt_ids(first)
        logits = policy.model(input_ids=torch.tensor([prompt])).logits[0, -1].float()
    if decoding == "constrained":
        allowed = list({policy.chat_format.encode(a)[0] for a in valid})
        masked = torch.full_like(logits, float("-inf"))
        masked[allowed] = logits[allowed]
        logits = masked
    tok = s.token_ids[0]
    assert float(at_half[0]) == pytest.approx(float(torch.log_softmax(logits / 0.5, -1)[tok]), abs=1e-5)
    assert float(at_one[0]) == pytest.approx(float(torch.log_softmax(logits, -1)[tok]), abs=1e-5)
    torch.testing.assert_close(at_half, torch.tensor(s.logprobs), atol=1e-5, rtol=0)
    torch.testing.assert_close(greedy, at_one)
    torch.testing.assert_close(torch.cat(both[0]), at_half)
    torch.testing.assert_close(torch.cat(both[1]), at_one)


def test_bad_scoring_temperatures_are_named(tiny_policy):
    from empo2_studio.policy import Turn

    conv = [Turn("x", tiny_policy.chat_format.encode("look around"), ("look around",))]
    with pytest.raises(ValueError, match="got 2 temperatures for 1 conversations"):
        tiny_policy.score([conv], temperature=[1.0, 0.5])
    with pytest.raises(ValueError, match=r"temperature must be a finite number ≥ 0 .*got -0\.5"):
        tiny_policy.score([conv], temperature=-0.5)
    assert logprob_temperature(0) == 1.0 and logprob_temperature(0.4) == 0.4


def test_low_prob_mask_reference_in_distillation(store):
    """Off-policy (distillation) batch, unchanged weights: δ drops exactly the tokens whose *recorded*
    with-tips log-prob is below it ("behaviour", the recipe) or whose tip-free re-score is ("tip-free",
    the paper text). δ is picked where the two rules drop different fractions of this batch."""
    from empo2_studio.policy import Turn

    policy = build_tiny_policy("constrained", seed=6, max_action_tokens=6)
    episodes = _group(policy, store, "memory", 1.0, n=3, limit=4)
    assert all(s.tips for ep in episodes for s in ep.steps)
    behaviour = [lp for ep in episodes for s in ep.steps for lp in s.sample.logprobs]
    with torch.no_grad():
        convs = [[Turn(s.user_message, tuple(s.sample.token_ids), s.valid_actions) for s in ep.steps] for ep in episodes]
        tip_free = [float(lp) for conv in policy.score(convs) for turn in conv for lp in turn]
    assert len(tip_free) == len(behaviour)
    values = sorted(set(behaviour) | set(tip_free))

    def dropped(lps, delta):
        return sum(lp < delta for lp in lps) / len(lps)

    # δ half-way between two log-probs ≥ 1e-4 apart (float noise cannot flip a token), where the rules differ
    deltas = [(a + b) / 2 for a, b in zip(values, values[1:]) if b - a > 1e-4 and (a + b) / 2 < 0]
    delta = next((d for d in deltas if dropped(behaviour, d) != dropped(tip_free, d)), None)
    assert delta is not None, "the tips should change some token's log-prob"
    by_behaviour, by_tip_free = dropped(behaviour, delta), dropped(tip_free, delta)
    for ref, expected in (("behaviour", by_behaviour), ("tip-free", by_tip_free)):
        m = _update_lr0(policy, episodes, "off-policy", low_prob_mask="per-token", low_prob_threshold=delta, low_prob_ref=ref)
        assert m["mask/low_prob_frac"] == pytest.approx(expected, abs=1e-12), ref
