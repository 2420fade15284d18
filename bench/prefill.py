"""Long-prompt prefill in bf16 through our kernel, and the kernel's rate at many rows.

    .venv/bin/python bench/prefill.py [--label NAME] [--shapes B:L,B:L] [--rows 256,3840] [--reps 3]

Prints one line: the packaged target's prefill (one forward over B left-padded rows of L tokens, the
engine's RaggedCache, best of --reps) in ms and tokens/s for each shape, then the kernel's GFLOP/s on the
target's linear shapes at each row count (specviz.models.bf16linear.linear, bf16 x and weights). Run it
from two checkouts in alternating processes to compare kernels (TORCH_EXTENSIONS_DIR apart, so each loads
its own build). Results: BENCHMARKS.md, "Long prompts through the kernel in passes, distill training in
float32 on an AVX2 CPU".
"""

from __future__ import annotations

import argparse
import time

import torch

from specviz.engine.ragged import RaggedCache, left_pad
from specviz.models import bf16linear
from specviz.models.loading import get_model

SHAPES = [(1536, 576), (576, 1536), (3072, 576)]  # [out, in]: the fused q/k/v-sized, down, gate|up


def prefill_ms(target, B: int, L: int, reps: int) -> float:
    rows = [[(7 * i + 13 * b) % 40000 + 100 for i in range(L)] for b in range(B)]  # fixed, varied token ids
    best = float("inf")
    for _ in range(reps):
        kv = RaggedCache(target.model, 0)
        ids, valid = left_pad(rows, 0, target.device)  # [B, L]
        t = time.perf_counter()
        with torch.no_grad():
            kv.forward(ids, valid, last_only=True)
        best = min(best, time.perf_counter() - t)
    return best * 1000


def kernel_gflops(M: int, out: int, inp: int) -> float:
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(out, inp, generator=g) * 0.05).bfloat16()  # [out, in]
    x = torch.randn(M, inp, generator=g).bfloat16()  # [M, in]
    bf16linear.linear(x, w)
    reps = max(3, 4000 // M)
    t = time.perf_counter()
    for _ in range(reps):
        bf16linear.linear(x, w)
    return 2 * M * out * inp / ((time.perf_counter() - t) / reps) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="this checkout")
    ap.add_argument("--shapes", default="1:512,8:480", help="B:L prefill shapes")
    ap.add_argument("--rows", default="256,3840", help="row counts for the kernel alone")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    target = get_model("default", "cpu", "bfloat16")
    parts = []
    for shape in a.shapes.split(","):
        B, L = map(int, shape.split(":"))
        ms = prefill_ms(target, B, L, a.reps)
        parts.append(f"prefill B{B}xL{L} {ms:7.0f} ms ({B * L / ms * 1000:5.0f} tok/s)")
    for M in map(int, a.rows.split(",")):
        parts += [f"{out}x{inp} M{M} {kernel_gflops(M, out, inp):6.1f} GFLOP/s" for out, inp in SHAPES]
    print(a.label, " | ".join(parts), flush=True)


if __name__ == "__main__":
    main()
