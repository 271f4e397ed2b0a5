"""The record line of ScienceWorld's find tasks (`envs.sw_search`): observations are the simulator's own
text for find-animal variation 0 (start in the hallway, box in the kitchen, a dove egg outside)."""

from collections import Counter

import pytest

from empo2_studio.envs.places import SCIENCEWORLD_PLACES
from empo2_studio.envs.sw_search import find_category, find_plan, search_record

TASK = "Your task is to find a(n) animal. First, focus on the thing. Then, move it to the red box in the kitchen."
HALLWAY = ("This room is called the hallway. In it, you see: \n\tthe agent\n\ta substance called air\n\ta picture\n"
           "You also see:\n\tA door to the art studio (that is open)\n\tA door to the kitchen (that is open)")  # fmt: skip
KITCHEN_LOOK = "This room is called the kitchen. In it, you see: \n\tthe agent\n\ta painting\n\ta red box (containing nothing)"
OUTSIDE_LOOK = "This outside location is called the outside. Here you see: \n\tthe agent\n\tan axe\n\ta dove egg"


def test_find_category_reads_the_four_find_tasks_and_nothing_else():
    assert find_category(TASK) == "animal"
    assert find_category(TASK.replace("animal", "living thing")) == "living thing"
    assert find_category(TASK.replace("a(n) animal", "a(n) non-living thing")) == "non-living thing"
    assert find_category("Your task is to find the red bulb. First, focus on the red bulb. Then, pick it up.") == ""
    assert search_record("Your task is to boil water. First, focus on the water.", [("", 0.0, HALLWAY)]) == ""


def test_a_focus_that_scored_names_the_target_its_room_and_the_whole_plan():
    steps = [("", 0.0, HALLWAY), ("teleport to kitchen", 17.0, "You teleport to the kitchen."),
             ("teleport to outside", 0.0, "You teleport to the outside."), ("look around", 0.0, OUTSIDE_LOOK),
             ("focus on dove", 50.0, "You focus on the dove egg.")]  # fmt: skip
    assert search_record(TASK, steps, key="e1") == (
        "[from the record] Next time: teleport to outside, then look around, then "
        "focus on dove, then pick up dove, then teleport to kitchen, then move dove to red box."
    )


def test_nothing_found_lists_every_room_stood_in_and_draws_an_unsearched_room_per_episode():
    steps = [("", 0.0, HALLWAY), ("teleport to kitchen", 17.0, "You teleport to the kitchen."),
             ("look around", 0.0, KITCHEN_LOOK), ("focus on painting", -100.0, "You focus on the painting.")]  # fmt: skip
    line = search_record(TASK, steps, key="e1")
    head = "[from the record] No animal was found in: hallway, kitchen. Next time: teleport to "
    assert line.startswith(head) and line.endswith(", then look around.")
    assert search_record(TASK, steps, key="e1") == line  # the same episode, the same line
    guesses = Counter(search_record(TASK, steps, key=f"e{i}")[len(head):].split(",")[0] for i in range(400))
    # every one of the 8 unsearched rooms, about 50 times each (400 / 8), never a searched one
    assert set(guesses) == set(SCIENCEWORLD_PLACES) - {"hallway", "kitchen"}
    assert min(guesses.values()) > 25


def test_notes_read_extend_the_search_and_keep_a_found_plan():
    steps = [("", 0.0, HALLWAY), ("teleport to bedroom", 0.0, "You teleport to the bedroom.")]
    searched = "[from the record] No animal was found in: hallway, workshop, greenhouse. Next time: teleport to x, then look around."
    line = search_record(TASK, steps, [searched], key="e2")
    assert line.startswith("[from the record] No animal was found in: hallway, bedroom, workshop, greenhouse. Next time: teleport to ")
    found = search_record(TASK, [("", 0.0, HALLWAY), ("look around", 0.0, OUTSIDE_LOOK), ("focus on dove", 50.0, "ok")])
    assert found == search_record(TASK, steps, [searched, found], key="e3")  # read but not replayed: kept
    # every room stood in without a find (an agent outside may have focused on the axe): a second pass
    # draws from every room but the one this episode ended in (the bedroom), never a dead end
    everywhere = f"[from the record] No animal was found in: {', '.join(SCIENCEWORLD_PLACES)}."
    rest = [p for p in SCIENCEWORLD_PLACES if p not in ("hallway", "bedroom")]
    head = f"[from the record] No animal was found in: hallway, bedroom, {', '.join(rest)}. Next time: teleport to "
    second = {search_record(TASK, steps, [everywhere], key=f"k{i}") for i in range(200)}
    assert all(line.startswith(head) for line in second)
    assert {line[len(head):].split(",")[0] for line in second} == set(SCIENCEWORLD_PLACES) - {"bedroom"}


def test_only_the_record_part_of_a_note_counts_and_only_rooms_that_exist():
    steps = [("", 0.0, HALLWAY)]
    # the model's own sentence before the record copies a plan and a room list: neither is read
    copied = ("[the model's note] Next time: teleport to kitchen, then look around, then focus on painting, then pick "
              "up painting. No animal was found in: outside. [from the record] No animal was found in: hallway, "
              "garden, living room. Next time: teleport to art studio, then look around.")  # fmt: skip
    line = search_record(TASK, steps, [copied], key="k")
    assert line.startswith("[from the record] No animal was found in: hallway, living room. Next time: teleport to ")
    guesses = {search_record(TASK, steps, [copied], key=f"k{i}").split("teleport to ")[-1].split(",")[0] for i in range(200)}
    assert guesses == set(SCIENCEWORLD_PLACES) - {"hallway", "living room"}  # outside stays open; no "garden"


def test_a_found_plan_read_is_not_repeated_after_its_focus_failed_and_a_carried_target_keeps_its_room():
    found = search_record(TASK, [("", 0.0, HALLWAY), ("look around", 0.0, OUTSIDE_LOOK), ("focus on dove", 50.0, "ok")])
    failed = [("", 0.0, HALLWAY), ("teleport to outside", 0.0, "You teleport to the outside."),
              ("focus on dove", -100.0, "You focus on the dove egg.")]  # fmt: skip
    assert search_record(TASK, failed, [found], key="k").startswith("[from the record] No animal was found in: hallway, outside.")
    carried = [("", 0.0, HALLWAY), ("teleport to outside", 0.0, "You teleport to the outside."),
               ("pick up dove", 0.0, "You move the dove egg to the inventory."),
               ("teleport to kitchen", 17.0, "You teleport to the kitchen."), ("focus on dove", 50.0, "You focus on the dove egg.")]  # fmt: skip
    assert search_record(TASK, carried) == found  # picked up outside: the plan starts outside, not in the kitchen


def test_multi_word_categories_targets_rooms_and_boxes():
    task = ("Your task is to find a(n) non-living thing. First, focus on the thing. Then, move it to the purple box "
            "in the living room.")  # fmt: skip
    assert find_category(task) == "non-living thing"
    steps = [("", 0.0, HALLWAY), ("teleport to art studio", 0.0, "You teleport to the art studio."),
             ("focus on large jar", 50.0, "You focus on the large jar.")]  # fmt: skip
    found = search_record(task, steps)
    assert found == ("[from the record] Next time: teleport to art studio, then look around, then focus on large jar, "
                     "then pick up large jar, then teleport to living room, then move large jar to purple box.")  # fmt: skip
    assert search_record(task, [("", 0.0, HALLWAY)], [found]) == found
    assert find_category("Your task is to find a(n) animal. First, focus on the thing.") == ""  # no box: no plan
    assert search_record("Your task is to find a(n) animal. First, focus on the thing.", steps) == ""


def test_find_plan_needs_the_box_in_the_task_text():
    with pytest.raises(ValueError, match="names no box"):
        find_plan("Your task is to find a(n) animal. First, focus on the thing.", "dove", "outside")


@pytest.mark.scienceworld
def test_a_played_scienceworld_episode_carries_the_search_line_and_a_rerun_writes_the_same():
    from fakes import ScriptedPolicy

    from empo2_studio.envs.scienceworld import ScienceWorldEnv
    from empo2_studio.rollout import play_group

    def play(env, actions):
        policy = ScriptedPolicy(lambda req: actions[min(len(req.turns) - 1, len(actions) - 1)])
        [ep] = play_group([env], policy, None, task="find-animal", variation=0, split="train", rollout_mode="naive",
                          update_mode=None, temperature=1.0, seed=7)  # fmt: skip
        return ep

    with ScienceWorldEnv(step_limit=4) as env:
        found = play(env, ["teleport to outside", "look around", "focus on dove"])
        assert found.record == (  # variation 0: start in the hallway, the red box in the kitchen
            "[from the record] Next time: teleport to outside, then look around, then "
            "focus on dove, then pick up dove, then teleport to kitchen, then move dove to red box."
        )
        missed = play(env, ["teleport to kitchen", "look around", "focus on painting"])
        head = "[from the record] No animal was found in: hallway, kitchen. Next time: teleport to "
        assert missed.record.startswith(head) and missed.record[len(head):].split(",")[0] not in ("hallway", "kitchen")
        assert play(env, ["teleport to kitchen", "look around", "focus on painting"]).record == missed.record
    assert ScienceWorldEnv(record_line=False).summarise_episode(found) is None  # the option off: no line


def test_the_record_line_is_on_by_default_on_scienceworld_only_and_checked():
    from empo2_studio.config import EnvConfig, RunConfig
    from empo2_studio.envs import make_env

    assert EnvConfig().record_line is None  # auto
    assert make_env(EnvConfig(name="scienceworld", task="find-animal")).record_line is True  # no JVM starts
    assert make_env(EnvConfig(name="scienceworld", task="find-animal", record_line=False)).record_line is False
    assert make_env(EnvConfig()).record_line is False  # the trap: the note writer's notes alone
    assert make_env(EnvConfig(record_line=True)).record_line is True
    with pytest.raises(ValueError, match=r"env.record_line must be True, False or None \(auto: on for ScienceWorld only\), got 1"):
        RunConfig(env=EnvConfig(record_line=1)).validate()
