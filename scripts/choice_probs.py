"""How a policy splits its probability among a state's valid actions: token-level vs whole-action choice.

- token-level: constrained decoding as the studio samples it (each token renormalised over the valid
  actions' next tokens, `HFPolicy.score` with `decoding="constrained"`);
- whole-action (`policy.decoding = "action"`, policy/choice.py): a categorical over the valid actions
  whose logits are each action's summed free-model log-prob ("sum"), divided by its token count
  ("token") or word count ("word"), optionally minus the same score under a neutral prompt ("+pmi").

Token-level decoding has label bias: once "focus on" is likely, it must put that mass on whichever object
is valid ("focus on bed"); whole-action scores let the object's low probability veto it. The states
shown are those of the task's shortest winning path on each variation (start, the target's room, after
the focus), no tips in the prompt; every probability is at `--temperature` (the categorical's logits ÷ T,
token-level logits ÷ T). `--play N` also plays every listed variation N times memory-free under each
`--decodings` entry and tallies success, first actions and first focuses.

    .venv/bin/python scripts/choice_probs.py                                   # the warm start, light bulb 36–39
    .venv/bin/python scripts/choice_probs.py --task trap-light-bulb-fixed --variations 36 37 38 39
    .venv/bin/python scripts/choice_probs.py --task trap-light-bulb-fixed --variations 36 … 47 --play 4 --decodings constrained action:word
    .venv/bin/python scripts/choice_probs.py --adapter sessions/<run>/<arm>/adapters/iter_000020
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from empo2_studio.config import RunConfig  # noqa: E402
from empo2_studio.envs.trap import FURNITURE, TASKS, TrapEnv  # noqa: E402
from empo2_studio.policy import Turn, load_policy, prompts  # noqa: E402
from empo2_studio.policy.choice import NEUTRAL_PROMPT, candidates, normalised, tree_logprobs  # noqa: E402

VARIANTS = ("token-level", "sum", "token", "word", "token+pmi", "word+pmi")


def token_level(policy, turns: list[Turn], user: str, actions, temperature: float) -> list[float]:
    """P(each action) under constrained decoding at `temperature` (a product of renormalised tokens)."""
    fmt = policy.chat_format
    convs = [turns + [Turn(user, fmt.encode(a) + (fmt.eot_id,), actions)] for a in actions]
    saved = policy.decoding
    policy.decoding = "constrained"
    try:
        with torch.no_grad():
            return [math.exp(float(s[-1].sum())) for s in policy.score(convs, temperature=temperature)]
    finally:
        policy.decoding = saved


def whole_action(policy, turns: list[Turn], user: str, actions, temperature: float) -> dict[str, list[float]]:
    """P(each action) in the whole-action categorical at `temperature`, per normalisation (± PMI)."""
    fmt = policy.chat_format
    cands = candidates(fmt, actions)
    prompt = policy.prompt_ids(turns + [Turn(user, None, actions)])
    neutral = fmt.conversation_ids([Turn(NEUTRAL_PROMPT, None)])[0]
    with torch.no_grad():
        (lps,) = tree_logprobs(policy.model, prompt, [(len(prompt), cands)])
        (prior,) = tree_logprobs(policy.model, neutral, [(len(neutral), cands)])
    out = {}
    for name in VARIANTS[1:]:
        norm, pmi = name.split("+")[0], name.endswith("+pmi")
        z = normalised(lps, actions, norm) - (normalised(prior, actions, norm) if pmi else 0.0)
        out[name] = torch.softmax(z / temperature, dim=-1).tolist()
    return out


def state_rows(policy, task: str, variation: int, temperature: float) -> list[dict]:
    """Per state of the gold path: its actions and P(each) under every variant."""
    env = TrapEnv()
    obs = env.reset(task, variation)
    fmt = policy.chat_format
    turns: list[Turn] = []
    rows = []
    for k, action in enumerate(env.gold_path(task, variation)):
        user = prompts.first_user_message("trap", obs, ()) if k == 0 else prompts.step_user_message(obs, "trap")
        actions = obs.valid_actions
        probs = {"token-level": token_level(policy, turns, user, actions, temperature)}
        probs.update(whole_action(policy, turns, user, actions, temperature))
        rows.append({"k": k, "gold": action, "actions": actions, "probs": probs, "room": env._state.room})
        turns.append(Turn(user, fmt.encode(action) + (fmt.eot_id,), actions))
        obs = env.step(action).observation
    return rows


def p_of(row: dict, variant: str, pick) -> float:
    return sum(p for a, p in zip(row["actions"], row["probs"][variant]) if pick(a))


def report(policy, task: str, variations, temperature: float) -> None:
    """Print the per-state table and the label-bias summary (means over `variations`)."""
    head = " | ".join(VARIANTS)
    print(f"\n### {task}: P(gold action) per state — {head}\n")
    print(f"| variation | state | gold action | {head} |\n|---|---|---|" + "---|" * len(VARIANTS))
    summary: dict[str, list[list[float]]] = {k: [] for k in ("first=target room", "first=focus", "focus target | room",
                                                             "focus furniture | room", "focus decoy | room", "finish | focused")}
    firsts: dict[str, Counter] = {v: Counter() for v in VARIANTS}
    for v in variations:
        lay = TrapEnv().layout(task, v)
        for row in state_rows(policy, task, v, temperature):
            state = "start" if row["k"] == 0 else f"after {row['k']} gold"
            cells = " | ".join(f"{p_of(row, x, lambda a: a == row['gold']):.3f}" for x in VARIANTS)
            print(f"| {v} | {state} | {row['gold']} | {cells} |")
            if row["k"] == 0:
                summary["first=target room"].append([p_of(row, x, lambda a: a == f"go to {lay.target_room}") for x in VARIANTS])
                summary["first=focus"].append([p_of(row, x, lambda a: a.startswith("focus on")) for x in VARIANTS])
                for x in VARIANTS:
                    best = max(range(len(row["actions"])), key=lambda i: row["probs"][x][i])
                    firsts[x][row["actions"][best]] += 1
            if row["gold"] == f"focus on {lay.target}":
                summary["focus target | room"].append([p_of(row, x, lambda a: a == row["gold"]) for x in VARIANTS])
                summary["focus furniture | room"].append([p_of(row, x, lambda a: a.removeprefix("focus on ") in FURNITURE.values()) for x in VARIANTS])
                summary["focus decoy | room"].append([p_of(row, x, lambda a: a.startswith("focus on ") and a != row["gold"]
                                                           and a.removeprefix("focus on ") not in FURNITURE.values()) for x in VARIANTS])
            if row["k"] and row["gold"].startswith(TASKS[task].verb) and lay.target in row["gold"]:
                summary["finish | focused"].append([p_of(row, x, lambda a: a == row["gold"]) for x in VARIANTS])
    print(f"\n### {task} {list(variations)}: means over variations at T = {temperature}\n")
    print(f"| P | {head} |\n|---|" + "---|" * len(VARIANTS))
    for name, vals in summary.items():
        if vals:
            means = [sum(col) / len(col) for col in zip(*vals)]
            print(f"| {name} | " + " | ".join(f"{m:.3f}" for m in means) + " |")
    print("\nmode of the first action, per variant: " + "; ".join(f"{x}: {dict(c)}" for x, c in firsts.items()))


def play(policy, task: str, variations, repeats: int, decodings, temperature: float, seed: int, step_limit: int) -> None:
    """Memory-free episodes of every variation under each decoding: success, first actions, first focuses."""
    from empo2_studio.rollout import play_group, seed_policy

    envs = [TrapEnv(step_limit=step_limit) for _ in range(repeats)]
    for dec in decodings:
        name, _, norm = dec.partition(":")
        policy.decoding = name
        if name == "action":
            policy.chooser.settings = replace(policy.chooser.settings, norm=norm.removesuffix("+pmi") or "word", pmi=norm.endswith("+pmi"))
        seed_policy(policy, seed)
        t0 = time.perf_counter()
        eps = []
        for v in variations:
            group = play_group(envs, policy, None, task=task, variation=v, split="test", rollout_mode="naive",
                               update_mode=None, temperature=temperature, seed=seed, group_id="")
            eps += group
            print(f"  {dec} variation {v}: scores {[e.score for e in group]}, first actions "
                  f"{[e.steps[0].action for e in group]} ({time.perf_counter() - t0:.0f} s)", flush=True)
        first = Counter(e.steps[0].action for e in eps if e.steps)
        focus = Counter(next((s.action for s in e.steps if s.action.startswith("focus on")), "none") for e in eps)
        scores = Counter(e.score for e in eps)
        print(f"\n{task} play, decoding {dec}, T = {temperature}, step limit {step_limit}, {len(eps)} episodes ({time.perf_counter() - t0:.0f} s): "
              f"success {sum(e.won for e in eps) / len(eps):.3f}, mean score {sum(e.score for e in eps) / len(eps):.1f}")
        print(f"  first actions {dict(first.most_common())}\n  first focus {dict(focus.most_common())}\n  scores {dict(scores.most_common())}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--adapter", default=None, help="a PEFT adapter directory (default: the warm start)")
    ap.add_argument("--task", default="trap-light-bulb", choices=sorted(TASKS))
    ap.add_argument("--variations", type=int, nargs="+", default=[36, 37, 38, 39])
    ap.add_argument("--temperature", type=float, default=0.4, help="the evaluation's (bench_learning: 0.4)")
    ap.add_argument("--no-table", action="store_true", help="skip the per-state probabilities")
    ap.add_argument("--play", type=int, default=0, help="episodes per variation and decoding (0: none)")
    ap.add_argument("--decodings", nargs="+", default=["constrained", "action:word"],
                    help="for --play: constrained, free, action:word|token|sum[+pmi]")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--step-limit", type=int, default=8, help="for --play (bench_learning's default: 8)")
    args = ap.parse_args(argv)
    policy = load_policy(RunConfig().policy)
    if args.adapter:
        policy.load_adapter(args.adapter)
    print(f"adapter: {args.adapter or 'warm start'}; T = {args.temperature}")
    if not args.no_table:
        report(policy, args.task, args.variations, args.temperature)
    if args.play:
        play(policy, args.task, args.variations, args.play, args.decodings, args.temperature, args.seed, args.step_limit)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
