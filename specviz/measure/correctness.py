"""Greedy exactness: speculative output per row vs plain greedy at batch size 1.

Speculative greedy must equal regular greedy token for token. A (k+1)-token verify rounds
differently from a 1-token step, so a near-tie in the reference's logits can legitimately flip;
every divergence is reported with the reference's top-1 minus top-2 logit margin there, never
hidden (Zhang et al. 2025, arXiv 2510.22876, report exact and partial matches the same way).

Also the Correctness page's checks: a speculative and a regular trace compared row by row, and a
chi-square test that the acceptance rule's first emitted token is distributed as the target's p.
"""

from __future__ import annotations

import dataclasses

import torch

from specviz.analysis.acceptance import acceptance_rate
from specviz.analysis.divergence import divergence_rows as _rows
from specviz.analysis.trace import synthetic_label
from specviz.common import SpecvizError
from specviz.engine.sampling import SamplingParams, accept_reference, process_logits
from specviz.run import decoder_for_ids


@dataclasses.dataclass
class RowCheck:
    index: int
    exact: bool
    first_divergence: int | None  # position in the generated tokens, None if exact
    margin: float | None  # reference top-1 minus top-2 logit at that position
    reference_len: int
    matched_prefix: int  # tokens equal up to the first divergence ("partial match")


def greedy_outputs(target, proposer, prompt_ids: list[list[int]], k: int, max_new_tokens: int,
                   lanes: int | None = None, tree=None) -> list[list[int]]:
    """Greedy outputs of every prompt run together (``lanes`` rows serving them as a request queue;
    ``tree`` an engine.step.TreeShape: token trees)."""
    dec = decoder_for_ids(target, proposer, prompt_ids, k, max_new_tokens, lanes=lanes, tree=tree)
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
                    references: list[list[int]] | None = None, requests: int | None = None,
                    tree=None) -> list[RowCheck]:
    """Run B rows (prompts cycled) speculatively and compare each with batch-1 greedy; with
    ``requests``, that many requests (prompts cycled) through B lanes refilled as rows finish."""
    rows = [prompt_ids[i % len(prompt_ids)] for i in range(requests or batch_size)]
    if references is None:
        references = [greedy_outputs(target, None, [p], 0, max_new_tokens)[0] for p in prompt_ids]
    refs = [references[i % len(prompt_ids)] for i in range(len(rows))]
    outs = greedy_outputs(target, proposer, rows, k, max_new_tokens, lanes=batch_size, tree=tree)
    return compare(target, rows, outs, refs)


# ---- checks on the Correctness page: two traces, and the acceptance rule's distribution --------------

def refuse_synthetic(config: dict) -> None:
    """Exactness asks whether speculation kept the target's text; a run with synthetic acceptance kept
    drafted tokens the target never chose, so there is nothing to check: a SpecvizError that says so."""
    if label := synthetic_label(config):
        raise SpecvizError(f"this run used {label}, so it is not compared with regular decoding: run it again "
                           "without synthetic acceptance to check exactness")


def divergence_rows(spec: dict, regular: dict, target=None) -> list[dict]:
    """analysis.divergence.divergence_rows with ``target``'s logit margins (a forward over prompt +
    regular output up to each divergence; None without a target). A synthetic run is refused."""
    refuse_synthetic(spec.get("config", {}))
    return _rows(spec, regular, (lambda ids: logit_margin(target, ids)) if target is not None else None)


def acceptance_distribution_check(n: int = 20000, vocab: int = 8, k: int = 2, temperature: float = 1.0,
                                  seed: int = 0, accept_fn=None) -> dict:
    """Sample the first output token of ``n`` rows through the acceptance rule with a random draft q
    and compare its counts with the target's processed p: chi-square statistic, dof and p-value.

    The rule is lossless iff the first emitted token is distributed as p (SPECDEC.md)."""
    accept_fn = accept_fn or accept_reference
    g = torch.Generator().manual_seed(seed)
    params = SamplingParams(temperature=temperature)
    t_logits = torch.randn(1, k + 1, vocab, generator=g).expand(n, k + 1, vocab).contiguous()  # [n, k+1, V]
    q = process_logits(torch.randn(1, k, vocab, generator=g), params).expand(n, k, vocab).contiguous()  # [n, k, V]
    drafts = torch.multinomial(q.reshape(-1, vocab), 1, generator=g).reshape(n, k)  # [n, k] x ~ q
    u = torch.rand(n, k + 1, generator=g)
    verdict = accept_fn(t_logits, drafts, torch.full((n,), k), u, params, q)
    first = verdict.emitted[:, 0]  # [n] the first output token of every row
    counts = torch.bincount(first, minlength=vocab).double()
    p = process_logits(t_logits[0, 0], params).double()
    expected = p * n
    keep = expected > 0
    chi2 = float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    dof = int(keep.sum()) - 1
    p_value = float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                            torch.tensor(chi2 / 2, dtype=torch.float64)))
    return {"counts": counts.tolist(), "expected": expected.tolist(), "chi2": chi2, "dof": dof, "p_value": p_value,
            "acceptance_rate": acceptance_rate(float(verdict.num_accepted.double().mean()), k), "n": n}
