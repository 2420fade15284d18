"""bf16 on an AVX2 CPU: our kernels (specviz.models.bf16linear) against F.linear, regular and speculative.

    .venv/bin/python bench/bf16_kernel.py [--prompts FILE] [--batch-sizes 1,8] [--k 2] [--rounds 3]
                                          [--max-new-tokens 64] [--sides plain,kernel,fused,packed] [--json OUT]

In one process, interleaved (the order rotates every round), per batch size: regular decoding and the
default pair at k through the CLI's engine (specviz.measure.bench.engine_arm), on four sides: plain
F.linear (SPECVIZ_BF16_KERNEL=0), the linear kernel alone (SPECVIZ_BF16_FUSED=0), the kernel with the
lean forward's other steps fused, and that over the kernel's packed weight copy (SPECVIZ_BF16_REPACK; all
on: the default), the packaged target in bf16, greedy (``--sides`` picks some, the first the reference). Each arm
sets the switches before it runs (the kernels read them every call). Prints tokens/s per round, each
side's speed-up over the first side and over the side before it, speculative over regular within each
side, and whether greedy outputs equal the first side's. Results: BENCHMARKS.md, "bf16 on an AVX2 CPU".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics

from specviz.measure.bench import engine_arm, interleaved, outputs, warm_up
from specviz.models import bf16linear, packed
from specviz.run import load_pair, read_prompts
from specviz.runconfig import RunConfig


SIDES = {"plain": {"SPECVIZ_BF16_KERNEL": "0"},
         "kernel": {"SPECVIZ_BF16_KERNEL": "1", "SPECVIZ_BF16_FUSED": "0", "SPECVIZ_BF16_REPACK": "0"},
         "fused": {"SPECVIZ_BF16_KERNEL": "1", "SPECVIZ_BF16_FUSED": "1", "SPECVIZ_BF16_REPACK": "0"},
         "packed": {"SPECVIZ_BF16_KERNEL": "1", "SPECVIZ_BF16_FUSED": "1", "SPECVIZ_BF16_REPACK": "1"}}


def switched(arm, side: str):
    def run():
        os.environ.update(SIDES[side])
        return arm()
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", default="bench/results/llamacpp-peer-2026-12-06/prompts.jsonl")
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--sides", default=",".join(SIDES), help=f"which of {', '.join(SIDES)}, in order")
    ap.add_argument("--json", metavar="OUT")
    a = ap.parse_args()
    sides = a.sides.split(",")
    if not sides or set(sides) - set(SIDES):
        raise SystemExit(f"--sides: a comma-separated list of {', '.join(SIDES)}")
    if packed.cpu_packs_bf16() or not bf16linear.available():
        raise SystemExit("the kernel is not the bf16 path on this machine (oneDNN packs bf16, or no AVX2/compiler)")
    prompts = read_prompts(a.prompts)
    target, proposer = load_pair(RunConfig(prompts=prompts, dtype="bfloat16", device="cpu"))
    out = {"prompts": a.prompts, "k": a.k, "max_new_tokens": a.max_new_tokens, "rounds": a.rounds, "by_batch": {}}
    for b in (int(x) for x in a.batch_sizes.split(",")):
        spec = RunConfig(prompts=prompts, batch_size=b, max_new_tokens=a.max_new_tokens, dtype="bfloat16",
                         device="cpu", draft_length=a.k)
        base = dataclasses.replace(spec, mode="regular")
        arms = {}
        for side in sides:
            os.environ.update(SIDES[side])
            warm_up(base, target, None)
            warm_up(spec, target, proposer)
            arms[f"{side} regular"] = switched(engine_arm(base, target, None), side)
            arms[f"{side} k={a.k}"] = switched(engine_arm(spec, target, proposer), side)
        res = interleaved(arms, a.rounds, reference=f"{sides[0]} regular",
                          on_round=lambda r, got: print(f"B={b} round {r + 1}: " + ", ".join(
                              f"{k} {v:.1f}" for k, v in got.items()), flush=True))
        med = {k: statistics.median(v.tok_s) for k, v in res.items()}
        modes = ("regular", f"k={a.k}")
        ratio = {f"{s} / {ref}, {m}": [x / y for x, y in zip(res[f"{s} {m}"].tok_s, res[f"{ref} {m}"].tok_s)]
                 for s, ref in {(s, r) for i, s in enumerate(sides[1:]) for r in (sides[0], sides[i])}
                 for m in modes}
        spec_over = {s: [x / y for x, y in zip(res[f"{s} k={a.k}"].tok_s, res[f"{s} regular"].tok_s)]
                     for s in sides}
        same = {f"{s} {m}": outputs(res[f"{s} {m}"].traces[0]) == outputs(res[f"{sides[0]} {m}"].traces[0])
                for s in sides[1:] for m in modes}
        print(f"B={b}: medians " + ", ".join(f"{k} {v:.1f} tok/s" for k, v in med.items()))
        for k, xs in ratio.items():
            print(f"B={b}: {k}: {[round(x, 2) for x in xs]} median {statistics.median(xs):.2f}")
        print(f"B={b}: greedy outputs equal to {sides[0]}'s: {same}")
        for s, xs in spec_over.items():
            print(f"B={b}: {s}: k={a.k} / regular {[round(x, 2) for x in xs]} median {statistics.median(xs):.2f}")
        out["by_batch"][b] = {"tok_s": {k: v.tok_s for k, v in res.items()}, "ratios": ratio,
                              "spec_over_regular": spec_over, "outputs_equal": same}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
