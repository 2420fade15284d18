"""What `--dtype auto` gives on this CPU: the default run in float32 against the same run in bfloat16.

    .venv/bin/python bench/auto_dtype.py [--prompts FILE] [--batch-sizes 1,8] [--rounds 3]
                                         [--max-new-tokens 64] [--json OUT]

In one process, interleaved (the order rotates every round), per batch size: regular decoding and the
default run (the CLI's defaults: draft `default`, k = 2, fixed policy, greedy) with the packaged target in
float32 (its default draft: its own weights in bf16) and in bfloat16 (the shipped distilled draft; on an AVX2
CPU the bf16 linears run through our kernel, specviz.models.bf16linear). Prints tokens/s per round, bf16 over
fp32 per arm, and speculative over regular within each dtype: the speed-up a user gets where auto picks
bf16 instead of fp32. Results: BENCHMARKS.md, "--dtype auto on an AVX2 CPU".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics

from specviz.measure.bench import engine_arm, interleaved, warm_up
from specviz.models.loading import resolve_dtype
from specviz.run import load_pair, read_prompts
from specviz.runconfig import RunConfig

DTYPES = ("float32", "bfloat16")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", default="bench/results/llamacpp-peer-2026-12-06/prompts.jsonl")
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--json", metavar="OUT")
    a = ap.parse_args()
    import torch

    auto = str(resolve_dtype("auto", torch.device("cpu"))).removeprefix("torch.")
    print(f"--dtype auto picks {auto} on this CPU", flush=True)
    prompts = read_prompts(a.prompts)
    pairs = {dt: load_pair(RunConfig(prompts=prompts, dtype=dt, device="cpu")) for dt in DTYPES}
    out = {"prompts": a.prompts, "max_new_tokens": a.max_new_tokens, "rounds": a.rounds, "auto_picks": auto,
           "drafts": {dt: p[1].name for dt, p in pairs.items()}, "by_batch": {}}
    for b in (int(x) for x in a.batch_sizes.split(",")):
        arms = {}
        for dt, (target, proposer) in pairs.items():
            spec = RunConfig(prompts=prompts, batch_size=b, max_new_tokens=a.max_new_tokens, dtype=dt, device="cpu")
            base = dataclasses.replace(spec, mode="regular")
            warm_up(base, target, None)
            warm_up(spec, target, proposer)
            arms[f"{dt} regular"] = engine_arm(base, target, None)
            arms[f"{dt} default"] = engine_arm(spec, target, proposer)
        res = interleaved(arms, a.rounds, reference="float32 regular",
                          on_round=lambda r, got: print(f"B={b} round {r + 1}: " + ", ".join(
                              f"{k} {v:.1f}" for k, v in got.items()), flush=True))
        med = {k: statistics.median(v.tok_s) for k, v in res.items()}
        bf16_over = {m: [x / y for x, y in zip(res[f"bfloat16 {m}"].tok_s, res[f"float32 {m}"].tok_s)]
                     for m in ("regular", "default")}
        spec_over = {dt: [x / y for x, y in zip(res[f"{dt} default"].tok_s, res[f"{dt} regular"].tok_s)]
                     for dt in DTYPES}
        print(f"B={b}: medians " + ", ".join(f"{k} {v:.1f} tok/s" for k, v in med.items()))
        for m, xs in bf16_over.items():
            print(f"B={b}: bfloat16 / float32, {m}: {[round(x, 2) for x in xs]} median {statistics.median(xs):.2f}")
        for dt, xs in spec_over.items():
            print(f"B={b}: {dt}: default / regular {[round(x, 2) for x in xs]} median {statistics.median(xs):.2f}")
        out["by_batch"][b] = {"tok_s": {k: v.tok_s for k, v in res.items()}, "bf16_over_fp32": bf16_over,
                              "spec_over_regular": spec_over}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
