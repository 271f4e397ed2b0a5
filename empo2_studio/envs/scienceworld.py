"""ScienceWorld behind the `TextEnv` protocol: the only module that imports `scienceworld`.

One JVM per instance (py4j, started lazily at the first `reset` and reused across resets; every
argument is validated before it starts). `close()`, garbage collection and interpreter exit stop it
(a `weakref.finalize`), and py4j's `die_on_exit` makes the JVM quit when its parent dies, so no `java`
process outlives its adapter. Scores stay on ScienceWorld's own scale (−100 … 100, reward = change
in score, focusing on a wrong object fails the task at −100 and ends the episode).

Variation splits come from the simulator through `scripts/make_fewshot.py`, which stores them next to
the few-shot examples (`assets/fewshot/scienceworld_splits.json`) so a bad variation is rejected
without starting Java; a `scienceworld`-marked test checks the file against the live simulator.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import threading
import weakref
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from scienceworld.constants import ID2TASK

from empo2_studio.envs.actions import correct_action, jaccard, words
from empo2_studio.envs.places import SCIENCEWORLD_PLACES, place_in
from empo2_studio.envs.room_notes import episode_record, episode_steps, notes_read
from empo2_studio.envs.sw_search import find_category, search_record
from empo2_studio.types import Episode, Observation, Split, StepResult

FEWSHOT_DIR = Path(__file__).resolve().parents[2] / "assets" / "fewshot"
FEWSHOT_PATH = FEWSHOT_DIR / "scienceworld.json"
SPLITS_PATH = FEWSHOT_DIR / "scienceworld_splits.json"

TASK_NAMES: tuple[str, ...] = tuple(ID2TASK.values())
"""The 30 ScienceWorld tasks, in the simulator's order (1-1 boil … 10-2)."""
HELD_OUT_TASKS: tuple[str, ...] = (
    "find-animal", "find-living-thing", "find-plant", "find-non-living-thing",
    "lifespan-longest-lived", "lifespan-shortest-lived", "lifespan-longest-lived-then-shortest-lived",
)
"""The test bed of the ScienceWorld Lesson, race and adaptation (issue 47): never in a shipped adapter's
training data nor in a choice between adapters. `scripts/make_sw_warmstart.py` refuses them by name and
a test fails when a shipped `warmstart.json` lists one."""
SIMPLIFICATIONS = (
    "teleportAction", "selfWateringFlowerPots", "openContainers", "openDoors", "noElectricalAction",
)
"""ScienceWorld's individual presets; "easy" is the simulator's bundle of them."""
STEP_LIMITS = {"chemistry-mix": 60, "measure-melting-point-known-substance": 120}
DEFAULT_STEP_LIMIT = 30
HIDDEN_ACTIONS = frozenset({"reset task"})
"""Listed by the simulator but never offered: it would restart the task mid-episode."""
REFUSED_TEXT = "No known action matches that input."
"""The simulator's answer to an action its own valid list offered but its parser cannot resolve
(e.g. "pick up cup containing orange juice" in find-animal's kitchen). Such an action is dropped from
the rest of the episode's valid lists (`ScienceWorldEnv.step`): offered again, a policy that likes it
sends it to the step limit."""
_SW_STEP_LIMIT = 1_000_000
"""ScienceWorld's own move limit, set out of the way: this adapter counts steps itself."""
JAVA_OPTS = ("-Xmx1g", "-XX:+UseSerialGC")
"""JVM options per adapter. Java's default heap (¼ of RAM, parallel GC) let one JVM grow to 1–3 GB;
a group of 8 adapters has to fit a laptop, and a serial collector keeps GC threads off busy cores."""
MAP_CANDIDATES = 8
"""How many valid actions `ScienceWorldEnv.valid_gold_path` tries for a gold action its list lacks."""
_LAUNCH_LOCK = threading.Lock()


def _start_simulator(java_opts: tuple[str, ...]) -> Any:
    """Start ScienceWorld's JVM with `java_opts`.

    ScienceWorld's constructor calls py4j's `launch_gateway` without JVM options, so the module's
    reference is swapped for one with `javaopts` while the constructor runs (under a lock, so
    adapters built from several threads do not interleave)."""
    import scienceworld.scienceworld as sw_module

    with _LAUNCH_LOCK:
        launch = sw_module.launch_gateway
        sw_module.launch_gateway = functools.partial(launch, javaopts=list(java_opts))
        try:
            return sw_module.ScienceWorldEnv("", envStepLimit=_SW_STEP_LIMIT)
        finally:
            sw_module.launch_gateway = launch


@cache
def load_splits() -> dict[str, dict[str, tuple[int, int]]]:
    """{task: {split: (first, last + 1)}} as the simulator reported them (contiguous ranges)."""
    if not SPLITS_PATH.exists():
        raise FileNotFoundError(f"{SPLITS_PATH} is missing; run `python scripts/make_fewshot.py`")
    raw = json.loads(SPLITS_PATH.read_text())
    return {t: {s: (d[s][0], d[s][1]) for s in ("train", "dev", "test")} for t, d in raw.items()}


@cache
def fewshot_variations() -> dict[str, tuple[int, int]]:
    """{task: the two training variations the few-shot examples were played on}."""
    load_splits()
    raw = json.loads(SPLITS_PATH.read_text())
    return {t: tuple(d["fewshot"]) for t, d in raw.items()}


@cache
def _fewshot() -> dict[str, list[str]]:
    if not FEWSHOT_PATH.exists():
        raise FileNotFoundError(f"{FEWSHOT_PATH} is missing; run `python scripts/make_fewshot.py`")
    return json.loads(FEWSHOT_PATH.read_text())


def _stop_jvm(sim: Any, proc: subprocess.Popen) -> None:
    """Shut the gateway down and make sure the java process is gone (idempotent)."""
    try:
        if proc.poll() is None:
            sim.close()  # py4j shutdown plus a newline on stdin, which makes the JVM exit
            proc.wait(timeout=10)
    except Exception:  # noqa: BLE001 — a half-dead gateway must not stop the kill below
        pass
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
    # ScienceWorld's own __del__ would call close() again on a dead gateway; make it a no-op.
    sim.close = lambda: None


def clean_gold_path(actions: list[str], simplification: str) -> list[str]:
    """Drop the gold steps a simplification turns into no-ops.

    The simulator writes its gold paths for the unsimplified world. With openDoors (part of "easy")
    every door starts open, so "open door to kitchen" only answers "The door is already open." and is
    not among the valid actions; played through `step`, action correction would map it to "close door
    to kitchen" and break the rest of the path."""
    parts = set(simplification.split(","))
    if not parts & {"easy", "openDoors"}:
        return list(actions)
    return [a for a in actions if not _DOOR_OPENING.match(a)]


_DOOR_OPENING = re.compile(r"^open (door to .+|.+ door)$")


def check_task(task: str) -> None:
    """Raise ValueError naming `task` and listing the 30 valid names if it is not one of them."""
    if task not in TASK_NAMES:
        raise ValueError(f"unknown ScienceWorld task {task!r}; valid tasks: {', '.join(TASK_NAMES)}")


def check_simplification(simplification: str) -> None:
    """Raise ValueError for a preset other than "easy", "" or a comma list of SIMPLIFICATIONS."""
    for part in simplification.split(","):
        if part and part != "easy" and part not in SIMPLIFICATIONS:
            raise ValueError(
                f"unknown ScienceWorld simplification {part!r}; valid: easy, {', '.join(SIMPLIFICATIONS)}"
            )


class ScienceWorldEnv:
    """ScienceWorld as a `TextEnv` (see the module docstring).

    `simplification`: "easy" (default), "" or a comma list of SIMPLIFICATIONS.
    `step_limit`: overrides the per-task limits (30; 60 chemistry-mix; 120 melting point).
    `java_opts`: options for this adapter's JVM (default JAVA_OPTS: 1 GB heap, serial GC).
    Raises ValueError for a bad simplification or step limit (no JVM is started).
    """

    name = "scienceworld"

    def __init__(
        self,
        simplification: str = "easy",
        step_limit: int | None = None,
        java_opts: tuple[str, ...] = JAVA_OPTS,
        record_line: bool = True,
    ) -> None:
        check_simplification(simplification)
        if step_limit is not None and step_limit < 1:
            raise ValueError(f"step_limit must be ≥ 1 or None, got {step_limit!r}")
        self.simplification = simplification
        self.record_line = record_line
        self.java_opts = tuple(java_opts)
        self._step_limit = step_limit
        self._sim: Any = None
        self._proc: subprocess.Popen | None = None
        self._finalizer: weakref.finalize | None = None
        self._loaded: tuple[str, int, bool] | None = None
        self._episode: dict[str, Any] | None = None

    # ---- catalogue (no JVM) ------------------------------------------------------------------
    def task_names(self) -> tuple[str, ...]:
        return TASK_NAMES

    def variations(self, task: str, split: Split) -> tuple[int, ...]:
        check_task(task)
        ranges = load_splits()[task]
        if split not in ranges:
            raise ValueError(f"unknown split {split!r}; valid splits: train, dev, test")
        return tuple(range(*ranges[split]))

    def check_variation(self, task: str, variation: int) -> None:
        """Raise ValueError naming the valid ranges if `variation` is in no split of `task`."""
        check_task(task)
        ranges = load_splits()[task]
        last = max(hi for _, hi in ranges.values()) - 1
        if not isinstance(variation, int) or not 0 <= variation <= last:
            named = ", ".join(f"{s} {lo}–{hi - 1}" for s, (lo, hi) in ranges.items())
            raise ValueError(f"variation {variation!r} of {task!r} is outside 0–{last} ({named})")

    def step_limit(self, task: str) -> int:
        check_task(task)
        if self._step_limit is not None:
            return self._step_limit
        return STEP_LIMITS.get(task, DEFAULT_STEP_LIMIT)

    def fewshot_examples(self, task: str) -> tuple[str, ...]:
        """Two gold trajectories from training variations (assets/fewshot/scienceworld.json)."""
        check_task(task)
        return tuple(_fewshot()[task])

    # ---- JVM ---------------------------------------------------------------------------------------
    @property
    def java_process(self) -> subprocess.Popen | None:
        """The JVM's process handle (None before the first reset)."""
        return self._proc

    def _simulator(self) -> Any:
        if self._sim is None:
            self._sim = _start_simulator(self.java_opts)
            self._proc = self._sim._gateway.java_process
            # Runs on close(), on garbage collection and at interpreter exit (atexit).
            self._finalizer = weakref.finalize(self, _stop_jvm, self._sim, self._proc)
        return self._sim

    def _load(self, task: str, variation: int, gold: bool = False) -> Any:
        sim = self._simulator()
        if self._loaded is None or self._loaded[:2] != (task, variation) or (gold and not self._loaded[2]):
            sim.load(task, variation, self.simplification, generateGoldPath=gold)
            self._loaded = (task, variation, gold)
        return sim

    def gold_path(self, task: str, variation: int) -> list[str]:
        """The simulator's gold action sequence for `task` at `variation`, without the steps the
        simplification makes no-ops (`clean_gold_path`). Ends any running episode.

        The generator picks some objects at random (which non-living thing to focus on), so two
        calls may differ; the world itself is deterministic. In tasks where things change with time
        (identify-life-stages) the dropped steps also let time pass, and the cleaned path can fall
        short of 100 there."""
        self.check_variation(task, variation)
        self._episode = None
        raw = self._load(task, variation, gold=True).get_gold_action_sequence()
        return clean_gold_path(list(raw), self.simplification)

    def valid_gold_path(self, task: str, variation: int) -> tuple[list[str], float]:
        """The gold path in the words of the step's valid actions, played to its end: `(actions, score)`.

        The simulator writes some gold actions in a form its parser accepts but its valid list does
        not hold ("connect battery anode to green wire terminal 1" where the list says "connect anode
        in battery to green wire terminal 1"; find-animal's "move egg butterfly egg in inventory to red
        box" where it says "move butterfly to red box"). A policy choosing among valid actions can only
        play a listed form, so each such action is replaced by the listed action that does the same:
        the gold action is played once, then the `MAP_CANDIDATES` valid actions closest to it in words
        are tried from the same state (a replay of the path so far) until one gives the same
        observation and score. Word overlap alone picks wrong ("move orange in inventory to red box"
        for the butterfly egg). With no such action, the closest one is kept. `score` (−100 … 100) is
        what the mapped path reached within the step limit. The simulator's ticks vary between runs
        (power-component's circuit may score on the last connection or one "wait1" later), so the
        gold steps after an early win are kept unmapped and a replay should play until `done`. Ends
        any running episode. Raises ValueError for an unknown task or variation (before a JVM starts)."""
        gold = self.gold_path(task, variation)
        played: list[str] = []

        def replay() -> Observation:
            obs = self.reset(task, variation)
            for done_action in played:
                obs = self.step(done_action).observation
            return obs

        obs = replay()
        done = False
        for action in gold:
            if done:  # won early: the simulator's ticks vary from run to run, so the rest is kept as it is
                played.append(action)
                continue
            if action not in obs.valid_actions:
                valid = obs.valid_actions
                text, _, _, info = self._sim.step(action)
                target = text.strip(), float(info["score"])
                gold_words = words(action)
                ranked = sorted(valid, key=lambda a: (-jaccard(gold_words, words(a)), a))
                for candidate in ranked[:MAP_CANDIDATES]:
                    replay()
                    result = self.step(candidate)
                    if (result.observation.text, result.observation.score) == target:
                        action = candidate
                        break
                else:
                    action = correct_action(action, valid)[0]
                obs = replay()
            result = self.step(action)
            played.append(result.action)
            obs, done = result.observation, result.done
            if done and not result.won:
                break
        self._episode = None
        return played, obs.score

    # ---- episode -------------------------------------------------------------------------------
    def reset(self, task: str, variation: int) -> Observation:
        self.check_variation(task, variation)  # before the JVM starts
        sim = self._load(task, variation)
        text, info = sim.reset()
        self._episode = {"task": task, "variation": variation, "steps": 0, "done": False, "refused": set()}
        return self._observation(text, info)

    def step(self, action_text: str) -> StepResult:
        ep = self._episode
        if ep is None:
            raise RuntimeError("step() before reset(): call reset(task, variation) first")
        if ep["done"]:
            raise RuntimeError("the episode has ended; call reset() to start a new one")
        last = ep["obs"]
        action, corrected, invalid = correct_action(action_text, last.valid_actions)
        ep["steps"] += 1
        if invalid:  # nothing goes to the JVM
            obs = replace(last, text="No action was given.")
            reward, score = 0.0, last.score
        else:
            text, _, completed, info = self._sim.step(action)
            if text.strip() == REFUSED_TEXT:
                # Refused by the parser, not by the state: it is refused in every later state of the
                # episode too, so it is not offered again until the next reset.
                ep["refused"].add(action)
            obs = self._observation(text, info)
            score, reward = obs.score, obs.score - last.score
            ep["done"] = bool(completed) or score <= -100 or score >= 100
        ep["done"] = ep["done"] or ep["steps"] >= self.step_limit(ep["task"])
        won = score >= 100
        if ep["done"]:
            obs = replace(obs, valid_actions=())
        ep["obs"] = obs
        return StepResult(
            observation=obs, reward=float(reward), done=ep["done"], won=won,
            action_text=action_text, action=action, corrected=corrected, invalid=invalid,
        )

    def _observation(self, text: str, info: dict[str, Any]) -> Observation:
        ep = self._episode
        assert ep is not None
        desc = info["taskDesc"].removeprefix("Task Description:").strip()
        obs = Observation(
            text=text.strip(),
            task=ep["task"],
            variation=ep["variation"],
            task_description=desc,
            valid_actions=tuple(sorted(set(info["valid"]) - HIDDEN_ACTIONS - ep["refused"])),
            inventory=info["inv"].strip(),
            score=float(info["score"]),
        )
        ep["obs"] = obs
        return obs

    def close(self) -> None:
        """Stop the JVM (no `java` process remains). Idempotent; a later reset starts a new one."""
        if self._finalizer is not None:
            self._finalizer()
        self._sim = self._proc = self._finalizer = self._loaded = self._episode = None

    def places(self, task: str) -> tuple[str, ...]:
        """ScienceWorld's ten locations (`envs.places.SCIENCEWORLD_PLACES`); ValueError for an unknown task."""
        check_task(task)
        return SCIENCEWORLD_PLACES

    def place_of(self, observation: str) -> str | None:
        """The location the observation says the agent is in, or None (`envs.places.place_in`)."""
        return place_in(observation, SCIENCEWORLD_PLACES)

    def summarise_episode(self, episode: Episode) -> str | None:
        """The episode's record line; None when it has nothing to say or the env was built with
        `record_line=False`. A find task ("find a(n) animal … focus on the thing") gets
        `envs.sw_search.search_record` (rooms stood in, or the plan of a focus that scored); any other
        `envs.room_notes` (ScienceWorld describes rooms in the words the trap copies)."""
        if not self.record_line or not episode.steps:
            return None
        if find_category(episode.task_description):
            # the draw's key: what the episode did and its group's seed (an id is random: a rerun would differ)
            key = f"{episode.seed}|{episode.variation}|" + " > ".join(s.action for s in episode.steps)
            line = search_record(episode.task_description, episode_steps(episode), notes_read(episode), key=key)
        else:
            line = episode_record(episode)
        return line or None

    def __enter__(self) -> ScienceWorldEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
