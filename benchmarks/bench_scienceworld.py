"""Does the embedded agent act in ScienceWorld when a note tells it the plan? Issue 47, bar 1.

Test variations of tasks outside `HELD_OUT_TASKS` (the warm start may train on their train and dev
variations, never on these). The note is the variation's gold plan: the simulator's gold path in the
words of the step's valid actions (`ScienceWorldEnv.valid_gold_path`), written as
"To finish the task: a, then b, …" and shown from its first step not yet played
(`prompts.remaining_plan`), as the rollout shows a plan.

Part "probs": the mapped gold path played with the note pinned (and with no note), the probability the
policy gives each gold action (T = 1, as the studio samples) under `--decoding`: "constrained" (the
token-level trie over the step's valid actions, the product of its token probabilities) or "action"
(the whole-action categorical over the step's valid actions, `policy.choice_norm`); per task the mean
and minimum over steps and the product over the path (the chance of playing the whole plan), and the
label bias at the focus step: P of the most likely wrong "focus on …" action (constrained: among the
`WRONG_FOCUS_CANDIDATES` closest in words, each scored as a whole conversation; action: among all the
step's "focus on …" actions, read off the one categorical).

Part "play": episodes with the plan pinned (memory rollout, step limit 30, T = 1) and naive ones;
success (score 100) per task, mean and min–max over seeds. `--notes plan` plays and scores only the
plan-pinned condition (naive episodes score 0 and run to the step limit).

    .venv/bin/python benchmarks/bench_scienceworld.py                    (the adapter a ScienceWorld session starts from)
    .venv/bin/python benchmarks/bench_scienceworld.py --parts probs --warm-start auto   (the trap's route adapter)

Results go to stdout and `<sessions root>/bench_scienceworld-<time>/scienceworld.md` (+ .json), and the
summary with the command, commit, seconds and per-seed numbers to `benchmarks/results/NAME.json`
(`--result NAME`, rewritten after every part).
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

from empo2_studio.config import WARM_START_DIR, RunConfig  # noqa: E402
from empo2_studio.envs.actions import jaccard, words  # noqa: E402
from empo2_studio.envs.scienceworld import HELD_OUT_TASKS, ScienceWorldEnv  # noqa: E402
from empo2_studio.policy import Turn, load_policy, prompts  # noqa: E402
from empo2_studio.policy.choice import candidates, categorical, tree_logprobs  # noqa: E402
from empo2_studio.policy.sampling import common_prefix  # noqa: E402
from empo2_studio.rollout import play_group, seed_policy  # noqa: E402
from empo2_studio.sessions import auto_warm_start, default_sessions_root, fresh_dir  # noqa: E402
from empo2_studio.types import RetrievedTip  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import add_result_option, write_result  # noqa: E402
from bench_notes import PinnedNote  # noqa: E402

TASKS = {"power-component": [15, 16, 17, 18], "chemistry-mix-paint-secondary-color": [27, 28, 29, 30],
         "test-conductivity": [675, 676, 677, 678]}  # fmt: skip
"""Three tasks with short gold paths (7–20 steps) and their first four test variations."""


def path_turns(env: ScienceWorldEnv, policy, task: str, variation: int, actions: list[str], note: str | None
               ) -> list[Turn]:
    """The mapped gold path as policy turns with `note` pinned (cut by remaining_plan), until done."""
    fmt = policy.chat_format
    obs = env.reset(task, variation)
    turns, played = [], []
    for k, action in enumerate(actions):
        user = (prompts.first_user_message("scienceworld", obs, env.fewshot_examples(task)
                                           if prompts.prompt_style("scienceworld") == "paper" else ())
                if k == 0 else prompts.step_user_message(obs, "scienceworld"))
        if note is not None:
            tip = prompts.with_plan_progress(RetrievedTip("note", note, 100.0, 1.0, True), played)
            user = prompts.with_tips(user, [tip], prompts.prompt_style("scienceworld"))
        turns.append(Turn(user, fmt.encode(action) + (fmt.eot_id,), obs.valid_actions))
        result = env.step(action)
        played.append(action)
        obs = result.observation
        if result.done:
            break
    return turns


def plan_probabilities(env: ScienceWorldEnv, policy, task: str, cases: list[tuple[int, list[str], str | None]]) -> dict:
    """P(each action of a plan) token-level along it (T = 1) with a note in view, per (variation, plan,
    note) of `cases` (`path_turns`), and over them: {"per_variation": rows, "mean": per step, "whole": the
    mean over cases of P(whole plan)}."""
    rows = []
    for variation, plan, note in cases:
        turns = path_turns(env, policy, task, variation, plan, note)
        with torch.no_grad():
            rows.append([float(lp.sum().exp()) for lp in policy.score([turns])[0]])
    means = [statistics.fmean(r[k] for r in rows) for k in range(len(rows[0]))]
    return {"per_variation": rows, "mean": means, "whole": statistics.fmean(float(torch.tensor(r).prod()) for r in rows)}


WRONG_FOCUS_CANDIDATES = 12
"""How many wrong "focus on …" actions `wrong_focus` scores: those closest in words to the gold one
(each is a whole conversation prefix to score, and a room offers up to 100 of them)."""


CHOICE_CHUNK = 150
"""Action decoding: candidates scored per forward here (a room offers 140–570 valid actions; all of a
path's turns in one packed forward, as `policy.score` does, needs tens of GB for its attention mask)."""


def action_distribution(policy, turns: list[Turn], k: int, state=None) -> list[float]:
    """Action decoding: π over turn `k`'s valid actions (T = 1), in their order — the categorical
    `policy.score` and the sampler compute, its candidates fed `CHOICE_CHUNK` at a time on the prompt's
    KV cache (`state`: a sampler state kept across the turns of one path, as an episode's)."""
    prompt = policy.prompt_ids(list(turns[:k]) + [Turn(turns[k].user_text, None, turns[k].valid_actions)])
    actions = turns[k].valid_actions
    cands = candidates(policy.chat_format, actions)
    sampler = policy.sampler
    st = state if state is not None else sampler._fresh()
    lps = []
    with torch.no_grad():
        sampler._crop(st, min(common_prefix(st.ids, prompt), len(prompt) - 1))
        sampler.feed(st, prompt[len(st.ids) : -1])  # the cache holds all but the prompt's last id
        for i in range(0, len(cands), CHOICE_CHUNK):
            lps += tree_logprobs(policy.model, prompt, [(len(prompt), cands[i : i + CHOICE_CHUNK])],
                                 cache=st.cache, cached=len(prompt) - 1)[0]  # fmt: skip
            st.cache.crop(-1)  # tree_logprobs leaves the whole prompt cached: back to all but its last id
        return categorical(policy.chooser.logits(lps, actions), 1.0).exp().tolist()


def gold_probs(policy, turns: list[Turn], actions: list[str]) -> list[float]:
    """P(gold action) at every turn under the policy's decoding (T = 1)."""
    if policy.decoding == "action":
        state = policy.sampler._fresh()
        return [action_distribution(policy, turns, k, state)[turns[k].valid_actions.index(a)]
                for k, a in enumerate(actions[: len(turns)])]  # fmt: skip
    with torch.no_grad():
        return [float(lp.sum().exp()) for lp in policy.score([turns])[0]]


def wrong_focus(policy, turns: list[Turn], k: int, gold: str) -> tuple[str, float]:
    """The most likely "focus on …" action other than `gold` at turn `k`, and its probability.
    Constrained decoding: among the `WRONG_FOCUS_CANDIDATES` closest to it in words, each scored as the
    answer of turn k, token-level, as the trie samples it. Action decoding: among all of them, read off
    the step's categorical."""
    others = [a for a in turns[k].valid_actions if a.startswith("focus on") and a != gold]
    if policy.decoding == "action":
        pi = dict(zip(turns[k].valid_actions, action_distribution(policy, turns, k)))
        best = max(sorted(others), key=pi.__getitem__)
        return best, pi[best]
    candidates = sorted(others, key=lambda a: (-jaccard(words(a), words(gold)), a))[:WRONG_FOCUS_CANDIDATES]
    fmt = policy.chat_format
    convs = [turns[:k] + [dataclasses.replace(turns[k], action_ids=fmt.encode(a) + (fmt.eot_id,))] for a in candidates]
    with torch.no_grad():
        scored = policy.score(convs)
    probs = [float(s[k].sum().exp()) for s in scored]
    best = max(range(len(probs)), key=probs.__getitem__)
    return candidates[best], probs[best]


def plan_of(args, env: ScienceWorldEnv, task: str, variation: int) -> list[str]:
    """The mapped gold path of the variation, or its teleporting form with --teleport (when it has one)."""
    actions, _ = env.valid_gold_path(task, variation)
    if args.teleport:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
        from make_sw_warmstart import teleport_path

        actions = teleport_path(env, task, variation, actions) or actions
    return actions


def part_probs(args, policy, env) -> tuple[list[str], dict]:
    how = "token-level" if args.decoding == "constrained" else f"whole-action choice ({policy.chooser.settings.norm} norm)"
    lines = [f"### P(gold action) along the mapped gold path, {how}, T = 1 (mean over the task's {args.split} variations)",
             "", "| task | note | mean P per step | min P per step | P(whole path) | P(focus) | most likely wrong focus |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    out: dict = {}
    for task, variations in args.tasks.items():
        for note_kind in args.notes:
            rows = []
            for v in variations:
                actions = plan_of(args, env, task, v)
                turns = path_turns(env, policy, task, v, actions, prompts.plan_note(actions) if note_kind == "plan" else None)
                ps = gold_probs(policy, turns, actions)
                k = next(i for i, a in enumerate(actions[: len(turns)]) if a.startswith("focus on"))
                gold = actions[k]
                wrong, p_wrong = wrong_focus(policy, turns, k, gold)
                rows.append({"variation": v, "p": ps, "focus": ps[k], "wrong_focus": wrong, "p_wrong_focus": p_wrong})
            out.setdefault(task, {})[note_kind] = rows
            mean = statistics.fmean(statistics.fmean(r["p"]) for r in rows)
            low = statistics.fmean(min(r["p"]) for r in rows)
            whole = statistics.fmean(float(torch.tensor(r["p"]).prod()) for r in rows)
            focus = statistics.fmean(r["focus"] for r in rows)
            worst = max(rows, key=lambda r: r["p_wrong_focus"])
            lines.append(f"| {task} | {note_kind} | {mean:.2f} | {low:.2f} | {whole:.3f} | {focus:.2f} | "
                         f"{worst['wrong_focus']!r} {worst['p_wrong_focus']:.2f} (variation {worst['variation']}) |")
            print(lines[-1], flush=True)
    return lines, out


def part_play(args, policy, env) -> tuple[list[str], dict]:
    lines = [f"### Success (score 100), {args.episodes} episodes × {len(args.seeds)} seeds per {args.split} variation, "
             f"step limit {args.step_limit}, T = {args.temperature} (mean over seeds, min–max)", "",
             "| task | plan pinned | no note |", "|---|---|---|"]  # fmt: skip
    envs = [ScienceWorldEnv(step_limit=args.step_limit) for _ in range(args.episodes)]
    out: dict = {}
    try:
        for task, variations in args.tasks.items():
            for seed in args.seeds:
                won: dict[str, list[bool]] = {kind: [] for kind in args.notes}
                for v in variations:
                    actions = plan_of(args, env, task, v)
                    for kind in args.notes:
                        note = prompts.plan_note(actions) if kind == "plan" else None
                        seed_policy(policy, seed * 1000 + v)
                        eps = play_group(
                            envs, policy, PinnedNote(note) if note else None, task=task, variation=v, split=args.split,
                            rollout_mode="memory" if note else "naive", update_mode=None,
                            temperature=args.temperature, seed=seed * 1000 + v,
                        )  # fmt: skip
                        won[kind] += [ep.won for ep in eps]
                for kind, w in won.items():
                    out.setdefault(task, {}).setdefault(kind, []).append(sum(w) / len(w))
                print(f"  {task} seed {seed}: " + ", ".join(f"{k} {out[task][k][-1]:.2f}" for k in args.notes), flush=True)
            cells = [f"{statistics.fmean(out[task][k]):.2f} ({min(out[task][k]):.2f}–{max(out[task][k]):.2f})"
                     if k in args.notes else "not played" for k in ("plan", "none")]
            lines.append(f"| {task} | " + " | ".join(cells) + " |")
    finally:
        for e in envs:
            e.close()
    return lines, out


PARTS = {"probs": part_probs, "play": part_play}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", nargs="+", default=["probs", "play"], choices=list(PARTS))
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), help=f"default: {', '.join(TASKS)} (their first four test variations)")
    ap.add_argument("--variations", type=int, default=4, help="variations per task (the first N of --split after --skip)")
    ap.add_argument("--split", default="test", choices=["test", "dev"], help="dev: to choose between adapters (docs/benchmarks/README.md)")
    ap.add_argument("--skip", type=int, default=0, help="skip the split's first N variations (a warm start trains on the first 3 dev ones)")
    ap.add_argument("--decoding", default=RunConfig().policy.decoding, choices=["constrained", "action"],
                    help="policy.decoding: the token-level trie or the whole-action choice over the step's valid actions")
    ap.add_argument("--notes", default="both", choices=["both", "plan"],
                    help="plan: only the plan-pinned condition (probs and play); both: also no note")
    ap.add_argument("--teleport", action="store_true", help="plans teleport between rooms (make_sw_warmstart.teleport_path) where they can")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--episodes", type=int, default=2, help="episodes per variation, note and seed")
    ap.add_argument("--step-limit", type=int, default=30)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warm-start", default=str(WARM_START_DIR / auto_warm_start("scienceworld")),
                    help="an adapter DIR (default: what a ScienceWorld session starts from), auto (the trap's) or none")
    add_result_option(ap)
    ap.add_argument("--root", type=Path, default=None)
    args = ap.parse_args(argv)
    args.notes = ("plan", "none") if args.notes == "both" else ("plan",)
    held = [t for t in args.tasks if t in HELD_OUT_TASKS]
    if held:
        ap.error(f"{', '.join(held)} is held out for the Lesson, the race and adaptation; bar 1 measures other tasks")
    env = ScienceWorldEnv()
    try:
        args.tasks = {t: list(env.variations(t, args.split)[args.skip : args.skip + args.variations]) for t in args.tasks}
    except ValueError as exc:
        ap.error(str(exc))
    torch.set_num_threads(max(1, min(args.threads, os.cpu_count() or 1)))
    _, root = fresh_dir(args.root or default_sessions_root(), time.strftime("bench_scienceworld-%Y%m%d-%H%M%S"))
    policy = load_policy(dataclasses.replace(RunConfig().policy, warm_start=args.warm_start, decoding=args.decoding))
    report = [f"# bench_scienceworld ({time.strftime('%Y-%m-%d %H:%M')}, warm start {args.warm_start}, "
              f"{prompts.prompt_style('scienceworld')} prompt, {args.decoding} decoding"
              f"{', teleporting plans' if args.teleport else ''})", ""]
    results: dict = {}
    t0 = time.perf_counter()
    try:
        for name in args.parts:
            t = time.perf_counter()
            lines, results[name] = PARTS[name](args, policy, env)
            report += lines + ["", f"({name}: {time.perf_counter() - t:.0f} s)", ""]
            (root / "scienceworld.md").write_text("\n".join(report))
            (root / "scienceworld.json").write_text(json.dumps(results, default=float, indent=1))
            write_result(args.result, __file__, argv, t0, args.seeds, results, parts=list(results),
                         warm_start=args.warm_start, tasks=args.tasks, decoding=args.decoding,
                         teleport=args.teleport, notes=list(args.notes), report="\n".join(report))  # fmt: skip
    finally:
        env.close()
    print("\n" + "\n".join(report))
    print(f"written: {root}/scienceworld.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
