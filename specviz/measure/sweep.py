"""Sweeps: measured vs predicted speedup over a batch-size x draft-length grid.

For each batch size b and draft length k, every prompt runs at batch size b with regular
decoding (k = 0) and with speculative decoding, in one process, through the interleaved-arms loop
of specviz.measure.bench (this machine's speed drifts by 20-50% over minutes, and a ratio of
passes taken minutes apart measured that drift more than speculation). Each cell records the measured speedup, the alpha measured in
that run, and the speedup the calibrated cost model predicts for it, so the model is judged on
its cost side, not on acceptance:

    predicted_speedup      every row's own alpha and output length, the batch running until its
                           last row finishes (specviz.analysis.analytic.ragged_batch_times)
    predicted_speedup_iid  one alpha for all rows, every row active every step
                           (specviz.analysis.analytic.speedup_batch): over-predicts for b > 1 when rows
                           accept unequally (BENCHMARKS.md)
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import statistics
import sys
from pathlib import Path
from typing import Callable

from specviz.analysis import acceptance
from specviz.analysis.analytic import optimal_k, speedup_batch
from specviz.analysis.tracestats import predicted_ragged, row_step_counts
from specviz.common import SpecvizError, write_atomic
from specviz.measure.bench import engine_arm, interleaved, warm_up
from specviz.measure.calibrate import calibrate, calibration_load_warning, load_calibration
from specviz.runconfig import RunConfig
from specviz.run import load_pair, trace_config


def measure_cell(base: RunConfig, b: int, k: int, target, proposer, calibration, repeats: int = 1) -> dict:
    """One (b, k) cell: every prompt at batch size b, regular and speculative interleaved over
    ``repeats`` rounds (specviz.measure.bench), alpha from the accepted tokens of the last
    round's speculative traces, and the cost model's predictions at that alpha."""
    reg_cfg = dataclasses.replace(base, batch_size=b, draft_length=0, mode="regular", policy="fixed")
    spec_cfg = dataclasses.replace(reg_cfg, draft_length=k, mode="speculative")
    res = interleaved({"regular": engine_arm(reg_cfg, target, None),
                       "speculative": engine_arm(spec_cfg, target, proposer)}, repeats)
    trs = res["speculative"].traces[-1]
    accepted, row_steps = row_step_counts(trs)
    alpha = acceptance.alpha_from_accepted(acceptance.mean_accepted(accepted, row_steps, empty=0.0), k)
    costs = calibration.costs(b)
    return {"batch_size": b, "draft_length": k, "alpha": alpha,
            "acceptance_rate": acceptance.acceptance_rate(sum(t["summary"]["accepted"] for t in trs),
                                                          sum(t["summary"]["drafted"] for t in trs), empty=0.0),
            "mean_acceptance_length": acceptance.mean_acceptance_length(accepted, row_steps, empty=1.0),
            "measured_speedup": res["speculative"].median_ratio, "predicted_speedup": predicted_ragged(trs, k, costs),
            "predicted_speedup_iid": speedup_batch(b, k, alpha, costs.target, costs.draft, costs.overhead,
                                                   costs.regular_overhead),
            "spec_tokens_per_s": res["speculative"].median_tok_s, "regular_tokens_per_s": res["regular"].median_tok_s}


def sweep(base: RunConfig, batch_sizes, draft_lengths, target, proposer, calibration, repeats: int = 1,
          on_cell: Callable[[dict], None] | None = None, should_stop: Callable[[], bool] | None = None,
          done: dict | None = None) -> list[dict]:
    """Run the grid; returns one dict per (b, k) cell, in order. ``on_cell(cell)`` after each
    cell; ``should_stop()`` is checked before each cell (the cells done so far are returned).
    ``done``: cells already measured by an interrupted sweep, by (b, k) (specviz.measure.resume),
    kept as they are."""
    rows, done = [], done or {}
    for b in batch_sizes:
        if should_stop is not None and should_stop():
            break
        if all((b, k) in done for k in draft_lengths):
            for k in draft_lengths:
                rows.append(done[(b, k)])
                if on_cell:
                    on_cell(rows[-1])
            continue
        warm = dataclasses.replace(base, batch_size=b, max_new_tokens=4)
        warm_up(dataclasses.replace(warm, mode="regular"), target, None)
        warm_up(dataclasses.replace(warm, draft_length=max(draft_lengths)), target, proposer)
        for k in draft_lengths:
            if should_stop is not None and should_stop():
                return rows
            rows.append(done.get((b, k)) or measure_cell(base, b, k, target, proposer, calibration, repeats))
            if on_cell:
                on_cell(rows[-1])
    return rows


def sweep_config(cfg: RunConfig, batch_sizes, draft_lengths, repeats: int = 1, recalibrate: bool = False,
                 on_cell=None, should_stop=None, note: Callable[[str], None] | None = None, done: dict | None = None):
    """``python -m specviz sweep``: load the pair, take the cached calibration (or measure one),
    run the grid. Returns (rows, summary, calibration, trace config)."""
    note = note or (lambda msg: print(msg, file=sys.stderr))
    target, proposer = load_pair(cfg)
    if proposer is None:
        raise SpecvizError("a sweep compares speculative with regular decoding: give a --draft other than none")
    cal = None if recalibrate else load_calibration(target, proposer)
    if cal is None:
        note("calibrating the cost model first (cached for next time)...")
        cal = calibrate(target, proposer, sorted(set(batch_sizes)), max(draft_lengths))
        warning = calibration_load_warning(cal)
        note("calibrated (cached for next time); measuring the grid" + (f". Warning: {warning}" if warning else ""))
    else:
        note(f"using the cached calibration from {cal.created or 'an unknown date'} (--recalibrate to measure again)")
    rows = sweep(cfg, batch_sizes, draft_lengths, target, proposer, cal, repeats, on_cell, should_stop, done)
    return rows, summarize_sweep(rows, cal), cal, trace_config(cfg, target, proposer)


def write_sweep(out_dir, rows: list[dict], summary: dict, calibration, config: dict) -> tuple[Path, Path]:
    """sweep.csv (one line per cell) and sweep.json (calibration, summary, config) in out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    write_atomic(out / "sweep.csv", buf.getvalue())
    write_atomic(out / "sweep.json", json.dumps({"calibration": calibration.to_json(), "summary": summary,
                                                 "config": config}, indent=1))
    return out / "sweep.csv", out / "sweep.json"


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
