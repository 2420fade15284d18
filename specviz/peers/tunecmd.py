"""``specviz tune``: read the acceptance (a trace, a sweep folder, or a vLLM server's /metrics over a window)
and the costs (a calibration, entered numbers, or the pair's own calibration), then print the answer of
specviz.peers.tune: k per batch size, where speculation should be off, the oracle bound and the settings of
one engine (``--json``: the whole answer as one JSON object). Errors are one line (SpecvizError)."""

from __future__ import annotations

import csv
import json
import statistics
import time
from pathlib import Path

from specviz.analysis.costs import Calibration, read_calibration, trace_calibration
from specviz.analysis.engineconfig import draft_of
from specviz.analysis.trace import load_json
from specviz.analysis.tune import Acceptance, roofline_costs
from specviz.bounds import int_list
from specviz.common import MissingResource, SpecvizError
from specviz.peers import metrics
from specviz.peers.tune import Inputs, answer, median_batch, render, trace_parts, vllm_acceptance

SAMPLE_S = 1.0  # how often the window reads the running-requests gauge
NO_COSTS = ("no costs for this pair: give --calibration FILE (from `specviz calibrate`, on this machine or another), "
            "or --target-step-ms and --draft-cost-ratio")


def read_trace(path: str) -> dict:
    try:
        trace = load_json(Path(path).expanduser())
    except (OSError, UnicodeDecodeError) as e:
        raise SpecvizError(f"cannot read --trace {path}: {getattr(e, 'strerror', None) or e}") from None
    except ValueError as e:
        raise SpecvizError(f"--trace {path}: {e}") from None
    return trace


def from_trace(a, notes: list[str]) -> dict:
    trace = read_trace(a.trace)
    parts = trace_parts(trace, f"--trace {a.trace}")
    parts["source"]["where"] = a.trace
    return {**parts, "calibration": trace_calibration(trace)}


def from_sweep(a, notes: list[str]) -> dict:
    folder = Path(a.sweep).expanduser()
    try:
        with open(folder / "sweep.csv", newline="") as f:
            cells = list(csv.DictReader(f))
        meta = json.loads((folder / "sweep.json").read_text())
        alphas = [float(c["alpha"]) for c in cells]
        cal = Calibration.from_json(meta["calibration"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SpecvizError(f"--sweep {a.sweep}: not a finished sweep's sweep.csv and sweep.json "
                           f"({type(e).__name__})") from None
    if not alphas:
        raise SpecvizError(f"--sweep {a.sweep}: sweep.csv has no cells")
    notes.append("a sweep records one fitted alpha per cell, not counts: acceptance is their median, without an interval")
    cfg = meta.get("config", {})
    best = {str(b): v["measured_best_k"] for b, v in meta.get("summary", {}).get("per_batch_size", {}).items()}
    sizes = sorted({int(c["batch_size"]) for c in cells})
    return {"acceptance": Acceptance.from_alpha(min(1.0, max(0.0, statistics.median(alphas)))), "calibration": cal,
            "draft": draft_of(str(cfg.get("draft", "ngram")), float(cfg.get("draft_confidence") or 0.0)),
            "serve_batch": sizes[len(sizes) // 2], "measured_best": best or None,
            "source": {"kind": "sweep", "where": a.sweep, "cells": len(cells)}}


def scrape_window(url: str, seconds: float) -> tuple[metrics.Delta, list]:
    """Two scrapes ``seconds`` apart, the running-requests gauge read every SAMPLE_S between them."""
    try:
        before = metrics.scrape(url)
    except SpecvizError as e:  # nothing answered at that address: a server that is not there
        if str(e).startswith("cannot reach"):
            raise MissingResource(str(e)) from None
        raise
    running, end, after = [], time.monotonic() + seconds, before
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(SAMPLE_S, left))
        after = metrics.scrape(url)
        running.append(after.gauges.get("running"))
    return metrics.delta(before, after), running


def from_metrics(a, notes: list[str]) -> dict:
    d, running = scrape_window(a.metrics_url, a.window)
    if not d.has_spec:
        raise SpecvizError(f"{metrics.NO_SPEC}: tune needs the acceptance of a server that speculates")
    if not d.drafts:
        raise SpecvizError(f"the server drafted nothing in the {a.window:g} s window: send it requests meanwhile, or "
                           "give a longer --window")
    notes += d.notes()
    acc, counts = vllm_acceptance(d)
    if not a.draft:
        notes.append("/metrics does not name the draft method: the settings assume ngram (give --draft)")
    served = median_batch(running)
    return {"acceptance": acc, "counts": counts, "calibration": None, "draft": draft_of("ngram"),
            "serve_batch": served or 1, "version": metrics.server_version(a.metrics_url),
            "source": {"kind": "vllm", "where": metrics.metrics_url(a.metrics_url), "window_s": a.window,
                       "drafts": d.drafts, "k": d.k, "median_running": served}}


def gather(a) -> Inputs:
    notes: list[str] = []
    got = from_trace(a, notes) if a.trace else from_sweep(a, notes) if a.sweep else from_metrics(a, notes)
    if a.calibration:
        cal = read_calibration(Path(a.calibration).expanduser())
        costs_at, note = cal.costs, f"calibration {a.calibration} ({cal.target} + {cal.draft}, {cal.device}, {cal.dtype})"
    elif a.target_step_ms is not None:
        rc = roofline_costs(a.target_step_ms / 1e3, a.draft_cost_ratio, a.knee_tokens)
        costs_at = lambda b: rc  # noqa: E731 - one roofline: it grows with b past the knee itself
        note = (f"entered: target step {a.target_step_ms:g} ms, draft cost ratio {a.draft_cost_ratio:g}, "
                f"flat up to {a.knee_tokens:g} tokens per forward")
    elif (cal := got.get("calibration")) is not None:
        costs_at = cal.costs
        note = f"the pair's calibration ({cal.target} + {cal.draft}, {cal.device}, {cal.dtype}, {cal.created or 'undated'})"
    else:
        raise MissingResource(NO_COSTS)
    # --draft renames the draft; the confidence stop is the one the acceptance was measured with
    draft = draft_of(a.draft, got["draft"].confidence) if a.draft else got["draft"]
    sizes = int_list(a.batch_sizes, "--batch-sizes")
    return Inputs(acceptance=got["acceptance"], costs_at=costs_at, costs_note=note, source=got["source"], draft=draft,
                  batch_sizes=sizes, serve_batch=a.serve_batch or got["serve_batch"], k_max=a.k_max,
                  counts=got.get("counts"), steps=got.get("steps"), tree_bounds=got.get("tree_bounds", (4, 32)),
                  vllm_version=a.vllm_version or got.get("version"), measured_best=got.get("measured_best"),
                  notes=notes)


def cmd_tune(a) -> int:
    ans = answer(gather(a), a.engine)
    if a.as_json:
        print(json.dumps(ans, indent=1))
    else:
        print("\n".join(render(ans)))
    return 0
