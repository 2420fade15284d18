"""Why torch ran slower in the app's worker thread than in the CLI: libgomp teams on 2 cores.

    python bench/omp_threads.py [--runs 2]

1. An 8x576 @ 576x576 bf16 linear (a typical small op of the default model) timed in a fresh
   thread before the main thread has run torch, in the main thread, and in a fresh thread after.
2. A whole B = 8 run of the default pair (k = 2, 64 tokens): in the main thread, then in a worker
   thread (the main thread's OpenMP team now exists), then in a worker thread with 1 torch thread.
"""

import argparse
import os
import statistics
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def in_thread(fn):
    out = {}
    t = threading.Thread(target=lambda: out.update(r=fn()))
    t.start()
    t.join()
    return out["r"]


def small_linear_us(n: int = 3000) -> float:
    a = torch.randn(8, 576, dtype=torch.bfloat16)
    w = torch.randn(576, 576, dtype=torch.bfloat16)
    for _ in range(200):
        torch.nn.functional.linear(a, w)
    t = time.perf_counter()
    for _ in range(n):
        torch.nn.functional.linear(a, w)
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    first = in_thread(small_linear_us)  # before the main thread has touched torch
    main_t = small_linear_us()
    after = in_thread(small_linear_us)
    print(f"8x576 bf16 linear: fresh thread (no other team) {first:.1f} us, main thread {main_t:.1f} us, "
          f"fresh thread after the main thread ran torch {after:.1f} us")

    from specviz.prompts.sets import CHAT
    from specviz.run import RunConfig, load_pair, run

    cfg = RunConfig(prompts=list(CHAT), batch_size=8, draft_length=2, draft="default", max_new_tokens=64)
    target, proposer = load_pair(cfg)
    run(cfg, target, proposer, telemetry=False)  # warm-up

    def timed(threads: int):
        def go():
            torch.set_num_threads(threads)
            return run(cfg, target, proposer, telemetry=False)["summary"]["wall_s"]
        return go

    res = {"main thread, 2 torch threads": [], "worker thread, 2 torch threads": [], "worker thread, 1 torch thread": []}
    for _ in range(a.runs):
        res["main thread, 2 torch threads"].append(timed(2)())
        res["worker thread, 2 torch threads"].append(in_thread(timed(2)))
        res["worker thread, 1 torch thread"].append(in_thread(timed(1)))
    torch.set_num_threads(2)
    for k, v in res.items():
        print(f"B=8 run, {k}: median {statistics.median(v):.2f} s  ({', '.join(f'{x:.2f}' for x in v)})")


if __name__ == "__main__":
    main()
