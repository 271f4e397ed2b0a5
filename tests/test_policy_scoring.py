"""Exact log-prob scoring on the tiny random policy: packed == per-turn == naive log_softmax+gather."""

import copy

import pytest
import torch

torch.set_num_threads(1)  # the CI machine has 2 shared cores

from empo2_studio.policy import Turn, build_tiny_policy
from empo2_studio.policy.hf_policy import HFPolicy

VALID = ("go to kitchen", "go to hallway", "look around", "open door", "pick up red bulb")


def _conversation(policy, n_turns=3):
    """A conversation whose actions are encoded valid actions + end of turn (as constrained sampling makes)."""
    fmt = policy.chat_format
    turns = []
    for t in range(n_turns):
        action = VALID[(2 * t + 1) % len(VALID)]
        turns.append(Turn(f"Observation {t}: you see things.", fmt.encode(action) + (fmt.eot_id,), VALID))
    return turns


def test_packed_score_equals_naive_log_softmax_gather():
    policy = build_tiny_policy("free", seed=1)
    conv = _conversation(policy)
    ids, spans = policy.chat_format.conversation_ids(conv)
    with torch.no_grad():
        got = policy.score([conv])[0]
        logits = policy.model(input_ids=torch.tensor([ids])).logits[0]
        ref = torch.log_softmax(logits, -1)
    for (s, e), turn, lp in zip(spans, conv, got):
        expect = torch.stack([ref[p - 1, ids[p]] for p in range(s, e)])
        assert list(ids[s:e]) == list(turn.action_ids)
        torch.testing.assert_close(lp, expect, atol=1e-5, rtol=0)


def test_constrained_score_is_masked_log_softmax():
    policy = build_tiny_policy("constrained", seed=1)
    fmt = policy.chat_format
    conv = _conversation(policy, 1)
    ids, [(s, e)] = fmt.conversation_ids(conv)
    seqs = [fmt.encode(a) + (fmt.eot_id,) for a in VALID]
    with torch.no_grad():
        got = policy.score([conv])[0][0]
        logits = policy.model(input_ids=torch.tensor([ids])).logits[0]
    expect = []
    for k, p in enumerate(range(s, e)):
        prefix = tuple(ids[s:p])
        allowed = sorted({q[k] for q in seqs if q[:k] == prefix})
        row = logits[p - 1, allowed]
        expect.append(torch.log_softmax(row, -1)[allowed.index(ids[p])])
    torch.testing.assert_close(got, torch.stack(expect), atol=1e-5, rtol=0)
    assert got[-1].item() == 0.0  # after "pick up red bulb"'s last word only the end of turn is allowed


@pytest.mark.parametrize("decoding", ["free", "constrained"])
def test_packed_equals_per_turn(decoding):
    policy = build_tiny_policy(decoding, seed=2)
    convs = [_conversation(policy, 4), _conversation(policy, 2)]
    with torch.no_grad():
        packed, per_turn = policy.score(convs), policy.score_per_turn(convs)
    for a, b in zip(packed, per_turn):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            torch.testing.assert_close(x, y, atol=1e-5, rtol=0)
    assert policy.metrics["policy/packed_fallback"] == 0.0


def test_template_without_prefix_property_falls_back_per_turn():
    base = build_tiny_policy("free", seed=3)
    tok = copy.deepcopy(base.tokenizer)
    # A template that shows only the last user message breaks the prefix property.
    tok.chat_template = (
        "{{ '<|im_start|>user\\n' + messages[-1]['content'] + '<|im_end|>\\n' }}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    policy = HFPolicy(base.model, tok, decoding="free", base_model_name="x")
    assert not policy.chat_format.packed
    conv = _conversation(base, 2)
    with torch.no_grad():
        got = policy.score([conv])
        ref = policy.score_per_turn([conv])
    assert policy.metrics["policy/packed_fallback"] == 2.0  # 1 at construction + 1 conversation
    for x, y in zip(got[0], ref[0]):
        torch.testing.assert_close(x, y)


def test_score_gradients_reach_lora_only(tiny_policy):
    conv = _conversation(tiny_policy, 2)
    with torch.no_grad():  # a trained adapter: B ≠ 0, so both A and B receive gradient
        for p in tiny_policy.trainable_parameters():
            p.normal_(std=0.05)
    loss = -torch.cat(tiny_policy.score([conv])[0]).sum()
    loss.backward()
    grads = [p.grad for p in tiny_policy.trainable_parameters()]
    assert all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)
    frozen = [p for p in tiny_policy.model.parameters() if not p.requires_grad]
    assert frozen and all(p.grad is None for p in frozen)
