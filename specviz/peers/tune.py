"""The tune answer, shared by ``specviz tune`` (specviz.peers.tunecmd) and the Speedup page's Recommend
panel: measured acceptance and costs in; k per batch size with its predicted goodput and uncertainty,
where speculation should be off, the oracle bound, the field's statistics and one engine's settings out.

The arithmetic lives in specviz.analysis (acceptstats, tune, oracle, engineconfig); token-tree shapes
reuse the tree policy's prediction (specviz.engine.treepolicy), which is why this sits above the engine,
beside the other engines it writes settings for. No torch.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Callable

from specviz.analysis import acceptance, treestats
from specviz.analysis.acceptstats import (PositionCounts, acceptance_per_position, counts_from_vllm, counts_of,
                                          field_statistics, first_rank_rounds, position_counts)
from specviz.analysis.analytic import Costs
from specviz.analysis.engineconfig import Draft, Plan, batch_ranges, draft_of, settings_for
from specviz.analysis.oracle import oracle_bound
from specviz.analysis.tune import Acceptance, Choice, k_by_batch, k_limit, recommend, recommend_k, shortest_worth
from specviz.common import SpecvizError
from specviz.engine import treepolicy
from specviz.peers import metrics

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)


@dataclasses.dataclass
class Inputs:
    """Everything one answer reads."""

    acceptance: Acceptance
    costs_at: Callable[[int], Costs]  # batch size -> costs (Calibration.costs, or one roofline for all)
    costs_note: str  # where the costs come from, one phrase
    source: dict  # {"kind": "trace" | "sweep" | "vllm", "where": path or URL, ...}
    draft: Draft
    batch_sizes: list[int] = dataclasses.field(default_factory=lambda: list(BATCH_SIZES))
    serve_batch: int = 1  # the batch size a single-k setting is for
    k_max: int | None = None  # None: the longest draft measured (tune.k_limit)
    unit: str = "tokens/s"  # of the goodput ("tokens per target step" for a roofline in units of one step)
    counts: PositionCounts | None = None  # as measured, for the statistics (None: a fitted alpha)
    steps: list | None = None  # a trace's steps: statistics, oracle bound, tree shapes
    tree_bounds: tuple[int, int] = (4, 32)  # a tree trace's --tree-width and --tree-nodes (the widest it drafted)
    vllm_version: str | None = None
    measured_best: dict | None = None  # a sweep's measured best k per batch size
    notes: list[str] = dataclasses.field(default_factory=list)


class MeasuredShapes(treepolicy.TreeShapes):
    """The tree policy's shape search on a trace's counted rates a(d, r) = accepted / tried, with no prior:
    a (depth, rank) cell never tried counts as never accepted."""

    def rate(self, d: int, r: int) -> float:
        acc, tried = self.counts.get((d, r), (0, 0))
        return acceptance.alpha(acc, tried, empty=0.0)


def tree_rows(steps: list | None) -> bool:
    return bool(steps) and any(r.get("tree") for s in steps for r in s["rows"])


def tree_shape(steps: list, costs: Costs, b: int, k_max: int, bounds: tuple[int, int]) -> dict | None:
    """The (depth, width, nodes) the tree policy picks at batch b from the trace's rates, with its goodput;
    None when a chain (width 1) or no speculation is best."""
    shapes = MeasuredShapes(costs, k_max=k_max, w_max=max(1, bounds[0]), n_max=max(1, bounds[1]))
    shapes.counts = {key: list(v) for key, v in treestats.acceptance_by_depth_rank(steps).items()}
    k, w, n = shapes.choose(b)
    if k == 0 or w == 1:
        return None
    tokens = treepolicy.predicted_tokens(k, w, n, shapes.rate)
    return {"depth": k, "width": w, "nodes": n, "tokens_per_step": tokens,
            "goodput": b * tokens / treepolicy.step_seconds(b, k, w, n, costs)}


def trace_parts(trace: dict, where: str = "") -> dict:
    """What a trace gives an answer: acceptance and its counts, the steps, the draft and the batch size it ran.
    SpecvizError for a trace without speculative steps."""
    cfg, steps = trace.get("config", {}), trace.get("steps", [])
    counts = position_counts(steps)
    if counts.rounds == 0:  # a tree run: its chains of first-rank children
        counts = counts_of(first_rank_rounds(steps))
    if counts.rounds == 0:
        raise SpecvizError(f"{where or 'this trace'} has no speculative steps (a regular run, or its draft never "
                           "proposed a token): tune needs drafted tokens")
    return {"acceptance": Acceptance.from_counts(counts), "counts": counts, "steps": steps,
            "draft": draft_of(str(cfg.get("draft", "ngram")), float(cfg.get("draft_confidence") or 0.0)),
            "serve_batch": int(cfg.get("batch_size", 1)),
            "tree_bounds": (int(cfg.get("tree_width", 1) or 1), int(cfg.get("tree_nodes", 16) or 16)),
            "source": {"kind": "trace", "where": where, "pair": f"{cfg.get('target_name', cfg.get('target'))} + "
                                                                f"{cfg.get('draft_name', cfg.get('draft'))}"}}


def vllm_acceptance(d: metrics.Delta) -> tuple[Acceptance, PositionCounts | None]:
    """What a vLLM server's counters over a window (a Delta that drafted) give an answer: acceptance per position
    from its per-position counters, else (an older vLLM) one alpha fitted to its mean accepted count, without an
    interval. SpecvizError when there is no alpha to read (nothing drafted, or no accepted-tokens counter)."""
    if d.accepted_per_position is not None and d.drafts:
        counts = counts_from_vllm(d.drafts, d.accepted_per_position)
        return Acceptance.from_counts(counts), counts
    if d.alpha is None:
        raise SpecvizError("the server reports no accepted draft tokens in this window: no acceptance to recommend from")
    return Acceptance.from_alpha(min(1.0, max(0.0, d.alpha))), None


def _choice_json(c: Choice) -> dict:
    d = dataclasses.asdict(c)
    d.update(off=c.k == 0, speedup=c.speedup, interval=list(c.interval) if c.interval else None, curve=list(c.curve))
    return d


def answer(inp: Inputs, engine: str) -> dict:
    """The whole answer as JSON-ready data (``specviz tune --json`` prints it)."""
    acc, sizes = inp.acceptance, sorted(set(inp.batch_sizes))
    choices = recommend(acc, inp.costs_at, sizes, inp.k_max)
    serve = recommend_k(acc, inp.costs_at(inp.serve_batch), inp.serve_batch, inp.k_max)
    kb = k_by_batch(acc, inp.costs_at, max(sizes + [inp.serve_batch]), inp.k_max)
    tree = None
    if tree_rows(inp.steps):
        tree = tree_shape(inp.steps, inp.costs_at(inp.serve_batch), inp.serve_batch, k_limit(acc, inp.k_max),
                          inp.tree_bounds)
        if tree is not None and tree["goodput"] <= serve.goodput:
            tree = None  # the chain is as good: keep the simpler setting
    plan = Plan(tuple(kb), inp.serve_batch, inp.draft, shortest_worth(serve),
                (tree["depth"], tree["width"], tree["nodes"]) if tree else None)
    settings = settings_for(engine, plan, inp.vllm_version)
    stats = field_statistics(inp.steps) if inp.steps and not tree_rows(inp.steps) else (
        {"rounds": inp.counts.rounds, "acceptance_per_position": acceptance_per_position(inp.counts)} if inp.counts
        else None)  # a tree trace: the first-rank chains' acceptance; treestats has its (depth, rank) rates
    bound = oracle_bound(inp.steps, inp.costs_at) if inp.steps else None
    return {"source": inp.source, "costs": inp.costs_note, "unit": inp.unit, "draft": dataclasses.asdict(inp.draft),
            "acceptance": {"alpha": acc.alpha, "measured_positions": acc.measured, "counted": acc.counted,
                           "k_max": k_limit(acc, inp.k_max)},
            "statistics": stats,
            "recommendations": [_choice_json(c) for c in choices],
            "serve": _choice_json(serve), "schedule": batch_ranges(kb),
            "off_at": [c.batch_size for c in choices if c.k == 0],
            "tree": tree, "oracle": None if bound is None else {**dataclasses.asdict(bound), "left_behind": bound.left_behind,
                                                                  "oracle_ks": list(bound.oracle_ks)},
            "measured_best": inp.measured_best,
            "settings": dataclasses.asdict(settings), "notes": list(inp.notes)}


# ---- the printed answer ----------------------------------------------------------------------------------

def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _row(c: dict) -> str:
    k = "off" if c["off"] else str(c["k"]) + ("*" if c["extrapolated"] else "")
    iv = f"[{c['interval'][0]:.1f}, {c['interval'][1]:.1f}]" if c["interval"] else "-"
    pb = "-" if c["p_best"] is None else f"{c['p_best']:.2f}"
    return f"{c['batch_size']:>5} {k:>5} {c['goodput']:>12.1f} {iv:>20} {c['speedup']:>8.2f}x {pb:>8}"


def render(ans: dict) -> list[str]:
    """The answer as the lines ``specviz tune`` prints."""
    src, st, unit = ans["source"], ans["statistics"], ans["unit"]
    lines = [f"acceptance: {src['kind']} {src.get('where', '')}".rstrip()
             + (f", {st['rounds']} rounds" if st else "") + f", alpha {ans['acceptance']['alpha']:.3f}",
             f"costs: {ans['costs']}"]
    if st:
        lines.append("acceptance per position (P(A >= j)): " + " ".join(f"{p:.3f}" for p in st["acceptance_per_position"]))
    if st and "zero_accept_rate" in st:
        hist = "; ".join(f"k={d}: " + ", ".join(f"{a}:{n}" for a, n in row.items())
                         for d, row in st["accepted_length_histogram"].items())
        lines += [f"accepted length by draft length (accepted:rounds): {hist}",
                  f"zero-accept rounds {_pct(st['zero_accept_rate'])}, drafted tokens wasted {_pct(st['wasted_draft_share'])}"]
    lines += ["", f"{'B':>5} {'k':>5} {'goodput ' + unit:>12} {'90% interval':>20} {'speedup':>9} {'P(best)':>8}"]
    lines += [_row(c) for c in ans["recommendations"]]
    if any(c["extrapolated"] for c in ans["recommendations"]):
        lines.append("* k past the longest draft measured (--k-max): its later positions assume the pooled alpha")
    if ans["off_at"]:
        lines.append("speculation off at batch size " + ", ".join(map(str, ans["off_at"]))
                     + ": predicted slower than regular decoding there")
    if ans["measured_best"]:
        lines.append("the sweep's measured best k: " + ", ".join(f"B={b}: {k}" for b, k in ans["measured_best"].items()))
    if ans["tree"]:
        t = ans["tree"]
        lines.append(f"a tree beats the chain at batch {ans['serve']['batch_size']}: depth {t['depth']}, width "
                     f"{t['width']}, {t['nodes']} nodes, {t['goodput']:.1f} {unit}")
    if o := ans["oracle"]:
        lines.append(f"oracle bound (the best k per step in hindsight, on this trace's steps): {o['oracle']:.1f} {unit}; "
                     f"best fixed k = {o['best_fixed_k']}: {o['best_fixed']:.1f} (the oracle is {_pct(o['left_behind'])} "
                     f"ahead); as run: {o['as_run']:.1f}")
    s = ans["settings"]
    lines += ["", f"{s['engine']} settings:", *([s["text"]] if s["text"] else []), f"# {s['explanation']}"]
    lines += [f"note: {n}" for n in ans["notes"]]
    return lines


def median_batch(values) -> int | None:
    """The median of observed running-request counts, rounded, at least 1 (None without any)."""
    vals = [v for v in values if v is not None]
    return max(1, round(statistics.median(vals))) if vals else None
