"""The Lesson on ScienceWorld's find-animal, measured stage by stage (issue 47, bar 2).

Per seed: a fresh ScienceWorld session from the adapter a ScienceWorld session starts from, and the
studio's own `Lesson` on it: 1 naive episodes on the lesson's train variations, 2 the pre-filled tip
(`lesson.scienceworld.curated_tip`) or a held-out wording of it (`--wording N`, from
benchmarks/data/heldout_sw_tips.json, a file no training code reads), 3 episodes with the tip, 4 Distill
now, 5 naive episodes again; and naive success on test variations nobody trained on, before the lesson
and after it (the point of EMPO²: a lesson about where animals live carries to every variation).
find-animal is held out from every shipped adapter (`envs.scienceworld.HELD_OUT_TASKS`).

Part "tips" scores the tip step alone: on the lesson's variations, the probability of each of the tip's
actions along its plan (token-level, as sampled), for the pre-filled tip and each held-out wording, and
with no note. Part "speed" times one training iteration per update mode (group 8, step limit 10) with
its time split (issue 47, bar 5). Part "wrong" plays memory episodes with a tip that names the wrong
place (bad input: followed or ignored?). Part "eval" scores distilled checkpoints of earlier lesson runs
on a split (a lesson chosen on dev, scored once on test with the checkpoints it was chosen by). Part
"room" asks, with no note, whether the agent takes the animal to the room the task text names
(`_sw_room`, dev variations in five box rooms).

    .venv/bin/python benchmarks/bench_sw_lesson.py --parts tips
    .venv/bin/python benchmarks/bench_sw_lesson.py --parts lesson --seeds 0 1 2 --result sw-lesson

Results go to stdout and `<sessions root>/bench_sw_lesson-<time>/sw_lesson.md`; `--result NAME` also
writes them to benchmarks/results/NAME.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from empo2_studio.config import WARM_START_DIR, EnvConfig, MemoryConfig, RolloutConfig, RunConfig, TrainConfig  # noqa: E402
from empo2_studio.envs.scienceworld import ScienceWorldEnv  # noqa: E402
from empo2_studio.lesson import Lesson, LessonSettings  # noqa: E402
from empo2_studio.lesson.scienceworld import (  # noqa: E402
    LESSON_EPISODES, LESSON_STEP_LIMIT, LESSON_VARIATIONS, TIP_OPENING, curated_tip, tip_plan,
)
from empo2_studio.memory import make_embedder  # noqa: E402
from empo2_studio.policy import load_policy, prompts  # noqa: E402
from empo2_studio.rollout import play_group, seed_policy  # noqa: E402
from empo2_studio.sessions import Session, auto_warm_start, default_sessions_root, fresh_dir  # noqa: E402
from empo2_studio.trainer import Trainer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import add_result_option, write_result  # noqa: E402
from _sw_room import part_room  # noqa: E402
from bench_lesson import restore_weights  # noqa: E402
from bench_scienceworld import path_turns, plan_probabilities  # noqa: E402

TASK = "find-animal"
WORDINGS = Path(__file__).resolve().parent / "data" / "heldout_sw_tips.json"
"""Teachers' own wordings of the lesson's tip, written apart from every training file: "{animal}",
"{box}" and "{room}" are filled per variation."""


def load_wordings() -> list[str]:
    return json.loads(WORDINGS.read_text())["find-animal"]


def tip_for(env: ScienceWorldEnv, variation: int, wording: int | None) -> tuple[str, list[str]]:
    """(tip text, its plan) for `variation`: the pre-filled tip, or held-out wording `wording` filled in."""
    text = curated_tip(TASK, variation, env)
    plan = text[len(TIP_OPENING):].rstrip(".").split(prompts.PLAN_SEPARATOR)
    if wording is None:
        return text, plan
    animal = plan[2][len("focus on "):]
    box = plan[-1].split(" to ", 1)[1]
    return load_wordings()[wording].format(animal=animal, box=box, room=plan[4][len("teleport to "):]), plan


def part_tips(args, policy, env) -> tuple[list[str], dict]:
    kinds = ["none", "pre-filled"]
    if not args.skip_wordings:  # held-out wordings: scored for the shipped adapter only (docs/benchmarks/README.md)
        kinds += [f"wording {i}" for i in range(len(load_wordings()))]
    lines = [f"### P(each action of the tip's plan), token-level, T = 1, find-animal variations {args.variations}", "",
             "| tip | " + " | ".join(f"step {k + 1}" for k in range(6)) + " | P(whole plan) |",
             "|---|" + "---|" * 7]  # fmt: skip
    out: dict = {}
    for kind in kinds:
        wording = int(kind.split()[1]) if kind.startswith("wording") else None
        tips = [tip_for(env, v, wording) for v in args.variations]
        out[kind] = plan_probabilities(env, policy, TASK, [(v, plan, None if kind == "none" else text)
                                                           for v, (text, plan) in zip(args.variations, tips)])  # fmt: skip
        lines.append(f"| {kind} | " + " | ".join(f"{p:.2f}" for p in out[kind]["mean"]) + f" | {out[kind]['whole']:.2f} |")
        print(lines[-1], flush=True)
    return lines, out


def naive_episodes(policy, envs, variations: list[int], seed: int, temperature: float, split: str) -> list:
    """Naive episodes, `len(envs)` per variation, group seeds `seed * 1000 + v` (the same before and
    after a lesson, and for a checkpoint scored again by part eval)."""
    episodes = []
    for v in variations:
        seed_policy(policy, seed * 1000 + v)
        episodes += play_group(envs, policy, None, task=TASK, variation=v, split=split, rollout_mode="naive",
                               update_mode=None, temperature=temperature, seed=seed * 1000 + v, group_id="")  # fmt: skip
    return episodes


def naive_rate(trainer, variations: list[int], episodes: int, seed: int, temperature: float, split: str) -> float:
    eps = naive_episodes(trainer.policy, trainer.envs(episodes), variations, seed, temperature, split)
    return sum(e.won for e in eps) / len(eps)


def eval_variations(args, env) -> tuple[list[int], str]:
    """The variations parts lesson and eval score naive episodes on (every `--eval-stride`th of
    `--eval-split`, the first `--test-variations`), and how a table names them."""
    vs = list(env.variations(TASK, args.eval_split)[:: args.eval_stride][: args.test_variations])
    return vs, f"{vs[0]}–{vs[-1]}" if args.eval_stride == 1 else ", ".join(map(str, vs))


def part_lesson(args, policy, env, root: Path, warm: list[torch.Tensor]) -> tuple[list[str], dict]:
    test_vs, evaluated = eval_variations(args, env)
    rows: dict[str, list[float]] = {}
    for seed in args.seeds:
        restore_weights(policy, warm)
        cfg = RunConfig(run_id=f"sw-lesson-seed{seed}", seed=seed,
                        env=EnvConfig(name="scienceworld", task=TASK, variations=tuple(args.variations), step_limit=args.step_limit),
                        memory=MemoryConfig(embedder="minilm", note_writer="none"),
                        rollout=RolloutConfig(group_size=args.episodes, train_temperature=args.temperature),
                        train=TrainConfig(learning_rate=args.lr, checkpoint_every=1000))  # fmt: skip
        trainer = Trainer(cfg, Session.create(root, cfg), policy=policy, embedder=args.embedder)
        t0 = time.perf_counter()
        try:
            test_before = naive_rate(trainer, test_vs, args.test_episodes, seed, args.temperature, args.eval_split)
            lesson = Lesson(trainer, LessonSettings(task=TASK, variations=tuple(args.variations), episodes=args.episodes,
                                                    distill_steps=args.distill_steps, temperature=args.temperature, seed=seed))
            tips = {v: tip_for(env, v, args.wording)[0] for v in args.variations}
            stages = {}
            for stage in ("naive", "tips", "memory", "distill", "naive_again"):
                t = time.perf_counter()
                stages[stage] = lesson.run_stage(stage, tips)
                print(f"  seed {seed} {stage}: success {stages[stage].success_rate:.2f} "
                      f"[{time.perf_counter() - t:.0f} s]", flush=True)
            lesson_seconds = sum(s.seconds for s in stages.values())
            policy.clear_cache()
            test_after = naive_rate(trainer, test_vs, args.test_episodes, seed, args.temperature, args.eval_split)
        finally:
            trainer.close()
        measured = {"naive": stages["naive"].success_rate, "memory": stages["memory"].success_rate,
                    "naive_again": stages["naive_again"].success_rate, "test_before": test_before,
                    "test_after": test_after, "lesson_seconds": lesson_seconds,
                    "seconds": time.perf_counter() - t0}  # fmt: skip
        for k, val in measured.items():
            rows.setdefault(k, []).append(val)
        print(f"  seed {seed}: " + ", ".join(f"{k} {v:.2f}" for k, v in measured.items()), flush=True)
    spread = {k: f"{statistics.fmean(v):.2f} ({min(v):.2f}–{max(v):.2f})" for k, v in rows.items()}
    tip = "the pre-filled tip" if args.wording is None else f"held-out wording {args.wording}"
    lines = [f"### The Lesson on find-animal, train variations {args.variations}, {args.episodes} episodes per variation "
             f"and stage, step limit {args.step_limit}, {args.distill_steps} distill steps, {tip}, seeds {args.seeds} "
             "(mean, min–max over seeds)", "",
             "| measure | success |", "|---|---|",
             f"| 1 · naive | {spread['naive']} |", f"| 3 · with the tip | {spread['memory']} |",
             f"| 5 · naive after distillation | {spread['naive_again']} |",
             f"| naive, {args.eval_split} variations {evaluated} ({args.test_episodes} episodes each), before | {spread['test_before']} |",
             f"| naive, {args.eval_split} variations {evaluated}, after | {spread['test_after']} |",
             "", f"Lesson stages' wall time: {spread['lesson_seconds']} s per seed."]  # fmt: skip
    return lines, rows


SPEED_PHASES = ("env", "sampling", "memory", "scoring", "backward")
"""The trainer's `time/*` metrics: the simulator, sampling (prefill + decoding), tips (retrieval and
writing), scoring the episodes for the update, and the backward pass with the optimizer step."""


def part_speed(args, policy, env, root: Path, warm: list[torch.Tensor]) -> tuple[list[str], dict]:
    """Bar 5: one training iteration per update mode (group 8, step limit 10) on the lesson's
    variations, the pre-filled tip in memory, the session's default memory settings (its note writer
    writes a tip after each episode); the time split and the prompt tokens prefilled. The pool's eight
    simulators are started first and timed apart: a session starts them once and reuses them."""
    restore_weights(policy, warm)
    cfg = RunConfig(run_id="sw-speed", env=EnvConfig(name="scienceworld", task=TASK, variations=tuple(args.variations),
                                                     step_limit=args.step_limit),
                    memory=MemoryConfig(embedder="minilm"), rollout=RolloutConfig(group_size=8),
                    train=TrainConfig(checkpoint_every=1000))  # fmt: skip
    trainer = Trainer(cfg, Session.create(root, cfg), policy=policy, embedder=args.embedder)
    fmt = policy.chat_format
    lines = [f"### Speed: find-animal, group 8, step limit {args.step_limit}, one iteration per update mode", "",
             "| update mode | total s | " + " | ".join(f"{p} s" for p in SPEED_PHASES) + " | steps | prompt tokens prefilled |",
             "|---|---|" + "---|" * len(SPEED_PHASES) + "---|---|"]  # fmt: skip
    out: dict = {}
    try:
        for v in args.variations:
            trainer.store.add_tip(TASK, v, curated_tip(TASK, v, env), score=100.0)
        t0 = time.perf_counter()  # the pool's simulators start once per session, then serve every iteration
        for sim in trainer.pool.take(cfg.rollout.group_size):
            sim.reset(TASK, args.variations[0])
        out["simulators started s"] = time.perf_counter() - t0
        print(f"({cfg.rollout.group_size} simulators started in {out['simulators started s']:.1f} s, before the clock)", flush=True)
        for mode in ("on-policy", "on-policy-with-tips", "off-policy"):
            report = trainer.step(forced_mode=mode)
            m = report.metrics
            steps = [s for ep in trainer.session.episodes(list(report.episode_ids)) for s in ep.steps]
            prefilled = sum(len(fmt.encode(s.user_message)) for s in steps)  # each turn's new tokens (KV cache)
            out[mode] = {**{f"time/{p}": m.get(f"time/{p}", 0.0) for p in SPEED_PHASES},
                         "time/iteration": m["time/iteration"], "steps": len(steps), "prefilled": prefilled}  # fmt: skip
            lines.append(f"| {mode} | {m['time/iteration']:.1f} | " + " | ".join(f"{m.get(f'time/{p}', 0):.1f}" for p in SPEED_PHASES)
                         + f" | {len(steps)} | {prefilled} |")  # fmt: skip
            print(lines[-1], flush=True)
    finally:
        trainer.close()
    return lines, out


def part_eval(args, policy, env, root: Path, warm: list[torch.Tensor]) -> tuple[list[str], dict]:
    """Naive success of distilled checkpoints (`--checkpoints`, one per seed of `--seeds`, e.g. the
    adapters a `--parts lesson` run saved) on `--eval-split`, as part lesson scores its own after the
    lesson (`naive_rate`'s seeds and episodes): a lesson chosen on dev scores the very checkpoints it
    was chosen by on test, without playing the lesson again."""
    test_vs, evaluated = eval_variations(args, env)
    envs = [ScienceWorldEnv(step_limit=args.step_limit) for _ in range(args.test_episodes)]
    rows: dict[str, list[float]] = {"success": [], "found": [], "score": []}
    try:
        for seed, ckpt in zip(args.seeds, args.checkpoints):
            distilled = load_policy(dataclasses.replace(RunConfig().policy, adapter=str(ckpt)))
            eps = naive_episodes(distilled, envs, test_vs, seed, args.temperature, args.eval_split)
            # a wrong focus ends the episode at −100, so a focus with a score ≥ 0 found an animal
            found = [any(st.action.startswith("focus on ") for st in e.steps) and e.score >= 0 for e in eps]
            for key, values in (("success", [e.won for e in eps]), ("found", found), ("score", [e.score for e in eps])):
                rows[key].append(statistics.fmean(values))
            print(f"  seed {seed} ({ckpt}): " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in rows.items()), flush=True)
            del distilled
    finally:
        for e in envs:
            e.close()
    lines = [f"### Naive episodes of distilled checkpoints, {args.eval_split} variations {evaluated}, "
             f"{args.test_episodes} episodes each, T = {args.temperature}", "",
             "| seed | success | focused on an animal | mean score |", "|---|---|---|---|"]  # fmt: skip
    lines += [f"| {s} | {a:.2f} | {b:.2f} | {c:.1f} |" for s, a, b, c in zip(args.seeds, *rows.values())]
    lines.append("| mean | " + " | ".join(f"{statistics.fmean(v):.2f}" for v in rows.values()) + " |")
    lines += ["", "Checkpoints: " + ", ".join(str(c) for c in args.checkpoints)]
    return lines, {"variations": test_vs, "checkpoints": [str(c) for c in args.checkpoints], **rows}


WRONG_ROOM = "greenhouse"
"""The room a wrong tip sends the agent to: a room of every find-animal variation that holds plants, never
an animal (every variation keeps its animals outside)."""


def part_wrong(args, policy, env, root: Path, warm: list[torch.Tensor]) -> tuple[list[str], dict]:
    """Bad input: a teacher's tip that names the wrong place ("teleport to greenhouse" where the
    pre-filled tip says outside, the rest word for word), played as memory episodes on the lesson's
    variations with the shipped weights: is it followed or ignored?"""
    restore_weights(policy, warm)
    cfg = RunConfig(run_id="sw-wrong", env=EnvConfig(name="scienceworld", task=TASK, variations=tuple(args.variations),
                                                     step_limit=args.step_limit),
                    memory=MemoryConfig(embedder="minilm", note_writer="none"),
                    rollout=RolloutConfig(group_size=args.episodes))  # fmt: skip
    trainer = Trainer(cfg, Session.create(root, cfg), policy=policy, embedder=args.embedder)
    wrong = f"teleport to {WRONG_ROOM}"
    counts = {"first action = teleport to the wrong room": 0, "ever entered it": 0,
              "first action = teleport to outside": 0, "success": 0}  # fmt: skip
    n = 0
    try:
        for v in args.variations:
            tip = curated_tip(TASK, v, env).replace("teleport to outside", wrong, 1)
            trainer.store.add_tip(TASK, v, tip, score=100.0)
            for seed in args.seeds:
                seed_policy(policy, seed * 1000 + v)
                eps = play_group(trainer.envs(args.episodes), policy, trainer.store, task=TASK, variation=v, split="train",
                                 rollout_mode="memory", update_mode=None, temperature=args.temperature,
                                 seed=seed * 1000 + v, group_id="")  # fmt: skip
                for e in eps:
                    actions = [st.action for st in e.steps]
                    n += 1
                    counts["first action = teleport to the wrong room"] += actions[:1] == [wrong]
                    counts["ever entered it"] += wrong in actions
                    counts["first action = teleport to outside"] += actions[:1] == ["teleport to outside"]
                    counts["success"] += e.won
    finally:
        trainer.close()
    rates = {k: c / n for k, c in counts.items()}
    lines = [f"### A tip that names the wrong place ({wrong!r} for 'teleport to outside'), memory episodes, "
             f"variations {args.variations}, seeds {args.seeds}, {args.episodes} episodes each ({n} in all), T = {args.temperature}",
             "", "| " + " | ".join(counts) + " |", "|" + "---|" * len(counts),
             "| " + " | ".join(f"{r:.2f}" for r in rates.values()) + " |"]  # fmt: skip
    print("\n".join(lines), flush=True)
    return lines, {"episodes": n, **rates}


PARTS = ("tips", "lesson", "speed", "wrong", "eval", "room")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", nargs="+", default=["tips", "lesson", "speed", "wrong"], choices=PARTS)
    ap.add_argument("--checkpoints", nargs="+", type=Path, default=[], help="part eval: one adapter folder per seed")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--variations", type=int, nargs="+", default=list(LESSON_VARIATIONS),
                    help="the lesson's train variations (default: the Lesson tab's)")
    ap.add_argument("--episodes", type=int, default=LESSON_EPISODES, help="episodes per variation and playing stage")
    ap.add_argument("--distill-steps", type=int, default=LessonSettings().distill_steps)
    ap.add_argument("--lr", type=float, default=None, help="distillation learning rate (default: the Lesson tab's)")
    ap.add_argument("--step-limit", type=int, default=LESSON_STEP_LIMIT)
    ap.add_argument("--test-variations", type=int, default=10, help="the first N variations of --eval-split")
    ap.add_argument("--eval-split", default="test", choices=["test", "dev"],
                    help="where naive success is measured before and after (dev: to choose lesson settings)")
    ap.add_argument("--eval-stride", type=int, default=1,
                    help="every Nth variation of --eval-split (7 on dev: all five box rooms and three animal blocks)")
    ap.add_argument("--test-episodes", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--skip-wordings", action="store_true",
                    help="part tips: no note and the pre-filled tip only (another adapter's reading, held-out wordings untouched)")
    ap.add_argument("--wording", type=int, default=None, metavar="N", help="the lesson's tip in held-out wording N")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warm-start", default=str(WARM_START_DIR / auto_warm_start("scienceworld")))
    ap.add_argument("--root", type=Path, default=None)
    add_result_option(ap)
    args = ap.parse_args(argv)
    env = ScienceWorldEnv(step_limit=args.step_limit)
    for v in args.variations:
        env.check_variation(TASK, v)
        if v not in env.variations(TASK, "train"):
            ap.error(f"the lesson plays train variations; {v} is not one")
    if "eval" in args.parts and (len(args.checkpoints) != len(args.seeds) or not all(c.is_dir() for c in args.checkpoints)):
        ap.error(f"part eval needs one adapter folder per seed: --checkpoints {[str(c) for c in args.checkpoints]}, "
                 f"--seeds {args.seeds}")
    if args.eval_stride < 1:
        ap.error(f"--eval-stride must be ≥ 1, got {args.eval_stride}")
    n = len(load_wordings())
    if args.wording is not None and not 0 <= args.wording < n:
        ap.error(f"--wording {args.wording}: {WORDINGS.name} holds wordings 0–{n - 1}")
    if args.lr is None:
        from empo2_studio.app.lesson_tab import LESSON_LEARNING_RATE

        args.lr = LESSON_LEARNING_RATE
    torch.set_num_threads(max(1, min(args.threads, os.cpu_count() or 1)))
    _, root = fresh_dir(args.root or default_sessions_root(), time.strftime("bench_sw_lesson-%Y%m%d-%H%M%S"))
    policy = load_policy(dataclasses.replace(RunConfig().policy, warm_start=args.warm_start))
    args.embedder = make_embedder("minilm")
    warm = [p.detach().clone() for p in policy.trainable_parameters()]
    report = [f"# bench_sw_lesson ({time.strftime('%Y-%m-%d %H:%M')}, warm start {args.warm_start})", ""]
    results: dict = {}
    t0 = time.perf_counter()
    try:
        for part in args.parts:
            t = time.perf_counter()
            if part == "tips":
                lines, results[part] = part_tips(args, policy, env)
            elif part == "room":
                lines, results[part] = part_room(policy, env, path_turns)
            else:
                run = {"lesson": part_lesson, "speed": part_speed, "wrong": part_wrong, "eval": part_eval}[part]
                lines, results[part] = run(args, policy, env, root, warm)
            report += lines + ["", f"({part}: {time.perf_counter() - t:.0f} s)", ""]
            (root / "sw_lesson.md").write_text("\n".join(report))
            write_result(args.result, __file__, argv, t0, args.seeds, results, parts=list(results),
                         warm_start=args.warm_start, variations=args.variations, table="\n".join(report))
    finally:
        env.close()
    print("\n" + "\n".join(report))
    print(f"written: {root}/sw_lesson.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
