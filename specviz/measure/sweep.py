"""Sweeps: measured vs predicted speedup over a batch-size x draft-length grid.

For each batch size b and draft length k, every prompt runs at batch size b with regular
decoding (k = 0) and then speculative decoding, batch by batch, in one process (interleaved:
this machine's speed drifts by 20-50% over minutes, and a ratio of passes taken minutes apart
measured that drift more than speculation). Each cell records the measured speedup, the alpha measured in
that run, and the speedup the calibrated cost model predicts for it, so the model is judged on
its cost side, not on acceptance:

    predicted_speedup      every row's own alpha and output length, the batch running until its
                           last row finishes (specviz.analysis.analytic.ragged_batch_times)
    predicted_speedup_iid  one alpha for all rows, every row active every step
                           (specviz.analysis.analytic.speedup_batch): over-predicts for b > 1 when rows
                           accept unequally (BENCHMARKS.md)
"""

from __future__ import annotations

import dataclasses
import statistics

from specviz.analysis.analytic import optimal_k, speedup_batch
from specviz.analysis.trace import tokens_per_s
from specviz.analysis.tracestats import alpha_from_accepted, mean_accepted_per_row_step, predicted_ragged
from specviz.run import RunConfig, run


def sweep(base: RunConfig, batch_sizes, draft_lengths, target, proposer, calibration, repeats: int = 1,
          on_cell=None) -> list[dict]:
    """Run the grid; returns one dict per (b, k) cell."""
    rows = []
    for b in batch_sizes:
        def cell_pass(k):
            """Every prompt once at batch size b, each batch run regular then speculative back to
            back, so the machine's drift hits both alike: (speedup, regular tok/s, spec tok/s, traces)."""
            reg_cfg = dataclasses.replace(base, batch_size=b, draft_length=0, mode="regular", controller="fixed")
            spec_cfg = dataclasses.replace(reg_cfg, draft_length=k, mode="speculative")
            ratios, regs, specs, trs = [], [], [], []
            for _ in range(repeats):
                pairs = [(run(rc, target, None, telemetry=False), run(sc, target, proposer, telemetry=False))
                         for rc, sc in zip(reg_cfg.every_prompt(), spec_cfg.every_prompt())]
                regs.append(tokens_per_s([r for r, _ in pairs]))
                specs.append(tokens_per_s([sp for _, sp in pairs]))
                ratios.append(specs[-1] / regs[-1])
                trs = [sp for _, sp in pairs]
            return statistics.median(ratios), statistics.median(regs), statistics.median(specs), trs

        # warm-up at this batch size: first forwards of a shape pay for allocation and kernel choice
        run(dataclasses.replace(base, batch_size=b, max_new_tokens=4, mode="regular"), target, None, telemetry=False)
        run(dataclasses.replace(base, batch_size=b, max_new_tokens=4, draft_length=max(draft_lengths)), target,
            proposer, telemetry=False)
        for k in draft_lengths:
            speedup, regular, spec, trs = cell_pass(k)
            alpha = alpha_from_accepted(mean_accepted_per_row_step(trs), k)
            costs = calibration.costs(b)
            predicted_iid = speedup_batch(b, k, alpha, costs.target, costs.draft, costs.overhead, costs.regular_overhead)
            predicted = predicted_ragged(trs, k, costs)
            cell = {"batch_size": b, "draft_length": k, "alpha": alpha,
                    "acceptance_rate": sum(t["summary"]["accepted"] for t in trs) / max(1, sum(t["summary"]["drafted"] for t in trs)),
                    "mean_acceptance_length": 1 + mean_accepted_per_row_step(trs),
                    "measured_speedup": speedup, "predicted_speedup": predicted,
                    "predicted_speedup_iid": predicted_iid,
                    "spec_tokens_per_s": spec, "regular_tokens_per_s": regular}
            rows.append(cell)
            if on_cell:
                on_cell(cell)
    return rows


def summarize_sweep(rows: list[dict], calibration, k_max: int = 16) -> dict:
    """Median |predicted - measured| / measured, and measured best k vs predicted k*(b) per b.

    Two predicted k*: ``predicted_k_star`` is the grid k with the highest predicted speedup, each
    cell predicted at the alpha measured in it (the model judged on its cost side, as the error
    is); ``predicted_k_star_one_alpha`` is analytic.optimal_k at the median alpha of the row of
    cells, which assumes alpha does not depend on k. Prompt lookup breaks that assumption: its
    alpha grows with k (long copied spans), so the second can sit low.
    """
    errs = [abs(r["predicted_speedup"] - r["measured_speedup"]) / r["measured_speedup"] for r in rows]
    per_b = {}
    for b in sorted({r["batch_size"] for r in rows}):
        cells = [r for r in rows if r["batch_size"] == b]
        best = max(cells, key=lambda r: r["measured_speedup"])
        ks = [r["draft_length"] for r in cells]
        alpha = statistics.median(r["alpha"] for r in cells)
        k_one_alpha = optimal_k(b, alpha, calibration.costs(b), k_max=max(ks))
        k_pred = max(cells, key=lambda r: r["predicted_speedup"])["draft_length"]
        per_b[b] = {"measured_best_k": best["draft_length"], "measured_best_speedup": best["measured_speedup"],
                    "predicted_k_star": k_pred, "predicted_k_star_one_alpha": k_one_alpha, "alpha": alpha}
    return {"median_abs_rel_error": statistics.median(errs) if errs else None, "per_batch_size": per_b}
