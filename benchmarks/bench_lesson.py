"""The lesson, measured: does the agent read its notes, and does distillation move them into the weights?

Trap env, embedded SmolLM2-135M with the default policy (warm-start adapter, float32 on CPU,
constrained decoding), MiniLM embedder. Every rate is over several seeds; the spread (min–max over
seeds) is printed next to the mean.

Part "notes" (issue bar 1): for every trap task, on train and on test variations, a group of naive
episodes and a group of memory episodes whose memory holds one correct curated tip
(`TrapEnv.curated_tip`, pinned at every step). Also the probability of the tip's first action at step 0,
without and with the tip in the prompt.

Part "distill" (bar 3): per seed, a fresh session from the warm start; naive and memory episodes on the
task's first two train variations, played as the Lesson plays them (no training group);
`Trainer.distill` on the memory episodes (no new rollouts), several steps; naive success on those
variations and on unseen test variations, before and after; P(tip's first action | no tip) before and
after.

Part "speed" (bar 6): one training iteration (group 8, step limit 8) per update mode and one Distill-now
over 16 episodes, time per phase, tokens/s against the CPU's measured float32 matmul rate, and peak RSS.

Run:  .venv/bin/python benchmarks/bench_lesson.py                      (all parts, ~30 min on 2 cores)
      .venv/bin/python benchmarks/bench_lesson.py --parts notes --seeds 0 1 2
Results go to stdout and `<sessions root>/bench_lesson-<time>/lesson.md` (+ lesson.json); `--result NAME` also
writes the numbers, per seed, to benchmarks/results/NAME.json (rewritten after every part).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from empo2_studio.config import (  # noqa: E402
    DEFAULT_WARM_START,
    LOW_PROB_REFS,
    NOTE_CONTEXTS,
    AlgoConfig,
    EnvConfig,
    MemoryConfig,
    RolloutConfig,
    RunConfig,
    TrainConfig,
)
from empo2_studio.envs.trap import TASKS, TrapEnv  # noqa: E402
from empo2_studio.lesson import LessonSettings  # noqa: E402
from empo2_studio.memory import TipStore, make_embedder  # noqa: E402
from empo2_studio.policy import Turn, load_policy, prompts  # noqa: E402
from empo2_studio.policy.loading import warm_start_dir  # noqa: E402
from empo2_studio.policy.note_writer import load_note_writer  # noqa: E402
from empo2_studio.rollout import play_group, seed_policy  # noqa: E402
from empo2_studio.sessions import Session, default_sessions_root, fresh_dir  # noqa: E402
from empo2_studio.trainer import Trainer  # noqa: E402
from empo2_studio.types import RetrievedTip  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import add_result_option, command_line, write_result  # noqa: E402


def restore_weights(policy, warm: list[torch.Tensor]) -> None:
    """Put the warm start's trainable weights (`warm`, cloned at load) back, so each seed starts from them."""
    with torch.no_grad():
        for p, w in zip(policy.trainable_parameters(), warm):
            p.copy_(w)
    policy.clear_cache()


def rss_gb() -> float:
    """Peak resident set size of this process so far, GiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def spread(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{statistics.fmean(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def plan_probs(policy, task: str, variation: int, with_tip: bool) -> list[float]:
    """P(each action of the tip's plan) under constrained decoding, given the plan's own history so far,
    with the tip at every step (as a curated tip is retrieved) or without it. One float per plan step."""
    env = TrapEnv()
    obs = env.reset(task, variation)
    tip = [RetrievedTip("t", env.curated_tip(task, variation), 100.0, 1.0)]
    fmt = policy.chat_format
    turns: list[Turn] = []
    history: list[str] = []
    for k, action in enumerate(env.gold_path(task, variation)):
        user = prompts.first_user_message("trap", obs, ()) if k == 0 else prompts.step_user_message(obs, "trap")
        if with_tip:  # as the rollout shows it: the plan from its first step not played yet
            user = prompts.with_tips(user, [prompts.with_plan_progress(t, history) for t in tip], "compact")
        turns.append(Turn(user, fmt.encode(action) + (fmt.eot_id,), obs.valid_actions))
        obs = env.step(action).observation
        history.append(action)
    with torch.no_grad():
        scored = policy.score([turns])[0]
    return [float(lp.sum().exp()) for lp in scored]


def first_action_prob(policy, task: str, variation: int, with_tip: bool) -> float:
    """P(the tip's first action) at step 0 under constrained decoding, with or without the tip."""
    return plan_probs(policy, task, variation, with_tip)[0]


def plan_prob_mean(policy, task: str, variations, with_tip: bool) -> tuple[float, list[list[float]]]:
    """Mean over variations and plan steps of `plan_probs`, and the per-variation lists."""
    per = [plan_probs(policy, task, v, with_tip) for v in variations]
    return statistics.fmean(p for ps in per for p in ps), per


def play(policy, store, task: str, variation: int, mode: str, n: int, seed: int, step_limit: int, temperature: float,
         group_id: str | None = None):
    """`n` episodes in lock-step; `group_id` "" plays them as the Lesson does (no training group)."""
    envs = [TrapEnv(step_limit=step_limit) for _ in range(n)]
    seed_policy(policy, seed)
    split = "test" if variation >= 36 else "train"
    return play_group(
        envs, policy, store, task=task, variation=variation, split=split, rollout_mode=mode, update_mode=None,
        temperature=temperature, seed=seed, group_id=group_id,
    )  # fmt: skip


def part_notes(args, policy, embedder, root: Path) -> tuple[str, dict]:
    """Bar 1: naive vs memory-with-a-correct-tip success, every task, train and test variations."""
    env = TrapEnv()
    out: dict = {}
    lines = [
        f"### Notes: naive vs one correct curated tip ({args.episodes} episodes × {len(args.seeds)} seeds per "
        f"variation, step limit {args.step_limit}, T = {args.temperature})",
        "",
        "| task | split (variations) | naive success | memory success | naive score | memory score | "
        "P(first action) no tip → tip |",
        "|---|---|---|---|---|---|---|",
    ]
    for task in args.tasks:
        store = TipStore.open(root / f"notes-{task}.lance", embedder, MemoryConfig())
        for split in ("train", "test"):
            variations = env.variations(task, split)[: args.variations_per_split]
            rate = {"naive": [], "memory": []}
            score = {"naive": [], "memory": []}
            probs = {"no": [], "tip": []}
            for v in variations:
                if not store.count(task, v):
                    store.add_tip(task, v, env.curated_tip(task, v), score=100.0)
                probs["no"].append(first_action_prob(policy, task, v, False))
                probs["tip"].append(first_action_prob(policy, task, v, True))
            for seed in args.seeds:
                for mode in ("naive", "memory"):
                    eps = [
                        ep for v in variations
                        for ep in play(policy, store, task, v, mode, args.episodes, seed * 1000 + v, args.step_limit, args.temperature)
                    ]  # fmt: skip
                    rate[mode].append(sum(ep.won for ep in eps) / len(eps))
                    score[mode].append(statistics.fmean(ep.score for ep in eps))
            out[f"{task}/{split}"] = {"rate": rate, "score": score, "probs": probs, "variations": list(variations)}
            lines.append(
                f"| {task} | {split} ({variations[0]}–{variations[-1]}) | {spread(rate['naive'])} | {spread(rate['memory'])} | "
                f"{statistics.fmean(score['naive']):.1f} | {statistics.fmean(score['memory']):.1f} | "
                f"{statistics.fmean(probs['no']):.2f} → {statistics.fmean(probs['tip']):.2f} |"
            )
            print(lines[-1], flush=True)
    return "\n".join(lines), out


def lesson_config(task: str, seed: int, args) -> RunConfig:
    return RunConfig(
        run_id=f"distill-{task}-seed{seed}", seed=seed,
        env=EnvConfig(name="trap", task=task, variations=tuple(args.distill_variations), step_limit=args.step_limit,
                      record_line=args.record_line),
        memory=MemoryConfig(embedder="minilm", note_writer=args.note_writer, note_context=args.note_context),
        rollout=RolloutConfig(group_size=8, train_temperature=args.temperature),
        algo=AlgoConfig(low_prob_ref=args.low_prob_ref),
        train=TrainConfig(learning_rate=args.distill_lr, checkpoint_every=1000, update_epochs=args.distill_epochs),
    )  # fmt: skip


def lesson_tip(task: str, variation: int, wording: int | None = None, wordings: str = "dev") -> str:
    """The Lesson's pre-filled tip (`TrapEnv.curated_tip`), or wording number `wording` of the `wordings`
    set ("dev": benchmarks/data/dev_notes.json, "test": test_notes.json; bench_notes.WORDING_SETS) filled
    for this layout: a teacher's own words for the same facts (issue 25, bar 4). Raises IndexError naming
    the valid numbers."""
    if wording is None:
        return TrapEnv().curated_tip(task, variation)
    from bench_notes import fill, load_wordings

    styles = load_wordings(wordings)[task]
    if not 0 <= wording < len(styles):
        raise IndexError(f"--tip-wording {wording}: {task} has {wordings} wordings 0-{len(styles) - 1}")
    return fill(styles[wording], task, variation)


def part_distill(args, policy, embedder, root: Path, warm: list[torch.Tensor]) -> tuple[str, dict]:
    """Bar 3: naive success before/after Distill now on memory episodes (no new rollouts)."""
    env = TrapEnv()
    task = args.distill_task
    train_vs = list(args.distill_variations)
    test_vs = list(env.variations(task, "test")[: args.variations_per_split])
    rows: dict[str, list[float]] = {}
    for seed in args.seeds:
        restore_weights(policy, warm)
        cfg = lesson_config(task, seed, args)
        session = Session.create(root, cfg)
        trainer = Trainer(cfg, session, policy=policy, embedder=embedder, writer=args.writer)
        for v in train_vs:
            trainer.store.add_tip(task, v, lesson_tip(task, v, args.tip_wording, args.wordings), score=100.0)

        def naive_rate(vs: list[int], tag: int) -> tuple[float, list]:
            eps = [ep for v in vs for ep in play(policy, trainer.store, task, v, "naive", args.episodes, seed * 1000 + v + tag, args.step_limit, args.temperature, group_id="")]
            return sum(ep.won for ep in eps) / len(eps), eps

        p_before, per_before = plan_prob_mean(policy, task, train_vs, False)
        pt_before, per_test_before = plan_prob_mean(policy, task, test_vs, False)
        tr_before, naive_eps = naive_rate(train_vs, 0)
        te_before, _ = naive_rate(test_vs, 0)
        # As the Lesson plays them: no training group, so Distill measures the memory episodes against the
        # naive ones of their variation (Trainer.distill). In a group of their own, memory episodes that
        # all succeed have every advantage 0 and distil nothing (with the shipped warm start: 1.00 success, P unmoved).
        memory_eps = [ep for v in train_vs for ep in play(policy, trainer.store, task, v, "memory", args.episodes, seed * 1000 + v + 1, args.step_limit, args.temperature, group_id="")]
        session.append_episodes(naive_eps + memory_eps)
        mem_rate = sum(ep.won for ep in memory_eps) / len(memory_eps)
        t0 = time.perf_counter()
        for k in range(args.distill_steps):
            m = trainer.distill([ep.episode_id for ep in memory_eps]).metrics
            print(f"  seed {seed} distill step {k + 1}: loss {m.get('loss/policy', float('nan')):.3f} "
                  f"ratio {m.get('ratio/mean', float('nan')):.2f} masked {m.get('mask/low_prob_frac', float('nan')):.2f} "
                  f"[{time.perf_counter() - t0:.0f} s]", flush=True)  # fmt: skip
        policy.clear_cache()
        p_after, per_after = plan_prob_mean(policy, task, train_vs, False)
        pt_after, per_test_after = plan_prob_mean(policy, task, test_vs, False)
        for v, b, a in zip(train_vs + test_vs, per_before + per_test_before, per_after + per_test_after):
            print(f"  seed {seed} variation {v}: P(plan step | no tip) " + ", ".join(f"{x:.2f}→{y:.2f}" for x, y in zip(b, a)), flush=True)
        tr_after, _ = naive_rate(train_vs, 2)
        te_after, _ = naive_rate(test_vs, 2)
        measured = dict(train_before=tr_before, train_after=tr_after, test_before=te_before, test_after=te_after,
                        p_before=p_before, p_after=p_after, pt_before=pt_before, pt_after=pt_after, mem=mem_rate)  # fmt: skip
        for key, val in measured.items():
            rows.setdefault(key, []).append(val)
        print(f"  seed {seed}: naive train {tr_before:.2f} → {tr_after:.2f}, test {te_before:.2f} → {te_after:.2f}, "
              f"memory {mem_rate:.2f}, P(plan action | no tip) {p_before:.2f} → {p_after:.2f}", flush=True)  # fmt: skip
        if args.save_adapter:
            save_distilled(args, policy, seed, train_vs, measured)
        trainer.close()
    lines = [
        f"### Distill now: {task}, variations {train_vs}, {args.episodes} naive + {args.episodes} memory episodes "
        f"per variation, {args.distill_steps} distill steps at lr {args.distill_lr}, seeds {args.seeds}, tips "
        + ("the template" if args.tip_wording is None else f"in {'test (held out; scored for the shipped default only)' if args.wordings == 'test' else 'dev'} wording {args.tip_wording}: {lesson_tip(task, train_vs[0], args.tip_wording, args.wordings)!r}"),
        "",
        "| measure | before | after |",
        "|---|---|---|",
        f"| naive success, distilled variations | {spread(rows['train_before'])} | {spread(rows['train_after'])} |",
        f"| naive success, unseen test variations {test_vs[0]}–{test_vs[-1]} | {spread(rows['test_before'])} | {spread(rows['test_after'])} |",
        f"| P(the tip's plan action), no tip in the prompt, mean over plan steps | {spread(rows['p_before'])} | {spread(rows['p_after'])} |",
        f"| P(the test variations' plan action), no tip, mean over plan steps | {spread(rows['pt_before'])} | {spread(rows['pt_after'])} |",
        f"| memory success (the distilled episodes) | {spread(rows['mem'])} | |",
    ]
    return "\n".join(lines), rows


def save_distilled(args, policy, seed: int, variations: list[int], measured: dict) -> Path:
    """Write the distilled adapter of `seed` to `args.save_adapter`/seed<seed>, with a warmstart.json
    naming what it saw: its --warm-start's tasks plus the distill task and variations, and the naive
    success it measured (a start with a known naive base rate for the race, issue 48 item 3)."""
    out = args.save_adapter / f"seed{seed}"
    out.mkdir(parents=True, exist_ok=True)
    policy.save_adapter(str(out))
    init = warm_start_dir(dataclasses.replace(RunConfig().policy, warm_start=args.warm_start))
    base = json.loads((init / "warmstart.json").read_text()) if init and (init / "warmstart.json").is_file() else {}
    meta = {
        "base_model": policy.base_model_name,
        "init": str(init) if init else "none",
        "tasks": sorted({*base.get("tasks", []), args.distill_task}),
        "trained_on": f"{base.get('trained_on', 'the base model')}; then {args.distill_steps} Distill-now steps on "
                      f"{args.distill_task} variations {variations} (the pre-filled tips, {args.episodes} memory "
                      f"episodes each, lr {args.distill_lr})",
        "distill": {"task": args.distill_task, "variations": variations, "steps": args.distill_steps,
                    "episodes": args.episodes, "lr": args.distill_lr, "temperature": args.temperature, "seed": seed},
        "naive_success": {"train_before": measured["train_before"], "train_after": measured["train_after"]},
        "command": args.command,
    }  # fmt: skip
    (out / "warmstart.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"  seed {seed}: distilled adapter written to {out}", flush=True)
    return out


ADAPT_TASKS = ("trap-light-bulb-fixed", "trap-find-animal-fixed", "trap-water-plant-fixed")
"""Part adapt's default tasks: the whole fixed family, no task of it in any shipped adapter's data by name
(every trap adapter trained on the search family only; tests/test_warm_start.py reads their
warmstart.json), though it keeps the search family's goals: it varies the target and its decoys where
the search family varies the room;
trap-light-bulb-fixed is also the race's task, but part adapt starts from the warm start, not from a race
checkpoint. The chain task trap-fetch-two, no adapter's either, is run apart: its gold path is 8–9
actions (its own step limit is 20)."""


def part_adapt(args, policy, embedder, root: Path, warm: list[torch.Tensor]) -> tuple[str, dict]:
    """Bar 5: OOD adaptation with frozen weights on tasks other than the session's; the memory fills
    with the episodes' own tips (the note writer's, then the record line with `--record-line`)
    trial after trial."""
    rows: dict = {}
    tips = "the model's note + the record line" if args.record_line else "the model's note alone, no record line"
    tips += f"; written by the {args.note_writer} note writer ({args.note_context} context)"
    limit = args.adapt_step_limit or "each task's own"
    lines = [
        f"### OOD adaptation: frozen weights, self-written tips ({tips}), {args.adapt_trials} memory trials after a "
        f"memory-free trial 0, group 8, step limit {limit}, seeds {args.seeds}",
        "",
        "| task | " + " | ".join(f"trial {t}" for t in range(args.adapt_trials + 1)) + " |",
        "|---|" + "---|" * (args.adapt_trials + 1),
    ]
    for task in args.adapt_tasks:
        per_trial: list[list[float]] = [[] for _ in range(args.adapt_trials + 1)]
        for seed in args.seeds:
            restore_weights(policy, warm)
            cfg = lesson_config(args.distill_task, seed, args)
            cfg = dataclasses.replace(cfg, run_id=f"adapt-{task}-seed{seed}",
                                      env=dataclasses.replace(cfg.env, step_limit=args.adapt_step_limit))
            trainer = Trainer(cfg, Session.create(root, cfg), policy=policy, embedder=embedder, writer=args.writer)
            for row in trainer.adapt(task, trials=args.adapt_trials):
                per_trial[int(row["adapt/trial"])].append(row["adapt/success_rate"])
            print(f"  {task} seed {seed}: " + " ".join(f"{v[-1]:.2f}" for v in per_trial), flush=True)
            trainer.close()
        rows[task] = per_trial
        lines.append(f"| {task} | " + " | ".join(spread(v) for v in per_trial) + " |")
    return "\n".join(lines), rows


def matmul_gflops() -> float:
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    a @ b
    t0 = time.perf_counter()
    for _ in range(20):
        a @ b
    return 20 * 2 * 1024**3 / (time.perf_counter() - t0) / 1e9


def part_speed(args, policy, embedder, root: Path, warm: list[torch.Tensor]) -> tuple[str, dict]:
    """Bar 6: one iteration per update mode (group 8, step limit 8) and a Distill now over 16 episodes."""
    task = args.distill_task
    restore_weights(policy, warm)
    cfg = dataclasses.replace(lesson_config(task, 0, args), run_id="speed")
    session = Session.create(root, cfg)
    trainer = Trainer(cfg, session, policy=policy, embedder=embedder, writer=args.writer)
    env = TrapEnv()
    for v in args.distill_variations:
        trainer.store.add_tip(task, v, env.curated_tip(task, v), score=100.0)
    gflops = matmul_gflops()
    params = sum(p.numel() for p in policy.model.parameters())
    phases = ("sampling", "env", "memory", "scoring", "backward")
    lines = [
        f"### Speed: {task}, group 8, step limit {args.step_limit}, CPU float32 matmul {gflops:.0f} GFLOP/s, "
        f"{params / 1e6:.0f} M parameters",
        "",
        "| update mode | total s | " + " | ".join(f"{p} s" for p in phases) + " | trained tokens | fwd+bwd tokens/s | vs CPU limit | peak RSS GiB |",
        "|---|---|" + "---|" * len(phases) + "---|---|---|---|",
    ]
    out: dict = {}
    memory_ids: list[str] = []
    for mode in ("on-policy", "on-policy-with-tips", "off-policy"):
        report = trainer.step(forced_mode=mode)
        m = report.metrics
        if mode != "on-policy":
            memory_ids += list(report.episode_ids)
        tokens = m.get("train/context_tokens", 0.0)
        tps = tokens / max(m.get("time/scoring", 0) + m.get("time/backward", 0), 1e-9)
        limit = gflops * 1e9 / (6 * params)  # forward + backward ≈ 6 FLOP per parameter per token
        out[mode] = {**m, "rss_gb": rss_gb()}
        lines.append(
            f"| {mode} | {m['time/iteration']:.1f} | " + " | ".join(f"{m.get(f'time/{p}', 0):.1f}" for p in phases)
            + f" | {m.get('train/tokens', 0):.0f} | {tps:.0f} | {tps / limit:.2f} | {rss_gb():.2f} |"
        )
        print(lines[-1], flush=True)
    t0 = time.perf_counter()
    m = trainer.distill(memory_ids[:16]).metrics
    out["distill"] = {**m, "seconds": time.perf_counter() - t0, "rss_gb": rss_gb()}
    lines.append(f"| Distill now ({len(memory_ids[:16])} episodes) | {time.perf_counter() - t0:.1f} | | | | "
                 f"{m.get('time/scoring', 0):.1f} | {m.get('time/backward', 0):.1f} | {m.get('train/tokens', 0):.0f} | | | {rss_gb():.2f} |")  # fmt: skip
    print(lines[-1], flush=True)
    trainer.close()
    return "\n".join(lines), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", nargs="+", default=["notes", "distill", "adapt", "speed"],
                    choices=["notes", "distill", "adapt", "speed"])  # fmt: skip
    ap.add_argument("--adapt-tasks", nargs="+", default=list(ADAPT_TASKS), choices=list(TASKS),
                    help="tasks to adapt on (default: tasks no shipped adapter trained on)")
    ap.add_argument("--adapt-trials", type=int, default=3)
    ap.add_argument("--adapt-step-limit", type=int, default=None, metavar="N",
                    help="part adapt's step limit (default: each task's own, as the studio's Adapt tab plays it; "
                         "--step-limit is the other parts')")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--tasks", nargs="+", default=[t for t in TASKS if TASKS[t].family != "chain"], choices=list(TASKS),
                    help="part notes' tasks (default: the search and fixed families; the chain task needs --step-limit ≥ 9)")
    ap.add_argument("--episodes", type=int, default=4, help="episodes per variation, mode and seed")
    ap.add_argument("--variations-per-split", type=int, default=2)
    ap.add_argument("--step-limit", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--distill-task", default="trap-light-bulb", choices=list(TASKS))
    ap.add_argument("--distill-variations", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--distill-steps", type=int, default=LessonSettings().distill_steps, help="Distill-now calls (default: the Lesson's)")
    ap.add_argument("--distill-lr", type=float, default=TrainConfig().learning_rate)
    ap.add_argument("--distill-epochs", type=int, default=TrainConfig().update_epochs, help="optimizer passes per distill step")
    ap.add_argument("--low-prob-ref", default=AlgoConfig().low_prob_ref, choices=LOW_PROB_REFS)
    ap.add_argument("--tip-wording", type=int, default=None, metavar="N",
                    help="part distill: the pre-filled tips in wording N of the --wordings set (a teacher's own words) "
                         "instead of the template")
    ap.add_argument("--wordings", choices=["dev", "test"], default="dev",
                    help="--tip-wording's set: dev (benchmarks/data/dev_notes.json) for choices, test "
                         "(benchmarks/data/test_notes.json) only for the shipped default's report "
                         "(docs/benchmarks/README.md, \"Choose on dev, report test once\")")
    ap.add_argument("--record-line", action="store_true",
                    help="tips end with the environment's record line (env.record_line; off by default: a tip is only what the model wrote)")
    ap.add_argument("--note-writer", default=MemoryConfig().note_writer, metavar="auto|none|DIR",
                    help="who writes the tips (memory.note_writer): auto (the shipped writer), none (the acting policy) or an adapter")
    ap.add_argument("--note-context", default=MemoryConfig().note_context, choices=NOTE_CONTEXTS,
                    help="a tip is written after the whole episode or per observation (memory.note_context; auto: as the writer was trained)")
    ap.add_argument("--warm-start", default=RunConfig().policy.warm_start, help=f"auto (the default adapter, {DEFAULT_WARM_START}) | none | DIR")
    ap.add_argument("--root", type=Path, default=None, help="sessions root (default: $EMPO2_SESSIONS_DIR or ./sessions)")
    ap.add_argument("--save-adapter", type=Path, default=None, metavar="DIR",
                    help="part distill: write each seed's distilled adapter to DIR/seed<N> with a warmstart.json "
                         "(a start of known naive base rate for bench_learning.py --warm-start)")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (1 when two benchmarks share 2 cores)")
    add_result_option(ap)
    args = ap.parse_args(argv)
    args.command = command_line(__file__, argv)  # what a saved adapter's warmstart.json says built it
    if args.threads < 1:
        ap.error(f"--threads must be ≥ 1, got {args.threads}")
    if args.adapt_step_limit is not None and args.adapt_step_limit < 1:
        ap.error(f"--adapt-step-limit must be ≥ 1 (or left out: each task's own), got {args.adapt_step_limit}")
    if args.save_adapter:  # refused before the model loads; an earlier start is never overwritten
        if "distill" not in args.parts:
            ap.error(f"--save-adapter saves part distill's adapters; --parts {' '.join(args.parts)} has no distill")
        taken = [str(args.save_adapter / f"seed{s}") for s in args.seeds if (args.save_adapter / f"seed{s}").exists()]
        if taken:
            ap.error(f"--save-adapter {args.save_adapter}: {', '.join(taken)} already exist; give another DIR or remove them")
    try:  # a bad --note-writer is refused before the model loads or a folder is written
        lesson_config(args.distill_task, 0, args).validate()
    except ValueError as e:
        ap.error(str(e))
    if args.tip_wording is not None:  # refused before the model loads or a folder is written
        try:
            lesson_tip(args.distill_task, args.distill_variations[0], args.tip_wording, args.wordings)
        except IndexError as e:
            ap.error(str(e))
        if args.wordings == "test" and args.warm_start != RunConfig().policy.warm_start:
            ap.error(f"--wordings test is scored for the shipped default only (--warm-start {RunConfig().policy.warm_start}), "
                     f"not {args.warm_start!r}: compare adapters on --wordings dev")  # fmt: skip
    torch.set_num_threads(min(args.threads, os.cpu_count() or 1))
    _, root = fresh_dir(args.root or default_sessions_root(), time.strftime("bench_lesson-%Y%m%d-%H%M%S"))
    embedder = make_embedder("minilm")
    t0 = time.perf_counter()
    policy = load_policy(dataclasses.replace(RunConfig().policy, warm_start=args.warm_start))
    print(f"model loaded in {time.perf_counter() - t0:.0f}s (version {policy.version})", flush=True)
    warm = [p.detach().clone() for p in policy.trainable_parameters()]
    args.writer = load_note_writer(lesson_config(args.distill_task, 0, args), policy)[0]  # one writer for every run
    report = [f"# bench_lesson ({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPU cores, torch {torch.__version__}, "
              f"policy {policy.version})", ""]  # fmt: skip
    results: dict = {}
    parts = {"notes": lambda: part_notes(args, policy, embedder, root),
             "distill": lambda: part_distill(args, policy, embedder, root, warm),
             "adapt": lambda: part_adapt(args, policy, embedder, root, warm),
             "speed": lambda: part_speed(args, policy, embedder, root, warm)}  # fmt: skip
    for name in args.parts:
        t = time.perf_counter()
        text, data = parts[name]()
        results[name] = data
        report += [text, "", f"({name}: {time.perf_counter() - t:.0f} s)", ""]
        (root / "lesson.md").write_text("\n".join(report))
        (root / "lesson.json").write_text(json.dumps(results, default=float, indent=1))
        write_result(args.result, __file__, argv, t0, args.seeds, results, parts=list(results),
                     warm_start=args.warm_start, note_writer=args.note_writer, report="\n".join(report))  # fmt: skip
    print("\n" + "\n".join(report))
    print(f"written: {root}/lesson.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
