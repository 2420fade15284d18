"""A chain's fast forms (mask-free verify, vectorised accept) against the same chain walked as a
width-1 tree (ancestor-mask verify, the tree walk), the default pair, interleaved in one process.

A chain is the width-1 token tree (specviz.engine.step); the engine keeps the two fast forms for
lines only if they pay. Arms: regular decoding, and each --chains k fast and walked. Every round
runs every arm once on the same prompts, greedy, in an order that rotates each round
(specviz.measure.bench.interleaved). Reported per arm: median tokens/s, the median of its per-round
ratio to regular, median verify and accept ms per step, and greedy rows equal to regular's.

    python bench/line_forms.py --batch-size 1 --rounds 3 --chains 2,3
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.engine.sampling import SamplingParams  # noqa: E402
from specviz.measure.bench import interleaved  # noqa: E402
from specviz.models.loading import encode_prompts  # noqa: E402
from specviz.run import decoder_for_ids, get_model, make_proposer, read_prompts  # noqa: E402


def arm(target, proposer, batches: list[list[list[int]]], k: int, max_new: int, walk_lines: bool):
    """Every batch through one decoder each; (tokens/s, [outputs per row, step timings])."""
    def go():
        outputs, steps, tokens, seconds = [], [], 0, 0.0
        for ids in batches:
            dec = decoder_for_ids(target, proposer if k else None, ids, k, max_new, SamplingParams(),
                                  walk_lines=walk_lines)
            t = time.perf_counter()
            steps += [(s.t_verify, s.t_accept) for s in dec.steps()]
            seconds += time.perf_counter() - t
            outputs += [r.output for r in dec.rows]
            tokens += sum(len(r.output) for r in dec.rows)
        return tokens / seconds, (outputs, steps)
    return go


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__), "prompts.txt"))
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--draft", default="default")
    ap.add_argument("--chains", default="2,3", help="chain draft lengths k")
    a = ap.parse_args()

    target = get_model("default", "auto", a.dtype)
    proposer = make_proposer(a.draft, target)
    ids = encode_prompts(target.tokenizer, read_prompts(a.prompts), False)
    batches = [ids[i:i + a.batch_size] for i in range(0, len(ids), a.batch_size)]
    arms = {"regular": arm(target, None, batches, 0, a.max_new_tokens, False)}
    for k in map(int, filter(None, a.chains.split(","))):
        arms[f"chain k={k} fast"] = arm(target, proposer, batches, k, a.max_new_tokens, False)
        arms[f"chain k={k} walked"] = arm(target, proposer, batches, k, a.max_new_tokens, True)
    import torch

    print(f"target {target.name} ({target.dtype}, {target.device}); draft {proposer.name}; B={a.batch_size}; "
          f"{len(ids)} prompts, {a.max_new_tokens} new tokens; rounds {a.rounds}; torch threads "
          f"{torch.get_num_threads()}", flush=True)
    for go in arms.values():  # warm-up: every arm's shapes once
        go()
    results = interleaved(arms, a.rounds, on_round=lambda r, t: print(
        f"round {r + 1}: " + ", ".join(f"{lbl} {v:.1f}" for lbl, v in t.items()), flush=True))
    print("\n| arm | tokens/s (median) | vs regular (median of per-round ratios) | verify ms | accept ms "
          "| greedy rows = regular |")
    print("|---|---|---|---|---|---|")
    reference = results["regular"].traces[-1][0]
    for lbl, res in results.items():
        outputs, steps = res.traces[-1]
        same = sum(x == y for x, y in zip(outputs, reference))
        print(f"| {lbl} | {res.median_tok_s:.1f} | {res.median_ratio:.2f}x | "
              f"{1000 * statistics.median(s[0] for s in steps):.2f} | "
              f"{1000 * statistics.median(s[1] for s in steps):.2f} | {same}/{len(reference)} |")


if __name__ == "__main__":
    main()
