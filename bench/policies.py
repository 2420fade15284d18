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

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from drafts import add_common_args, print_round  # noqa: E402

from specviz.measure.bench import engine_arm, interleaved, warm_up  # noqa: E402
from specviz.measure.calibrate import load_calibration  # noqa: E402
from specviz.runconfig import RunConfig  # noqa: E402
from specviz.run import load_pair, read_prompts  # noqa: E402


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
    add_common_args(ap, batch_size=8, rounds=5)
    ap.add_argument("--draft", default="default")
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
    configs = {"regular": (dataclasses.replace(base, mode="regular"), None)}
    configs.update({f"{name} (k={k})": (dataclasses.replace(base, policy=name, draft_length=k), proposer)
                    for name, k in parse_policies(a.policies)})
    warm_up(dataclasses.replace(base, draft_length=2), target, proposer)
    results = interleaved({label: engine_arm(cfg, target, prop) for label, (cfg, prop) in configs.items()}, a.rounds,
                          on_round=print_round)

    print(f"\n| policy | tokens/s (median) | vs regular (median of per-round ratios) | acceptance rate | mean k |")
    print("|---|---|---|---|---|")
    for label, res in results.items():
        k = statistics.median(statistics.mean(mean_k(t) for t in traces) for traces in res.traces)
        print(f"| {label} | {res.median_tok_s:.1f} | {res.median_ratio:.2f}x | {res.acceptance:.3f} | {k:.2f} |")


if __name__ == "__main__":
    main()
