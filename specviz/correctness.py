"""Greedy exactness: speculative output per row vs plain greedy at batch size 1.

Speculative greedy must equal regular greedy token for token. A (k+1)-token verify rounds
differently from a 1-token step, so a near-tie in the reference's logits can legitimately flip;
every divergence is reported with the reference's top-1 minus top-2 logit margin there, never
hidden (Zhang et al. 2025, arXiv 2510.22876, report exact and partial matches the same way).
"""

from __future__ import annotations

import dataclasses

import torch

from .controllers import Fixed
from .engine import SpecDecoder
from .sampling import SamplingParams


@dataclasses.dataclass
class RowCheck:
    index: int
    exact: bool
    first_divergence: int | None  # position in the generated tokens, None if exact
    margin: float | None  # reference top-1 minus top-2 logit at that position
    reference_len: int
    matched_prefix: int  # tokens equal up to the first divergence ("partial match")


def greedy_outputs(target, proposer, prompt_ids: list[list[int]], k: int, max_new_tokens: int) -> list[list[int]]:
    dec = SpecDecoder(target, proposer, Fixed(k if proposer is not None else 0), [""] * len(prompt_ids),
                      prompt_ids, SamplingParams(), max_new_tokens)
    for _ in dec.steps():
        pass
    return [r.output for r in dec.rows]


@torch.inference_mode()
def logit_margin(target, context: list[int]) -> float:
    """top-1 minus top-2 logit of the target's next-token prediction after ``context``."""
    x = torch.tensor([context], device=target.device)
    logits = target.model(input_ids=x, logits_to_keep=1).logits[0, -1].float()
    top = logits.topk(2).values
    return float(top[0] - top[1])


def compare(target, prompt_ids, outputs, references) -> list[RowCheck]:
    checks = []
    for i, (p, out, ref) in enumerate(zip(prompt_ids, outputs, references)):
        j = next((j for j, (a, b) in enumerate(zip(out, ref)) if a != b), None)
        if j is None and len(out) != len(ref):
            j = min(len(out), len(ref))
        margin = logit_margin(target, p + ref[:j]) if j is not None else None
        checks.append(RowCheck(i, j is None, j, margin, len(ref), len(ref) if j is None else j))
    return checks


def check_exactness(target, proposer, prompt_ids, batch_size: int, k: int, max_new_tokens: int,
                    references: list[list[int]] | None = None) -> list[RowCheck]:
    """Run B rows (prompts cycled) speculatively and compare each with batch-1 greedy."""
    rows = [prompt_ids[i % len(prompt_ids)] for i in range(batch_size)]
    if references is None:
        references = [greedy_outputs(target, None, [p], 0, max_new_tokens)[0] for p in prompt_ids]
    refs = [references[i % len(prompt_ids)] for i in range(batch_size)]
    outs = greedy_outputs(target, proposer, rows, k, max_new_tokens)
    return compare(target, rows, outs, refs)
