"""Why a decoding forward on this CPU costs the same whatever the batch: weight-read rate by rows and dtype.

A decoding forward of the embedded model multiplies M rows (the unfinished episodes, 1 token each) by
every weight matrix once. With M small the product is bound by reading the weights, not by arithmetic,
so its cost is (weight bytes) ÷ (the rate the GEMM kernel reads them). This times SmolLM2-135M's MLP
shapes (576 × 1536, 90 matrices = 318 MB in fp32, about 60 % of the model's weights) at M = 1, 8, 64,
256 in fp32, and at M = 8 in bf16 and fp16 (half the bytes: a lever only if the kernel keeps its rate).
Prints seconds per pass, GFLOP/s and GB/s of weights read; best of `--repeats` passes.

Run: PYTHONPATH=. .venv/bin/python benchmarks/bench_gemm.py [--repeats 5] [--result NAME]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import add_result_option, write_result  # noqa: E402

HIDDEN, INTERMEDIATE, MATRICES = 576, 1536, 90
"""SmolLM2-135M: 30 layers × (gate, up, down) MLP matrices of 576 × 1536."""


def best_seconds(x: torch.Tensor, weights: list[torch.Tensor], repeats: int) -> float:
    for w in weights[:4]:
        x @ w  # warm the kernel up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for w in weights:
            x @ w
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    add_result_option(ap)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    torch.manual_seed(0)
    fp32 = [torch.randn(HIDDEN, INTERMEDIATE) for _ in range(MATRICES)]
    print(f"threads {torch.get_num_threads()}, {MATRICES} matrices {HIDDEN}×{INTERMEDIATE}\n")
    print("| rows M | dtype | s per pass | GFLOP/s | weights GB/s | vs M = 1 fp32 time |")
    print("|---|---|---|---|---|---|")
    base = None
    rows_out = []
    cases = [(1, torch.float32), (8, torch.float32), (64, torch.float32), (256, torch.float32),
             (8, torch.bfloat16), (8, torch.float16)]  # fmt: skip
    for rows, dtype in cases:
        weights = fp32 if dtype is torch.float32 else [w.to(dtype) for w in fp32]
        x = torch.randn(rows, HIDDEN, dtype=dtype)
        s = best_seconds(x, weights, args.repeats)
        base = base or s
        gbytes = sum(w.numel() * w.element_size() for w in weights) / 1e9
        gflops = 2 * rows * HIDDEN * INTERMEDIATE * MATRICES / s / 1e9
        name = str(dtype).removeprefix("torch.")
        print(f"| {rows} | {name} | {s:.4f} | {gflops:.1f} | {gbytes / s:.2f} | {s / base:.1f}× |")
        rows_out.append({"rows": rows, "dtype": name, "s_per_pass": s, "gflops": gflops, "weights_gb_s": gbytes / s,
                         "vs_m1_fp32": s / base})  # fmt: skip
    write_result(args.result, __file__, argv, started, [0], rows_out, threads=torch.get_num_threads(), repeats=args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
