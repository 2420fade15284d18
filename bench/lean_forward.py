"""Our lean llama forward (specviz/fastllama.py) vs transformers' forward, inside our engine.

Same process, same prompts, interleaved round by round: regular and speculative decoding at
each batch size with SPECVIZ_LEAN_FORWARD=1 and =0 (the RaggedCache reads it when built). Also
checks that greedy outputs agree between the two forwards (bf16 may differ on exact ties).

    python bench/lean_forward.py [--batch-sizes 1,8] [--rounds 3] [--draft-length 2]
"""

import argparse
import dataclasses
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.analysis.trace import tokens_per_s  # noqa: E402
from specviz.runconfig import RunConfig  # noqa: E402
from specviz.run import load_pair, read_prompts, run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__), "prompts.txt"))
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--draft-length", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    base = RunConfig(prompts=read_prompts(a.prompts), max_new_tokens=a.max_new_tokens, dtype=a.dtype,
                     draft_length=a.draft_length)
    target, proposer = load_pair(base)
    print(f"target {target.name} ({target.dtype}); draft {proposer.name}; k={a.draft_length}; "
          f"{len(base.prompts)} prompts x {a.max_new_tokens} tokens; rounds {a.rounds}", flush=True)
    arms = []
    for b in map(int, a.batch_sizes.split(",")):
        for mode in ("regular", "speculative"):
            arms.append((b, mode))
    res = {(b, m, lean): [] for b, m in arms for lean in ("1", "0")}
    outs = {}
    for lean in ("1", "0"):  # warm-up both paths
        os.environ["SPECVIZ_LEAN_FORWARD"] = lean
        run(dataclasses.replace(base, max_new_tokens=4), target, proposer, telemetry=False)
    for r in range(a.rounds):
        for b, mode in arms:
            for lean in (("1", "0") if r % 2 == 0 else ("0", "1")):
                os.environ["SPECVIZ_LEAN_FORWARD"] = lean
                cfg = dataclasses.replace(base, batch_size=b, mode=mode)
                traces = [run(c, target, proposer if mode == "speculative" else None, telemetry=False)
                          for c in cfg.every_prompt()]
                res[(b, mode, lean)].append(tokens_per_s(traces))
                outs[(b, mode, lean)] = [s["output_token_ids"] for t in traces for s in t["sequences"]]
        print(f"round {r + 1}/{a.rounds} done", flush=True)
    os.environ.pop("SPECVIZ_LEAN_FORWARD", None)
    print("\n| B | mode | transformers' forward tok/s | lean forward tok/s | lean / transformers | same greedy rows |")
    print("|---|---|---|---|---|---|")
    for b, mode in arms:
        hf, lean = statistics.median(res[(b, mode, "0")]), statistics.median(res[(b, mode, "1")])
        ratios = [x / y for x, y in zip(res[(b, mode, "1")], res[(b, mode, "0")])]
        same = sum(x == y for x, y in zip(outs[(b, mode, "1")], outs[(b, mode, "0")]))
        print(f"| {b} | {mode} | {hf:.1f} | {lean:.1f} | {statistics.median(ratios):.2f}x | "
              f"{same}/{len(outs[(b, mode, '1')])} |")


if __name__ == "__main__":
    main()
