"""Draft-length policies side by side at one batch size, in one process, interleaved.

Every round runs regular decoding and each policy once on the same prompts (greedy), in an
order that rotates each round, so the machine's drift hits every policy alike. Reported per
policy: median tokens/s, the median of its per-round ratio to the same round's regular pass,
acceptance rate and the mean draft length it chose.

    python bench/policies.py --batch-size 8 --rounds 5 \
        --policies fixed:1,fixed:2,fixed:3,heuristic:2,bass:2,bass-capped:2,analytic:2

`analytic` and `bass-capped` read the cached calibration for the pair
(`python -m specviz calibrate --dtype bfloat16 --draft default` first); without one they fall
back to the batch-1 formula, and this script says so.
"""

import argparse
import dataclasses
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.calibrate import load_calibration  # noqa: E402
from specviz.runner import RunConfig, load_pair, read_prompts, run, tokens_per_s  # noqa: E402


def parse_policies(text: str) -> list[tuple[str, int]]:
    out = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, _, k = item.partition(":")
        out.append((name, int(k or 2)))
    return out


def mean_k(trace: dict) -> float:
    steps = trace["steps"]
    return sum(s["k"] for s in steps) / max(1, len(steps))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__), "prompts.txt"))
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--draft", default="default")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--policies", default="fixed:1,fixed:2,fixed:3,heuristic:2,bass:2,bass-capped:2,analytic:2",
                    help="NAME:K,... (K: the fixed or starting draft length)")
    a = ap.parse_args()

    base = RunConfig(prompts=read_prompts(a.prompts), batch_size=a.batch_size, max_new_tokens=a.max_new_tokens,
                     draft=a.draft, dtype=a.dtype)
    base.validate()
    target, proposer = load_pair(base)
    cal = load_calibration(target, proposer)
    print(f"target {target.name} ({target.dtype}); draft {proposer.name}; B={a.batch_size}; "
          f"{len(base.prompts)} prompts, {a.max_new_tokens} new tokens; rounds {a.rounds}; calibration: "
          + (f"{cal.created}" if cal is not None else "none (analytic / bass-capped use the batch-1 formula)"),
          flush=True)
    arms = [("regular", dataclasses.replace(base, mode="regular"), None)]
    arms += [(f"{name} (k={k})", dataclasses.replace(base, controller=name, draft_length=k), proposer)
             for name, k in parse_policies(a.policies)]
    run(dataclasses.replace(base, max_new_tokens=8, draft_length=2), target, proposer, telemetry=False)  # warm-up
    results = {label: {"tok_s": [], "ratio": [], "acc": [], "k": []} for label, _, _ in arms}
    for r in range(a.rounds):
        order = arms[r % len(arms):] + arms[: r % len(arms)]
        got = {}
        for label, cfg, prop in order:
            traces = [run(c, target, prop, telemetry=False) for c in cfg.every_prompt()]
            got[label] = tokens_per_s(traces)
            res = results[label]
            res["tok_s"].append(got[label])
            drafted = sum(t["summary"]["drafted"] for t in traces)
            res["acc"].append(sum(t["summary"]["accepted"] for t in traces) / drafted if drafted else float("nan"))
            res["k"].append(statistics.mean(mean_k(t) for t in traces))
        for label in got:
            results[label]["ratio"].append(got[label] / got["regular"])
        print(f"round {r + 1}/{a.rounds}: " + ", ".join(f"{lbl} {v:.1f}" for lbl, v in got.items()), flush=True)

    print(f"\n| policy | tokens/s (median) | vs regular (median of per-round ratios) | acceptance rate | mean k |")
    print("|---|---|---|---|---|")
    for label, res in results.items():
        print(f"| {label} | {statistics.median(res['tok_s']):.1f} | {statistics.median(res['ratio']):.2f}x "
              f"| {statistics.median(res['acc']):.3f} | {statistics.median(res['k']):.2f} |")


if __name__ == "__main__":
    main()
