"""The record line (`envs.room_notes`): rooms, doors, routes, the tool and the finishing action read from
a trap trajectory; moved here from the reflection tests with the code, assertions unchanged."""

from __future__ import annotations

from empo2_studio.types import ActionSample, Episode, Step


def _played(env, task: str, variation: int, actions: tuple[str, ...]) -> list[tuple[str, float, str]]:
    """(action, reward, observation) per step from a fresh reset, the first observation as action ""."""
    steps = [("", 0.0, env.reset(task, variation).text)]
    for action in actions:
        res = env.step(action)
        steps.append((action, res.reward, res.observation.text))
    return steps


def test_record_line_from_a_trap_trajectory_exact():
    from empo2_studio.envs.trap import TrapEnv
    from empo2_studio.envs.room_notes import record_line

    env = TrapEnv()
    task = env.task_description("trap-light-bulb", 0)
    assert env.curated_tip("trap-light-bulb", 0) == (  # the green light bulb is in the kitchen
        "The green light bulb is in the kitchen: go to kitchen, then focus on green light bulb, "
        "then turn on green light bulb."
    )
    won = _played(
        env, "trap-light-bulb", 0,
        ("go to workshop", "go to kitchen", "focus on green light bulb", "turn on green light bulb"),
    )  # fmt: skip
    assert record_line(task, won) == (  # after a win the plan is the winning route, not "Actions that scored: …"
        "[from the record] The green light bulb was seen in the kitchen. "
        "Next time: go to kitchen, then focus on green light bulb, then turn on green light bulb."
    )
    # No finishing action to name (ScienceWorld's "Then, move it to …"): the record keeps what scored and
    # adds the plan only while its focus never scored.
    sw_task = "Your task is to turn on the green light bulb. First, focus on the green light bulb. Then, move it to the box."
    assert record_line(sw_task, won) == (
        "[from the record] The green light bulb was seen in the kitchen. "
        "Actions that scored: go to kitchen, focus on green light bulb, turn on green light bulb."
    )
    assert record_line(sw_task, won[:3]) == (
        "[from the record] The green light bulb was seen in the kitchen. Actions that scored: go to kitchen. "
        "Next time: go to kitchen, then focus on green light bulb."
    )
    failed = _played(env, "trap-light-bulb", 0, ("go to workshop", "go to hallway", "focus on red light bulb"))
    # Never seen: the first room behind a door seen and not searched (the hallway's doors list
    # kitchen, workshop, greenhouse, bedroom) is the plan's guess; a plan replaces the failed action.
    assert record_line(task, failed) == (
        "[from the record] The green light bulb was not in: hallway, workshop. Next time: go to kitchen."
    )  # a guess ends at the room: "then focus on" in an empty room was a focus on its table (−100)
    assert record_line(task, failed, guess=False) == (  # no guess: no plan
        "[from the record] The green light bulb was not in: hallway, workshop. "
        "Action that failed the task: focus on red light bulb."
    )
    assert record_line("Your task is to boil water.", [("look around", 0.0, "You see nothing.")]) == ""
    partial = _played(
        env, "trap-light-bulb", 0, ("go to kitchen", "turn on green light bulb", "turn on green light bulb")
    )
    assert [r for _, r, _ in partial] == [0.0, 25.0, 0.0, 0.0]  # the room scores, turning on before focus does not
    assert record_line(task, partial) == (  # the plan, not the scored "go to kitchen" the model would replay
        "[from the record] The green light bulb was seen in the kitchen. "
        "Next time: go to kitchen, then focus on green light bulb, then turn on green light bulb."
    )
    focused = _played(env, "trap-light-bulb", 0, ("go to kitchen", "focus on green light bulb", "go to hallway"))
    assert [r for _, r, _ in focused] == [0.0, 25.0, 25.0, 0.0]
    # Focused but never turned on: the plan is still the whole winning path (each episode starts over).
    assert record_line(task, focused) == (
        "[from the record] The green light bulb was seen in the kitchen. "
        "Next time: go to kitchen, then focus on green light bulb, then turn on green light bulb."
    )


def test_record_line_does_not_take_a_decoy_for_the_target():
    """find-animal's hallway holds "a toy rabbit": the rabbit is in the kitchen, not the hallway."""
    from empo2_studio.envs.trap import TrapEnv
    from empo2_studio.envs.room_notes import record_line

    env = TrapEnv()
    obs = env.reset("trap-find-animal", 0)
    assert "a toy rabbit" in obs.text and "a rabbit" not in obs.text
    steps = [("", 0.0, obs.text)]
    res = env.step("go to kitchen")
    steps.append(("go to kitchen", res.reward, res.observation.text))
    assert record_line(obs.task_description, steps[:1]) == (
        "[from the record] The rabbit was not in: hallway. Next time: go to kitchen."
    )
    assert record_line(obs.task_description, steps) == (
        "[from the record] The rabbit was seen in the kitchen. "
        "Next time: go to kitchen, then focus on rabbit, then pick up rabbit."
    )


def test_finishing_action_reads_the_descriptions_then_sentence():
    from empo2_studio.envs.trap import TrapEnv
    from empo2_studio.envs.task_text import finishing_action

    env = TrapEnv()
    expected = {"trap-light-bulb": "turn on", "trap-find-animal": "pick up", "trap-water-plant": "water"}
    for task, verb in expected.items():
        target = env.layout(task, 0).target
        action = finishing_action(env.task_description(task, 0), target)
        assert action == f"{verb} {target}"
        assert action in env.gold_path(task, 0)  # the valid-action wording, as the winning path has it
    # ScienceWorld's second object and a description without the sentence give no action.
    sw = "Your task is to find a(n) animal. First, focus on the thing. Then, move it to the red box in the kitchen."
    assert finishing_action(sw, "frog") == ""
    assert finishing_action("Your task is to boil water.", "water") == ""


def test_failed_episodes_reading_each_others_notes_try_every_room_once():
    """trap-light-bulb variation 37: the blue bulb is in the bedroom, the 4th door of the hallway.
    Each episode follows the last note's guess; counting the note's searched rooms as searched walks
    the guesses kitchen → workshop → greenhouse → bedroom instead of kitchen ↔ workshop."""
    from empo2_studio.envs.trap import TrapEnv
    from empo2_studio.envs.room_notes import record_line, searched_in_notes

    env = TrapEnv()
    task = env.task_description("trap-light-bulb", 37)
    assert env.layout("trap-light-bulb", 37).target_room == "bedroom"
    first = record_line(task, _played(env, "trap-light-bulb", 37, ("go to kitchen",)))
    assert first == (
        "[from the record] The blue light bulb was not in: hallway, kitchen. Next time: go to workshop."
    )
    # The kitchen's doors are the hallway and the workshop: alone, the next episode would guess kitchen.
    second_steps = _played(env, "trap-light-bulb", 37, ("go to workshop",))
    assert record_line(task, second_steps).endswith("Next time: go to kitchen.")
    second = record_line(task, second_steps, [first])
    assert second == (
        "[from the record] The blue light bulb was not in: hallway, workshop, kitchen. Next time: go to greenhouse."
    )
    third = record_line(task, _played(env, "trap-light-bulb", 37, ("go to greenhouse",)), [second])
    assert third.endswith("was not in: hallway, greenhouse, workshop, kitchen. Next time: go to bedroom.")
    # A note that saw the target: the room is known (its plan carries over), nothing is guessed.
    seen = "[from the record] The blue light bulb was seen in the bedroom. Next time: go to bedroom, then …"
    assert searched_in_notes([first, seen], "blue light bulb") is None
    assert record_line(task, second_steps, guess=False) == "[from the record] The blue light bulb was not in: hallway, workshop."
    assert searched_in_notes([first], "red light bulb") == []  # another target's rooms do not count


def test_episode_record_counts_the_rooms_of_the_notes_the_episode_read():
    from dataclasses import replace

    from empo2_studio.envs.room_notes import episode_record
    from empo2_studio.types import RetrievedTip

    ep = _episode_with_observation(
        "This room is called the workshop. In it, you see: a workbench. Doors lead to: the hallway, the kitchen."
    )
    assert episode_record(ep) == (  # alone, the workshop's other door is the guess
        "[from the record] The green light bulb was not in: workshop. Next time: go to hallway."
    )
    read = RetrievedTip("t", "[from the record] The green light bulb was not in: hallway, kitchen. Next time: …", 0.0, 0.9)
    ep = replace(ep, steps=(replace(ep.steps[0], tips=(read,)),))
    # hallway and kitchen were searched by the note's episode; no door left unsearched, so no plan
    assert episode_record(ep) == "[from the record] The green light bulb was not in: workshop, hallway, kitchen."


def test_water_plant_record_fetches_the_can_first_over_the_doors_seen():
    """trap-water-plant variation 0: the blue flower is in the workshop, the can in the bedroom, so the
    winning route is bedroom → hallway → workshop (the gold path). A record that saw both rooms gives
    exactly that plan; one that never saw the can says where it was not and tries the first unsearched
    room behind a door; a note that saw the can tells the next record where it is."""
    from empo2_studio.envs.trap import TrapEnv
    from empo2_studio.envs.room_notes import record_line
    from empo2_studio.envs.task_text import tool_of

    env = TrapEnv()
    task = env.task_description("trap-water-plant", 0)
    assert tool_of(task) == "watering can" and tool_of(env.task_description("trap-light-bulb", 0)) == ""
    gold = env.gold_path("trap-water-plant", 0)
    assert gold == ["go to bedroom", "pick up watering can", "go to hallway", "go to workshop",
                    "focus on blue flower", "water blue flower"]  # fmt: skip
    both = _played(env, "trap-water-plant", 0, ("go to workshop", "go to hallway", "go to bedroom"))
    assert record_line(task, both) == (
        "[from the record] The blue flower was seen in the workshop. The watering can was seen in the bedroom. "
        "Next time: " + ", then ".join(gold) + "."
    )
    # The flower seen, the can not: its guess is the first door seen not searched (the hallway's doors
    # are kitchen, workshop, greenhouse, bedroom), then back to the flower through the kitchen's door.
    flower_only = _played(env, "trap-water-plant", 0, ("go to workshop",))
    first = record_line(task, flower_only)
    assert first == (
        "[from the record] The blue flower was seen in the workshop. The watering can was not in: hallway, "
        "workshop. Next time: go to kitchen, then pick up watering can, "
        "then go to workshop, then focus on blue flower, then water blue flower."
    )
    # The next episode, reading that note, searched the kitchen too: the rooms add up, the greenhouse is next.
    kitchen = _played(env, "trap-water-plant", 0, ("go to kitchen", "go to workshop"))
    assert "The watering can was not in: hallway, kitchen, workshop. " in record_line(task, kitchen, [first])
    assert record_line(task, kitchen, [first]).endswith(
        "Next time: go to greenhouse, then pick up watering can, then go to hallway, then go to workshop, "
        "then focus on blue flower, then water blue flower."
    )
    # A note that saw the can: an episode that never went there still plans the right fetch.
    assert record_line(task, flower_only, [record_line(task, both)]).endswith(
        "Next time: " + ", then ".join(gold) + "."
    )
    # Can in the hallway (variation 5): the plan starts with the pick-up, no walk first.
    task5 = env.task_description("trap-water-plant", 5)
    assert record_line(task5, _played(env, "trap-water-plant", 5, ("go to workshop",))).endswith(
        "Next time: pick up watering can, then go to workshop, then focus on purple flower, then water purple flower."
    )


def test_notes_carry_the_rooms_they_saw_and_searched_into_the_next_record():
    """A note's "…was seen in the R" keeps its plan in the next record even if that episode never got
    there; a note's searched rooms for the can are read sentence by sentence (after a "seen" sentence)."""
    from empo2_studio.envs.trap import TrapEnv
    from empo2_studio.envs.room_notes import record_line, searched_in_notes

    note = "[from the record] The blue flower was seen in the workshop. The watering can was not in: hallway, workshop."
    assert searched_in_notes([note], "watering can") == ["hallway", "workshop"]
    assert searched_in_notes([note], "blue flower") is None
    env = TrapEnv()
    task = env.task_description("trap-light-bulb", 0)  # the green light bulb is in the kitchen
    seen = "[from the record] The green light bulb was seen in the kitchen. Next time: go to kitchen, then …"
    assert record_line(task, _played(env, "trap-light-bulb", 0, ("go to workshop",)), [seen]) == (
        "[from the record] The green light bulb was seen in the kitchen. "
        "Next time: go to kitchen, then focus on green light bulb, then turn on green light bulb."
    )
    # water-plant v0 (can in the bedroom): the note searched hallway, kitchen, workshop for the can, so an
    # episode that saw only the workshop guesses the greenhouse, not the kitchen again.
    task = env.task_description("trap-water-plant", 0)
    first = record_line(task, _played(env, "trap-water-plant", 0, ("go to kitchen", "go to workshop")))
    assert "The watering can was not in: hallway, kitchen, workshop." in first
    assert record_line(task, _played(env, "trap-water-plant", 0, ("go to workshop",)), [first]).endswith(
        "Next time: go to greenhouse, then pick up watering can, then go to hallway, then go to workshop, "
        "then focus on blue flower, then water blue flower."
    )


def test_stored_tip_marks_the_models_sentence_and_puts_the_record_last():
    from empo2_studio.envs.trap import TrapEnv
    from empo2_studio.memory.reflection import OWN_NOTE_PREFIX, fallback_tip, with_record

    ep = _episode_with_observation("This room is called the kitchen. In it, you see: a green light bulb. Doors lead to: the hallway.")
    record = TrapEnv().summarise_episode(ep)
    assert with_record("I should go back.", record) == (
        f"{OWN_NOTE_PREFIX} I should go back. [from the record] The green light bulb was seen in the kitchen. "
        "Next time: go to kitchen, then focus on green light bulb."  # the description has no "Then, …" sentence
    )
    assert with_record(fallback_tip(ep), record) == (
        "[from the record] The green light bulb was seen in the kitchen. "
        "Next time: go to kitchen, then focus on green light bulb."
    )

    # The record line is the environment's optional hint, off by default: a tip is only what the model wrote.
    from empo2_studio.config import EnvConfig
    from empo2_studio.envs import make_env

    off = make_env(EnvConfig())
    assert off.summarise_episode(ep) is None and with_record("I should go back.", off.summarise_episode(ep) or "") == "I should go back."
    assert make_env(EnvConfig(record_line=True)).summarise_episode(ep) == record


def _episode_with_observation(observation: str) -> Episode:
    step = Step(
        index=0, user_message="Task: Your task is to turn on the green light bulb. First, focus on the green light bulb.\n\nObservation: x",
        tips=(), valid_actions=("go to kitchen",), sample=ActionSample(text="go to kitchen", token_ids=(1,), logprobs=(0.0,)),
        action="go to kitchen", corrected=False, reward=0.0, score=0.0, observation=observation,
    )  # fmt: skip
    return Episode(
        episode_id="e", env="trap", task="trap-light-bulb", variation=0, split="train", rollout_mode="naive",
        update_mode=None, decoding="constrained", temperature=1.0, seed=0, steps=(step,), score=0.0, won=False,
        task_description="Your task is to turn on the green light bulb. First, focus on the green light bulb.",
        first_observation="x",
    )  # fmt: skip
