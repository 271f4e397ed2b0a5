"""Exploration-trap environment: pure Python, deterministic, milliseconds per step, no Java.

In the spirit of the paper's motivating example (EMPO² §1, Fig. 1): "turn on the red light bulb" when
the bulb is in another room. The agent starts in the hallway, which holds look-alike decoys (a blue
and a green light bulb, a toy frog, ...). The pretrained reflex, "focus on the light bulb" right away,
focuses on a decoy and fails the task (−100, episode over); the agent only scores by first exploring
the rooms, which its observations name, so a tip such as "the red light bulb is in the workshop" or a
retrieved past episode tells it where to go.

Scores follow ScienceWorld (−100 … 100, reward = change in score). A score is a function of the
state, so the order of milestones does not matter:
- trap-light-bulb / trap-find-animal: +25 for entering the target's room, +25 for focusing on the
  target, +50 once the focused target is on / picked up (100 = solved).
- trap-water-plant: +25 for holding the watering can, +25 for entering the flower's room, +25 for
  focusing on the flower, +25 once the focused flower is watered.
Focusing on anything but the target sets the score to −100 and ends the episode.

Two families of these tasks (the world and its layouts: `envs.trap_world`): the *search* family
(`trap-light-bulb`, `trap-find-animal`, `trap-water-plant`, the env's default) hides each layout's
target in any side room, so test layouts put it where training never did; the *fixed* family
(`trap-light-bulb-fixed`, `trap-find-animal-fixed`, `trap-water-plant-fixed`) keeps it in one room per
task, as the paper's ScienceWorld variations keep their parts in one place, and varies which target,
which decoys and where they stand. A family is chosen by the task name (`--env.task`). The *chain*
family's `trap-fetch-two` fetches a battery and a light bulb from two rooms before turning on a lamp in
a third (its own rules and scores: `envs.trap_chain`).

Variations: per task 48 distinct layouts, shuffled once with a fixed seed; indices 0–23 are train,
24–35 dev, 36–47 test (disjoint).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

from empo2_studio.envs.actions import correct_action
from empo2_studio.envs.places import TRAP_PLACES, place_in
from empo2_studio.envs.room_notes import episode_record, record_line
from empo2_studio.envs.trap_chain import KIND as CHAIN
from empo2_studio.envs.trap_chain import chain_actions, chain_execute, chain_gold_path, chain_score, chain_where
from empo2_studio.envs.trap_world import (
    CAN,
    DOORS,
    FAMILIES,
    FURNITURE,
    N_LAYOUTS,
    N_PER_SPLIT,
    SIDE_ROOMS,
    SPLIT_START,
    START_ROOM,
    TASKS,
    Layout,
    TaskSpec,
    layouts,
    route,
)
from empo2_studio.types import Episode, Observation, Split, StepResult

_route = route  # the name scripts/make_warmstart.py imports
__all__ = [
    "CAN", "DOORS", "FAMILIES", "FURNITURE", "SIDE_ROOMS", "START_ROOM", "TASKS", "Layout", "TaskSpec", "TrapEnv",
]


@dataclass
class _State:
    layout: Layout
    variation: int
    room: str = START_ROOM
    inventory: list[str] = field(default_factory=list)
    objects: dict[str, str] = field(default_factory=dict)
    on: set[str] = field(default_factory=set)
    watered: set[str] = field(default_factory=set)
    focused: str | None = None
    failed: bool = False
    visited_target_room: bool = False
    had_can: bool = False
    steps: int = 0
    done: bool = False


class TrapEnv:
    """The exploration trap behind the `TextEnv` protocol (see the module docstring for the rules).

    `step_limit` overrides every task's own limit (12, 12, 15; trap-fetch-two 20) when given.
    """

    name = "trap"

    def __init__(self, step_limit: int | None = None, record_line: bool = True) -> None:
        if step_limit is not None and step_limit < 1:
            raise ValueError(f"step_limit must be ≥ 1 or None, got {step_limit!r}")
        self._step_limit = step_limit
        self.record_line = record_line
        self._layouts = {t: layouts(t) for t in TASKS}
        self._state: _State | None = None

    # ---- catalogue -------------------------------------------------------------------------
    def task_names(self) -> tuple[str, ...]:
        return tuple(TASKS)

    def _check_task(self, task: str) -> TaskSpec:
        if task not in TASKS:
            raise ValueError(f"unknown trap task {task!r}; valid tasks: {', '.join(TASKS)}")
        return TASKS[task]

    def family(self, task: str) -> str:
        """"search" or "fixed": the family `task` belongs to (module docstring); ValueError if unknown."""
        return self._check_task(task).family

    def variations(self, task: str, split: Split) -> tuple[int, ...]:
        self._check_task(task)
        if split not in SPLIT_START:
            raise ValueError(f"unknown split {split!r}; valid splits: train, dev, test")
        start = SPLIT_START[split]
        return tuple(range(start, start + N_PER_SPLIT[split]))

    def step_limit(self, task: str) -> int:
        spec = self._check_task(task)
        return self._step_limit if self._step_limit is not None else spec.step_limit

    def layout(self, task: str, variation: int) -> Layout:
        """Where everything is in `task` at `variation` (for tests and the UI, not the agent)."""
        self._check_task(task)
        n = N_LAYOUTS
        if isinstance(variation, bool) or not isinstance(variation, numbers.Integral):
            raise ValueError(
                f"variation must be an int in 0–{n - 1} (train 0–23, dev 24–35, test 36–47), "
                f"got {variation!r} ({type(variation).__name__})"
            )
        if not 0 <= variation < n:
            raise ValueError(
                f"variation {variation!r} of {task!r} is outside 0–{n - 1} "
                "(train 0–23, dev 24–35, test 36–47)"
            )
        return self._layouts[task][variation]

    def task_description(self, task: str, variation: int) -> str:
        spec, target = TASKS[task], self.layout(task, variation).target
        return spec.description.format(t=target, a=next(a for a in spec.attrs if spec.noun.format(a) == target))

    # ---- scripted paths ----------------------------------------------------------------------
    def gold_path(self, task: str, variation: int) -> list[str]:
        """Shortest winning action sequence for `task` at `variation` (score 100; trap-fetch-two: in its
        description's order, `trap_chain.chain_gold_path`)."""
        lay = self.layout(task, variation)
        spec = TASKS[task]
        if spec.kind == CHAIN:
            return chain_gold_path(lay)
        actions, room = [], START_ROOM
        if spec.kind == "water-plant":
            can_room = lay.objects[CAN]
            actions += [f"go to {r}" for r in route(room, can_room)]
            actions.append(f"pick up {CAN}")
            room = can_room
        actions += [f"go to {r}" for r in route(room, lay.target_room)]
        actions += [f"focus on {lay.target}", f"{spec.verb} {lay.target}"]
        return actions

    def gold_record(self, task: str, variation: int) -> str:
        """The record line (`room_notes.record_line`) of the layout's shortest winning episode, played on
        a fresh env: what a winning episode of this layout stores after its own note."""
        env = TrapEnv()  # the task's own step limit (12–15) outlasts every gold path
        obs = env.reset(task, variation)
        steps = [("", 0.0, obs.text)]
        for action in env.gold_path(task, variation):
            result = env.step(action)
            steps.append((action, result.reward, result.observation.text))
        return record_line(obs.task_description, steps)

    def curated_tip(self, task: str, variation: int) -> str:
        """A correct tip for `task` at `variation`, as a teacher would write it: where the target (and
        the watering can) is, then the winning actions in the valid-action wording.

        >>> TrapEnv().curated_tip("trap-light-bulb", 0)  # doctest: +ELLIPSIS
        'The ... light bulb is in the ...: go to ..., then focus on ... light bulb, then turn on ... light bulb.'
        """
        lay = self.layout(task, variation)
        where = f"The {lay.target} is in the {lay.target_room}"
        if TASKS[task].kind == "water-plant":
            where = f"The {CAN} is in the {lay.objects[CAN]} and the {lay.target} is in the {lay.target_room}"
        if TASKS[task].kind == CHAIN:
            where = chain_where(lay)
        return f"{where}: " + ", then ".join(self.gold_path(task, variation)) + "."

    def focus_first_path(self, task: str, variation: int) -> list[str]:
        """The pretrained reflex: focus on the first look-alike in the start room right away."""
        lay = self.layout(task, variation)
        noun_words = set(TASKS[task].noun.format("").split())
        lookalikes = sorted(
            o for o, r in lay.objects.items()
            if r == START_ROOM and o not in FURNITURE.values() and o != CAN
            and (noun_words <= set(o.split()) or TASKS[task].kind == "find-animal")
        )
        return [f"focus on {lookalikes[0]}"]

    def fewshot_examples(self, task: str) -> tuple[str, ...]:
        """Two gold trajectories of training variations 0 and 1 (never dev/test), as prompt text."""
        self._check_task(task)
        return tuple(self._transcript(task, v) for v in self.variations(task, "train")[:2])

    def _transcript(self, task: str, variation: int) -> str:
        sim = TrapEnv()
        obs = sim.reset(task, variation)
        lines = [f"Task: {obs.task_description}", obs.text]
        for action in self.gold_path(task, variation):
            res = sim.step(action)
            lines += [f"> {action}", res.observation.text]
        return "\n".join(lines)

    # ---- episode -------------------------------------------------------------------------------
    def reset(self, task: str, variation: int) -> Observation:
        """Start `task` at `variation` (an int in 0–47; a bool or non-integer is a ValueError naming it
        and the valid range, as is an unknown task or a variation out of range)."""
        lay = self.layout(task, variation)
        self._state = _State(layout=lay, variation=int(variation), objects=dict(lay.objects))
        return self._observation(self._describe_room())

    def step(self, action_text: str) -> StepResult:
        st = self._state
        if st is None:
            raise RuntimeError("step() before reset(): call reset(task, variation) first")
        if st.done:
            raise RuntimeError("the episode has ended; call reset() to start a new one")
        before = self._score()
        action, corrected, invalid = correct_action(action_text, self._valid_actions())
        text = "No action was given." if invalid else self._execute(action)
        st.steps += 1
        score = self._score()
        won = score >= 100
        if won:
            text += " You have completed the task."
        st.done = won or st.failed or st.steps >= self.step_limit(st.layout.task)
        observation = self._observation(text)
        return StepResult(
            observation=observation,
            reward=score - before,
            done=st.done,
            won=won,
            action_text=action_text,
            action=action,
            corrected=corrected,
            invalid=invalid,
        )

    def close(self) -> None:
        self._state = None

    def summarise_episode(self, episode: Episode) -> str | None:
        """The episode's record line (`envs.room_notes`); None when it has nothing to say or the env
        was built with `record_line=False`."""
        return (episode_record(episode) or None) if self.record_line else None

    def places(self, task: str) -> tuple[str, ...]:
        """The trap's five rooms (`envs.places.TRAP_PLACES`); ValueError for an unknown task."""
        self._check_task(task)
        return TRAP_PLACES

    def place_of(self, observation: str) -> str | None:
        """The room the observation says the agent is in, or None (`envs.places.place_in`)."""
        return place_in(observation, TRAP_PLACES)

    # ---- rules ---------------------------------------------------------------------------------
    def _score(self) -> float:
        st = self._state
        assert st is not None
        if st.failed:
            return -100.0
        lay, kind = st.layout, TASKS[st.layout.task].kind
        if kind == CHAIN:
            return chain_score(lay, st.inventory, st.focused, st.on)
        focused = st.focused == lay.target
        if kind == "light-bulb":
            finished = lay.target in st.on
        elif kind == "find-animal":
            finished = lay.target in st.inventory
        else:
            finished = lay.target in st.watered
        if kind == "water-plant":
            milestones = (st.had_can, st.visited_target_room, focused, focused and finished)
            return 25.0 * sum(milestones)
        return 25.0 * st.visited_target_room + 25.0 * focused + (50.0 if focused and finished else 0.0)

    def _here(self) -> list[str]:
        st = self._state
        assert st is not None
        return sorted(o for o, r in st.objects.items() if r == st.room)

    def _valid_actions(self) -> tuple[str, ...]:
        st = self._state
        assert st is not None
        kind = TASKS[st.layout.task].kind
        acts = {"look around"} | {f"go to {r}" for r in DOORS[st.room]}
        if kind == CHAIN:
            acts |= chain_actions(self._here())
        for obj in self._here() + st.inventory:
            acts.add(f"focus on {obj}")
        for obj in self._here():
            if kind == "light-bulb" and obj.endswith("light bulb"):
                acts.add(f"turn on {obj}")
            if obj == CAN or (kind == "find-animal" and obj not in FURNITURE.values()):
                acts.add(f"pick up {obj}")
            if CAN in st.inventory and obj.endswith("flower"):
                acts.add(f"water {obj}")
        return tuple(sorted(acts))

    def _describe_room(self) -> str:
        st = self._state
        assert st is not None

        def show(o: str) -> str:
            article = "an" if o[0] in "aeiou" else "a"  # "an orange light bulb" (fixed family)
            return f"{article} {o} (on)" if o in st.on else f"{article} {o}"

        things = ", ".join(show(o) for o in self._here())
        doors = ", ".join(f"the {r}" for r in DOORS[st.room])
        return f"This room is called the {st.room}. In it, you see: {things}. Doors lead to: {doors}."

    def _execute(self, action: str) -> str:
        st = self._state
        assert st is not None
        if action == "look around":
            return self._describe_room()
        if TASKS[st.layout.task].kind == CHAIN and (text := chain_execute(st, action)) is not None:
            return text
        if action.startswith("go to "):
            st.room = action.removeprefix("go to ")
            st.visited_target_room |= st.room == st.layout.target_room
            return f"You go to the {st.room}. " + self._describe_room()
        if action.startswith("focus on "):
            obj = action.removeprefix("focus on ")
            if obj != st.layout.target:
                st.failed = True
                return f"You focus on the {obj}. That is not what the task asks for: the task has failed."
            st.focused = obj
            return f"You focus on the {obj}."
        if action.startswith("turn on "):
            obj = action.removeprefix("turn on ")
            st.on.add(obj)
            return f"The {obj} is now on."
        if action.startswith("pick up "):
            obj = action.removeprefix("pick up ")
            del st.objects[obj]
            st.inventory.append(obj)
            st.had_can |= obj == CAN
            return f"You pick up the {obj}."
        obj = action.removeprefix("water ")
        st.watered.add(obj)
        return f"You water the {obj} with the watering can."

    def _inventory_text(self) -> str:
        st = self._state
        assert st is not None
        items = ", ".join(f"a {o}" for o in st.inventory) or "nothing"
        return f"In your inventory, you see: {items}."

    def _observation(self, text: str) -> Observation:
        st = self._state
        assert st is not None
        lay = st.layout
        return Observation(
            text=text,
            task=lay.task,
            variation=st.variation,
            task_description=self.task_description(lay.task, st.variation),
            valid_actions=() if st.done else self._valid_actions(),
            inventory=self._inventory_text(),
            score=self._score(),
        )
