"""One training step on a GPU, timed, for scripts/gpu_check.sh (docs/gpu.md).

    python scripts/gpu_step.py empo2 --model DIR --env trap|scienceworld [--out results.jsonl]
    python scripts/gpu_step.py trl   --model DIR [--out results.jsonl]

`empo2`: one EMPO² iteration (a group of `--group` episodes, their tips, the update) with the model in
DIR on CUDA; prints and appends one JSON line: wall time, its sampling / scoring / backward parts,
action tokens sampled, peak GPU memory. `trl`: one step of TRL's GRPOTrainer on the same model, LoRA
rank, group size and completion length, on the trap env's first prompts (single-turn: GRPO has no
episodes), with the same JSON fields where they exist. Compare the two per sampled token: an
EMPO² iteration plays whole episodes (many turns) where a GRPO step answers one prompt.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from empo2_studio.config import EnvConfig, MemoryConfig, PolicyConfig, RolloutConfig, RunConfig, TrainConfig

TASKS = {"trap": ("trap-light-bulb", 20), "scienceworld": ("power-component", 15)}
"""env → (task, step limit) kept short so the whole check stays near 10 minutes."""


def _record(out: Path | None, row: dict) -> None:
    line = json.dumps(row)
    print(line, flush=True)
    if out is not None:
        with open(out, "a") as fh:
            fh.write(line + "\n")


def _peak_gib() -> float:
    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0


def _reset_peak() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def run_empo2(a: argparse.Namespace) -> dict:
    from empo2_studio.sessions import Session
    from empo2_studio.trainer import Trainer

    task, limit = TASKS[a.env]
    limit = a.step_limit or limit
    cfg = RunConfig(
        run_id=f"gpu-check-{a.env}",
        env=EnvConfig(name=a.env, task=task, variations=(0,), step_limit=limit),
        policy=PolicyConfig(model=a.model, device=a.device, quantization=a.quantization),
        memory=MemoryConfig(embedder="hash"),
        rollout=RolloutConfig(group_size=a.group, forced_mode="on-policy"),
        train=TrainConfig(iterations=1),
    )
    with tempfile.TemporaryDirectory(prefix="empo2-gpu-check-") as tmp:
        session = Session.create(tmp, cfg)
        t0 = time.perf_counter()
        trainer = Trainer(cfg, session)
        load_s = time.perf_counter() - t0
        _reset_peak()
        t0 = time.perf_counter()
        report = trainer.step()
        _sync()
        wall = time.perf_counter() - t0
        episodes = session.episodes(list(report.episode_ids))
        trainer.close()
    m = report.metrics
    tokens = sum(len(s.sample.token_ids) for ep in episodes for s in ep.steps)
    return {
        "part": f"empo2-{a.env}", "model": a.model, "group": a.group, "load_s": round(load_s, 1),
        "step_s": round(wall, 2), "sampling_s": round(m.get("time/sampling", 0.0), 2),
        "scoring_s": round(m.get("time/scoring", 0.0), 2), "backward_s": round(m.get("time/backward", 0.0), 2),
        "turns": sum(len(ep.steps) for ep in episodes), "sampled_tokens": tokens,
        "s_per_1k_sampled_tokens": round(1000 * wall / max(tokens, 1), 3),
        "score_mean": m.get("rollout/score_mean"), "ratio_mean": m.get("ratio/mean"),
        "ratio_min": m.get("ratio/min"), "ratio_max": m.get("ratio/max"), "peak_gib": round(_peak_gib(), 2),
        "dtype": str(next(trainer.policy.model.parameters()).dtype),
    }  # fmt: skip


def _trap_prompts(n: int) -> tuple[list[list[dict]], tuple[str, ...]]:
    from empo2_studio.envs import make_env
    from empo2_studio.policy.prompts import first_user_message

    env = make_env(EnvConfig(name="trap"))
    task = TASKS["trap"][0]
    obs = env.reset(task, 0)
    text = first_user_message("trap", obs, env.fewshot_examples(task))
    env.close()
    return [[{"role": "user", "content": text}] for _ in range(n)], obs.valid_actions


def run_trl(a: argparse.Namespace) -> dict:
    import dataclasses

    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    prompts, valid = _trap_prompts(a.group)
    completions_seen = [0]

    def reward(completions, **kw):  # 1 for a valid action on the first line, as the trap env would accept
        out = []
        for c in completions:
            text = c[-1]["content"] if isinstance(c, list) else str(c)
            completions_seen[0] += 1
            out.append(1.0 if text.strip().split("\n")[0].strip() in valid else 0.0)
        return out

    wanted = dict(
        output_dir=tempfile.mkdtemp(prefix="trl-gpu-check-"), per_device_train_batch_size=a.group,
        num_generations=a.group, max_completion_length=32, max_steps=1, learning_rate=1e-4,
        bf16=torch.cuda.is_bf16_supported(), logging_steps=1, report_to=[], save_strategy="no",
        gradient_accumulation_steps=1, temperature=1.0,
    )  # fmt: skip
    known = {f.name for f in dataclasses.fields(GRPOConfig)}
    args = GRPOConfig(**{k: v for k, v in wanted.items() if k in known})
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])  # fmt: skip
    trainer = GRPOTrainer(model=a.model, reward_funcs=[reward], args=args,
                          train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]), peft_config=lora)  # fmt: skip
    _reset_peak()
    t0 = time.perf_counter()
    trainer.train()
    _sync()
    wall = time.perf_counter() - t0
    return {"part": "trl-grpo-trap", "model": a.model, "group": a.group, "step_s": round(wall, 2),
            "completions": completions_seen[0], "peak_gib": round(_peak_gib(), 2),
            "note": "single-turn GRPO step; compare per sampled token with empo2-trap"}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=("empo2", "trl"))
    ap.add_argument("--model", required=True, help="a local model directory")
    ap.add_argument("--env", choices=tuple(TASKS), default="trap")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--step-limit", type=int, default=None, help="steps per episode (default: 20 trap, 15 ScienceWorld)")
    ap.add_argument("--quantization", default="auto", choices=("auto", "4bit", "8bit", "none"))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # "cpu": a dry run of this script
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: skipped")
        return
    _record(a.out, run_empo2(a) if a.what == "empo2" else run_trl(a))


if __name__ == "__main__":
    main()
