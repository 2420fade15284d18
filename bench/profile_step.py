"""Where a single decode step of the target spends its time: torch.profiler over N one-token
steps with a cached prefix, through transformers' forward (what both our engine and the
transformers peer call).

    python bench/profile_step.py [--dtype bfloat16] [--batch-size 1] [--prefix 128] [--steps 10]

Prints the wall time per step, the CPU time per step, the matrix-multiply share and the top ops.
"""

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.run import get_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--prefix", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lean", action="store_true", help="our lean forward (specviz/fastllama.py) instead of transformers'")
    a = ap.parse_args()
    from torch.profiler import ProfilerActivity, profile

    target = get_model("default", "cpu", a.dtype)
    model = target.model
    ids = torch.randint(0, 1000, (a.batch_size, a.prefix), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        cache = model(ids, use_cache=True).past_key_values
        x = torch.full((a.batch_size, 1), 5)
        pos = torch.full((a.batch_size, 1), a.prefix)

        def step():
            model(x, cache=cache, use_cache=True, position_ids=pos, logits_to_keep=1)
            cache.crop(-1)

        if a.lean:
            from specviz.models import fastllama

            fastllama.fuse_projections(model)
            valid = torch.ones(a.batch_size, a.prefix + 1, dtype=torch.bool)

            def step():  # noqa: F811
                fastllama.forward(model, x, valid, pos, cache, last_only=True)
                cache.crop(-1)

        for _ in range(5):
            step()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        wall = (time.perf_counter() - t0) / a.steps
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(a.steps):
                step()
    ev = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in ev) / a.steps / 1e3
    mm = sum(e.self_cpu_time_total for e in ev if e.key in ("aten::mm", "aten::addmm", "aten::bmm")) / a.steps / 1e3
    attn = sum(e.self_cpu_time_total for e in ev if "scaled_dot_product" in e.key) / a.steps / 1e3
    linear_bytes = sum(m.weight.numel() * m.weight.element_size() for m in model.modules()
                       if isinstance(m, torch.nn.Linear))
    big = torch.empty(64 * 2**20 // 4)
    dst = torch.empty_like(big)
    dst.copy_(big)  # first touch: page faults, not bandwidth
    t0 = time.perf_counter()
    for _ in range(10):
        dst.copy_(big)
    copy_gbs = 10 * 2 * big.numel() * 4 / (time.perf_counter() - t0) / 1e9
    print(f"{target.name} {a.dtype} B={a.batch_size} prefix={a.prefix}, {torch.get_num_threads()} threads, "
          f"{'lean' if a.lean else 'transformers'} forward")
    in_mm = (f"{linear_bytes / (mm * 1e-3) / 1e9:.1f} GB/s in the matmuls" if mm else
             "no aten matmul ran (our bf16 kernel's calls are not aten ops: the profiler does not see them)")
    print(f"matrix weights {linear_bytes / 1e6:.0f} MB per step: {in_mm}; a 64 MiB copy runs at {copy_gbs:.1f} GB/s "
          "(read + write)")
    print(f"wall per step (no profiler): {1e3 * wall:.1f} ms")
    print(f"profiled CPU time per step: {total:.1f} ms; matrix multiplies {mm:.1f} ms ({100 * mm / total:.0f}%), "
          f"attention {attn:.1f} ms, everything else {total - mm - attn:.1f} ms")
    print(ev.table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
