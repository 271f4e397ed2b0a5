"""Observation notes: one note per observation, joined into the tip; their training answers."""

from __future__ import annotations

import random
import re
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from empo2_studio.envs.trap import CAN, TrapEnv
from empo2_studio.memory.reflection import (
    FALLBACK_PREFIX,
    OBSERVATION_NOTE_INSTRUCTION,
    episode_observations,
    join_observation_notes,
    observation_prompt,
    write_observation_notes,
)
from empo2_studio.policy import Turn, instruction_list
from empo2_studio.types import ActionSample, Episode, Step

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from make_warmstart import observation_item  # noqa: E402
from note_wordings import observation_answer  # noqa: E402


def _step(i: int, observation: str) -> Step:
    return Step(index=i, user_message=f"user {i}", tips=(), valid_actions=("look around",),
                sample=ActionSample(text="look around", token_ids=(1,), logprobs=(-0.1,)),
                action="look around", corrected=False, reward=0.0, score=0.0, observation=observation)  # fmt: skip


def _episode(first: str, *observations: str, task: str = "Your task is to find the frog.") -> Episode:
    return Episode(episode_id="e", env="trap", task="trap-find-animal", variation=0, split="test",
                   rollout_mode="naive", update_mode=None, decoding="constrained", temperature=1.0, seed=0,
                   steps=tuple(_step(i, o) for i, o in enumerate(observations)), score=0.0, won=False,
                   task_description=task, first_observation=first)  # fmt: skip


class RecordingWriter:
    """`write_tips` double: records every call, replies from a list in order."""

    def __init__(self, replies):
        self.replies, self.calls = list(replies), []

    def write_tips(self, conversations, instruction, *, keys=None):
        self.calls.append((conversations, instruction))
        out, self.replies = self.replies[: len(conversations)], self.replies[len(conversations) :]
        return out


def test_join_keeps_each_distinct_line_once_in_order_without_nothing_new():
    ep = _episode("hall")
    replies = ["The frog is not in the hallway.", "Nothing new.", " nothing new ", "The frog is not in the hallway.",
               '  "The frog is in the kitchen."\nsecond line', "..."]  # fmt: skip
    assert join_observation_notes(replies, ep) == "The frog is not in the hallway. The frog is in the kitchen."


def test_join_keeps_each_sentence_once():
    replies = ["The red flower is not in the hallway. The watering can is in the hallway.",
               "The red flower is not in the hallway.", "The red flower is in the bedroom. Nothing new."]  # fmt: skip
    assert join_observation_notes(replies, _episode("hall")) == (
        "The red flower is not in the hallway. The watering can is in the hallway. The red flower is in the bedroom.")


def test_join_of_nothing_usable_is_the_fallback():
    ep = _episode("hall", "You look around.")
    tip = join_observation_notes(["Nothing new.", "", "?!"], ep)
    assert tip.startswith(FALLBACK_PREFIX) and "after 1 steps" in tip


def test_write_observation_notes_asks_once_per_distinct_observation_in_one_batch():
    a = _episode("This room is called the hallway.", "You go to the kitchen. K.", "This room is called the hallway.")
    b = _episode("This room is called the hallway.", "You pick up the can.", task="Your task is to water the plant.")
    c = _episode("This room is called the hallway.", "You go to the kitchen. K.")  # a's layout, a's rooms
    writer = RecordingWriter(["H-a.", "K.", "H-b.", "Nothing new."])
    tips = write_observation_notes(writer, [a, b, c])
    assert len(writer.calls) == 1
    conversations, prompts = writer.calls[0]
    assert conversations == [()] * 4  # the hallway seen twice in a, and c's two rooms, are asked about once
    assert prompts[0] == ("Task: Your task is to find the frog.\n\nObservation: This room is called the hallway.\n\n"
                          + OBSERVATION_NOTE_INSTRUCTION)  # fmt: skip
    assert prompts[3] == observation_prompt("Your task is to water the plant.", "You pick up the can.")
    assert tips == ["H-a. K.", "H-b.", "H-a. K."]


def test_write_observation_notes_reply_count_mismatch():
    with pytest.raises(ValueError, match="returned 1 notes for 2 observations"):
        write_observation_notes(RecordingWriter(["one"]), [_episode("hall", "kitchen")])
    assert write_observation_notes(RecordingWriter([]), []) == []


def test_episode_observations_drop_blanks_and_repeats():
    assert episode_observations(_episode(" A ", "", "B", "A")) == ["A", "B"]


def test_instruction_list():
    convs = [(), ()]
    assert instruction_list("say", convs) == ["say", "say"]
    assert instruction_list(("x", "y"), convs) == ["x", "y"]
    with pytest.raises(ValueError, match="got 1 instructions for 2 conversations"):
        instruction_list(["x"], convs)
    with pytest.raises(ValueError, match="got 1 keys for 2 conversations"):
        instruction_list("say", convs, keys=["k"])
    with pytest.raises(ValueError, match="empty batch"):
        instruction_list("say", [])


def test_observation_answer_by_hand():
    lay = TrapEnv().layout("trap-water-plant", 3)  # red flower in the bedroom, the can in the workshop
    assert (lay.target, lay.target_room, lay.objects[CAN]) == ("red flower", "bedroom", "workshop")
    assert observation_answer(lay, "bedroom", {"bed", "red flower"}) == "The red flower is in the bedroom."
    assert observation_answer(lay, "hallway", {"blue flower", "yellow flower"}) == "The red flower is not in the hallway."
    assert observation_answer(lay, "workshop", {"purple flower", CAN}) == (
        "The red flower is not in the workshop. The watering can is in the workshop.")
    assert observation_answer(lay, None, {"bed"}) == "Nothing new."
    animal = TrapEnv().layout("trap-find-animal", 3)
    assert observation_answer(animal, "kitchen", {CAN}) == f"The {animal.target} is not in the kitchen."


class WordFormat:
    """A chat format whose tokens are the words: a verdict position is a word index."""

    eot_id = -1

    def encode(self, text: str) -> tuple[int, ...]:
        return tuple(range(len(text.split())))


def _listed(observation: str) -> list[str] | None:
    m = re.search(r"In it, you see: (.*?)\. Doors lead to", observation)
    return [o.removeprefix("a ").removeprefix("an ") for o in m.group(1).split(", ")] if m else None


def test_observation_items_answer_what_their_observation_lists():
    rng, args = random.Random(7), SimpleNamespace(verdict_weight=3.0)
    kinds = set()
    for i in range(60):
        task = ("trap-light-bulb", "trap-find-animal", "trap-water-plant")[i % 3]
        (turn,), weights = observation_item(WordFormat(), task, i % 24, rng, args)
        lay = TrapEnv().layout(task, i % 24)
        observation = turn.user_text.split("Observation: ")[1].split("\n\n")[0]
        listed = _listed(observation)
        answer = observation_answer(lay, None, set())  # "Nothing new." unless the observation shows a room
        if listed is not None:
            room = re.search(r"This room is called the (\w+)\.", observation).group(1)
            answer = observation_answer(lay, room, set(listed))
            verdict = len(f"The {lay.target} is".split())  # "The red flower is |not in the …"
            assert weights[0][verdict] == 3.0 and weights[0].sum() == len(turn.action_ids) + 2.0
            kinds.add("in" if lay.target in listed else "not")
        else:
            kinds.add("none")
            assert weights[0].tolist() == [1.0] * len(turn.action_ids)
        assert turn.action_ids == WordFormat().encode(answer) + (WordFormat.eot_id,)
        assert turn.user_text.startswith(f"Task: {TrapEnv().reset(task, i % 24).task_description.strip()}")
    assert kinds == {"in", "not", "none"}  # 60 draws see all three kinds of answer


class RoomWriter:
    """A note writer that reads its prompt as a trained one would: "The X is in/not in the R." for a room
    observation (X and R read from the prompt), "Nothing new." otherwise; records its calls."""

    def __init__(self):
        self.calls = []

    def write_tips(self, conversations, instruction, *, keys=None):
        self.calls.append(list(instruction))
        out = []
        for prompt in instruction:
            target = re.search(r"(?:turn on|focus on) the ([a-z ]+?)\.", prompt).group(1)
            room = re.search(r"This room is called the (\w+)\. In it, you see: (.*?)\. Doors", prompt)
            if room is None:
                out.append("Nothing new.")
            else:
                verdict = "is in" if f"a {target}," in room.group(2) + "," else "is not in"
                out.append(f"The {target} {verdict} the {room.group(1)}.")
        return out


def test_trainer_stores_the_note_writers_observation_notes_and_drops_the_actors_caches(tmp_path):
    from empo2_studio.memory import make_embedder
    from empo2_studio.sessions import Session
    from empo2_studio.trainer import Trainer
    from fakes import ScriptedPolicy
    from test_trainer import small_cfg

    env, task = TrapEnv(), "trap-light-bulb"
    plan = env.gold_path(task, 0)  # go to kitchen, focus on green light bulb, turn on green light bulb
    cfg = small_cfg(env={"variations": (0,), "record_line": False}, memory={"note_context": "observation"})
    session = Session.create(tmp_path / "sessions", cfg)
    actor, writer = ScriptedPolicy(lambda r: plan[len(r.turns) - 1]), RoomWriter()
    trainer = Trainer(session.config, session, policy=actor, embedder=make_embedder("hash"), writer=writer)
    report = trainer.step(forced_mode="on-policy")
    episodes = session.episodes(list(report.episode_ids))
    assert len(writer.calls) == 1 and len(writer.calls[0]) == 4  # hallway, kitchen, 2 results: both episodes saw them
    assert [e.tip for e in episodes] == ["The green light bulb is not in the hallway. The green light bulb is in the kitchen."] * 2
    assert actor.tips_written == 0 and actor.cached == set()  # the actor wrote nothing and keeps no cache


def test_config_names_a_bad_note_context_or_writer(tmp_path):
    from empo2_studio.config import RunConfig

    with pytest.raises(ValueError, match=r"memory.note_context must be one of \['auto', 'episode', 'observation'\], got 'room'"):
        RunConfig().with_overrides(memory={"note_context": "room"}).validate()
    (tmp_path / "w").mkdir()
    with pytest.raises(ValueError, match=r"memory.note_writer '.*/w' is not a PEFT adapter directory"):
        RunConfig().with_overrides(memory={"note_writer": str(tmp_path / "w")}).validate()
    (tmp_path / "w" / "adapter_config.json").write_text("{}")
    assert RunConfig().with_overrides(memory={"note_writer": str(tmp_path / "w")}).validate().memory.note_writer


def test_reflection_refuses_an_unknown_context():
    from empo2_studio.memory.reflection import write_tips

    with pytest.raises(ValueError, match="reflection context 'room'"):
        write_tips(RecordingWriter([]), [_episode("hall")], [()], context="room")


def test_the_note_writer_auto_rules(tmp_path):
    from empo2_studio.config import EMBEDDED_MODEL, PolicyConfig
    from empo2_studio.policy.loading import WARM_START_DIR
    from empo2_studio.policy.note_writer import NOTE_WRITER, note_context, note_writer_dir

    embedded, other = PolicyConfig(), PolicyConfig(model="some/other-model")
    assert embedded.model == EMBEDDED_MODEL and note_writer_dir(embedded, "auto") == WARM_START_DIR / NOTE_WRITER
    assert note_writer_dir(other, "auto") is None  # any other model writes its own tips (paper §2)
    assert note_writer_dir(embedded, "none") is None and note_writer_dir(embedded, None) is None
    with pytest.raises(FileNotFoundError, match=r"memory.note_writer: .*/nowhere/adapter_config.json is missing"):
        note_writer_dir(embedded, str(tmp_path / "nowhere"))
    # "auto" context: what the writer was trained on, read from its warmstart.json
    assert note_context("auto", WARM_START_DIR / NOTE_WRITER) == "observation"
    (tmp_path / "warmstart.json").write_text('{"context": "transcript"}')
    assert note_context("auto", tmp_path) == "episode" and note_context("auto", None) == "episode"
    assert note_context("observation", None) == "observation"


def test_a_policy_without_the_embedded_base_writes_its_own_tips():
    from empo2_studio.config import RunConfig
    from empo2_studio.policy.note_writer import load_note_writer
    from fakes import ScriptedPolicy

    actor = ScriptedPolicy(lambda r: "look around")
    assert load_note_writer(RunConfig(), actor) == (actor, "episode")  # default config, a non-HF policy
    writer = RoomWriter()
    assert load_note_writer(RunConfig(), actor, writer) == (writer, "episode")


def test_auto_writes_scienceworld_tips_with_the_policy_itself():
    from empo2_studio.config import EMBEDDED_MODEL, EnvConfig, RunConfig
    from empo2_studio.policy.note_writer import load_note_writer

    class EmbeddedLike:  # what load_note_writer reads of an HFPolicy on the embedded model
        base_model_name = EMBEDDED_MODEL

    actor = EmbeddedLike()
    sw = RunConfig(env=EnvConfig(name="scienceworld", task="find-living-thing"))
    assert load_note_writer(sw, actor) == (actor, "episode")  # the shipped writer knows only the trap


class CountingWriter:
    """A writer whose note is "note k: <prompt>" for its k-th written prompt; records every call."""

    def __init__(self):
        self.calls, self.written = [], 0

    def write_tips(self, conversations, instruction, *, keys=None):
        self.calls.append((list(conversations), instruction, keys))
        prompts = [instruction] * len(conversations) if isinstance(instruction, str) else list(instruction)
        notes = [f"note {self.written + i}: {p}" for i, p in enumerate(prompts)]
        self.written += len(prompts)
        return notes


def test_a_frozen_writer_answers_an_observation_it_wrote_about_from_memory():
    from empo2_studio.policy.note_writer import FrozenWriter

    model = CountingWriter()
    writer = FrozenWriter(model)
    assert writer.write_tips([(), (), ()], ["a", "b", "a"]) == ["note 0: a", "note 1: b", "note 0: a"]
    # a repeat and a new prompt: only the new one reaches the model, in one batch, answers in order
    assert writer.write_tips([(), ()], ["c", "b"]) == ["note 2: c", "note 1: b"]
    assert [c[1] for c in model.calls] == [["a", "b"], ["c"]]
    assert writer.write_tips([(), ()], ["a", "c"]) == ["note 0: a", "note 2: c"] and len(model.calls) == 2
    assert writer.calls is model.calls  # every other attribute is the model's
    assert (writer.written, writer.remembered) == (3, 4)
    writer.decoding = "free"  # a setting reaches the model (bench_notes' part ask scores with it)
    assert model.decoding == "free" and "decoding" not in vars(writer)
    import copy

    assert copy.copy(writer).policy is model  # a copy does not recurse through __getattr__


def test_a_frozen_writer_sends_whole_episodes_to_the_model_every_time():
    from empo2_studio.policy.note_writer import FrozenWriter

    model = CountingWriter()
    writer = FrozenWriter(model)
    turns = [("look around",)]
    assert writer.write_tips([turns], "Write a tip.") == ["note 0: Write a tip."]
    assert writer.write_tips([turns], "Write a tip.") == ["note 1: Write a tip."]  # not remembered
    assert writer.write_tips([()], ["a"], keys=["ep-1"]) == ["note 2: a"]  # a kept cache: the model's
    assert writer.write_tips([()], ["a"], keys=["ep-1"]) == ["note 3: a"]
    assert len(model.calls) == 4


def test_a_frozen_writer_keeps_at_most_max_notes_dropping_the_least_recent():
    from empo2_studio.policy.note_writer import FrozenWriter

    model = CountingWriter()
    writer = FrozenWriter(model)
    writer.MAX_NOTES = 2
    writer.write_tips([(), ()], ["a", "b"])
    writer.write_tips([()], ["a"])  # a is now the most recent
    writer.write_tips([()], ["c"])  # drops b
    assert writer.write_tips([(), ()], ["a", "b"]) == ["note 0: a", "note 3: b"]  # b written again


def test_a_frozen_writer_refuses_a_model_that_returns_too_few_notes():
    from empo2_studio.policy.note_writer import FrozenWriter

    class Short(CountingWriter):
        def write_tips(self, conversations, instruction, *, keys=None):
            return super().write_tips(conversations, instruction, keys=keys)[:-1]

    with pytest.raises(ValueError, match="returned 1 notes for 2 observations"):
        FrozenWriter(Short()).write_tips([(), ()], ["a", "b"])
