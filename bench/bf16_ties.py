"""Does computing the final norm and output layer in float32 make bf16 greedy exact?

    python bench/bf16_ties.py [--max-new-tokens 48]

In bf16 the target's logits are rounded to 8 significant bits, so the top two often tie exactly
(margin 0.0), and a (k+1)-token verify can break a tie differently from a 1-token step. This
checks speculative vs regular greedy (bf16 target, distilled draft and ngram, B = 1 and 8) with
the stock model, then with its final RMSNorm and output layer patched to run and return float32
in both paths, and prints each divergence's reference top-1 minus top-2 margin.
"""

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from specviz.measure.correctness import check_exactness, greedy_outputs  # noqa: E402
from specviz.prompts.sets import CHAT  # noqa: E402
from specviz.run import DEFAULT_DRAFT_DIR, encode_prompts, get_model, make_proposer  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from exactness import PROMPTS  # noqa: E402


class Fp32Norm(torch.nn.Module):
    """The final RMSNorm computed and returned in float32 (HF's casts back to bf16)."""

    def __init__(self, norm):
        super().__init__()
        self.weight = torch.nn.Parameter(norm.weight.detach().float(), requires_grad=False)
        self.eps = norm.variance_epsilon

    def forward(self, h):
        h = h.float()
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps))


class Fp32Head(torch.nn.Module):
    def __init__(self, head):
        super().__init__()
        self.weight = torch.nn.Parameter(head.weight.detach().float().clone(), requires_grad=False)

    def forward(self, h):
        return torch.nn.functional.linear(h.float(), self.weight)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-new-tokens", type=int, default=48)
    a = ap.parse_args()
    target = get_model("default", "cpu", "bfloat16")
    ids = encode_prompts(target.tokenizer, PROMPTS + list(CHAT))
    for patched in (False, True):
        if patched:
            target.model.model.norm = Fp32Norm(target.model.model.norm)
            target.model.lm_head = Fp32Head(target.model.lm_head)
        t0 = time.perf_counter()
        refs = [greedy_outputs(target, None, [p], 0, a.max_new_tokens)[0] for p in ids]
        for name in (str(DEFAULT_DRAFT_DIR), "ngram"):
            draft = make_proposer(name, target)
            for b, k in ((1, 2), (8, 2), (8, 4)):
                checks = check_exactness(target, draft, ids, b, k, a.max_new_tokens, refs)
                margins = ", ".join(f"{c.margin:.1e}" for c in checks if not c.exact)
                print(f"{'fp32 norm+head' if patched else 'stock bf16':<14} {os.path.basename(name)[:20]:<20} B={b} k={k}: "
                      f"exact {sum(c.exact for c in checks)}/{len(checks)}  divergence margins [{margins}]", flush=True)
        print(f"  ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
