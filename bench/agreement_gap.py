"""Where a feature draft's agreement with the target goes: by prompt set, and by how sure the
target itself was.

For each set (the free-form prompts, answered greedily here by the target with its features and
top-k; and any data folder's held-out ``val`` shards), the draft's top-1 agreement with the
target, teacher-forced as training measures it, overall and in bins of the target's own top-1
probability (softmax over its stored top-32 logits). ``--engine`` also runs the engine at k = 1 on
the free-form prompts, so the training measure and the engine's acceptance stand side by side.
The last line applies the first data folder's per-bin agreement to the free-form set's bins: when
that predicts the free-form agreement, the gap between the sets is how sure the target is on
their answers, not what the draft learned.

    python bench/agreement_gap.py DRAFT_DIR [--data DIR ...] [--engine] [--prompts 16]
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.distill.evaluate import eval_acceptance  # noqa: E402
from specviz.distill.feature import collate_features, feature_tensors, fused_input, generate_feature_data, read_feature_samples, train_forward, trainable  # noqa: E402
from specviz.prompts.gen import freeform_prompts  # noqa: E402
from specviz.run import get_model, make_proposer  # noqa: E402

BINS = [0.0, 0.3, 0.5, 0.7, 0.9, 1.01]


@torch.no_grad()
def per_position(draft, samples, vocab_size: int):
    """(agree [N] bool, target top-1 probability [N]) over every labelled position."""
    kept = list(filter(trainable, samples))  # the samples feature_tensors keeps, in its order
    items = feature_tensors(kept, draft.lm_head.vocab_map.tolist(), vocab_size)
    p1 = np.concatenate([torch.softmax(torch.as_tensor(s["topk_logits"], dtype=torch.float32), -1)[:, 0].numpy()
                         for s in kept])
    agree = []
    for i in range(0, len(items), 16):
        ids, mask, fin, _, rows, cols, _, _, _, top1 = collate_features(items[i:i + 16])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            g, _ = train_forward(draft, fused_input(draft, ids, fin), mask)
        agree.append((draft.lm_head.reduced(g[rows, cols]).argmax(-1) == top1).numpy())
    return np.concatenate(agree), p1


def by_bin(agree, p1):
    b = np.digitize(p1, BINS) - 1
    return [(agree[b == i].mean() if (b == i).any() else float("nan"), int((b == i).sum())) for i in range(len(BINS) - 1)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("draft")
    ap.add_argument("--data", action="append", default=[], help="a distill --data folder: its held-out val shards")
    ap.add_argument("--engine", action="store_true", help="also the engine's acceptance at k = 1 on the free-form set")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=16, help="the first N free-form prompts")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    a = ap.parse_args()
    target = get_model("default", "cpu", "bfloat16")
    proposer = make_proposer(a.draft, target)
    draft, V = proposer.loaded.model, target.model.config.vocab_size
    prompts = freeform_prompts(a.prompts)
    with tempfile.TemporaryDirectory() as tmp:
        generate_feature_data(target, prompts, Path(tmp), "ff", max_new=a.max_new_tokens, batch_size=a.batch_size,
                              topk=32, seed=0, greedy_every=1)
        sets = {"free-form": per_position(draft, read_feature_samples(Path(tmp), "ff"), V)}
    for d in a.data:
        sets[f"held-out of {d}"] = per_position(draft, read_feature_samples(Path(d), "val"), V)
    print(f"draft {a.draft}; bins of the target's top-1 probability: {BINS[:-1]} (agreement, positions)")
    for name, (agree, p1) in sets.items():
        cells = "  ".join(f"{m:.2f} ({n})" for m, n in by_bin(agree, p1))
        print(f"{name}: agreement {agree.mean():.3f} over {len(agree)} positions, target top-1 prob {p1.mean():.3f}; {cells}")
    if a.data:
        ref = by_bin(*sets[f"held-out of {a.data[0]}"])
        agree, p1 = sets["free-form"]
        counts = [n for _, n in by_bin(agree, p1)]
        pred = sum(m * n for (m, _), n in zip(ref, counts) if n) / sum(counts)
        print(f"free-form agreement predicted from {a.data[0]}'s per-bin agreement: {pred:.3f} (measured {agree.mean():.3f})")
    if a.engine:
        engine = eval_acceptance(target, proposer, prompts, [1], a.max_new_tokens, a.batch_size)[1]
        print(f"engine acceptance at k = 1 on the free-form set: {engine['acceptance_rate']:.3f} (B = {a.batch_size})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
