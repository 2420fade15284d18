"""Greedy exactness over many cases: each row's speculative output vs batch-1 greedy.

    python bench/exactness.py [--dtype float32] [--device cpu] [--max-new-tokens 48]
    python bench/exactness.py --requests 13:3,29:8 --draft-lengths 2,4   # request queues (issue 17)
    python bench/exactness.py --drafts default --trees 2:6,3:10,4:16      # token trees W:N (issue 16)

Prints one line per (draft, batch size, k): exact rows, mean partial match (fraction of tokens
equal up to the first divergence), and every divergence with the reference's top-1 minus top-2
logit margin there. Exits 1 if a divergence happens at a margin that is not a near-tie.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.measure.correctness import check_exactness, greedy_outputs  # noqa: E402
from specviz.engine.proposers import ModelDraft  # noqa: E402
from specviz.engine.step import TreeShape  # noqa: E402
from specviz.run import encode_prompts, get_model, make_proposer  # noqa: E402

PROMPTS = [
    "Repeat exactly: the quick brown fox jumps over the lazy dog, the quick brown fox jumps over the lazy dog.",
    "What is the capital of France?",
    "List the first ten even numbers, separated by commas.",
    "Write a Python function that returns the square of a number.",
    "Explain photosynthesis to a ten-year-old.",
    "Summarize: Cats sleep a lot. Cats sleep up to sixteen hours a day. Sleeping cats save energy.",
    "Give three synonyms for happy.",
    "Write a haiku about autumn leaves.",
]
NEAR_TIE = 1e-3


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="default",
                    help="target SPEC (bench/gpu_check.sh passes a random-weight model when the real one is absent)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--batch-sizes", default="1,3,8")
    ap.add_argument("--draft-lengths", default="1,4,8")
    ap.add_argument("--drafts", default="ngram,default-bf16", help="comma-separated draft SPECs (default-bf16: the target's bf16 copy)")
    ap.add_argument("--requests", metavar="N:LANES,...",
                    help="instead of --batch-sizes: N requests (prompts cycled) through LANES refilled rows each")
    ap.add_argument("--trees", default="", metavar="W:N,...",
                    help="token trees (model drafts): width W and nodes N per row, each run at every k; 1:1 = chains")
    a = ap.parse_args()
    trees = [tuple(map(int, t.split(":"))) for t in a.trees.split(",")] if a.trees else [(1, 1)]
    target = get_model(a.target, a.device, a.dtype)
    ids = encode_prompts(target.tokenizer, PROMPTS)
    t0 = time.perf_counter()
    refs = [greedy_outputs(target, None, [p], 0, a.max_new_tokens)[0] for p in ids]
    print(f"target {a.target} ({a.dtype}, {a.device}); {len(PROMPTS)} ragged prompts "
          f"({min(map(len, ids))}-{max(map(len, ids))} tokens); max_new_tokens {a.max_new_tokens}")
    bad = 0
    total = exact = 0
    for name in a.drafts.split(","):
        queues = ([tuple(map(int, q.split(":"))) for q in a.requests.split(",")] if a.requests
                  else [(None, b) for b in map(int, a.batch_sizes.split(","))])
        for n, b in queues:
            for k, (w, nodes) in ((k, t) for k in map(int, a.draft_lengths.split(",")) for t in trees):
                tree = TreeShape(w, nodes) if w > 1 else None
                if name == "default-bf16":
                    draft = ModelDraft(get_model(a.target, a.device, "bfloat16"), vocab_size=target.model.config.vocab_size)
                else:  # any draft SPEC: ngram[:N], a model, a distilled draft directory
                    draft = make_proposer(name, target)
                checks = check_exactness(target, draft, ids, b, k, a.max_new_tokens, refs, requests=n, tree=tree)
                n_exact = sum(c.exact for c in checks)
                partial = sum(c.matched_prefix / max(c.reference_len, 1) for c in checks) / len(checks)
                div = [f"row {c.index} @{c.first_divergence} margin {c.margin:.2e}" for c in checks if not c.exact]
                bad += sum(1 for c in checks if not c.exact and c.margin >= NEAR_TIE)
                total += len(checks)
                exact += n_exact
                print(f"{name:<13} B={b:<2}{f' N={n:<3}' if n else ''} k={k:<2}{f' W={w} nodes={nodes}' if tree else ''} exact {n_exact}/{len(checks)}  partial {partial:.3f}  "
                      + ("; ".join(div) if div else ""), flush=True)
    print(f"total: {exact}/{total} rows exact; divergences not at a near-tie (margin >= {NEAR_TIE}): {bad}; "
          f"{time.perf_counter() - t0:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
