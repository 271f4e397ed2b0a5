"""Train the ScienceWorld warm-start LoRA adapter: the embedded model reads a plan note in ScienceWorld.

The trap's warm start (assets/warmstart/…-route) reads notes in the trap's words. In ScienceWorld the
same adapter gives a pinned gold plan's next step 0.4–0.8 and "look around" 0.00 (power-component test
variations, compact prompt; docs/notebook/2026-12-06-scienceworld-agent.md), so a plan of ten steps is
almost never played to its end. This adapter is that adapter fine-tuned on ScienceWorld conversations:

1. note-following: the simulator's gold path of a task variation (`ScienceWorldEnv.valid_gold_path`,
   in the words of the step's valid actions) played in the compact prompt with the plan pinned as a
   note at every step, shown from its first step not yet played (`prompts.remaining_plan`), or whole
   in a share of the conversations (`--whole-share`); likelihood of every gold action under
   constrained decoding (the studio's token-level trie over the step's valid actions);
2. note-free walks of random valid actions on the same variations (no "focus on": that ends most
   tasks), held to the `--init` adapter's distribution by a KL term, so that what the agent does
   without a note stays what it was.
3. named-room conversations (`--named-room N`, `named_room_turns`): the same tasks' worlds under a task
   text that names a container and its room; an object is picked up elsewhere, taken to the named room
   and moved into the named container. No held-out sentence is among the texts: whether reading a room carries to find-*'s is
   what the dev probe asks (docs/notebook/2026-12-07-named-room-warm-start.md).

Only the train and dev variations of tasks outside `HELD_OUT_TASKS` are read: the held-out tasks are
the test bed of the Lesson, the race and adaptation, and a task named there is refused by name. The
adapter's `warmstart.json` lists every task and variation it saw (a test fails on a held-out one).

    .venv/bin/python scripts/make_sw_warmstart.py --paths /tmp/sw_paths.json   # the second adapter (~55 min on a loaded 2-core CPU)
    .venv/bin/python scripts/make_sw_warmstart.py --follow 0 --named-room 4 --variations 8 --init <the second> \
        --out <dir>                        # the shipped one: the second, fine-tuned on named-room conversations (~18 min)
    .venv/bin/python scripts/make_sw_warmstart.py --tasks power-component --variations 2 --out /tmp/sw   # a quick try
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from empo2_studio.config import EMBEDDED_MODEL, PolicyConfig  # noqa: E402
from empo2_studio.envs.scienceworld import HELD_OUT_TASKS, TASK_NAMES, ScienceWorldEnv  # noqa: E402
from empo2_studio.policy import Turn, prompts  # noqa: E402
from empo2_studio.types import RetrievedTip  # noqa: E402
from make_warmstart import _to_half  # noqa: E402
from warmstart_record import init_record, lineage, merged_seen  # noqa: E402

DEFAULT_OUT = ROOT / "assets" / "warmstart" / f"{EMBEDDED_MODEL}-scienceworld"
DEFAULT_INIT = ROOT / "assets" / "warmstart" / f"{EMBEDDED_MODEL}-route"
DEFAULT_TASKS = (
    "power-component", "power-component-renewable-vs-nonrenewable-energy", "test-conductivity",
    "test-conductivity-of-unknown-substances", "chemistry-mix", "chemistry-mix-paint-secondary-color",
    "chemistry-mix-paint-tertiary-color",
)
"""Tasks outside HELD_OUT_TASKS whose mapped gold path wins within 30 steps under "easy" (measured over
three train, dev and test variations each: docs/notebook/2026-12-06-scienceworld-agent.md)."""
PLAN_OPENINGS = ("To finish the task: ", "Plan that worked: ", "Do this: ", "Steps: ")
"""How a training note opens its plan; the plan itself is joined by `prompts.PLAN_SEPARATOR`."""


def check_tasks(tasks: list[str]) -> None:
    """Raise ValueError naming a held-out or unknown task (the warm start never reads either)."""
    held = [t for t in tasks if t in HELD_OUT_TASKS]
    if held:
        raise ValueError(f"held-out task(s) {', '.join(held)} may not enter a warm start's data; "
                         f"held out: {', '.join(HELD_OUT_TASKS)}")
    unknown = [t for t in tasks if t not in TASK_NAMES]
    if unknown:
        raise ValueError(f"unknown ScienceWorld task(s) {', '.join(unknown)}; valid tasks: {', '.join(TASK_NAMES)}")


def gold_turns(env: ScienceWorldEnv, task: str, variation: int, actions: list[str], note: str | None,
               cut: bool) -> list[tuple[str, str, tuple[str, ...]]]:
    """(user message, gold action, valid actions) for each step of `actions` played from reset, in the
    compact prompt, `note` pinned at every step (cut by `remaining_plan` when `cut`); stops when the
    episode ends."""
    obs = env.reset(task, variation)
    turns, played = [], []
    for k, action in enumerate(actions):
        user = (prompts.first_user_message("scienceworld", obs, ()) if k == 0
                else prompts.step_user_message(obs, "scienceworld"))
        if note is not None:
            tip = RetrievedTip("note", note, 100.0, 1.0, True)
            tip = prompts.with_plan_progress(tip, played) if cut else tip
            user = prompts.with_tips(user, [tip], prompts.prompt_style("scienceworld"))
        turns.append((user, action, obs.valid_actions))
        result = env.step(action)
        played.append(action)
        obs = result.observation
        if result.done:
            break
    return turns


def teleport_path(env: ScienceWorldEnv, task: str, variation: int, actions: list[str]) -> list[str] | None:
    """`actions` with each run of "go to …" moves replaced by "teleport to <the run's last room>" and a
    "look around" (unless the path looks around next): the same plan as an agent with the "easy"
    simplification's teleport plays it ("go to hallway, go to kitchen, focus on x" becomes "teleport
    to kitchen, look around, focus on x"). Replayed from reset; None when the path has no move, a
    rewritten step is not in the step's valid list, or the path does not win (score 100) by its end.
    """
    out, k = [], 0
    while k < len(actions):
        if not actions[k].startswith("go to "):
            out.append(actions[k])
            k += 1
            continue
        j = k
        while j < len(actions) and actions[j].startswith("go to "):
            j += 1
        out.append("teleport to " + actions[j - 1][len("go to "):].removeprefix("door to "))
        if j == len(actions) or actions[j] != "look around":
            out.append("look around")
        k = j
    if out == actions:
        return None
    obs = env.reset(task, variation)
    for i, action in enumerate(out):
        if action not in obs.valid_actions:
            return None
        result = env.step(action)
        obs = result.observation
        if result.done:
            return out[: i + 1] if result.won else None
    return None


NAMED_ROOM_TASKS = (
    "Your task is to pick up the {obj}. Then, put it in the {box} in the {room}.",
    "Your task is to move the {obj} to the {box}, which is in the {room}.",
    "Your task is to take the {obj} to the {room} and place it in the {box} there.",
    "Your task is to find the {obj}. First, focus on it. Then, bring it to the {box} in the {room}.",
    "Your task is to collect the {obj}. The {box} you must put it in is located in the {room}.",
    "Your task is to focus on the {obj}, then carry it to the {room} and drop it in the {box}.",
    "Your task is to get the {obj} into the {box}. That box stands in the {room}.",
    "Your task is to find the {obj} and deliver it to the {room}, to the {box}.",
    "Your task is to move the {obj} to the {box} in the {room}.",
    "Your task is to put the {obj} into the {box} in the {room}.",
    "Your task is to place the {obj} in the {box} in the {room}.",
    "Your task is to carry the {obj} to the {box} in the {room}.",
    "Your task is to pick up the {obj}. Then, take it to the {box} in the {room}.",
    "Your task is to locate the {obj}. Then, drop it into the {box} in the {room}.",
    "Your task is to focus on the {obj}. Then, transfer it to the {box} in the {room}.",
    "Your task is to get the {obj}. After that, move the {obj} to the {box} in the {room}.",
    "Your task is to find the {obj}. Once you have it, go to the {room} and put it in the {box}.",
    "Your task is to bring the {obj} to the {room}. Put it in the {box} there.",
    "Your task is to pick up the {obj} and deliver it to the {box} in the {room}.",
    "Your task is to store the {obj} in the {box} in the {room}.",
    "Your task is to fetch the {obj}. The {box} is in the {room}; put the {obj} in it.",
    "Your task is to find the {obj}. First, focus on it. Then, place it in the {box} in the {room}.",
    "Your task is to focus on the {obj}. Next, put it in the {box}. The {box} is in the {room}.",
    "Your task is to collect the {obj}, then move it into the {box} located in the {room}.",
)
"""Task texts of the named-room turns (`named_room_turns`). None is a held-out task's sentence ("… Then,
move it to the red box in the bedroom." is find-*'s): the skill is reading a room from a task text, and
whether it carries to the held-out sentence is what the dev probe measures."""
NOT_PICKED = ("outside", "greenhouse")
"""Rooms a named-room turn never picks its object in: their animals and plants are what the held-out
find-* and lifespan tasks ask about, and this data teaches rooms, not which thing is alive."""


def named_room_turns(env: ScienceWorldEnv, task: str, variation: int, rng: random.Random
                     ) -> tuple[list[tuple[str, str, tuple[str, ...]]], int] | None:
    """A conversation that takes an object to the container and room its task text names, and the
    index of its first trained turn.

    The simulator's own states of `task`'s world, under a task text of `NAMED_ROOM_TASKS` that names an
    object of the room the agent goes to first and a container of another room: "teleport to <room 1>",
    "look around", then (trained) "focus on <object>", "pick up <object>", "teleport to <the named
    room>", "move <object> to <the named container>". The focus is shown, not played (it would end the
    simulator's own task): its observation is the simulator's wording, "You focus on the <object>.".
    The move is trained too, or the agent learns to write the task's room after every "to" ("move dove
    to kitchen" instead of "… to red box": the first adapters, docs/notebook/2026-12-07-named-room-warm-start.md).
    None when the world offers no such object or container.
    """
    obs = env.reset(task, variation)
    rooms = sorted(a.removeprefix("teleport to ") for a in obs.valid_actions if a.startswith("teleport to "))
    first = rng.choice([r for r in rooms if r not in NOT_PICKED])
    start = obs
    seen = env.step(f"teleport to {first}").observation
    looked = env.step("look around").observation
    objects = [a.removeprefix("pick up ") for a in looked.valid_actions if a.startswith("pick up ")
               and f"focus on {a.removeprefix('pick up ')}" in looked.valid_actions and "door" not in a]
    if not objects:
        return None
    obj = rng.choice(objects)
    named = rng.choice([r for r in rooms if r != first])
    focused = replace(looked, text=f"You focus on the {obj}.")
    picked = env.step(f"pick up {obj}").observation
    if f"teleport to {named}" not in picked.valid_actions:
        return None
    arrived = env.step(f"teleport to {named}").observation
    move = f"move {obj} to "
    boxes = [a.removeprefix(move) for a in arrived.valid_actions if a.startswith(move)]
    boxes = [b for b in boxes if b not in rooms and b not in (obj, "agent", "inventory", "air") and "door" not in b]
    if not boxes:
        return None
    box = rng.choice(boxes)
    text = rng.choice(NAMED_ROOM_TASKS).format(obj=obj, box=box, room=named)
    first_message = prompts.first_user_message("scienceworld", replace(start, task_description=text), ())
    states = [(start, f"teleport to {first}"), (seen, "look around"), (looked, f"focus on {obj}"),
              (focused, f"pick up {obj}"), (picked, f"teleport to {named}"), (arrived, move + box)]
    turns = [(first_message if k == 0 else prompts.step_user_message(state, "scienceworld"), action,
              looked.valid_actions if state is focused else state.valid_actions)
             for k, (state, action) in enumerate(states)]
    return turns, 2


def walk_turns(env: ScienceWorldEnv, task: str, variation: int, rng: random.Random, steps: int = 6
               ) -> list[tuple[str, str, tuple[str, ...]]]:
    """A note-free walk of `steps` random valid actions that are not "focus on …" (compact prompt)."""
    obs = env.reset(task, variation)
    turns = []
    for k in range(steps):
        choices = [a for a in obs.valid_actions if not a.startswith("focus on")]
        if not choices:
            break
        action = rng.choice(choices)
        user = (prompts.first_user_message("scienceworld", obs, ()) if k == 0
                else prompts.step_user_message(obs, "scienceworld"))
        turns.append((user, action, obs.valid_actions))
        result = env.step(action)
        obs = result.observation
        if result.done:
            break
    return turns


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS))
    ap.add_argument("--splits", nargs="+", choices=["train", "dev"], default=["train", "dev"])
    ap.add_argument("--variations", type=int, default=3, help="variations per task and split (the first N)")
    ap.add_argument("--teleport-share", type=float, default=0.0,
                    help="share of the variations whose plan teleports between rooms (`teleport_path`) instead of walking")
    ap.add_argument("--whole-share", type=float, default=0.25, help="share of the notes shown whole at every step")
    ap.add_argument("--named-room", type=int, default=0, metavar="N",
                    help="named-room conversations per variation (`named_room_turns`), beside the note-following ones")
    ap.add_argument("--follow", type=int, default=1, metavar="N",
                    help="note-following conversations per variation (0: named-room turns and walks only)")
    ap.add_argument("--follow-variations", type=int, default=None, metavar="N",
                    help="note-following conversations only on the first N variations per task and split (default: "
                         "--variations); the named-room ones and the walks use all of them")
    ap.add_argument("--init", type=Path, default=DEFAULT_INIT, help="the adapter to fine-tune (its KL anchor)")
    ap.add_argument("--anchor-weight", type=float, default=1.0)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--paths", type=Path, default=None,
                    help="a JSON file of mapped gold paths ({task: {variation: [actions]}}): read when it exists, "
                         "else written after they are computed (mapping replays take most of the data's time)")
    args = ap.parse_args(argv)
    try:
        check_tasks(args.tasks)
    except ValueError as exc:
        ap.error(str(exc))
    if args.variations < 1 or args.epochs < 1 or args.batch < 1:
        ap.error(f"--variations, --epochs and --batch must be ≥ 1, got {args.variations}, {args.epochs}, {args.batch}")
    if args.follow_variations is None:
        args.follow_variations = args.variations
    if not 1 <= args.follow_variations <= args.variations:
        ap.error(f"--follow-variations must be in 1…--variations ({args.variations}), got {args.follow_variations}")
    if args.follow < 0 or args.named_room < 0 or args.follow + args.named_room == 0:
        ap.error(f"--follow and --named-room must be ≥ 0 and not both 0, got {args.follow}, {args.named_room}")
    for name in ("whole_share", "teleport_share"):
        if not 0 <= getattr(args, name) <= 1:
            ap.error(f"--{name.replace('_', '-')} must be a share in [0, 1], got {getattr(args, name)}")
    if not (args.init / "adapter_config.json").is_file():
        ap.error(f"--init {str(args.init)!r} is not an adapter directory (no adapter_config.json)")
    try:
        init_record(args.init)  # an init that cannot say what it saw is refused before the JVMs start
    except ValueError as exc:
        ap.error(str(exc))

    import torch

    from empo2_studio.policy.loading import load_policy

    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    t0 = time.time()
    env = ScienceWorldEnv()
    seen: dict[str, list[int]] = {}
    follow, walks = [], []  # follow: (turns, index of the first trained turn)
    teleported = named = 0
    cached = json.loads(args.paths.read_text()) if args.paths and args.paths.is_file() else {}
    paths: dict[str, dict[str, list[str]]] = {}
    for task in args.tasks:
        for split in args.splits:
            for k, v in enumerate(env.variations(task, split)[: args.variations]):
                for _ in range(args.named_room):
                    conv = named_room_turns(env, task, v, rng)
                    named += conv is not None
                    follow += [conv] if conv else []
                seen.setdefault(task, []).append(v)
                walks.append(walk_turns(env, task, v, rng))
                if not args.follow or k >= args.follow_variations:
                    continue
                if str(v) in cached.get(task, {}):
                    actions, score = cached[task][str(v)], 100.0
                else:
                    actions, score = env.valid_gold_path(task, v)
                if score < 100:  # a path that does not win teaches nothing to follow
                    print(f"  skip {task} {v}: its mapped gold path reaches {score:.0f}", flush=True)
                    continue
                paths.setdefault(task, {})[str(v)] = actions
                for _ in range(args.follow):
                    whole = rng.random() < args.whole_share
                    plan = actions
                    if rng.random() < args.teleport_share:
                        plan = teleport_path(env, task, v, actions) or actions
                        teleported += plan is not actions
                    note = prompts.plan_note(plan, rng.choice(PLAN_OPENINGS))
                    follow.append((gold_turns(env, task, v, plan, note, cut=not whole), 0))
        print(f"{task}: {len(seen.get(task, []))} variations [{time.time() - t0:.0f} s]", flush=True)
    env.close()
    if args.paths and not cached and args.follow:
        args.paths.write_text(json.dumps(paths, indent=1))

    policy = load_policy(PolicyConfig(quantization="none", warm_start="none", lora_layers=12))
    policy.load_adapter(str(args.init))
    fmt = policy.chat_format

    def as_turns(conv):
        return [Turn(u, fmt.encode(a) + (fmt.eot_id,), valid) for u, a, valid in conv]

    anchor_convs = [as_turns(w) for w in walks if w]
    with torch.no_grad():
        reference = [policy.allowed_logprobs(c) for c in anchor_convs]
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=args.lr, weight_decay=0.0)
    history: list[dict[str, float]] = []
    policy.model.train()
    for epoch in range(args.epochs):
        order = list(range(len(follow)))
        rng.shuffle(order)
        steps = -(-len(order) // args.batch)
        for step in range(steps):
            chosen = [follow[i] for i in order[step * args.batch : (step + 1) * args.batch]]
            logps = policy.score([as_turns(turns) for turns, _ in chosen])
            picked = [lp.sum() for conv, (_, first) in zip(logps, chosen) for lp in conv[first:]]
            nll = -torch.stack(picked).mean()
            kls = []
            for c in range(step, len(anchor_convs), steps):  # every walk once per epoch, spread over the batches
                for ref, cur in zip(reference[c], policy.allowed_logprobs(anchor_convs[c]), strict=True):
                    kls.append((ref.exp() * (ref - cur)).sum())
            kl = torch.stack(kls).mean() if kls else torch.zeros(())
            loss = nll + args.anchor_weight * kl
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(), 1.0)
            opt.step()
            p_action = float(torch.stack(picked).exp().mean())
            history.append({"epoch": epoch, "step": len(history), "loss": float(nll), "kl": float(kl), "p_action": p_action})
            print(f"epoch {epoch} batch {step + 1}/{steps} nll {float(nll):.3f} kl {float(kl):.4f} "
                  f"mean P(action) {p_action:.2f} [{time.time() - t0:.0f} s]", flush=True)
    policy.model.eval()
    args.out.mkdir(parents=True, exist_ok=True)
    policy.save_adapter(str(args.out))
    _to_half(args.out / "adapter_model.safetensors")
    own = {task: sorted(vs) for task, vs in seen.items()}
    seen = merged_seen(own, args.init)  # what the init chain saw, this one saw too
    meta = {
        "base_model": EMBEDDED_MODEL,
        "trained_on": trained_on(len(follow) - named, named),
        "envs": list(dict.fromkeys(["scienceworld"] + init_record(args.init).get("envs", []))),
        "tasks": {t: vs for t, vs in seen.items() if not t.startswith("trap-")}, "seen": seen,
        "lineage": lineage(f"{args.out.name}: ScienceWorld variations {own}", args.init),
        "splits": args.splits, "prompt_style": prompts.prompt_style("scienceworld"),
        "init": str(args.init.resolve().relative_to(ROOT)) if args.init.resolve().is_relative_to(ROOT) else str(args.init),
        "variations": args.variations, "follow": args.follow, "follow_variations": args.follow_variations, "named_room": args.named_room, "named": named, "whole_share": args.whole_share,
        "teleport_share": args.teleport_share, "teleported": teleported,
        "anchor_weight": args.anchor_weight, "epochs": args.epochs, "batch": args.batch, "lr": args.lr,
        "seed": args.seed, "conversations": len(follow), "walks": len(anchor_convs),
        "seconds": round(time.time() - t0, 1), "history": history,
    }  # fmt: skip
    (args.out / "warmstart.json").write_text(json.dumps(meta, indent=1))
    (args.out / "README.md").write_text(CARD.format(**meta, n_tasks=len(meta["tasks"])))
    print(f"wrote {args.out} in {time.time() - t0:.0f} s")
    return 0


def trained_on(followed: int, named: int) -> str:
    """What `warmstart.json` and the card say the adapter trained on: only the kinds of data it had."""
    parts = ["note-free random walks held to the --init adapter (KL)"]
    if followed:
        parts.insert(0, "the mapped gold path played with its plan pinned as a note (likelihood, constrained decoding, "
                        "compact prompt; a share of the plans, teleport_share, rewritten to teleport between rooms)")
    if named:
        parts.append("named-room conversations: these tasks' own states under task texts of NAMED_ROOM_TASKS that "
                     "name a container and its room, the object taken there (likelihood of the focus, pick-up, "
                     "teleport and move turns)")
    return "ScienceWorld train/dev variations of the tasks below (never a held-out task): " + "; ".join(parts)


CARD = """# ScienceWorld warm-start LoRA adapter for {base_model}

Built by `scripts/make_sw_warmstart.py` (seed {seed}, {epochs} epoch(s), lr {lr}, fine-tuned from {init},
{conversations} conversations ({named} of them named-room ones) and {walks} note-free walks on {n_tasks} tasks, {seconds} s on
this machine's CPU). Trained on: {trained_on}. Every task and variation it saw is listed in `warmstart.json`
("tasks"); none of ScienceWorld's held-out tasks (`envs.scienceworld.HELD_OUT_TASKS`) is among them.
"""


if __name__ == "__main__":
    raise SystemExit(main())
