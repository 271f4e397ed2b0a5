"""Lock-step rollouts on the trap env with the tiny random policy and the hash embedder."""

from __future__ import annotations

import copy

import pytest

from empo2_studio.algorithm import NoveltyMemory
from empo2_studio.algorithm.schedule import draw_update_mode as algo_draw
from empo2_studio.config import MemoryConfig
from empo2_studio.envs.trap import TrapEnv
from empo2_studio.memory import TipStore, entry_text, make_embedder
from empo2_studio.policy import prompts
from empo2_studio.rollout.episodes import KEY_TAIL_CHARS
from empo2_studio.rollout import (
    Timings,
    draw_update_mode,
    key_text,
    play_batch,
    play_group,
    play_side_by_side,
    seed_policy,
    with_tips_message,
    write_group_tips,
)
from fakes import ScriptedPolicy

TASK = "trap-light-bulb"


@pytest.fixture
def embedder():
    return make_embedder("hash")


@pytest.fixture
def store(tmp_path, embedder):
    # Threshold −1: every stored tip of the partition is similar enough, so retrieval is exercised.
    return TipStore.open(tmp_path / "tips.lance", embedder, MemoryConfig(embedder="hash", similarity_threshold=-1.0))


def _group(policy, store, mode, *, n=3, limit=4, **kw):
    seed_policy(policy, 0)
    envs = [TrapEnv(step_limit=limit) for _ in range(n)]
    return play_group(
        envs, policy, store, task=TASK, variation=0, split="train", rollout_mode=mode,
        update_mode="on-policy" if mode == "naive" else "off-policy", temperature=1.0, seed=7, **kw,
    )  # fmt: skip


def test_caches_are_dropped_at_episode_end_unless_kept_for_the_tips(tiny_policy, store):
    tiny_policy.clear_cache()
    episodes = _group(tiny_policy, None, "naive", n=2, limit=3)
    assert not tiny_policy.sampler.states
    episodes = _group(tiny_policy, None, "naive", n=2, limit=3, keep_caches=True)
    assert set(tiny_policy.sampler.states) == {ep.episode_id for ep in episodes}
    with_tips = write_group_tips(tiny_policy, store, episodes)
    assert not tiny_policy.sampler.states and all(ep.tip for ep in with_tips)


def test_rollout_forgets_each_episode_at_its_end_unless_asked_to_keep_it(store):
    policy = ScriptedPolicy()
    _group(policy, None, "naive", n=2, limit=3)
    assert policy.cached == set()
    episodes = _group(policy, None, "naive", n=2, limit=3, keep_caches=True)
    assert policy.cached == {ep.episode_id for ep in episodes}
    tipped = write_group_tips(policy, store, episodes)  # the reflection reuses, then drops, them
    assert policy.cached == set()
    # one batched reflection call: the scripted tips 0 and 1, in episode order, before the record line
    assert [ep.tip.split("[the model's note] ")[-1].split(" [from the record]")[0] for ep in tipped] == [
        "tip 0: try what raised the score", "tip 1: try what raised the score"]  # fmt: skip


def test_one_batched_sample_call_per_step_over_running_episodes():
    policy = ScriptedPolicy()  # records its sample calls
    episodes = _group(policy, None, "naive", n=3, limit=4)
    lengths = [len(ep.steps) for ep in episodes]
    assert len(policy.calls) == max(lengths)  # one call per lock-step
    for t, call in enumerate(policy.calls):
        assert len(call) == sum(1 for n in lengths if n > t)  # only still-running episodes
        assert all(len(req.turns) == t + 1 and req.turns[-1].action_ids is None for req in call)
    for ep in episodes:
        assert ep.task == TASK and ep.variation == 0 and ep.seed == 7 and ep.rollout_mode == "naive"
        assert ep.group_id == episodes[0].group_id != ""
        assert [s.index for s in ep.steps] == list(range(len(ep.steps)))
        assert ep.score == ep.steps[-1].score
        assert ep.return_ == pytest.approx(ep.score)  # trap scores start at 0
        for s in ep.steps:
            assert len(s.sample.logprobs) == len(s.sample.token_ids) > 0
            assert s.tips == () and s.intrinsic_reward == 0.0
            assert s.action in s.valid_actions  # constrained decoding picks a valid action
            # what the policy sampled is recorded as is: its bytes as token ids, −0.5 per token
            assert (s.sample.text, s.sample.token_ids) == (s.action, tuple(s.action.encode()))
            assert s.sample.logprobs == (-0.5,) * len(s.action.encode()) and not s.corrected


def test_first_turn_holds_instructions_and_history_keeps_exact_tokens():
    policy = ScriptedPolicy()  # records its sample calls
    episodes = _group(policy, None, "naive", n=2, limit=3)
    env = TrapEnv()
    obs = env.reset(TASK, 0)
    first = prompts.first_user_message("trap", obs, env.fewshot_examples(TASK))
    assert all(ep.steps[0].user_message == first for ep in episodes)
    ep = max(episodes, key=lambda e: len(e.steps))
    assert len(ep.steps) > 1  # the scripted seed-0 episodes run on past step 0
    req = next(r for r in policy.calls[1] if r.turns[0].action_ids == ep.steps[0].sample.token_ids)
    replay = TrapEnv(step_limit=3)
    replay.reset(TASK, 0)
    after = replay.step(ep.steps[0].sample.text).observation
    assert ep.steps[1].user_message == prompts.step_user_message(after, "trap")
    assert req.turns[1].user_text == ep.steps[1].user_message


def test_memory_mode_retrieves_every_step_and_records_both_prompts(store):
    policy = ScriptedPolicy()
    naive = _group(policy, None, "naive", n=2, limit=3)
    write_group_tips(policy, store, naive)
    assert store.count(task=TASK, variation=0) > 0
    policy.calls.clear()  # the memory group's calls only
    memory = _group(policy, store, "memory", n=2, limit=3)
    for ep in memory:
        assert ep.rollout_mode == "memory"
        for s in ep.steps:
            assert 0 < len(s.tips) <= 10
            assert all(-1.0 <= t.similarity <= 1.0 for t in s.tips)
            assert s.tips[0].text not in s.user_message  # the tip-free variant
            assert prompts.note_text(s.tips[0].text) in with_tips_message(s, "compact")
    # What the policy saw at step 0 is exactly the with-tips rendering of the recorded step.
    assert memory[0].prompt_style == "compact"
    assert policy.calls[0][0].turns[-1].user_text == with_tips_message(memory[0].steps[0], "compact")


class SpyStore:
    """Wraps a real TipStore and records every batched retrieval (a spy, not a fake)."""

    def __init__(self, inner):
        self.inner, self.batches = inner, []

    def retrieve_explained(self, task, variation, queries):
        self.batches.append(list(queries))
        return self.inner.retrieve_explained(task, variation, queries)


def test_memory_queries_of_a_lock_step_are_embedded_in_one_batch(store):
    policy = ScriptedPolicy()
    write_group_tips(policy, store, _group(policy, None, "naive", n=2, limit=3))
    spy = SpyStore(store)
    memory = _group(policy, spy, "memory", n=3, limit=3)
    assert [len(b) for b in spy.batches] == [sum(1 for ep in memory if len(ep.steps) > t) for t in range(len(spy.batches))]
    for t, batch in enumerate(spy.batches):
        running = [ep for ep in memory if len(ep.steps) > t]
        for ep, query in zip(running, batch):
            pairs = [(s.user_message, s.sample.text) for s in ep.steps[:t]]
            assert query == prompts.conversation_text([*pairs, (ep.steps[t].user_message, "")])[-KEY_TAIL_CHARS:]
            # the batch gives what one query at a time gives (then the compact prompt's cut, and each
            # plan shown from its first unplayed step)
            shown, _ = prompts.compact_notes_cut(store.retrieve(TASK, 0, query))
            played = [s.action for s in ep.steps[:t]]
            assert tuple(prompts.with_plan_progress(tip, played) for tip in shown) == ep.steps[t].tips


def test_tips_of_memory_episodes_reuse_their_sampling_caches(tiny_policy, store):
    from empo2_studio.memory.reflection import TIP_INSTRUCTION
    from empo2_studio.policy import Turn
    from empo2_studio.rollout import conversation as episode_turns

    write_group_tips(tiny_policy, store, _group(tiny_policy, None, "naive", n=2, limit=3))
    tiny_policy.clear_cache()
    memory = _group(tiny_policy, store, "memory", n=2, limit=3, keep_caches=True)
    assert all(s.tips for ep in memory for s in ep.steps)
    fed = tiny_policy.sampler.tokens_processed
    write_group_tips(tiny_policy, store, memory)
    fed = tiny_policy.sampler.tokens_processed - fed
    # Reused: only what follows each episode's last sampling prompt (its last action, the instruction)
    # and the tip's own tokens go through the model, not the tip-heavy conversations again.
    new = 0
    for ep in memory:
        turns = episode_turns(ep)
        last_prompt = tiny_policy.prompt_ids([*turns[:-1], Turn(turns[-1].user_text, None, ep.steps[-1].valid_actions)])
        new += len(tiny_policy.prompt_ids([*turns, Turn(TIP_INSTRUCTION, None)])) - len(last_prompt)
    assert fed <= new + len(memory) * tiny_policy.max_tip_tokens
    assert fed < sum(len(tiny_policy.prompt_ids(episode_turns(ep))) for ep in memory) / 2


def test_memory_mode_needs_a_store():
    policy = ScriptedPolicy()
    with pytest.raises(ValueError, match="tip store"):
        _group(policy, None, "memory")


def test_novelty_bonus_matches_a_replay_in_lock_step_order(embedder):
    policy = ScriptedPolicy()
    novelty = NoveltyMemory(0.9)
    episodes = _group(policy, None, "naive", n=3, limit=4, embedder=embedder, novelty=novelty)
    replay = NoveltyMemory(0.9)
    expected: dict[tuple[int, int], float] = {}
    for t in range(max(len(ep.steps) for ep in episodes)):
        reached = [(i, embedder.embed([ep.steps[t].observation])[0]) for i, ep in enumerate(episodes) if t < len(ep.steps)]
        for i, v in reached:  # each state of a lock-step is scored against the memory before the step
            expected[i, t] = copy.deepcopy(replay).reward(v)
        for _, v in reached:
            replay.reward(v)
    got = {(i, t): s.intrinsic_reward for i, ep in enumerate(episodes) for t, s in enumerate(ep.steps)}
    assert got == pytest.approx(expected)
    assert all(ep.steps[0].intrinsic_reward == 1.0 for ep in episodes)  # step-0 states are all new to the memory


class _HalvingNovelty:
    """Only what `NoveltyReward` asks for: `reward` pays 1, 1/2, 1/4, … over the visits it records."""

    def __init__(self) -> None:
        self.visits = 0

    def reward(self, vector) -> float:
        self.visits += 1
        return 0.5 ** (self.visits - 1)


def test_the_rollout_needs_only_the_novelty_reward_protocol(embedder):
    # 2 episodes of 3 steps: each lock-step scores its 2 states on copies of the memory as it was
    # before the step (visits 0, 2, 4 → bonuses 1, 1/4, 1/16 for both), then records both visits.
    novelty = _HalvingNovelty()
    episodes = _group(ScriptedPolicy(script=lambda r: "look around"), None, "naive", n=2, limit=3,
                      embedder=embedder, novelty=novelty)  # fmt: skip
    assert [[s.intrinsic_reward for s in ep.steps] for ep in episodes] == [[1.0, 0.25, 0.0625]] * 2
    assert novelty.visits == 6  # every reached state recorded once on the memory itself


def test_write_group_tips_stores_one_entry_per_step(store):
    policy = ScriptedPolicy()
    episodes = _group(policy, None, "naive", n=2, limit=3)
    timings = Timings()
    out = write_group_tips(policy, store, episodes, timings=timings)
    written = [ep for ep in out if ep.tip and ep.tip.strip()]
    # One entry per step, exact duplicates skipped (paper §2): count the distinct entry texts.
    entries = {entry_text(ep.tip, s.action, ep.score) for ep in written for s in ep.steps}
    assert store.count(task=TASK, variation=0) == len(entries) >= 1
    assert [ep.episode_id for ep in out] == [ep.episode_id for ep in episodes]
    assert timings.memory > 0
    # The key is the conversation's tail (MiniLM reads only its first 256 word-pieces).
    key = key_text(out[0])
    full = prompts.conversation_text([(s.user_message, s.sample.text) for s in out[0].steps])
    assert key.endswith("assistant: " + out[0].steps[-1].sample.text) and key == full[-KEY_TAIL_CHARS:]


def test_side_by_side_streams_both_sides_in_one_batch(store):
    policy = ScriptedPolicy()
    write_group_tips(policy, store, _group(policy, None, "naive", n=2, limit=3))
    policy.calls.clear()  # the pair's calls only
    seen: list[tuple[str, int]] = []
    seed_policy(policy, 1)
    naive, memory = play_side_by_side(
        [TrapEnv(step_limit=3), TrapEnv(step_limit=3)], policy, store, task=TASK, variation=0, split="train",
        seed=1, temperature=1.0, on_step=lambda side, step: seen.append((side, step.index)),
    )  # fmt: skip
    assert naive.rollout_mode == "naive" and memory.rollout_mode == "memory"
    assert naive.update_mode is None and memory.update_mode is None
    assert all(s.tips == () for s in naive.steps) and all(s.tips for s in memory.steps)
    assert len(policy.calls) == max(len(naive.steps), len(memory.steps))
    assert all(len(c) <= 2 for c in policy.calls) and len(policy.calls[0]) == 2
    assert sorted(seen) == sorted([("naive", s.index) for s in naive.steps] + [("memory", s.index) for s in memory.steps])
    assert naive.tip is not None and memory.tip is not None


def test_a_side_by_side_step_limit_below_the_envs_ends_both_episodes_there(store):
    """The Episodes pair plays a ScienceWorld Lesson task at the Lesson's step limit on envs whose own
    is the task's (`pair_memory.lesson_step_limit`); a larger one than the envs' changes nothing."""
    policy = ScriptedPolicy(lambda request: "look around")  # never ends a trap episode
    envs = [TrapEnv(step_limit=6), TrapEnv(step_limit=6)]
    kwargs = dict(task=TASK, variation=0, split="train", seed=0, temperature=1.0, write_tips=False)
    cut = play_side_by_side(envs, policy, store, step_limit=2, **kwargs)
    assert [len(e.steps) for e in cut] == [2, 2]
    assert [len(e.steps) for e in play_side_by_side(envs, policy, store, step_limit=50, **kwargs)] == [6, 6]
    assert [len(e.steps) for e in play_side_by_side(envs, policy, store, **kwargs)] == [6, 6]


def test_draw_update_mode_is_the_algorithm_schedule():
    assert draw_update_mode is algo_draw
    import random

    rng = random.Random(0)
    draws = [draw_update_mode(rng, 0.25, 2 / 3) for _ in range(6000)]
    assert draws.count("on-policy") / 6000 == pytest.approx(0.75, abs=0.02)
    assert draws.count("off-policy") / 6000 == pytest.approx(1 / 6, abs=0.015)


def test_a_compact_prompt_shows_three_curated_notes_and_says_why_not_the_rest(store):
    for i, note in enumerate(["Go to the kitchen.", "Open the door.", "Look around.", "Focus on the bulb.", "Turn it on."]):
        store.add_tip(TASK, 0, note, score=90.0 - i)  # added by hand: curated, pinned
    memory = _group(ScriptedPolicy(), store, "memory", n=1, limit=2)
    for s in memory[0].steps:
        assert {prompts.note_text(t.text) for t in s.tips} == {"Go to the kitchen.", "Open the door.", "Look around."}
        cut = [k for k in s.skipped_tips if k.reason.startswith("a compact prompt shows")]
        assert [prompts.note_text(k.text) for k in cut] == ["Focus on the bulb.", "Turn it on."]
        assert cut[0].reason == "a compact prompt shows the 3 best-scored notes only (score 87.0)"
        assert "Turn it on." not in with_tips_message(s, "compact")


def test_a_compact_prompt_shows_the_agents_best_scored_note_only(store):
    policy = ScriptedPolicy()
    naive = _group(policy, None, "naive", n=3, limit=2)
    write_group_tips(policy, store, naive)
    (memory,) = _group(policy, store, "memory", n=1, limit=2)
    for s in memory.steps:
        shown = {prompts.note_text(t.text) for t in s.tips}
        cut = [k for k in s.skipped_tips if k.reason.startswith("a compact prompt shows the best-scored note only")]
        assert len(shown) == 1 and len({prompts.note_text(k.text) for k in cut}) == 2  # 3 episodes, 3 notes
        assert not shown & {prompts.note_text(k.text) for k in cut}
        assert all(k.score <= s.tips[0].score for k in cut)


def test_a_curated_plan_is_shown_from_its_first_unplayed_step(store):
    env = TrapEnv()
    gold = env.gold_path(TASK, 0)
    store.add_tip(TASK, 0, env.curated_tip(TASK, 0), score=100.0)
    where = env.curated_tip(TASK, 0).split(": ")[0]
    policy = ScriptedPolicy(lambda req: gold[len(req.turns) - 1])
    (episode,) = _group(policy, store, "memory", n=1, limit=len(gold))
    assert [s.action for s in episode.steps] == gold and episode.won
    for k, step in enumerate(episode.steps):
        (tip,) = step.tips
        assert tip.pinned  # a hand-added tip is curated, so pinned
        assert prompts.note_text(tip.text) == f"{where}: " + ", then ".join(gold[k:]) + "."
        # what the policy was shown is what every later rebuild (scoring, reflection) renders
        assert policy.calls[k][0].turns[-1].user_text == with_tips_message(step, "compact")


def test_a_batch_plays_each_episode_on_its_own_variation_and_reports_each_end():
    # Even episodes focus on the coat rack (a wrong focus ends the episode at its first step), odd ones
    # look around until the step limit (3): lock-step batch sizes 4, 2, 2, ends 0 and 2 first, then 1, 3.
    policy = ScriptedPolicy(lambda req: "focus on coat rack" if int(req.key.rsplit("-", 1)[1]) % 2 == 0 else "look around")
    envs = [TrapEnv(step_limit=3) for _ in range(5)]
    ends = []
    episodes = play_batch(envs, policy, task=TASK, variations=[36, 36, 37, 0], split="test", temperature=0.4,
                          seed=3, on_end=lambda i, won: ends.append((i, won)))  # fmt: skip
    assert [e.variation for e in episodes] == [36, 36, 37, 0]
    assert [e.first_observation for e in episodes] == [TrapEnv().reset(TASK, v).text for v in (36, 36, 37, 0)]
    assert [len(call) for call in policy.calls] == [4, 2, 2]
    assert [len(e.steps) for e in episodes] == [1, 3, 1, 3]
    assert ends == [(0, False), (2, False), (1, False), (3, False)]
    assert all(e.update_mode is None and e.group_id == "" and e.rollout_mode == "naive" for e in episodes)
    assert all(e.split == "test" and e.temperature == 0.4 and e.seed == 3 for e in episodes)
    with pytest.raises(ValueError, match="1 to 2 variations"):
        play_batch(envs[:2], policy, task=TASK, variations=[36, 37, 38], split="test", temperature=0.4, seed=0)
