"""Evaluating a distilled draft: acceptance through the engine, the cost ratio from real
forwards, and the speedup the analytic model predicts from them."""

from __future__ import annotations

import time

import numpy as np


def eval_acceptance(target, proposer, prompts: list[str], ks, max_new: int, batch_size: int) -> dict:
    """Greedy speculative decoding on ``prompts`` at each k; acceptance, fitted alpha, tokens/s."""
    from specviz.analysis import acceptance
    from specviz.distill.data import encode_chat
    from specviz.run import decoder_for_ids

    ids = encode_chat(target.tokenizer, prompts)
    out = {}
    for k in [0, *ks]:
        drafted = accepted = row_steps = tokens = 0
        wall = 0.0
        outputs = []
        for i in range(0, len(prompts), batch_size):
            dec = decoder_for_ids(target, proposer if k else None, ids[i:i + batch_size], k, max_new,
                                  prompts=prompts[i:i + batch_size])
            t = time.perf_counter()
            for s in dec.steps():
                for r in s.rows:
                    if r.active:
                        drafted, accepted, row_steps = drafted + r.drafted, accepted + r.accepted, row_steps + 1
            wall += time.perf_counter() - t
            tokens += sum(len(r.output) for r in dec.rows)
            outputs += [r.output for r in dec.rows]
        cell = {"tokens": tokens, "tokens_per_s": tokens / wall, "outputs": outputs}
        if k:
            mean_accepted = acceptance.mean_accepted(accepted, row_steps, empty=0.0)
            cell.update(acceptance_rate=acceptance.acceptance_rate(accepted, drafted, empty=0.0),
                        mean_accepted=mean_accepted,
                        mean_acceptance_length=acceptance.mean_acceptance_length(accepted, row_steps, empty=1.0),
                        alpha=acceptance.alpha_from_accepted(mean_accepted, k),
                        measured_speedup=cell["tokens_per_s"] / out[0]["tokens_per_s"])
        out[k] = cell
    return out


def cost_ratio(target, draft, batch_sizes=(1, 8), prefix_len: int = 128, rounds: int = 3) -> dict:
    """c = T_draft(b, 1) / T_target(b, 1) from real forwards over a cached prefix (median of
    interleaved rounds, so drift hits both models alike)."""
    from specviz.measure.calibrate import time_forward

    out = {}
    for b in batch_sizes:
        td, tt = [], []
        for _ in range(rounds):
            tt.append(time_forward(target, b, 1, prefix_len, repeats=3))
            td.append(time_forward(draft, b, 1, prefix_len, repeats=3))
        out[b] = {"t_target_ms": 1e3 * float(np.median(tt)), "t_draft_ms": 1e3 * float(np.median(td)),
                  "c": float(np.median(td) / np.median(tt))}
    return out


def predicted_speedups(alpha: float, c: float, k_max: int = 8) -> dict:
    from specviz.analysis.analytic import optimal_k_batch1, speedup_batch1

    k_star = optimal_k_batch1(alpha, c, k_max=k_max)
    return {"alpha": alpha, "c": c, "k_star": k_star, "speedup_at_k_star": speedup_batch1(alpha, k_star, c),
            "speedup_by_k": {k: speedup_batch1(alpha, k, c) for k in range(1, k_max + 1)}}
