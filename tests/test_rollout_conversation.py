"""The one conversation builder (`rollout.conversation`): rollout, reflection and update see the same turns."""

from __future__ import annotations

from empo2_studio.config import MemoryConfig
from empo2_studio.envs.trap import TrapEnv
from empo2_studio.memory import TipStore, make_embedder
from empo2_studio.policy import Turn, prompts
from empo2_studio.rollout import conversation, play_group, seed_policy, write_group_tips
from empo2_studio.types import ActionSample, Episode, RetrievedTip, Step
from fakes import ScriptedPolicy


def _step(i, action, tips=()):
    return Step(index=i, user_message=f"user {i}", tips=tips, valid_actions=(action, "wait"),
                sample=ActionSample(text=action, token_ids=(10 + i, 20 + i), logprobs=(-0.5, -0.1)),
                action=action, corrected=False, reward=0.0, score=0.0, observation="")  # fmt: skip


def _episode(style="compact"):
    t = (RetrievedTip("a", "tip one", 50.0, 0.9), RetrievedTip("b", "tip two", 10.0, 0.7))
    steps = (_step(0, "look around"), _step(1, "open door", t), _step(2, "go kitchen"))
    return Episode(episode_id="e", env="trap", task="t", variation=0, split="train", rollout_mode="memory",
                   update_mode="off-policy", decoding="constrained", temperature=1.0, seed=0, steps=steps,
                   score=25.0, won=False, prompt_style=style)  # fmt: skip


def test_turns_are_the_prompts_as_sampled_and_keep_token_ids():
    ep = _episode()
    turns = conversation(ep)
    assert turns == (
        Turn("user 0", (10, 20), ("look around", "wait")),
        Turn(prompts.with_tips("user 1", ep.steps[1].tips, "compact"), (11, 21), ("open door", "wait")),
        Turn("user 2", (12, 22), ("go kitchen", "wait")),
    )
    assert "tip one" in turns[1].user_text and "tip two" in turns[1].user_text
    # the compact notes block, worked out by hand; the paper style gives the <tip> block instead
    assert turns[1].user_text == "user 1\n\nNotes from your earlier attempts:\n- tip one\n- tip two"
    assert conversation(_episode("paper"))[1].user_text.startswith("user 1\n\n<tip> ")
    # tip-free and cut variants (the update's)
    assert [t.user_text for t in conversation(ep, with_tips=False)] == ["user 0", "user 1", "user 2"]
    assert conversation(ep, n_turns=2) == turns[:2]


class RecordingPolicy(ScriptedPolicy):
    """A scripted policy that also keeps the conversations it was asked to write tips about."""

    def __init__(self) -> None:
        super().__init__()
        self.tip_conversations: list = []

    def write_tips(self, conversations, instruction, *, keys=None):
        self.tip_conversations += [tuple(c) for c in conversations]
        return super().write_tips(conversations, instruction, keys=keys)


def test_rollout_reflection_and_update_build_the_same_turns(tmp_path):
    from empo2_studio.update import conversation as update_conversation

    store = TipStore.open(tmp_path / "tips.lance", make_embedder("hash"),
                          MemoryConfig(embedder="hash", similarity_threshold=-1.0))  # fmt: skip
    policy = RecordingPolicy()

    def group(mode):
        seed_policy(policy, 0)
        envs = [TrapEnv(step_limit=3) for _ in range(2)]
        return play_group(envs, policy, store if mode == "memory" else None, task="trap-light-bulb", variation=0,
                          split="train", rollout_mode=mode, update_mode="off-policy", temperature=1.0, seed=7)  # fmt: skip

    write_group_tips(policy, store, group("naive"))
    policy.calls.clear()
    policy.tip_conversations.clear()
    memory = group("memory")
    write_group_tips(policy, store, memory)
    for ep, reflected in zip(memory, policy.tip_conversations, strict=True):
        assert ep.prompt_style == "compact" and all(s.tips for s in ep.steps)
        # rollout: the last prompt sent for this episode, answered by its last sampled action
        last = [r for batch in policy.calls for r in batch if r.key == ep.episode_id][-1]
        acted = (*last.turns[:-1], Turn(last.turns[-1].user_text, ep.steps[-1].sample.token_ids, last.turns[-1].valid_actions))
        updated = tuple(update_conversation(ep, "on-policy-with-tips"))
        assert acted == reflected == updated == conversation(ep)
        for s, turn in zip(ep.steps, acted):  # values: each user text is the message plus its notes block
            notes = "".join(f"\n- {n}" for n in dict.fromkeys(prompts.note_text(t.text) for t in s.tips))  # each once
            assert turn.user_text == f"{s.user_message}\n\nNotes from your earlier attempts:{notes}"
            assert turn.action_ids == s.sample.token_ids == tuple(s.sample.text.encode())
        assert [t.user_text for t in update_conversation(ep, "off-policy")] == [s.user_message for s in ep.steps]


def test_a_transcript_holds_the_task_what_was_seen_and_done_and_no_notes():
    from dataclasses import replace

    from empo2_studio.rollout.conversation import transcript

    ep = _episode()
    steps = tuple(replace(s, observation=f"seen {s.index}") for s in ep.steps)
    ep = replace(ep, steps=steps, task_description="Your task is to find x. ", first_observation="start room")
    assert transcript(ep) == (
        "Task: Your task is to find x.\n\nWhat happened:\nstart room\n"
        "> look around\nseen 0\n> open door\nseen 1\n> go kitchen\nseen 2"
    )
    assert "tip one" not in transcript(ep)  # a note read is not something the episode saw
