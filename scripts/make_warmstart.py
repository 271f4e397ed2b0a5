"""Train the warm-start LoRA adapter that teaches the embedded model to read its notes.

The embedded SmolLM2-135M-Instruct does not act on a tip in its prompt: with a correct note saying
"go to kitchen", it still gives that action the probability it gives any door (measured in
benchmarks/bench_lesson.py). The paper's 7B model could follow instructions; this adapter gives the
135M model that one skill before any EMPO² training, and both arms of every comparison start from it.

What it learns, on the constrained-decoding distribution over the step's valid actions:
1. in a trap episode whose prompt carries notes, the next action the notes imply (likelihood of that
   action, computed from the env's state: `next_action`). The data never uses the variations the
   benchmarks measure on: by default only the trap's dev layouts (variations 24–35 of every task;
   `--splits dev train` adds 0–23, never test 36–47). Two recipes (`--recipe`):
   - `shipped` (the template adapter, no longer shipped): the informative note is the template a teacher's pre-filled tip
     uses (`TrapEnv.curated_tip`) or a "[from the record]" line, half and half, shown as the rollout
     shows it, its plan from the first step not yet played (`prompts.remaining_plan`);
   - `wordings`: a quarter of the notes are the template, a tenth record lines, and the rest a note in a
     random wording (`scripts/note_wordings.py`: facts only, paraphrased or exact plans, partial names,
     warnings, filler sentences, in random order), so that the model reads the facts rather than
     copying the first step of a plan; trajectories may take one more detour later, and half the
     conversations show plans whole.
   In both, an uninformative note sometimes sits beside the informative one, and trajectories start
   with 0–2 detours so the model also learns to recover;
2. with `--reflect R` (an experiment, 0 in the shipped adapter): R reflection conversations per
   note-following one, each an episode (note-following or a note-free walk) followed by the reflection
   prompt (`memory.reflection.TIP_INSTRUCTION`) answered with a true note about what the episode's turns
   showed (`note_wordings.reflection_answer`), learned as free text, as `write_tips` decodes it;
3. on the same layouts *without* notes, nothing new: a KL(base ‖ adapted) term over the allowed tokens
   at every action position of random note-free walks keeps the note-free policy at the base model's
   (or, with `--anchor-ref init`, at the `--init` adapter's).
   Without it the note-free reflex became one fixed door ("go to bedroom", 0.98, on every layout), so
   naive episodes won wherever the target was behind it and the trap stopped trapping.

Experiments, all off by default (docs/notebook/2026-12-04-reading-and-writing-levers.md): `--focus-weight`
counts the focus step's tokens more in the note-following loss; `--plan-share` sets how many random-wording
notes say what to do rather than state facts only; `--answer-form rooms` writes reflection answers room by
room (`note_wordings.rooms_answer`); for trap-water-plant's two stages, `--plant-per-layout` gives its
layouts more conversations, `--can-weight` weights the can's pick-up like the focus, and `--focus-first`
lets a share of its conversations focus on the flower first when a detour lands in its room;
`--return-trips` adds its train layouts whose can sits in a third room (`return_trip_layouts`),
`--stay-trips` those whose can sits in the flower's room (`stay_layouts`; docs/notebook/2026-12-05-bars-run.md), and
`--return-weight` weights the walk back from the can like the focus (`key_turns`). `--negation` gives a
share of the conversations a note that only rules rooms out, and starts them in one of those rooms
(`note_wordings.negation_note`). `--distract` gives a share of the informative notes a true sentence about
another object and its room (`note_wordings.with_distractor`; docs/notebook/2026-12-05-distractors.md).
`--anchor-spread` spreads the note-free KL anchor's walks over every batch (`anchor_slices`), and
`--anchor-ref init` holds them to the `--init` adapter's note-free choices instead of the base model's. For note
writers (`--reflect-only`): `--room-questions` answers a share of the episodes with yes/no questions about
the rooms they stood in, `--verdict-weight` counts each room's verdict more, `--context transcript`
shows the episode as one text block instead of the conversation (docs/notebook/2026-12-04-writer-signal.md),
and `--context observation` trains the shipped note writer: one observation at a time, answered by its
observation note (`observation_item`, docs/notebook/2026-12-04-observation-notes.md).

LoRA adapts the last 12 of the 30 layers (`--last-layers`): autograd stops there, so every later
backward pass of a run costs 12 layers, not 30, and stores their activations only.

    .venv/bin/python scripts/make_warmstart.py            # the template adapter: ~6 min on a quiet 2-core Xeon; writes
                                                          # assets/warmstart/<model>, not shipped (docs/notebook/2026-12-06-only-what-runs-ships.md)
    .venv/bin/python scripts/make_warmstart.py --recipe wordings --out /tmp/ws   # notes in many wordings (docs/notebook/2026-12-03-notes.md)
    .venv/bin/python scripts/make_warmstart.py --epochs 1 --out /tmp/ws   # a quick try elsewhere

The output is a PEFT adapter directory plus `warmstart.json` (what it was trained on, its loss curve).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from empo2_studio.config import EMBEDDED_MODEL, PolicyConfig  # noqa: E402
from empo2_studio.envs.trap import CAN, DOORS, TASKS, TrapEnv, _route  # noqa: E402
from empo2_studio.envs.trap_world import SIDE_ROOMS, START_ROOM  # noqa: E402
from empo2_studio.envs.room_notes import record_line  # noqa: E402
from empo2_studio.memory.reflection import FALLBACK_PREFIX, TIP_INSTRUCTION, observation_prompt  # noqa: E402
from empo2_studio.policy import Turn, prompts  # noqa: E402
from empo2_studio.types import RetrievedTip  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
from warmstart_record import init_record, lineage, merged_seen  # noqa: E402
from note_wordings import (  # noqa: E402
    negation_note,
    observation_answer,
    observation_note,
    reflection_answer,
    training_note,
    with_distractor,
)

DEFAULT_OUT = ROOT / "assets" / "warmstart" / EMBEDDED_MODEL


def next_action(env: TrapEnv, focus_first: bool = False) -> str:
    """The action a correct note implies from the env's current state (shortest winning plan).

    On trap-water-plant the can comes first, except with `focus_first` when the agent already stands
    in the flower's room (after a detour): then it focuses on the flower and fetches the can after,
    which also wins (the task says "First, focus on the flower") and shows the states the shortest
    plan never visits: focused on the flower, without the can."""
    st = env._state
    assert st is not None
    lay, task = st.layout, st.layout.task
    at_flower = st.room == lay.target_room and st.focused != lay.target
    if task == "trap-water-plant" and CAN not in st.inventory and not (focus_first and at_flower):
        can_room = st.objects[CAN]
        return f"pick up {CAN}" if st.room == can_room else f"go to {_route(st.room, can_room)[0]}"
    if st.room != lay.target_room:
        return f"go to {_route(st.room, lay.target_room)[0]}"
    if st.focused != lay.target:
        return f"focus on {lay.target}"
    return f"{TASKS[task].verb} {lay.target}"


def failed_record(task: str, variation: int, rng: random.Random) -> str:
    """The record line of a failed episode: a wrong room searched, then a decoy focused."""
    env = TrapEnv()
    obs = env.reset(task, variation)
    lay = env.layout(task, variation)
    steps = [("", 0.0, obs.text)]
    wrong = rng.choice([r for r in DOORS["hallway"] if r != lay.target_room])
    for action in (f"go to {wrong}", "go to hallway"):
        res = env.step(action)
        steps.append((action, res.reward, res.observation.text))
    decoys = [a for a in res.observation.valid_actions if a.startswith("focus on") and lay.target not in a]
    if decoys:
        res = env.step(rng.choice(decoys))
        steps.append((res.action, res.reward, res.observation.text))
    # No guessed "Next time" room: beside the informative note this one must say nothing to follow (and
    # the shipped adapter was trained before record lines guessed a room for an unseen target).
    return record_line(obs.task_description, steps, guess=False)


def notes_for(task: str, variation: int, rng: random.Random, recipe: str = "shipped", template: float = 0.25,
              plan: float = 0.55, observed: float = 0.0, distract: float = 0.0) -> list[str]:  # fmt: skip
    """One informative note, sometimes with an uninformative one beside it.

    `shipped` (the adapter in assets/): the teacher's template (`TrapEnv.curated_tip`) or a record line,
    half and half. `wordings`: the template (share `template`), a record line (10 %), a note in the note
    writer's form (share `observed`, `note_wordings.observation_note`) or, the rest, a note in a random
    wording (`note_wordings.training_note`). A share `distract` of the informative notes carry a true
    sentence about another object and its room (`note_wordings.with_distractor`)."""
    env = TrapEnv()
    if recipe == "shipped":
        good = env.curated_tip(task, variation) if rng.random() < 0.5 else env.gold_record(task, variation)
        two, fallback = 0.25, 0.4
    else:
        r = rng.random()
        if r < template:
            good = env.curated_tip(task, variation)
        elif r < template + 0.1:
            good = env.gold_record(task, variation)
        elif r < template + 0.1 + observed:
            good = observation_note(env.layout(task, variation), rng)
        else:
            good = training_note(env.layout(task, variation), rng, plan)
        two, fallback = 0.15, 0.25
    if distract > 0 and rng.random() < distract:  # draws only when on: the default data stream stays
        good = with_distractor(good, env.layout(task, variation), rng)
    extra = rng.random()
    if extra < two:
        return [good, failed_record(task, variation, rng)]
    if extra < fallback:
        steps = rng.randint(3, 8)
        return [good, f"{FALLBACK_PREFIX} The episode ended with score 0.0/100 after {steps} steps."]
    return [good]


def anchor_slices(n_anchors: int, steps: int, batch: int, *, spread: bool) -> list[range]:
    """Which anchor walks (indices into the epoch's shuffled list) each of `steps` batches scores for the KL.

    Default: batch i takes walks batch·i … batch·i + batch − 1, so with more batches than walks / batch the
    later batches get none (ws33's build: the last 7 of 43 batches; with --plant-per-layout 8, 26 of 62).
    `spread`: every walk once, in contiguous runs of ⌊n / steps⌋ or ⌈n / steps⌉ walks, so no batch trains
    without an anchor while n ≥ steps.

    >>> [list(r) for r in anchor_slices(5, 3, 2, spread=False)]
    [[0, 1], [2, 3], [4]]
    >>> [list(r) for r in anchor_slices(4, 6, 2, spread=False)]
    [[0, 1], [2, 3], [], [], [], []]
    >>> [list(r) for r in anchor_slices(7, 3, 4, spread=True)]
    [[0, 1], [2, 3], [4, 5, 6]]
    """
    if spread:
        return [range(i * n_anchors // steps, (i + 1) * n_anchors // steps) for i in range(steps)]
    return [range(min(i * batch, n_anchors), min((i + 1) * batch, n_anchors)) for i in range(steps)]


def anchor_conversation(task: str, variation: int, rng: random.Random, step_limit: int = 8) -> list[tuple[str, str, tuple[str, ...]]]:
    """A note-free random walk on a layout, as (user text, action, valid actions) turns: doors are
    preferred (60 %) so the walk reaches other rooms before a focus ends it."""
    env = TrapEnv(step_limit=step_limit)
    obs = env.reset(task, variation)
    turns = []
    for i in range(step_limit):
        user = prompts.first_user_message("trap", obs, ()) if i == 0 else prompts.step_user_message(obs, "trap")
        doors = [a for a in obs.valid_actions if a.startswith("go to")]
        action = rng.choice(doors) if doors and rng.random() < 0.6 else rng.choice(obs.valid_actions)
        turns.append((user, action, obs.valid_actions))
        res = env.step(action)
        obs = res.observation
        if res.done:
            break
    return turns


def conversation(task: str, variation: int, rng: random.Random, step_limit: int = 8, recipe: str = "shipped", template: float = 0.25,
                 plan: float = 0.55, focus_first: bool = False, observed: float = 0.0, negation: bool = False,
                 distract: float = 0.0) -> tuple[list[Turn], list[int]]:  # fmt: skip
    """A note-following episode as policy turns, and the indices of the turns to learn from
    (`focus_first`: see `next_action`). With `negation` the only note rules rooms out
    (`note_wordings.negation_note`) and the episode's first move, not learned, enters one of them: the
    turns learned from there leave it."""
    from empo2_studio.policy.tokens import ChatFormat  # noqa: F401  (format comes from the policy)

    env = TrapEnv(step_limit=step_limit)
    obs = env.reset(task, variation)
    notes = notes_for(task, variation, rng, recipe, template, plan, observed, distract)
    rng.shuffle(notes)
    tips = [RetrievedTip(f"n{i}", n, 100.0, 1.0) for i, n in enumerate(notes)]
    detours = rng.choice((0, 0, 1, 2))
    wander, progress = -1, True  # shipped: no later detour; plans always cut as the rollout cuts them
    if recipe == "wordings":
        wander = rng.randint(1, step_limit - 2) if rng.random() < 0.3 else -1  # one detour later in the path
        progress = rng.random() < 0.5  # plans shown from their first unplayed step (remaining_plan) or whole
    ruled_in: str | None = None
    if negation:
        text, ruled = negation_note(env.layout(task, variation), rng)
        tips, detours, wander, ruled_in = [RetrievedTip("n0", text, 100.0, 1.0)], 1, -1, rng.choice(ruled)
    turns: list[tuple[str, str, tuple[str, ...]]] = []
    learn: list[int] = []
    for i in range(step_limit):
        user = prompts.first_user_message("trap", obs, ()) if i == 0 else prompts.step_user_message(obs, "trap")
        if i < detours and ruled_in is not None:
            action = f"go to {ruled_in}"  # the hallway opens on every side room
        elif i < detours or i == wander:
            safe = [a for a in obs.valid_actions if a.startswith("go to") or a == "look around"]
            action = rng.choice(safe)
        else:
            action = next_action(env, focus_first)
            learn.append(i)
        played = [a for _, a, _ in turns]
        shown = [prompts.with_plan_progress(t, played) if progress else t for t in tips]
        turns.append((prompts.with_tips(user, shown, "compact"), action, obs.valid_actions))
        res = env.step(action)
        obs = res.observation
        if res.done:
            break
    return turns, learn


def reflection_conversation(task: str, variation: int, rng: random.Random, step_limit: int = 8, recipe: str = "wordings",
                            template: float = 0.25, pass_by_share: float = 0.0, form: str = "sentence",
                            ) -> tuple[list[tuple[str, str, tuple[str, ...]]], str]:  # fmt: skip
    """An episode as the policy saw it (`reflection_episode`), then the true note about it that answers the
    reflection prompt (`note_wordings.reflection_answer` in the answer form `form`: "sentence" or "rooms").
    Returns (turns as (user text, action, valid actions), answer)."""
    turns, rooms, can_room, _ = reflection_episode(task, variation, rng, step_limit, recipe, template, pass_by_share)
    return turns, reflection_answer(TrapEnv().layout(task, variation), rooms, can_room, rng, form)


def reflection_episode(task: str, variation: int, rng: random.Random, step_limit: int = 8, recipe: str = "wordings",
                       template: float = 0.25, pass_by_share: float = 0.0, final: bool = False,
                       ) -> tuple[list[tuple[str, str, tuple[str, ...]]], list[str], str | None, str]:  # fmt: skip
    """An episode for the reflection prompt, and what its turns' observations showed.

    Half the episodes are meant to see the target: a note-following episode (`conversation`) or a walk
    that takes the note's next action half the time, or (share `pass_by_share` of them) a walk that
    goes into the target's room and on without acting on the target. The other half never enter the
    target's room (a random walk over the other actions), so the note must say where the target was
    *not*: with wins 9 in 10 of the episodes, the model learned to name a room whatever it saw. What the
    turns' observations showed: the rooms the policy stood in at each turn (the room a last "go to" enters
    is never shown to it; with `final` it is, as a transcript shows it) and the room where it saw the
    watering can (None: not seen, or not water-plant). Returns (turns as (user text, action, valid
    actions), rooms stood in, in order, can room, transcript): `replay_rooms`."""
    find = rng.random() < 0.5
    # The trap's own failure: walk into the target's room and out again without acting on the target.
    pass_by = find and pass_by_share > 0 and rng.random() < pass_by_share
    if find and not pass_by and rng.random() < 0.5:
        turns, _ = conversation(task, variation, rng, step_limit, recipe, template)
        actions = [a for _, a, _ in turns]
    else:
        env = TrapEnv(step_limit=step_limit)
        obs = env.reset(task, variation)
        lay = env.layout(task, variation)
        avoid = f"go to {lay.target_room}"
        turns, actions, seen = [], [], False
        for i in range(step_limit):
            user = prompts.first_user_message("trap", obs, ()) if i == 0 else prompts.step_user_message(obs, "trap")
            seen = seen or (env._state is not None and env._state.room == lay.target_room)
            if (pass_by and not seen) or (find and not pass_by and rng.random() < 0.5):
                action = next_action(env)  # on a pass-by, the way into the target's room
            else:
                allowed = [a for a in obs.valid_actions if (find or a != avoid) and not (pass_by and lay.target in a)]
                doors = [a for a in allowed if a.startswith("go to")]
                action = rng.choice(doors) if doors and rng.random() < 0.7 else rng.choice(allowed)
            turns.append((user, action, obs.valid_actions))
            actions.append(action)
            res = env.step(action)
            obs = res.observation
            if res.done:
                break
    return turns, *replay_rooms(task, variation, actions, step_limit, final)


def replay_rooms(task: str, variation: int, actions: list[str], step_limit: int = 8, final: bool = False,
                 ) -> tuple[list[str], str | None, str]:  # fmt: skip
    """Replay `actions`: the room each turn was played in (with `final`, also the room the last action
    ends in, whose observation a transcript shows), the room where the watering can was first seen
    (None: not seen, or not water-plant), and the episode's transcript (`prompts.episode_transcript`)."""
    env = TrapEnv(step_limit=step_limit)
    first = env.reset(task, variation)
    rooms: list[str] = []
    steps: list[tuple[str, str]] = []
    can_room = None

    def stand() -> None:  # the room the env is in now, and the can if it is seen there first
        nonlocal can_room
        st = env._state
        assert st is not None
        rooms.append(st.room)
        if st.objects.get(CAN) == st.room and can_room is None and task == "trap-water-plant":
            can_room = st.room

    for action in actions:
        stand()
        steps.append((action, env.step(action).observation.text))
    if final:
        stand()
    return rooms, can_room, prompts.episode_transcript(first.task_description, first.text, steps)


def room_questions(task: str, variation: int, rooms_seen: list[str], rng: random.Random) -> list[tuple[str, str]]:
    """Yes/no questions about rooms the episode stood in, asked after it instead of the reflection prompt:
    (question, "Yes" or "No"), one about the target's room when the episode saw it and one about another
    room, in random order.

    Why: the note writers (docs/notebook/2026-12-04-own-notes.md) named the rooms right and got each room's
    verdict wrong. Asked about one room's observation alone, a LoRA learned the verdict in one epoch
    (docs/notebook/2026-12-04-water-plant-and-gpu.md); here the question is asked where the note needs it,
    after the whole episode, so the answer is one weighted token instead of a few among twenty."""
    lay = TrapEnv().layout(task, variation)
    seen = list(dict.fromkeys(rooms_seen))
    others = [r for r in seen if r != lay.target_room]
    picked = ([lay.target_room] if lay.target_room in seen else []) + rng.sample(others, min(len(others), 1))
    if len(picked) < 2 and len(others) > 1:
        picked.append(rng.choice([r for r in others if r not in picked]))
    rng.shuffle(picked)
    return [(f"Was the {lay.target} in the {room}? Answer Yes or No.", "Yes" if room == lay.target_room else "No")
            for room in picked]


def verdict_positions(fmt, answer: str) -> list[int]:
    """Token positions of each room's verdict in a room-by-room answer ("Kitchen: no red light bulb.
    Greenhouse: the red light bulb."): the first token after each "Room:". The encoded prefix up to a
    colon is a prefix of the encoded answer (the tokenizer splits before spaces), so its length is the
    verdict's position."""
    out, start = [], 0
    while (colon := answer.find(":", start)) >= 0:
        out.append(len(fmt.encode(answer[: colon + 1])))
        start = colon + 1
    return out


def reflection_item(fmt, task: str, variation: int, rng: random.Random, args) -> tuple[list[Turn], dict[int, "torch.Tensor"]]:
    """One reflection conversation as policy turns, and the turns learned with their per-token weights:
    the episode (`reflection_episode`) answered by a true note (`reflection_answer`; in the rooms form each
    room's verdict token counted `args.verdict_weight` times) or, for a share `args.room_questions` of
    them, by yes/no questions about its rooms (`room_questions`, every answer token counted
    `args.verdict_weight` times)."""
    import torch

    if args.context == "observation":
        return observation_item(fmt, task, variation, rng, args)
    transcript = args.context == "transcript"
    turns, rooms, can_room, text = reflection_episode(task, variation, rng, recipe=args.recipe, template=args.template,
                                                      pass_by_share=args.pass_by, final=transcript)  # fmt: skip
    # With --context transcript the episode is one text block before the first question; else its turns.
    conv = [] if transcript else [Turn(u, fmt.encode(a) + (fmt.eot_id,), valid) for u, a, valid in turns]
    lead = text + "\n\n" if transcript else ""
    learned: dict[int, torch.Tensor] = {}
    if args.room_questions and rng.random() < args.room_questions:  # draws only when on: the default data stays
        for question, answer in room_questions(task, variation, rooms, rng):
            ids = fmt.encode(answer) + (fmt.eot_id,)
            learned[len(conv)] = torch.full((len(ids),), float(args.verdict_weight))
            conv.append(Turn(lead + question, ids, ()))
            lead = ""
        return conv, learned
    answer = reflection_answer(TrapEnv().layout(task, variation), rooms, can_room, rng, args.answer_form)
    ids = fmt.encode(answer) + (fmt.eot_id,)
    weights = torch.ones(len(ids))
    if args.answer_form == "rooms":
        weights[verdict_positions(fmt, answer)] = float(args.verdict_weight)
    learned[len(conv)] = weights
    conv.append(Turn(lead + TIP_INSTRUCTION, ids, ()))
    return conv, learned


def observation_item(fmt, task: str, variation: int, rng: random.Random, args) -> tuple[list[Turn], dict[int, "torch.Tensor"]]:
    """One observation note to learn (`memory.reflection.write_observation_notes`): the task and one
    observation of the layout (`observation_prompt`), answered by its true note (`observation_answer`),
    the verdict's token (" in" or " not" after "The X is") counted `args.verdict_weight` times.

    The observation: a share 0.15 is an action's result that shows no room ("You pick up the watering
    can."; answered "Nothing new."); of the rest, 0.35 enter the target's room and 0.65 another room
    (the hallway's look-alikes included), on arrival or after "look around" half and half. On
    trap-water-plant the can is carried first in 0.3 of them, so its room is seen without it."""
    import torch

    env = TrapEnv()
    first = env.reset(task, variation)
    lay = env.layout(task, variation)
    obs_text = first.text

    def walk(goal: str) -> None:
        nonlocal obs_text
        assert env._state is not None
        for room in _route(env._state.room, goal) if goal != env._state.room else []:
            obs_text = env.step(f"go to {room}").observation.text

    if task == "trap-water-plant" and rng.random() < 0.3:
        walk(lay.objects[CAN])
        obs_text = env.step(f"pick up {CAN}").observation.text  # shows no room: looked around below if it stays
    others = [r for r in (START_ROOM, *SIDE_ROOMS) if r != lay.target_room]
    walk(lay.target_room if rng.random() < 0.35 else rng.choice(others))
    st = env._state
    assert st is not None
    acts = [a for a in env._valid_actions() if not a.startswith(("go to", "look around", "focus on"))]
    if rng.random() < 0.15 and acts:
        obs_text = env.step(rng.choice(acts)).observation.text
        room = None
    else:  # a room's observation (also when no action here shows something else)
        room = st.room
        if rng.random() < 0.5 or f"called the {room}." not in obs_text:  # a pick-up left no room in view
            obs_text = env.step("look around").observation.text
    here = {o for o, r in st.objects.items() if r == st.room}
    answer = observation_answer(lay, room, here)
    ids = fmt.encode(answer) + (fmt.eot_id,)
    weights = torch.ones(len(ids))
    if room is not None:
        weights[len(fmt.encode(f"The {lay.target} is"))] = float(args.verdict_weight)
    return [Turn(observation_prompt(first.task_description, obs_text), ids, ())], {0: weights}


def weighted_nll(picked: list, focus: list[bool], focus_weight: float = 1.0) -> "torch.Tensor":
    """Mean negative log-likelihood over action tokens, the tokens of key steps counted `focus_weight`
    times. `picked`: one 1-D tensor of token log-probs (len(action tokens),) per learned turn; `focus`:
    whether each turn is a key step (a "focus on" step, and with `--can-weight` the can's pick-up).
    1.0 is a plain mean over the tokens.

    Why weight the focus step: a conversation has one, against up to three "go to" labels (its route and
    the way back from each detour), and a facts-only note names a room in both cases; the adapter
    learned to walk out of the target's room (docs/notebook/2026-12-04-reading-and-writing-levers.md)."""
    import torch

    weights = torch.cat([torch.full_like(p, focus_weight if f else 1.0) for p, f in zip(picked, focus, strict=True)])
    return -(torch.cat(picked) * weights).sum() / weights.sum()


def key_turns(turns: list, learn: list[int], key: tuple[str, ...], walk_back: bool = False) -> list[bool]:
    """For each learned turn: whether its action is a key step that `--focus-weight` counts more. An
    action starting with one of `key`, and with `walk_back` every move after the can's pick-up and
    before the first focus (the walk back to the flower)."""
    out, picked, focused = [], False, False
    for i, (_, action, _) in enumerate(turns):
        if i in learn:
            out.append(action.startswith(key) or (walk_back and picked and not focused and action.startswith("go to ")))
        picked |= action == f"pick up {CAN}"
        focused |= action.startswith("focus on")
    return out


def return_trip_layouts(env: TrapEnv) -> list[int]:
    """trap-water-plant train layouts whose watering can sits in a third room, neither the hallway nor the
    flower's: after the pick-up the path walks back through the hallway to the flower (6 gold steps).
    The dev split has 2 such layouts of 12 and the test split 6, so without these the walk back is the
    step the adapter has seen least. The first train layout is left out: `evaluation.adapt` plays it."""
    task = "trap-water-plant"
    out = []
    for v in env.variations(task, "train")[1:]:
        lay = env.layout(task, v)
        if lay.objects[CAN] not in (START_ROOM, lay.target_room):
            out.append(v)
    return out


def stay_layouts(env: TrapEnv) -> list[int]:
    """trap-water-plant train layouts whose watering can sits in the flower's own room: after the pick-up
    the path focuses where it stands (4 gold steps). They are meant to balance `return_trip_layouts`, whose
    weighted walk back the route adapter also takes after a pick-up in the flower's room
    (docs/notebook/2026-12-05-bars-run.md). The first train layout is left out, as there."""
    task = "trap-water-plant"
    return [v for v in env.variations(task, "train")[1:] if (lay := env.layout(task, v)).objects[CAN] == lay.target_room]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--recipe", choices=["shipped", "wordings"], default="shipped",
                    help="shipped: the adapter in assets/ (template and record notes, dev layouts); "
                    "wordings: notes in random wordings too (an experiment: docs/notebook/2026-12-03-notes.md)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--per-layout", type=int, default=2, help="conversations per layout and epoch")
    ap.add_argument("--batch", type=int, default=4, help="conversations per optimizer step")
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--last-layers", type=int, default=12, help="LoRA on the model's last N layers")
    ap.add_argument("--splits", nargs="+", default=["dev"], choices=["dev", "train"], help="layouts trained on (never test)")
    ap.add_argument("--template", type=float, default=0.25, help="share of notes in the curated template's wording")
    ap.add_argument("--plan-share", type=float, default=0.55,
                    help="wordings recipe: share of the random-wording notes that say what to do (the rest: facts only)")
    ap.add_argument("--focus-weight", type=float, default=1.0,
                    help="weight of the focus step's tokens in the note-following loss, against 1 for the others")
    ap.add_argument("--can-weight", action="store_true",
                    help="count the watering can's pick-up as a key step, weighted like the focus (--focus-weight)")
    ap.add_argument("--plant-per-layout", type=int, default=None,
                    help="conversations per trap-water-plant layout and epoch (default: --per-layout); its two "
                         "stages, the can then the flower, need more examples than one")
    ap.add_argument("--focus-first", type=float, default=0.0,
                    help="share of water-plant conversations that, standing in the flower's room without the can, "
                         "focus first and fetch the can after (next_action)")
    ap.add_argument("--return-trips", action="store_true",
                    help="add trap-water-plant's train layouts whose can sits in a third room (return_trip_layouts), "
                         "so the walk back to the flower after the pick-up is learned on more than the 2 dev layouts")
    ap.add_argument("--stay-trips", action="store_true",
                    help="add trap-water-plant's train layouts whose can sits in the flower's room (stay_layouts), "
                         "so a pick-up is not always followed by a walk back")
    ap.add_argument("--return-weight", action="store_true",
                    help="count the moves between the can's pick-up and the first focus as key steps, weighted "
                         "like the focus (--focus-weight; key_turns)")
    ap.add_argument("--negation", type=float, default=0.0,
                    help="share of note-following conversations whose only note rules rooms out, in the note writer's "
                         "sentences, and that start by entering one of them (note_wordings.negation_note)")
    ap.add_argument("--observed", type=float, default=0.0,
                    help="wordings recipe: share of notes in the note writer's form, a sentence per room searched "
                         "(note_wordings.observation_note)")
    ap.add_argument("--distract", type=float, default=0.0,
                    help="share of the informative notes given a true sentence about another object and its room, "
                         "before or after the note (note_wordings.with_distractor)")
    ap.add_argument("--anchor-weight", type=float, default=1.0, help="weight of the note-free KL anchor")
    ap.add_argument("--anchor-ref", choices=("base", "init"), default="base",
                    help="the note-free distributions the KL anchor holds the walks to: the base model's (no adapter), "
                         "or those of the --init adapter as loaded, so a fine-tune keeps the walk of the adapter it starts from")
    ap.add_argument("--anchor-spread", action="store_true",
                    help="spread the note-free anchor walks over every batch of the epoch (anchor_slices); without "
                         "it batch i takes the i-th --batch walks and the batches after the last walk train with no anchor")
    ap.add_argument("--init", type=Path, default=None,
                    help="start from this adapter directory (same --last-layers) instead of an untrained LoRA: "
                         "fine-tune a built warm start on a changed data stream")
    ap.add_argument("--reflect-only", action="store_true",
                    help="train only the reflection answers (per-layout conversations each), no note-following turns "
                         "and no anchor: an adapter that writes notes, for another to act")
    ap.add_argument("--pass-by", type=float, default=0.0,
                    help="share of the reflection episodes meant to see the target that walk into its room and leave "
                         "without acting on it (the trap's own failure)")
    ap.add_argument("--answer-form", choices=["sentence", "rooms"], default="sentence",
                    help="reflection answers as one sentence in a random wording, or room by room, each room's "
                         "verdict right after its name (note_wordings.rooms_answer)")
    ap.add_argument("--room-questions", type=float, default=0.0,
                    help="share of the reflection episodes answered by yes/no questions about the rooms they stood in "
                         "('Was the X in the Y?') instead of a note (room_questions)")
    ap.add_argument("--context", choices=["conversation", "transcript", "observation"], default="conversation",
                    help="what the reflection answer follows: the episode's conversation as the policy saw it, "
                         "its transcript alone (prompts.episode_transcript: task, observations, actions; no notes), "
                         "or one observation, answered by its observation note (observation_item)")
    ap.add_argument("--verdict-weight", type=float, default=1.0,
                    help="weight of each room's verdict token in rooms-form notes and of the room questions' answers")
    ap.add_argument("--reflect", type=float, default=0.0,
                    help="reflection conversations per note-following one: the reflection prompt answered with a "
                         "true note about the episode (0 = none, the shipped adapter)")
    args = ap.parse_args(argv)
    if args.reflect < 0:
        ap.error(f"--reflect must be ≥ 0 (reflection conversations per note-following one), got {args.reflect}")
    if not 0 <= args.observed <= 1 - args.template - 0.1:
        ap.error(f"--observed must be a share in [0, {1 - args.template - 0.1:.2f}] (1 - --template - 0.1 for record lines), got {args.observed}")
    for flag, on in (("--return-trips", args.return_trips), ("--stay-trips", args.stay_trips)):
        if on and "train" in args.splits:
            ap.error(f"{flag} adds train layouts; with --splits train they are already in")
    if not 0 <= args.negation <= 1:
        ap.error(f"--negation must be a share in [0, 1], got {args.negation}")
    if not 0 <= args.distract <= 1:
        ap.error(f"--distract must be a share in [0, 1], got {args.distract}")
    if args.anchor_ref == "init" and (args.init is None or args.epochs != 1):
        # the reference is read off the adapter before the first step: a later epoch would read a trained one
        ap.error(f"--anchor-ref init needs --init and --epochs 1, got --init {args.init} --epochs {args.epochs}")
    if not 0 <= args.plan_share <= 1:
        ap.error(f"--plan-share must be a share in [0, 1], got {args.plan_share}")
    if args.focus_weight <= 0:
        ap.error(f"--focus-weight must be > 0, got {args.focus_weight}")
    if not 0 <= args.focus_first <= 1:
        ap.error(f"--focus-first must be a share in [0, 1], got {args.focus_first}")
    if args.plant_per_layout is not None and args.plant_per_layout < 1:
        ap.error(f"--plant-per-layout must be ≥ 1, got {args.plant_per_layout}")
    if not 0 <= args.room_questions <= 1:
        ap.error(f"--room-questions must be a share in [0, 1], got {args.room_questions}")
    if args.verdict_weight <= 0:
        ap.error(f"--verdict-weight must be > 0, got {args.verdict_weight}")
    if not 0 <= args.pass_by <= 1:
        ap.error(f"--pass-by must be a share in [0, 1], got {args.pass_by}")
    if args.init is not None and not (args.init / "adapter_config.json").is_file():
        ap.error(f"--init {str(args.init)!r} is not an adapter directory (no adapter_config.json); "
                 "give a folder make_warmstart.py wrote")
    try:
        init_record(args.init)  # an init that cannot say what it saw is refused before hours of training
    except ValueError as exc:
        ap.error(str(exc))

    import torch

    from empo2_studio.policy.loading import load_policy

    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    policy = load_policy(PolicyConfig(quantization="none", warm_start="none", lora_layers=args.last_layers))
    if args.init is not None:
        try:
            policy.load_adapter(str(args.init))
        except ValueError as exc:
            ap.error(f"--init: {exc}")
    fmt = policy.chat_format
    env = TrapEnv()
    # The search family's layouts only: no fixed-family layout (its train and test layouts are the race's).
    layouts = [(t, v) for t in TASKS if TASKS[t].family == "search" for split in args.splits for v in env.variations(t, split)]

    # --return-trips and --stay-trips: trap-water-plant train layouts added to the note-following data
    return_trips = return_trip_layouts(env) if args.return_trips else []
    stay_trips = stay_layouts(env) if args.stay_trips else []
    added = [("trap-water-plant", v) for v in return_trips + stay_trips]
    own_seen: dict[str, set[int]] = {}  # task → the layouts this run trains on (warmstart.json's "seen")
    for task, variation in layouts + added:
        own_seen.setdefault(task, set()).add(variation)

    def per_layout(task: str) -> int:
        return args.plant_per_layout if task == "trap-water-plant" and args.plant_per_layout else args.per_layout

    def negation() -> bool:  # draws only when the option is on, as focus_first
        return args.negation > 0 and rng.random() < args.negation

    def focus_first(task: str) -> bool:  # draws only when the option is on: the default data stream stays as it was
        return args.focus_first > 0 and task == "trap-water-plant" and rng.random() < args.focus_first

    key = ("focus on", f"pick up {CAN}") if args.can_weight else ("focus on",)  # the steps --focus-weight counts more
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=args.lr, weight_decay=0.0)
    history: list[dict[str, float]] = []
    t0 = time.time()
    policy.model.train()
    for epoch in range(args.epochs):
        follow = not args.reflect_only
        data = [conversation(t, v, rng, recipe=args.recipe, template=args.template, plan=args.plan_share,
                             focus_first=focus_first(t), observed=args.observed, negation=negation(),
                             distract=args.distract)
                for t, v in layouts + added for _ in range(per_layout(t))] if follow else []  # fmt: skip
        rng.shuffle(data)
        anchors = [anchor_conversation(t, v, rng) for t, v in layouts for _ in range(args.per_layout)] if follow else []
        rng.shuffle(anchors)
        anchor_convs = [[Turn(u, fmt.encode(a) + (fmt.eot_id,), valid) for u, a, valid in w] for w in anchors]
        n_notes = round(len(data) * args.reflect) if follow else len(layouts) * args.per_layout
        reflect_convs = [reflection_item(fmt, t, v, rng, args) for t, v in rng.sample(layouts * args.per_layout, n_notes)]
        steps = -(-(len(data) if follow else n_notes) // args.batch)
        per_batch = -(-len(reflect_convs) // max(1, steps))  # the reflection answers, spread over the steps
        with torch.no_grad(), (policy.no_adapter() if args.anchor_ref == "base" else contextlib.nullcontext()):
            reference = [policy.allowed_logprobs(c) for c in anchor_convs]  # --anchor-ref's note-free distributions
        anchor_at = anchor_slices(len(anchor_convs), steps, args.batch, spread=args.anchor_spread)
        for step in range(steps):
            b = step * args.batch
            batch = data[b : b + args.batch]
            nll = kl = torch.zeros(())
            acc = float("nan")
            if batch:
                convs = [[Turn(u, fmt.encode(a) + (fmt.eot_id,), valid) for u, a, valid in turns] for turns, _ in batch]
                logps = policy.score(convs)
                picked = [logps[c][i] for c, (_, learn) in enumerate(batch) for i in learn]
                focus = [k for turns, learn in batch for k in key_turns(turns, learn, key, args.return_weight)]
                nll = weighted_nll(picked, focus, args.focus_weight)
                acc = float(torch.stack([p.sum() for p in picked]).exp().mean())
                kls = []
                for c in anchor_at[step]:
                    for ref, cur in zip(reference[c], policy.allowed_logprobs(anchor_convs[c]), strict=True):
                        kls.append((ref.exp() * (ref - cur)).sum())
                kl = torch.stack(kls).mean() if kls else kl
            loss = nll + args.anchor_weight * kl
            notes = reflect_convs[step * per_batch : (step + 1) * per_batch]
            note_nll = torch.zeros(())
            if notes:
                policy.decoding = "free"  # the note is free text (write_tips decodes it unconstrained)
                try:
                    scored = policy.score([conv for conv, _ in notes])
                finally:
                    policy.decoding = "constrained"
                lps = torch.cat([lp[i] for lp, (_, learned) in zip(scored, notes) for i in learned])
                weights = torch.cat([w for _, learned in notes for w in learned.values()])
                note_nll = -(lps * weights).sum() / weights.sum()
                loss = loss + note_nll
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(), 1.0)
            opt.step()
            history.append({"epoch": epoch, "step": len(history), "loss": float(nll), "kl": float(kl), "p_action": acc,
                            "note_nll": float(note_nll)})  # fmt: skip
            print(f"epoch {epoch} batch {step + 1}/{steps} nll {float(nll):.3f} kl {float(kl):.4f} mean P(action) "
                  f"{acc:.2f} note nll {float(note_nll):.3f} [{time.time() - t0:.0f} s]", flush=True)  # fmt: skip
    policy.model.eval()
    args.out.mkdir(parents=True, exist_ok=True)
    policy.save_adapter(str(args.out))
    _to_half(args.out / "adapter_model.safetensors")
    meta = {
        "base_model": EMBEDDED_MODEL,
        "trained_on": f"trap {' and '.join(args.splits)} variations of every search-family task (never test 36-47, never the fixed family): "
        + ("single observations, each answered with its true observation note (a note writer: it is not "
           "trained to act)" if args.reflect_only and args.context == "observation" else
           "the reflection prompt only, answered with a true note about the episode (a note writer: it is not "
           "trained to act)" if args.reflect_only else
           "note-following turns (likelihood; notes shown from their plan's first unplayed step, as the rollout "
           "shows them)" if args.recipe == "shipped" else
           "note-following turns (likelihood; notes in the curated template, record lines and random wordings "
           "from scripts/note_wordings.py, plans shown whole or cut by remaining_plan)")
        + (f", the reflection prompt answered with a true note about the episode ({args.reflect:g} per "
           "note-following conversation)" if args.reflect and not args.reflect_only else "")
        + (f", plus trap-water-plant train layouts {return_trips} for the walk back from the can's room "
           "(--return-trips)" if return_trips else "")
        + (f", plus trap-water-plant train layouts {stay_trips} whose can sits in the flower's room "
           "(--stay-trips)" if stay_trips else "")
        + (", the moves from the can's pick-up to the first focus weighted like the focus (--return-weight)"
           if args.return_weight and not args.reflect_only else "")
        + (f", {args.distract:g} of the informative notes with a true sentence about another object beside them "
           "(--distract)" if args.distract and not args.reflect_only else "")
        + (f", {args.negation:g} of the note-following conversations with a note that only rules rooms out, "
           "entering one of them first (--negation)" if args.negation and not args.reflect_only else "")
        + ("" if args.reflect_only else " and note-free random walks (KL to "
           + ("the --init adapter as loaded" if args.anchor_ref == "init" else "the base model")
           + (", in every batch" if args.anchor_spread else "") + ")")
        + (f"; fine-tuned from {args.init} (--init)" if args.init else ""),
        "envs": ["trap"], "tasks": sorted({t for t, _ in layouts}),
        "seen": merged_seen(own_seen, args.init),  # read by tests/test_warm_start.py (unseen adaptation tasks)
        "lineage": lineage(f"{args.out.name}: trap layouts {merged_seen(own_seen, None)}", args.init),
        "recipe": args.recipe, "splits": args.splits, "template_share": args.template, "reflect": args.reflect,
        "reflect_only": args.reflect_only, "pass_by": args.pass_by, "answer_form": args.answer_form,
        "room_questions": args.room_questions, "verdict_weight": args.verdict_weight, "context": args.context,
        "last_layers": args.last_layers, "anchor_weight": args.anchor_weight, "anchor_spread": args.anchor_spread, "anchor_ref": args.anchor_ref, "focus_weight": args.focus_weight, "plan_share": args.plan_share, "can_weight": args.can_weight, "plant_per_layout": args.plant_per_layout, "focus_first": args.focus_first, "observed": args.observed, "return_trips": return_trips, "stay_trips": stay_trips, "return_weight": args.return_weight, "negation": args.negation, "distract": args.distract, "init": str(args.init) if args.init else None, "epochs": args.epochs, "per_layout": args.per_layout, "batch": args.batch, "lr": args.lr, "seed": args.seed,
        "seconds": round(time.time() - t0, 1), "history": history,
    }  # fmt: skip
    (args.out / "warmstart.json").write_text(json.dumps(meta, indent=1))
    card = WRITER_CARD if args.reflect_only else CARD
    (args.out / "README.md").write_text(card.format(**meta))  # replaces PEFT's empty model-card template
    print(f"wrote {args.out} in {time.time() - t0:.0f} s")
    return 0


CARD = """# Warm-start LoRA adapter for {base_model}

Built by `scripts/make_warmstart.py` (seed {seed}, {epochs} epochs, lr {lr}, LoRA on the last {last_layers}
layers, note-free KL anchor weight {anchor_weight}, {seconds} s on this machine's CPU).
Trained on: {trained_on}. It teaches the embedded model one skill the paper's 7B model already had: to take
the action its notes imply, among the step's valid actions. A run starts from it with
`--policy.warm-start <this folder>` (`auto` is the default named in empo2_studio/config.py,
DEFAULT_WARM_START; `none` is an untrained LoRA); `warmstart.json` holds the loss curve.
"""


WRITER_CARD = """# Note-writer LoRA adapter for {base_model}

Built by `scripts/make_warmstart.py --reflect-only` (seed {seed}, {epochs} epochs, lr {lr}, LoRA on the last
{last_layers} layers, verdict weight {verdict_weight}, context {context}, {seconds} s on this machine's CPU).
Trained on: {trained_on}. It writes the tips while another adapter acts; it is never trained further.
A run uses it with `--memory.note-writer <this folder>` (the default, `auto`, is
assets/warmstart/smollm2-135m-instruct-note-writer for the embedded model); `warmstart.json` holds the loss curve.
"""


def _to_half(path: Path) -> None:
    """Store the adapter in float16 (half the size in the repo; loading casts back to float32)."""
    from safetensors.torch import load_file, save_file

    state = load_file(str(path))
    save_file({k: v.half() for k, v in state.items()}, str(path))


if __name__ == "__main__":
    raise SystemExit(main())
