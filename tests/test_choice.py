"""Whole-action choice (`policy.decoding = "action"`, policy/choice.py): the categorical by hand, the
shared-prefix candidate block against plain forwards, ratio 1 before an update, gradients, bad input."""

from __future__ import annotations

import math

import pytest
import torch

from empo2_studio.config import AlgoConfig, PolicyConfig, RunConfig
from empo2_studio.envs.trap import TrapEnv
from empo2_studio.policy import ActionRequest, Turn, build_tiny_policy
from empo2_studio.policy.choice import NEUTRAL_PROMPT, ChoiceSettings, candidates, categorical, normalised, tree_logprobs
from empo2_studio.rollout import play_group, seed_policy
from empo2_studio.update import UpdateSettings, policy_update

torch.set_num_threads(1)

ACTS = ("go to kitchen", "look around", "focus on bed")
FAKE = [torch.tensor([-1.0, -0.5, -0.5, -2.0]), torch.tensor([-1.0, -1.0, -1.0]), torch.tensor([-0.5, -0.5, -3.0, -1.0, -1.0])]


def test_normalisations_by_hand():
    # sums −4, −3, −6; tokens 4, 3, 5; words 3, 2, 3
    assert normalised(FAKE, ACTS, "sum").tolist() == pytest.approx([-4.0, -3.0, -6.0])
    assert normalised(FAKE, ACTS, "token").tolist() == pytest.approx([-1.0, -1.0, -1.2])
    assert normalised(FAKE, ACTS, "word").tolist() == pytest.approx([-4 / 3, -1.5, -2.0])


def test_categorical_at_a_temperature_by_hand():
    # word-normalised z = (−4/3, −1.5, −2) at T = 0.5: z / T = (−8/3, −3, −4);
    # exp = 0.069483, 0.049787, 0.018316, sum 0.137586 → π = 0.50501, 0.36186, 0.13312
    logp = categorical(normalised(FAKE, ACTS, "word"), 0.5)
    assert logp.exp().tolist() == pytest.approx([0.50501, 0.36186, 0.13312], abs=1e-5)
    # "sum" at T = 1 prefers the short action (−3 beats −4): exp(−4, −3, −6) / 0.070582 → 0.2595, 0.7054, 0.0351
    assert categorical(normalised(FAKE, ACTS, "sum"), 1.0).exp().tolist() == pytest.approx([0.25950, 0.70538, 0.03512], abs=1e-4)


@pytest.fixture(scope="module")
def policy():
    return build_tiny_policy("action", seed=3, max_action_tokens=6)


def _plain(policy, prefix, cand):
    ids = list(prefix) + list(cand)
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits, -1)[len(prefix) - 1 : len(ids) - 1].gather(-1, torch.tensor(cand)[:, None]).squeeze(-1)


def test_candidate_block_equals_one_forward_per_candidate(policy):
    fmt = policy.chat_format
    conv = [Turn("You are in the hallway.", fmt.encode("look around") + (fmt.eot_id,), ACTS), Turn("Still here.", None, ACTS)]
    base, spans = fmt.conversation_ids(conv[:1])
    prompt = policy.prompt_ids(conv)
    cands = candidates(fmt, ACTS)
    assert cands[1] == fmt.encode("look around") + (fmt.eot_id,)
    # Two groups on one base: after turn 0's prompt (s = its span start) and after the whole base.
    with torch.no_grad():
        g0, g1 = tree_logprobs(policy.model, prompt, [(spans[0][0], cands), (len(prompt), cands)])
    for c, got0, got1 in zip(cands, g0, g1):
        assert torch.allclose(got0, _plain(policy, prompt[: spans[0][0]], c), atol=1e-5)
        assert torch.allclose(got1, _plain(policy, prompt, c), atol=1e-5)


def test_pmi_subtracts_the_neutral_prompt_score(policy):
    fmt = policy.chat_format
    neutral = fmt.conversation_ids([Turn(NEUTRAL_PROMPT, None)])[0]
    prior = [_plain(policy, neutral, c) for c in candidates(fmt, ACTS)]
    policy.chooser.settings = ChoiceSettings("token", pmi=True)
    try:
        z = policy.chooser.logits(FAKE, ACTS)
    finally:
        policy.chooser.settings = ChoiceSettings()
    expected = torch.tensor([-1.0, -1.0, -1.2]) - normalised(prior, ACTS, "token")
    assert torch.allclose(z, expected, atol=1e-5)


@pytest.mark.parametrize("temperature", [0.4, 1.0, 0.0])
def test_sampled_logprob_is_the_rescored_categorical(policy, temperature):
    """Two episodes sharing a fresh prefix, two turns each (the second on the kept KV cache): every
    recorded log-prob equals the re-score, and equals log softmax(z / T) assembled by hand."""
    fmt = policy.chat_format
    seed_policy(policy, 7)
    convs: list[list[Turn]] = [[], []]
    recorded: list[list[float]] = [[], []]
    users = (("Task: light the bulb. Hallway.", "You go to the kitchen."), ("Task: light the bulb. Hallway.", "Nothing happens."))
    for step in range(2):
        reqs = [ActionRequest(f"ep{i}-T{temperature}", tuple(convs[i]) + (Turn(users[i][step], None, ACTS),)) for i in range(2)]
        for i, s in enumerate(policy.sample(reqs, temperature=temperature)):
            assert s.text in ACTS and s.token_ids == candidates(fmt, [s.text])[0] and len(s.logprobs) == 1
            convs[i].append(Turn(users[i][step], s.token_ids, ACTS))
            recorded[i].append(s.logprobs[0])
    t_eff = temperature or 1.0
    with torch.no_grad():
        scored = policy.score(convs, temperature=temperature)
    for conv, rows in zip(convs, scored):
        assert [r.shape for r in rows] == [torch.Size([1])] * 2
        # by hand: turn 0 of the conversation, from plain forwards
        prompt = policy.prompt_ids([Turn(conv[0].user_text, None, ACTS)])
        z = normalised([_plain(policy, prompt, c) for c in candidates(fmt, ACTS)], ACTS, "word")
        k = candidates(fmt, ACTS).index(conv[0].action_ids)
        assert float(rows[0]) == pytest.approx(float(torch.log_softmax(z / t_eff, -1)[k]), abs=1e-5)
    assert [float(r) for rows in scored for r in rows] == pytest.approx([lp for r in recorded for lp in r], abs=1e-5)


def test_gradients_reach_every_candidate(policy):
    fmt = policy.chat_format
    conv = [Turn("Hallway.", candidates(fmt, ACTS)[2], ACTS)]
    for p in policy.trainable_parameters():
        p.grad = None
    (rows,) = policy.score([conv], temperature=0.7)
    rows[0].sum().backward()
    assert sum(float(p.grad.abs().sum()) for p in policy.trainable_parameters() if p.grad is not None) > 0
    for p in policy.trainable_parameters():
        p.grad = None


def test_bad_input(policy):
    fmt = policy.chat_format
    with pytest.raises(ValueError, match="none of the step's valid actions"):
        policy.score([[Turn("Hallway.", fmt.encode("dance") + (fmt.eot_id,), ACTS)]])
    with pytest.raises(ValueError, match="action decoding needs valid_actions"):
        policy.sample([ActionRequest("x", (Turn("Hallway.", None, ()),))], temperature=0.4)
    with pytest.raises(ValueError, match=r"policy.choice_norm must be one of \['word', 'token', 'sum'\], got 'bytes'"):
        RunConfig(policy=PolicyConfig(choice_norm="bytes")).validate()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="policy.choice_norm"):
        ChoiceSettings("bytes")
    assert RunConfig(policy=PolicyConfig(decoding="action", choice_pmi=True)).validate().policy.decoding == "action"


def test_ratio_is_one_before_an_update():
    """A trap group under action decoding, one update at learning rate 0: every turn is one "token"
    whose ratio is exactly 1; at a real learning rate the chosen actions' log-probs move."""
    policy = build_tiny_policy("action", seed=2, max_action_tokens=6)
    seed_policy(policy, 1)
    eps = play_group([TrapEnv(step_limit=3) for _ in range(2)], policy, None, task="trap-light-bulb", variation=0,
                     split="train", rollout_mode="naive", update_mode="on-policy", temperature=0.7, seed=3)
    assert all(len(s.sample.logprobs) == 1 and s.sample.text in s.valid_actions for e in eps for s in e.steps)
    settings = UpdateSettings(AlgoConfig(low_prob_mask="off"))
    m = policy_update(policy, torch.optim.AdamW(policy.trainable_parameters(), lr=0.0), eps, [1.0, -1.0], "on-policy", settings)
    assert m["train/tokens"] == sum(len(e.steps) for e in eps)
    assert abs(m["ratio/min"] - 1.0) <= 1e-5 and abs(m["ratio/max"] - 1.0) <= 1e-5
    policy_update(policy, torch.optim.AdamW(policy.trainable_parameters(), lr=1e-2), eps, [1.0, -1.0], "on-policy", settings)
    with torch.no_grad():
        after = policy.score([[Turn(s.user_message, s.sample.token_ids, s.valid_actions) for s in eps[0].steps]], temperature=0.7)[0]
    assert not math.isclose(float(after[0]), eps[0].steps[0].sample.logprobs[0], abs_tol=1e-4)
