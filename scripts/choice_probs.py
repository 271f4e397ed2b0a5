"""How a policy splits its probability among a state's valid actions, two ways.

- token-level: constrained decoding as the studio samples (each token renormalised over the valid
  actions' next tokens, `HFPolicy.score` with `decoding="constrained"`);
- action-level: each valid action's whole-sequence probability under the free model (every token
  softmaxed over the vocabulary), renormalised over the valid actions.

The two differ where the model likes a prefix but none of its continuations: once "focus on" is
likely, token-level decoding must put that mass on whichever object is valid ("focus on bed"), while
action-level normalisation lets the object's low probability veto it (label bias). The states shown
are those of the task's shortest winning path on each variation (start, the target's room, after the
focus), no tips in the prompt.

    .venv/bin/python scripts/choice_probs.py                                   # the warm start
    .venv/bin/python scripts/choice_probs.py --adapter sessions/<run>/<arm>/adapters/iter_000020
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from empo2_studio.config import RunConfig  # noqa: E402
from empo2_studio.envs.trap import TASKS, TrapEnv  # noqa: E402
from empo2_studio.policy import Turn, load_policy, prompts  # noqa: E402


def action_logprobs(policy, turns: list[Turn], user: str, actions, temperature: float, decoding: str) -> list[float]:
    """log P(each action) after `turns`, summed over its tokens, under `decoding` ("constrained" or "free")."""
    fmt = policy.chat_format
    convs = [turns + [Turn(user, fmt.encode(a) + (fmt.eot_id,), actions)] for a in actions]
    saved = policy.decoding
    policy.decoding = decoding
    try:
        with torch.no_grad():
            return [float(s[-1].sum()) for s in policy.score(convs, temperature=temperature)]
    finally:
        policy.decoding = saved


def state_table(policy, task: str, variation: int, temperature: float, top: int) -> list[str]:
    """Markdown rows: per state of the gold path, the `top` actions by token-level P with both Ps."""
    env = TrapEnv()
    obs = env.reset(task, variation)
    fmt = policy.chat_format
    gold = env.gold_path(task, variation)
    turns: list[Turn] = []
    lines = []
    for k, action in enumerate(gold):
        user = prompts.first_user_message("trap", obs, ()) if k == 0 else prompts.step_user_message(obs, "trap")
        actions = obs.valid_actions
        tok = action_logprobs(policy, turns, user, actions, temperature, "constrained")
        seq = action_logprobs(policy, turns, user, actions, temperature, "free")
        z = math.log(sum(math.exp(s) for s in seq))
        order = sorted(range(len(actions)), key=lambda i: -tok[i])[:top]
        shown = ", ".join(f"{actions[i]} {math.exp(tok[i]):.2f} / {math.exp(seq[i] - z):.2f}" for i in order)
        g = actions.index(action)
        state = "start" if k == 0 else f"after {gold[k - 1]}"
        lines.append(
            f"| {variation} | {state} | {action} | {math.exp(tok[g]):.3f} | {math.exp(seq[g] - z):.3f} | {shown} |"
        )
        turns.append(Turn(user, fmt.encode(action) + (fmt.eot_id,), actions))
        obs = env.step(action).observation
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--adapter", default=None, help="a PEFT adapter directory (default: the warm start)")
    ap.add_argument("--task", default="trap-light-bulb", choices=sorted(TASKS))
    ap.add_argument("--variations", type=int, nargs="+", default=[36, 37, 38, 39])
    ap.add_argument("--temperature", type=float, default=0.4, help="the evaluation's (bench_learning: 0.4)")
    ap.add_argument("--top", type=int, default=3, help="actions listed per state")
    args = ap.parse_args(argv)
    policy = load_policy(RunConfig().policy)
    if args.adapter:
        policy.load_adapter(args.adapter)
    print(f"adapter: {args.adapter or 'warm start'}; T = {args.temperature}; P shown token-level / action-level\n")
    print("| variation | state | gold action | P token-level | P action-level | top actions (token / action) |")
    print("|---|---|---|---|---|---|")
    for v in args.variations:
        print("\n".join(state_table(policy, args.task, v, args.temperature, args.top)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
