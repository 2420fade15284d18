"""Where does a decode step's time go? torch.profiler over a few steps of one run.

    python bench/gpu_profile.py [--device cuda] [--batch-size 8] [--draft-length 3] [--steps 12]

Prints the step records' phase times and the top ops by self CPU time (and by self CUDA time on
a GPU), so a host-bound step (Python, launches, host-device syncs) shows which op pays. Made for
the open GPU finding in BENCHMARKS.md: the engine's bench on an H200 host ran 2-3x slower than a
bare forward of the same model.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from specviz.prompts.sets import CHAT  # noqa: E402
from specviz.runconfig import RunConfig  # noqa: E402
from specviz.run import iter_run, load_pair, run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--draft", default="default")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--draft-length", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12, help="steps profiled (after 4 unprofiled ones)")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    cfg = RunConfig(prompts=list(CHAT), batch_size=a.batch_size, draft_length=a.draft_length, draft=a.draft,
                    device=a.device, dtype=a.dtype, max_new_tokens=a.steps * (a.draft_length + 1) + 16)
    target, proposer = load_pair(cfg)
    run(RunConfig(**{**cfg.__dict__, "max_new_tokens": 8}), target, proposer, telemetry=False)  # warm-up
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if target.device.type == "cuda" else [])
    recs = []
    with torch.profiler.profile(activities=acts) as prof:
        for _, rec in iter_run(cfg, target, proposer, telemetry=False):
            if rec is None:
                break
            recs.append(rec)
            if len(recs) >= 4 + a.steps:
                break
    prof_steps = recs[4:] or recs
    for key in ("t_draft", "t_verify", "t_accept", "t_bookkeeping"):
        print(f"{key:>14}: {1e3 * sum(getattr(r, key) for r in prof_steps) / len(prof_steps):7.2f} ms/step (profiled, so inflated)")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.top))
    if target.device.type == "cuda":
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=a.top))


if __name__ == "__main__":
    main()
