"""Policy benchmarks on the embedded SmolLM2-135M-Instruct (ratios measured in one run).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_policy.py [--turns 30] [--group 8] [--step 20] [--result NAME]

1. packed vs per-turn scoring of one episode: tokens processed, wall time, max |Δ log-prob| (fp32);
2. sampling at step `--step` for a group: per-episode KV caches vs one episode at a time with the whole
   history re-encoded (greedy, so the sampled tokens must be identical): env-steps per second;
3. memory footprint of the policy, 4-bit vs fp32;
4. LoRA training tokens/s against the CPU's limit = measured matmul FLOP/s / (6 × parameters).
The machine's load average is printed: other processes share the 2 cores.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from empo2_studio.config import PolicyConfig
from empo2_studio.policy import ActionRequest, Turn, load_policy
from empo2_studio.policy.prompts import FINAL_INSTRUCTION

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import add_result_option, write_result  # noqa: E402

ROOMS = ("kitchen", "hallway", "workshop", "greenhouse", "bathroom", "living room", "bedroom", "art studio")
VALID = tuple(f"go to {r}" for r in ROOMS) + ("look around", "open door", "focus on red light bulb", "pick up battery")


def _obs(ep: int, t: int) -> str:
    room = ROOMS[(ep + t) % len(ROOMS)]
    return (
        f"Observation: This room is called the {room}. In it, you see: a table, a chair, a {ROOMS[t % 8]} map, "
        f"a battery, a wire, and a door to the {ROOMS[(t + 1) % 8]}. Step {t} of episode {ep}.\n\n{FINAL_INSTRUCTION}"
    )


def _history(policy, ep: int, turns: int) -> list[Turn]:
    fmt = policy.chat_format
    first = "Your task is to turn on the red light bulb. First, focus on the red light bulb.\n" * 20
    return [
        Turn((first if t == 0 else "") + _obs(ep, t), fmt.encode(VALID[(ep * 7 + t) % len(VALID)]) + (fmt.eot_id,), VALID)
        for t in range(turns)
    ]


def bench_packed(policy, turns: int) -> dict:
    conv = _history(policy, 0, turns)
    ids, _ = policy.chat_format.conversation_ids(conv)
    per_turn_tokens = sum(len(policy.prompt_ids(conv[:t] + [Turn(c.user_text, None, VALID)])) + len(c.action_ids) for t, c in enumerate(conv))
    with torch.no_grad():
        t0 = time.perf_counter()
        packed = policy.score([conv])[0]
        t1 = time.perf_counter()
        ref = policy.score_per_turn([conv])[0]
        t2 = time.perf_counter()
    diff = max(float((a - b).abs().max()) for a, b in zip(packed, ref))
    return {"tokens packed": len(ids), "tokens per-turn": per_turn_tokens, "time packed s": t1 - t0,
            "time per-turn s": t2 - t1, "max |Δ logp|": diff}


SAMPLING_MODES = {  # name: (sampler.batched, sampler.batched_prefill)
    "batched": (True, True),
    "batched-decode": (True, False),
    "per-episode": (False, True),
}


def bench_sampling(policy, group: int, step: int) -> dict:
    """Step `step` of a group from warm caches, in every sampling mode (each from the same cache
    snapshot), against the naive baseline: one episode at a time, whole history re-encoded."""
    import copy

    keys = [f"ep{e}" for e in range(group)]
    hist = {k: _history(policy, e, step) for e, k in enumerate(keys)}
    req = lambda k, h, t: ActionRequest(k, tuple(h) + (Turn(_obs(keys.index(k), t), None, VALID),))  # noqa: E731
    sampler = policy.sampler
    warm = policy.sample([req(k, hist[k][:-1], step - 1) for k in keys], temperature=0)  # fills the caches
    for k, s in zip(keys, warm):
        hist[k][-1] = Turn(hist[k][-1].user_text, s.token_ids, VALID)
    snapshot = copy.deepcopy(sampler.states)
    out: dict = {}
    results = {}
    for name, (batched, prefill) in SAMPLING_MODES.items():
        sampler.states = copy.deepcopy(snapshot)
        sampler.batched, sampler.batched_prefill = batched, prefill
        n0, t0 = sampler.tokens_processed, time.perf_counter()
        results[name] = policy.sample([req(k, hist[k], step) for k in keys], temperature=0)
        t1 = time.perf_counter()
        out[f"tokens {name}"] = sampler.tokens_processed - n0
        out[f"steps/s {name}"] = group / (t1 - t0)
        print(f"    {name}: {t1 - t0:.2f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    sampler.batched, sampler.batched_prefill = True, True
    sampler.states.clear()
    naive = []
    n0, t0 = sampler.tokens_processed, time.perf_counter()
    for k in keys:  # one episode at a time, whole history re-encoded
        naive += policy.sample([req(k, hist[k], step)], temperature=0)
        policy.forget(k)
    t1 = time.perf_counter()
    out["tokens naive"] = sampler.tokens_processed - n0
    out["steps/s naive"] = group / (t1 - t0)
    out["greedy identical"] = all(
        a.token_ids == b.token_ids for r in results.values() for a, b in zip(r, naive)
    )
    out["context tokens/episode"] = len(policy.prompt_ids(req(keys[0], hist[keys[0]], step).turns))
    return out


def footprint(quantization: str) -> dict:
    code = (
        "import os, torch; torch.set_num_threads(1)\n"
        "def rss(): return int([l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1]) / 1024\n"
        "from empo2_studio.config import PolicyConfig\nfrom empo2_studio.policy import load_policy\n"
        "import transformers, peft\nr0 = rss()\n"
        f"p = load_policy(PolicyConfig(quantization={quantization!r}, device='cpu'))\n"
        "with torch.no_grad(): p.model(input_ids=torch.tensor([[1, 2, 3]]))  # touch the mmapped weights\n"
        "print(rss() - r0, p.model.get_memory_footprint() / 2**20)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": "."})
    rss, fp = map(float, out.stdout.split()[-2:])
    return {"rss MB": rss, "footprint MB": fp}


def matmul_flops(n: int = 1024, reps: int = 10) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.perf_counter() - t)


def bench_training(policy, turns: int) -> dict:
    conv = _history(policy, 1, turns)
    ids, _ = policy.chat_format.conversation_ids(conv)
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-5)
    t = time.perf_counter()
    loss = -torch.cat(policy.score([conv])[0]).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    tok_s = len(ids) / (time.perf_counter() - t)
    params = sum(p.numel() for p in policy.model.parameters())
    flops = matmul_flops()
    limit = flops / (6 * params)
    return {"train tokens/s": tok_s, "matmul GFLOP/s": flops / 1e9, "limit tokens/s": limit, "fraction of limit": tok_s / limit}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--step", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sections", default="packed,sampling,lora,memory", help="comma-separated subset to run")
    ap.add_argument("--quantization", default="none", help="for sampling and training (packed is fp32)")
    add_result_option(ap)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    print(f"load average at start: {os.getloadavg()}")
    rows: list[tuple[str, object]] = []

    def add(section: str, values: dict) -> None:  # print as we go: a loaded machine may stop us early
        for k, v in values.items():
            rows.append((f"{section}/{k}", v))
            print(f"  {section}/{k} = {v}", flush=True)

    sections = set(args.sections.split(","))
    fp32 = load_policy(PolicyConfig(quantization="none", device="cpu")) if "packed" in sections or args.quantization == "none" else None
    if "packed" in sections:
        add("packed", bench_packed(fp32, args.turns))
    pol = fp32 if args.quantization == "none" else load_policy(PolicyConfig(quantization=args.quantization, device="cpu"))
    if "sampling" in sections:
        add("sampling", bench_sampling(pol, args.group, args.step))
    if "lora" in sections:
        add("lora", bench_training(pol, args.turns))
    if "memory" in sections:
        for q in ("none", "4bit"):
            add("memory", {f"{q} {k}": v for k, v in footprint(q).items()})
    d = dict(rows)
    ratios = [  # (name, numerator key, denominator key)
        ("ratio packed tokens (goal ≥ 8)", "packed/tokens per-turn", "packed/tokens packed"),
        ("ratio packed time (goal ≥ 5)", "packed/time per-turn s", "packed/time packed s"),
        *[(f"ratio sampling steps/s {m} / naive (goal ≥ 8)", f"sampling/steps/s {m}", "sampling/steps/s naive") for m in SAMPLING_MODES],
        ("ratio memory 4bit/fp32 footprint (goal ≤ 0.35)", "memory/4bit footprint MB", "memory/none footprint MB"),
        ("ratio memory 4bit/fp32 rss", "memory/4bit rss MB", "memory/none rss MB"),
    ]
    rows += [(name, d[num] / d[den]) for name, num, den in ratios if num in d and den in d]
    print(f"load average at end: {os.getloadavg()}")
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v:.4g}" if isinstance(v, float) else f"{k:<{width}}  {v}")
    write_result(args.result, __file__, argv, started, [], dict(rows), threads=args.threads)


if __name__ == "__main__":
    main()
