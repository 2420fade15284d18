"""What a verify forward of T slots per row costs against a decode step of one: the price of speculation's
verified tokens on this machine.

    .venv/bin/python bench/verify_width.py [--widths 1,2,3,5,9] [--batch-size 1] [--dtype bfloat16] [--rounds 3]

In one process, interleaved (every round runs each width in turn): the packaged target's RaggedCache forward of
T slots per row after a 64-token prefill, all logits kept (what a verify reads), median of 10 forwards per round
(the cache cropped back after each). Prints each width's median time and its ratio to T = 1, per round and
overall. Results: BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specviz.engine.ragged import RaggedCache
from specviz.models.forwardoptions import ForwardOptions
from specviz.models.loading import get_model

PREFILL = 64


@torch.inference_mode()
def forward_s(model, B: int, T: int, repeats: int = 10) -> float:
    """Median seconds of a T-slot forward over a PREFILL-slot cache (the same cache, cropped back each time)."""
    kv = RaggedCache(model, options=ForwardOptions())
    g = torch.Generator().manual_seed(T)
    kv.forward(torch.randint(0, 1000, (B, PREFILL), generator=g), torch.ones(B, PREFILL, dtype=torch.bool),
               last_only=True)
    ids, valid = torch.randint(0, 1000, (B, T), generator=g), torch.ones(B, T, dtype=torch.bool)  # [B, T]
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        kv.forward(ids, valid)
        times.append(time.perf_counter() - t)
        kv.cache.crop(-T)
        kv.valid, kv.lengths = kv.valid[:, :-T], kv.lengths - T
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--widths", default="1,2,3,5,9")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    widths = [int(w) for w in a.widths.split(",")]
    if widths[0] != 1:
        raise SystemExit("--widths: start with 1 (the decode step the others are compared with)")
    model = get_model("default", "cpu", a.dtype).model
    forward_s(model, a.batch_size, 1)  # warm-up: the kernel's weight copies, the allocator
    runs = {T: [] for T in widths}
    for r in range(a.rounds):
        for T in widths:
            runs[T].append(forward_s(model, a.batch_size, T))
        print(f"round {r + 1}: " + ", ".join(f"T={T} {runs[T][-1] * 1e3:.2f} ms "
                                             f"({runs[T][-1] / runs[1][-1]:.2f}x)" for T in widths), flush=True)
    print(f"B = {a.batch_size}, {a.dtype}, {torch.get_num_threads()} threads, after a {PREFILL}-slot prefill:")
    for T in widths:
        ratios = [t / one for t, one in zip(runs[T], runs[1])]
        print(f"T={T}: {statistics.median(runs[T]) * 1e3:.2f} ms, {statistics.median(ratios):.2f}x a one-slot step "
              f"({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
