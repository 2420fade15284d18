"""What the pages derive from a trace, without Streamlit: the measured acceptance alpha and draft
cost ratio c, the analytic model's predicted speedup (with the newest calibration, if any), and
token text for the ids a trace records."""

from __future__ import annotations

from functools import lru_cache

from specviz.analysis import acceptance, analytic
from specviz.analysis.acceptance import alpha_from_accepted, mean_accepted, positions_tried
from specviz.analysis.analytic import ragged_batch_times


# ---- decode: token ids -> text, memoised per tokenizer -------------------------------------------

@lru_cache(maxsize=8)
def _decoder(tokenizer):
    @lru_cache(maxsize=200_000)
    def one(t: int) -> str:
        return _decode_one(tokenizer, t)

    def decode(ids: list[int]) -> str:
        return "".join(one(int(t)) for t in ids)

    return decode


def _decode_one(tokenizer, t: int) -> str:
    """One id's text, or "[id]" for an id the tokenizer lacks (a trace of another model, a hostile
    one): a fast tokenizer raises OverflowError for -1, and a page drawing it would break."""
    try:
        return tokenizer.decode([t], skip_special_tokens=False)
    except (OverflowError, ValueError, TypeError, IndexError, KeyError):
        return f"[{t}]"


def decoder_for(tokenizer):
    """A fast ``decode(ids) -> str`` (token by token, memoised); None without a tokenizer. It never
    raises for an id: one the tokenizer lacks reads "[id]"."""
    if tokenizer is None or not hasattr(tokenizer, "decode"):
        return None
    try:
        return _decoder(tokenizer)
    except TypeError:  # unhashable tokenizer
        def decode(ids: list[int]) -> str:
            try:
                return tokenizer.decode(list(ids))
            except (OverflowError, ValueError, TypeError, IndexError, KeyError):
                return "".join(_decode_one(tokenizer, int(t)) for t in ids)

        return decode


# ---- alpha from a trace: two estimators (defined in specviz.analysis.acceptance) ---------------------

def alpha_from_trace(trace: dict) -> float | None:
    """Alpha (per-position acceptance, acceptance.alpha) over a trace's rows that drafted."""
    succ = trials = 0
    for s in trace.get("steps", []):
        for r in s["rows"]:
            if r["active"] and r["drafted"] > 0:
                succ += r["accepted"]
                trials += positions_tried(r["drafted"], r["accepted"])
    return acceptance.alpha(succ, trials)


def row_step_counts(traces) -> tuple[int, int]:
    """(accepted drafts, active row-steps) over one trace or a list of traces."""
    rs = [r for t in ([traces] if isinstance(traces, dict) else traces) for s in t["steps"] for r in s["rows"] if r["active"]]
    return sum(r["accepted"] for r in rs), len(rs)


def row_alphas_and_lengths(trace: dict, k: int) -> tuple[list[float], list[int]]:
    """Per row of one trace: alpha fitted to its own mean accepted per step, and its output length."""
    acc, steps = {}, {}
    for s in trace["steps"]:
        for r in s["rows"]:
            if r["active"]:
                acc[r["index"]] = acc.get(r["index"], 0) + r["accepted"]
                steps[r["index"]] = steps.get(r["index"], 0) + 1
    seqs = sorted(trace["sequences"], key=lambda q: q["index"])
    alphas = [alpha_from_accepted(mean_accepted(acc.get(q["index"], 0), steps.get(q["index"], 0), empty=0.0), k)
              for q in seqs]
    return alphas, [len(q["output_token_ids"]) for q in seqs]


def predicted_ragged(traces: list[dict], k: int, costs) -> float:
    """The ragged-completion prediction (analytic.ragged_batch_times) over a cell's batches,
    from each row's own alpha and length: time-weighted, as tokens/s over all batches is."""
    t_reg = t_spec = 0.0
    for t in traces:
        alphas, lengths = row_alphas_and_lengths(t, k)
        if not lengths or not any(lengths):
            continue
        r, sp = ragged_batch_times(lengths, alphas, k, costs.target, costs.draft, costs.overhead,
                                   costs.regular_overhead)
        t_reg, t_spec = t_reg + r, t_spec + sp
    return t_reg / t_spec if t_spec else float("nan")


def predicted_speedup(trace: dict, costs=None, cost_ratio: float = 0.05) -> float | None:
    """The analytic model's speedup for this trace's (b, k, alpha); None if not computable.

    With calibrated costs and per-row data in the trace: the ragged-completion prediction from
    each row's own alpha and length (predicted_ragged, what the sweep reports);
    otherwise the one-alpha formula."""
    cfg = trace.get("config", {})
    alpha = alpha_from_trace(trace)
    if alpha is None or cfg.get("mode") == "regular":
        return None
    b, k = int(cfg.get("batch_size", 1)), int(cfg.get("draft_length", 0))
    try:
        if costs is not None:
            if k > 0 and cfg.get("policy", "fixed") == "fixed" and any(
                    q.get("output_token_ids") for q in trace.get("sequences", [])):
                return predicted_ragged([trace], k, costs)
            return analytic.speedup_batch(b, k, alpha, costs.target, costs.draft, costs.overhead, costs.regular_overhead)
        return analytic.speedup_batch1(min(alpha, 1.0), k, cost_ratio)
    except Exception:
        return None


def draft_cost_ratio(trace: dict) -> float | None:
    """Measured c ~ draft time per drafted position / (verify time per step) from a trace."""
    steps = [s for s in trace.get("steps", []) if s["k"] > 0]
    if not steps:
        return None
    draft = sum(s["t_draft"] / s["k"] for s in steps) / len(steps)
    verify = sum(s["t_verify"] for s in steps) / len(steps)
    return draft / verify if verify else None
