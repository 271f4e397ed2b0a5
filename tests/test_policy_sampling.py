"""Batched, cached sampling on the tiny policy: behaviour log-probs equal a re-score (ratio 1)."""

import pytest
import torch

from empo2_studio.policy import ActionRequest, Turn, build_tiny_policy

torch.set_num_threads(1)  # the CI machine has 2 shared cores

VALID = ("go to kitchen", "go to hallway", "look around", "open door", "pick up red bulb", "pick up blue bulb")
FIRST = "Your task: turn on the red bulb.\nObservation: You are in the hallway."


def _play(policy, keys, steps, temperature=1.0):
    """Lock-step episodes; returns per key the list of answered turns."""
    convs = {k: [] for k in keys}
    for t in range(steps):
        reqs = [
            ActionRequest(k, tuple(convs[k]) + (Turn(FIRST if t == 0 else f"Observation {t} of {k}.", None, VALID),))
            for k in keys
        ]
        for k, req, s in zip(keys, reqs, policy.sample(reqs, temperature=temperature)):
            assert len(s.logprobs) == len(s.token_ids)
            convs[k].append(Turn(req.turns[-1].user_text, s.token_ids, VALID))
            convs.setdefault("_samples_" + k, []).append(s)
    return convs


@pytest.mark.parametrize("decoding", ["constrained", "free"])
def test_behaviour_logprobs_equal_rescore(decoding):
    policy = build_tiny_policy(decoding, seed=4, max_action_tokens=6)
    keys = ["a", "b", "c"]
    convs = _play(policy, keys, 3)
    with torch.no_grad():
        scored = policy.score([convs[k] for k in keys])
    for k, per_turn in zip(keys, scored):
        for s, lp in zip(convs["_samples_" + k], per_turn):
            behaviour = torch.tensor(s.logprobs)
            ratio = torch.exp(lp - behaviour)
            torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=1e-5, rtol=0)


def test_constrained_samples_are_valid_actions_ending_with_end_of_turn():
    policy = build_tiny_policy("constrained", seed=5)
    reqs = [ActionRequest(str(i), (Turn(FIRST, None, VALID),)) for i in range(12)]
    samples = policy.sample(reqs, temperature=1.5)
    eot = policy.chat_format.eot_id
    for s in samples:
        assert s.text in VALID
        assert s.token_ids[-1] == eot
        assert list(s.token_ids) == list(policy.chat_format.encode(s.text)) + [eot]
    assert len({s.text for s in samples}) > 1  # random weights at T=1.5 do not always pick one action


def test_free_samples_stop_at_end_of_line_or_limit():
    policy = build_tiny_policy("free", seed=6, max_action_tokens=5)
    samples = policy.sample([ActionRequest(str(i), (Turn(FIRST, None, VALID),)) for i in range(6)], temperature=1.0)
    newline, _ = policy._newline_ids()
    for s in samples:
        assert 1 <= len(s.token_ids) <= 5
        assert all(t not in newline for t in s.token_ids[:-1])
        assert "\n" not in s.text


def test_cache_processes_only_new_tokens_and_matches_uncached_greedy():
    policy = build_tiny_policy("free", seed=7, max_action_tokens=4)
    fresh = build_tiny_policy("free", seed=7, max_action_tokens=4)
    first = (Turn(FIRST, None, VALID),)
    prompt = policy.prompt_ids(first)
    s0 = policy.sample([ActionRequest("a", first), ActionRequest("b", first)], temperature=0)
    # shared prefix once (n-1 tokens), then 1 token each, then one token per decoding step after the first
    decode_feeds = sum(len(s.token_ids) - 1 for s in s0)
    assert policy.sampler.tokens_processed == len(prompt) + 1 + decode_feeds
    turns = (Turn(FIRST, s0[0].token_ids, VALID), Turn("Observation 1.", None, VALID))
    before = policy.sampler.tokens_processed
    fed_for_a = len(policy.sampler.states["a"].ids)
    s1 = policy.sample([ActionRequest("a", turns)], temperature=0)[0]
    assert policy.sampler.tokens_processed - before == len(policy.prompt_ids(turns)) - fed_for_a + len(s1.token_ids) - 1
    ref = fresh.sample([ActionRequest("z", turns)], temperature=0)[0]
    assert ref.token_ids == s1.token_ids
    torch.testing.assert_close(torch.tensor(ref.logprobs), torch.tensor(s1.logprobs), atol=1e-5, rtol=0)


def test_forget_drops_the_cache(tiny_policy):
    tiny_policy.sample([ActionRequest("a", (Turn(FIRST, None, VALID),))], temperature=1.0)
    assert "a" in tiny_policy.sampler.states
    tiny_policy.forget("a")
    tiny_policy.forget("never-seen")
    assert "a" not in tiny_policy.sampler.states


def test_write_tips_returns_one_text_per_conversation():
    policy = build_tiny_policy("constrained", seed=8, max_tip_tokens=5)
    fmt = policy.chat_format
    conv = [Turn(FIRST, fmt.encode("look around") + (fmt.eot_id,), VALID)]
    tips = policy.write_tips([conv, conv + conv], "Summarise the episode in one line.")
    assert len(tips) == 2 and all(isinstance(t, str) for t in tips)
    assert all("\n" not in t for t in tips)  # generation stops at the end of the first line
    again = policy.write_tips([conv], "Summarise the episode in one line.")
    assert again[0] == tips[0]  # greedy and left padding do not change the text


def test_write_tips_equal_greedy_generate_and_reuse_kept_caches():
    """Reference: transformers' greedy `generate` on the same prompt, cut at the end of the first line."""
    policy = build_tiny_policy("constrained", seed=3, max_tip_tokens=12)
    convs = _play(policy, ["a", "b"], steps=2)  # leaves the caches of "a" and "b" in the sampler
    assert {"a", "b"} <= set(policy.sampler.states)
    instruction = "Summarise the episode in one line."
    fed = policy.sampler.tokens_processed
    kept = policy.write_tips([convs["a"], convs["b"]], instruction, keys=["a", "b"])
    fed_kept = policy.sampler.tokens_processed - fed
    assert not {"a", "b"} & set(policy.sampler.states)  # dropped after the tips
    fed = policy.sampler.tokens_processed
    fresh = policy.write_tips([convs["a"], convs["b"]], instruction)
    assert kept == fresh
    assert fed_kept < policy.sampler.tokens_processed - fed  # the kept caches saved re-reading the episodes
    newline, blank = policy._newline_ids()
    for conv, text in zip((convs["a"], convs["b"]), kept):
        prompt = policy.prompt_ids(list(conv) + [Turn(instruction, None)])
        ref = policy.model.generate(
            input_ids=torch.tensor([prompt]), max_new_tokens=12, do_sample=False, pad_token_id=0,
            eos_token_id=[policy.chat_format.eot_id],
        )[0, len(prompt):].tolist()  # fmt: skip
        cut, started = len(ref), False
        for i, tok in enumerate(ref):
            if tok == policy.chat_format.eot_id or (tok in newline and (started or tok not in blank)):
                cut = i + 1
                break
            started = started or tok not in blank
        assert text == policy.tokenizer.decode(ref[:cut], skip_special_tokens=True).strip()


def test_write_tips_rejects_mismatched_keys(tiny_policy):
    conv = [Turn(FIRST, tiny_policy.chat_format.encode("look around"), VALID)]
    with pytest.raises(ValueError, match="got 1 keys for 2 conversations"):
        tiny_policy.write_tips([conv, conv], "x", keys=["a"])


def _uneven_requests(policy, steps_by_key):
    """Requests whose episodes have different history lengths (answered turns = steps_by_key[k])."""
    fmt = policy.chat_format
    reqs = []
    for k, steps in steps_by_key.items():
        past = tuple(
            Turn(FIRST if t == 0 else f"Observation {t} of {k}: " + "a table, " * (3 * t + len(k)), fmt.encode(VALID[(t + len(k)) % 6]) + (fmt.eot_id,), VALID)
            for t in range(steps)
        )
        reqs.append(ActionRequest(k, past + (Turn(FIRST if not steps else f"Now {k}.", None, VALID),)))
    return reqs


@pytest.mark.parametrize("decoding,batched_prefill", [("constrained", True), ("free", True), ("constrained", False)])
def test_batched_equals_one_at_a_time_with_uneven_histories(decoding, batched_prefill):
    steps = {"a": 0, "bb": 2, "ccc": 1, "d": 3}
    batched = build_tiny_policy(decoding, seed=9, max_action_tokens=6)
    batched.sampler.batched_prefill = batched_prefill
    single = build_tiny_policy(decoding, seed=9, max_action_tokens=6)
    single.sampler.batched = False
    assert batched.sampler.batched  # batching is the default
    for turn in range(2):  # second call reuses the caches cut out of the batch
        reqs = _uneven_requests(batched, {k: s + turn for k, s in steps.items()})
        got = batched.sample(reqs, temperature=0)
        ref = [single.sample([r], temperature=0)[0] for r in reqs]
        fresh = build_tiny_policy(decoding, seed=9, max_action_tokens=6)
        naive = [fresh.sample([r], temperature=0)[0] for r in reqs]  # nothing cached: full re-encode
        for g, r, n in zip(got, ref, naive):
            assert g.token_ids == r.token_ids == n.token_ids
            torch.testing.assert_close(torch.tensor(g.logprobs), torch.tensor(r.logprobs), atol=1e-5, rtol=0)
        for k in steps:  # caches cut out of the batch hold exactly the fed ids, no padding
            st = batched.sampler.states[k]
            assert st.cache.get_seq_length() == len(st.ids)
    with torch.no_grad():
        convs = [list(r.turns[:-1]) + [Turn(r.turns[-1].user_text, g.token_ids, VALID)] for r, g in zip(reqs, got)]
        scored = batched.score(convs)
    for g, per_turn in zip(got, scored):
        torch.testing.assert_close(per_turn[-1], torch.tensor(g.logprobs), atol=1e-5, rtol=0)


def test_constrained_batch_yields_only_valid_actions_and_rescored_logprobs():
    policy = build_tiny_policy("constrained", seed=10)
    reqs = _uneven_requests(policy, {"a": 0, "b": 1, "c": 2, "d": 0, "e": 3, "f": 1, "g": 2, "h": 0})
    samples = policy.sample(reqs, temperature=1.0)  # behaviour log-probs at T=1 equal the score
    for s in samples:
        assert s.text in VALID
        assert list(s.token_ids) == list(policy.chat_format.encode(s.text)) + [policy.chat_format.eot_id]
    assert len({s.text for s in samples}) > 1
    with torch.no_grad():
        convs = [list(r.turns[:-1]) + [Turn(r.turns[-1].user_text, s.token_ids, VALID)] for r, s in zip(reqs, samples)]
        scored = policy.score(convs)
    for s, per_turn in zip(samples, scored):
        torch.testing.assert_close(per_turn[-1], torch.tensor(s.logprobs), atol=1e-5, rtol=0)


def test_episode_caches_are_not_held_twice_while_a_batch_decodes(monkeypatch):
    """The batch holds a padded copy of every episode's cache: while it decodes, no episode keeps its
    own (they were held twice, the peak of writing tips); afterwards each has its cache back."""
    policy = build_tiny_policy("constrained", seed=3)
    policy.sample(_uneven_requests(policy, {"a": 1, "bb": 2, "ccc": 0}), temperature=0)
    seen = []
    decode = policy.sampler._decode_batch

    def spy(batch, states, *args):
        seen.append([st.cache for st in states])
        return decode(batch, states, *args)

    monkeypatch.setattr(policy.sampler, "_decode_batch", spy)
    policy.sample(_uneven_requests(policy, {"a": 2, "bb": 3, "ccc": 1}), temperature=0)
    assert seen == [[None, None, None]]
    for key, st in policy.sampler.states.items():
        assert st.cache.get_seq_length() == len(st.ids) > 0, key


def test_a_failed_batch_forgets_its_episodes(monkeypatch):
    """Their caches went into the batch: a failure mid-decoding must not leave states without one."""
    policy = build_tiny_policy("constrained", seed=4)
    reqs = _uneven_requests(policy, {"a": 1, "bb": 2})
    policy.sample(reqs, temperature=0)
    assert set(policy.sampler.states) == {"a", "bb"}

    def boom(*args, **kwargs):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(policy.sampler, "_decode_batch", boom)
    with pytest.raises(RuntimeError, match="interrupted"):
        policy.sample(_uneven_requests(policy, {"a": 2, "bb": 3}), temperature=0)
    assert not policy.sampler.states
    monkeypatch.undo()
    got = policy.sample(_uneven_requests(policy, {"a": 2, "bb": 3}), temperature=0)  # starts afresh
    assert all(g.token_ids for g in got)


def test_the_batch_takes_the_episode_caches_over_layer_by_layer():
    """Building the padded batch empties each episode's cache layer once copied (also a prefix cache
    two fresh episodes share), so the caches are never held twice; the rows come back unpadded."""
    from empo2_studio.policy.batch_cache import BatchState
    from empo2_studio.policy.sampling import CachedState

    policy = build_tiny_policy("free", seed=1)
    sampler = policy.sampler
    a, shared = sampler._fresh(), sampler._fresh()
    sampler.feed(a, [5, 6, 7, 8, 9])
    sampler.feed(shared, [5, 6, 7])
    keys_a = [layer.keys.clone() for layer in a.cache.layers]
    b = CachedState(list(shared.ids), shared.cache, shared.logits)  # two fresh episodes, one prefix cache
    batch = BatchState([a, shared, b], range(3), policy.model.config, sampler.device)
    assert batch.mask == [[1] * 5, [0, 0, 1, 1, 1], [0, 0, 1, 1, 1]] and batch.pos == [5, 3, 3]
    assert all(layer.keys.shape[2] == 0 and layer.values.shape[2] == 0 for c in (a.cache, shared.cache) for layer in c.layers)
    assert all(layer.keys.shape[:3] == (3, layer.keys.shape[1], 5) for layer in batch.cache.layers)
    back = batch.extract(0)
    assert all(torch.equal(layer.keys, k) for layer, k in zip(back.layers, keys_a))
    assert batch.extract(2).get_seq_length() == 3
