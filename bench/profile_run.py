"""Where a whole run spends its CPU time, op by op: torch.profiler over one engine run after a warm-up.

    python bench/profile_run.py --draft ngram --draft-length 4 --batch-size 8 --requests 32
    python bench/profile_run.py --draft none --batch-size 8 --requests 32      # regular decoding

Prints the run's steps and wall time, then the top ops by self CPU time (calls, average per call):
compare two modes' tables to see which ops grow. bf16, greedy; the prompts file's first
``--num-prompts`` prompts, cycled over the requests.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.measure.bench import warm_up  # noqa: E402
from specviz.runconfig import RunConfig  # noqa: E402
from specviz.run import load_pair, read_prompts, run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__), "prompts.txt"))
    ap.add_argument("--num-prompts", type=int, default=4)
    ap.add_argument("--draft", default="ngram")
    ap.add_argument("--draft-length", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--rows", type=int, default=16, help="ops listed")
    a = ap.parse_args()
    from torch.profiler import ProfilerActivity, profile

    regular = a.draft == "none"
    cfg = RunConfig(prompts=read_prompts(a.prompts)[: a.num_prompts], draft=a.draft, draft_length=a.draft_length,
                    mode="regular" if regular else "speculative", max_new_tokens=a.max_new_tokens,
                    batch_size=a.batch_size, requests=a.requests, dtype="bfloat16")
    cfg.validate()
    target, proposer = load_pair(cfg)
    warm_up(cfg, target, proposer)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        trace = run(cfg, target, proposer, telemetry=False)
    s = trace["summary"]
    print(f"{'regular' if regular else f'{a.draft} k={a.draft_length}'}, B = {a.batch_size}, "
          f"{s['requests']} requests: {s['steps']} steps, {s['tokens']} tokens, {s['wall_s']:.2f} s")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.rows, max_name_column_width=40))


if __name__ == "__main__":
    main()
