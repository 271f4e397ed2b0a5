"""Scale-out benchmark: one EMPO² iteration on 1 vs 2 processes, the all-reduce's cost, tokens/s.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_scale.py [--models tiny embedded] [--processes 1 2] [--result NAME]
    PYTHONPATH=. .venv/bin/python benchmarks/bench_scale.py --vllm-url http://127.0.0.1:8000   # GPU check

1. For each model (the tiny random model, the embedded SmolLM2-135M) and process count: a fresh trap
   session (`trap-light-bulb`, `--variations` groups of `--group-size`, step limit `--step-limit`,
   on-policy, hash embedder), `--iterations` iterations; 1 process = the default `Trainer`, N > 1 =
   `torchrun --standalone --nproc_per_node N` running `DistributedTrainer` (gloo on CPU, nccl on CUDA).
   Reported: seconds per iteration, the update's all-reduce seconds (`time/allreduce`: the counts and
   metrics; since the switch to DDP the gradient all-reduce runs inside the backward pass, overlapped,
   and is not in it), and action tokens (sampled + trained) per second per process (= per GPU on CUDA).
2. The all-reduce alone: the LoRA gradient buffer's size, mean of 20 all-reduces.
3. With `--vllm-url`: rollout throughput of the vLLM sampler vs the local HF sampler on the same model
   (`--vllm-model`, free decoding, a group of `--group-size` trap episodes): action tokens per second.
The machine's load average is printed: on this project's 2-core CPU other jobs share the cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import add_result_option, write_result  # noqa: E402


def _cfg(args, world: int):
    from empo2_studio.config import EnvConfig, MemoryConfig, PolicyConfig, RolloutConfig, RunConfig, ScaleConfig, TrainConfig

    return RunConfig(
        run_id="bench", env=EnvConfig(name="trap", task="trap-light-bulb", variations=(0, 1), step_limit=args.step_limit),
        policy=PolicyConfig(warm_start="none"), memory=MemoryConfig(embedder="hash"),
        rollout=RolloutConfig(group_size=args.group_size, variations_per_iteration=args.variations, forced_mode="on-policy"),
        train=TrainConfig(iterations=args.iterations, checkpoint_every=1000), scale=ScaleConfig(processes=world),
    )  # fmt: skip


def _policy(model: str):
    import torch

    from empo2_studio.config import PolicyConfig
    from empo2_studio.policy import build_tiny_policy, load_policy

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    return build_tiny_policy(seed=0) if model == "tiny" else load_policy(PolicyConfig(warm_start="none"))


def worker(args) -> None:
    """One rank of a run: train, then time the bare all-reduce; rank 0 writes the result JSON."""
    import torch
    import torch.distributed as dist

    from empo2_studio.memory import make_embedder
    from empo2_studio.scale import launched_world_size
    from empo2_studio.sessions import Session

    world = launched_world_size()
    root = Path(args.root)
    policy = _policy(args.model)
    if world == 1:
        from empo2_studio.trainer import Trainer

        trainer = Trainer(_cfg(args, 1), Session.create(root, _cfg(args, 1)), policy=policy, embedder=make_embedder("hash"))
        ctx = None
    else:
        from empo2_studio.scale.dist import DistContext
        from empo2_studio.scale.trainer import DistributedTrainer

        ctx = DistContext.from_env()
        if ctx.is_main:
            Session.create(root, _cfg(args, world))
        ctx.barrier()
        trainer = DistributedTrainer(_cfg(args, world), Session.open(root, "bench"), ctx=ctx, policy=policy,
                                     embedder=make_embedder("hash"))  # fmt: skip
    reports = trainer.train(args.iterations)
    trainer.close()
    rows = [r.metrics for r in reports]
    episodes = Session.open(root, "bench").episodes()
    sampled = sum(len(s.sample.token_ids) for ep in episodes for s in ep.steps) / world  # per process
    trained = sum(r["train/tokens"] for r in rows) / world
    seconds = sum(r["time/iteration"] for r in rows)
    params = [p for p in policy.trainable_parameters() if p.requires_grad]
    numel = sum(p.numel() for p in params)
    ar = 0.0
    if ctx is not None:
        buf = torch.zeros(numel, device=ctx.device if ctx.backend == "nccl" else "cpu")
        dist.all_reduce(buf)
        t0 = time.perf_counter()
        for _ in range(20):
            dist.all_reduce(buf)
        if ctx.backend == "nccl":
            torch.cuda.synchronize()
        ar = (time.perf_counter() - t0) / 20
    out = {
        "model": args.model, "processes": world, "iterations": len(rows), "s_per_iteration": seconds / max(len(rows), 1),
        "allreduce_s": sum(r.get("time/allreduce", 0.0) for r in rows) / max(len(rows), 1),
        "bare_allreduce_ms": ar * 1e3, "lora_params": numel, "tokens_per_s_per_process": (sampled + trained) / seconds,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
    }  # fmt: skip
    if ctx is None or ctx.is_main:
        Path(args.out).write_text(json.dumps(out))
    if ctx is not None:
        ctx.close()


def run(args, model: str, processes: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix=f"bench_scale-{model}-{processes}-"))
    out = tmp / "result.json"
    me = [str(Path(__file__).resolve()), "--worker", "--model", model, "--root", str(tmp / "sessions"), "--out", str(out),
          "--iterations", str(args.iterations), "--group-size", str(args.group_size), "--variations", str(args.variations),
          "--step-limit", str(args.step_limit)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    env.pop("WORLD_SIZE", None)
    if processes == 1:
        cmd = [sys.executable, *me]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}", *me]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{model} × {processes}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


def vllm_vs_hf(args) -> dict:
    """Rollout throughput of the vLLM sampler vs the local HF sampler (same model, free decoding)."""
    import torch

    from empo2_studio.config import EnvConfig, PolicyConfig
    from empo2_studio.envs import make_env
    from empo2_studio.policy import load_policy
    from empo2_studio.rollout import play_group, seed_policy
    from empo2_studio.scale.vllm_sampler import VLLMPolicy

    local = load_policy(PolicyConfig(model=args.vllm_model, decoding="free", warm_start="none", quantization="none"))
    results = {}
    for name, policy in (("hf", local), ("vllm", VLLMPolicy(local, [args.vllm_url], served_model=args.vllm_served_name))):
        envs = [make_env(EnvConfig(name="trap", step_limit=args.step_limit)) for _ in range(args.group_size)]
        seed_policy(policy, 0)
        t0 = time.perf_counter()
        eps = play_group(envs, policy, None, task="trap-light-bulb", variation=0, split="train", rollout_mode="naive",
                         update_mode="on-policy", temperature=1.0, seed=0)  # fmt: skip
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        tokens = sum(len(s.sample.token_ids) for ep in eps for s in ep.steps)
        results[name] = (tokens, dt)
        print(f"{name:5s} sampler: {tokens} action tokens in {dt:.1f} s = {tokens / dt:.1f} tokens/s")
    ratio = (results["vllm"][0] / results["vllm"][1]) / (results["hf"][0] / results["hf"][1])
    print(f"vLLM / HF rollout throughput: {ratio:.2f}×")
    return {**{f"{k}_tokens": t for k, (t, _) in results.items()}, **{f"{k}_s": dt for k, (_, dt) in results.items()},
            "vllm_over_hf": ratio}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["tiny", "embedded"], choices=["tiny", "embedded"])
    p.add_argument("--processes", nargs="+", type=int, default=[1, 2])
    p.add_argument("--iterations", type=int, default=1)
    p.add_argument("--group-size", type=int, default=2)
    p.add_argument("--variations", type=int, default=2)
    p.add_argument("--step-limit", type=int, default=4)
    p.add_argument("--vllm-url", default=None)
    p.add_argument("--vllm-model", default="Qwen/Qwen2.5-0.5B-Instruct")
    p.add_argument("--vllm-served-name", default=None)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--root", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    add_result_option(p)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    started = time.perf_counter()
    print(f"load average {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f}")
    if args.vllm_url:
        write_result(args.result, __file__, argv, started, [0], vllm_vs_hf(args), vllm_model=args.vllm_model)
        return
    rows = []
    for model in args.models:
        for n in args.processes:
            r = run(args, model, n)
            rows.append(r)
            print(json.dumps(r), flush=True)
    print("\n| model | processes | s / iteration | all-reduce in update s | bare all-reduce ms (LoRA params) | tokens/s per process |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['processes']} | {r['s_per_iteration']:.1f} | {r['allreduce_s']:.3f} | "
              f"{r['bare_allreduce_ms']:.2f} ({r['lora_params']:,}) | {r['tokens_per_s_per_process']:.1f} |")
    for model in args.models:
        by = {r["processes"]: r for r in rows if r["model"] == model}
        if 1 in by and 2 in by:
            print(f"{model}: 2 vs 1 processes, iteration time {by[2]['s_per_iteration'] / by[1]['s_per_iteration']:.2f}×")
            rows.append({"model": model, "2_vs_1_iteration_time": by[2]["s_per_iteration"] / by[1]["s_per_iteration"]})
    print(f"load average {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f}")
    write_result(args.result, __file__, argv, started, [0], rows, iterations=args.iterations, group_size=args.group_size)


if __name__ == "__main__":
    main()
