"""Watch the `analytic` policy decide, step by step, in one real run.

Prints, every few steps: the k it ran, the active batch size, its pooled acceptance estimate,
each row's estimate, and the ragged-completion model's predicted speedup for k = 0, 1, 2 (what
it maximises at b > 1). Ends with the k sequence of the whole run.

    python bench/analytic_trace.py [--batch-size 8] [--every 6]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.analysis import analytic  # noqa: E402
from specviz.run import RunConfig, load_pair, make_decoder, read_prompts  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--every", type=int, default=6)
    a = ap.parse_args()
    cfg = RunConfig(prompts=read_prompts(os.path.join(os.path.dirname(__file__), "prompts.txt")),
                    batch_size=a.batch_size, max_new_tokens=a.max_new_tokens, dtype="bfloat16", controller="analytic")
    target, proposer = load_pair(cfg)
    dec = make_decoder(cfg, target, proposer)
    policy = dec.controller
    if policy.costs is None:
        sys.exit("no calibration for this pair: run python -m specviz calibrate --dtype bfloat16 first")
    c = policy.costs
    ks = []
    for s in dec.steps():
        ks.append(s["k"])
        rows = sorted(policy.left)
        if s["step"] % a.every or not rows:
            continue
        lengths, alphas = [policy.left[r] for r in rows], [policy.row_alpha(r) for r in rows]
        pred = [analytic.speedup_ragged(lengths, alphas, k, c.target, c.draft, c.overhead, c.regular_overhead)
                for k in range(3)]
        print(f"step {s['step']:>3}: ran k={s['k']} at b={s['batch_size']}; pooled alpha {policy.alpha:.2f}; "
              f"rows {' '.join(f'{x:.2f}' for x in alphas)}; predicted speedup k=0..2: "
              + " ".join(f"{x:.3f}" for x in pred))
    print("k per step:", "".join(map(str, ks)))


if __name__ == "__main__":
    main()
