"""What the pages derive from a trace, without Streamlit: the measured acceptance alpha and draft
cost ratio c, the analytic model's predicted speedup (with the newest calibration, if any), and
token text for the ids a trace records."""

from __future__ import annotations

from functools import lru_cache


# ---- decode: token ids -> text, memoised per tokenizer -------------------------------------------

@lru_cache(maxsize=8)
def _decoder(tokenizer):
    @lru_cache(maxsize=200_000)
    def one(t: int) -> str:
        return tokenizer.decode([t], skip_special_tokens=False)

    def decode(ids: list[int]) -> str:
        return "".join(one(int(t)) for t in ids)

    return decode


def decoder_for(tokenizer):
    """A fast ``decode(ids) -> str`` (token by token, memoised); None without a tokenizer."""
    if tokenizer is None or not hasattr(tokenizer, "decode"):
        return None
    try:
        return _decoder(tokenizer)
    except TypeError:  # unhashable tokenizer
        return lambda ids: tokenizer.decode(list(ids))


# ---- the analytic model, if present ------------------------------------------------------------

def analytic_module():
    try:
        from . import analytic

        return analytic
    except Exception:
        return None


def load_calibration(batch_size: int = 1):
    """Fitted costs (analytic.Costs) from the newest `python -m specviz calibrate` result for the
    device in use, else None ("not calibrated yet")."""
    import json

    from .calibrate import Calibration, calibration_path

    folder = calibration_path("x", "x", "x", "x").parent
    files = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True) if folder.is_dir() else []
    for f in files:
        try:
            return Calibration.from_json(json.loads(f.read_text())).costs(batch_size)
        except (ValueError, KeyError, TypeError, OSError):
            continue
    return None


def alpha_from_trace(trace: dict) -> float | None:
    """Per-position acceptance alpha (successes / trials, as the analytic model assumes)."""
    from .analytic import positions_tried

    succ = trials = 0
    for s in trace.get("steps", []):
        for r in s["rows"]:
            if r["active"] and r["drafted"] > 0:
                succ += r["accepted"]
                trials += positions_tried(r["drafted"], r["accepted"])
    return succ / trials if trials else None


def predicted_speedup(trace: dict, costs=None, cost_ratio: float = 0.05) -> float | None:
    """The analytic model's speedup for this trace's (b, k, alpha); None if not computable.

    With calibrated costs and per-row data in the trace: the ragged-completion prediction from
    each row's own alpha and length (specviz.sweep.predicted_ragged, what the sweep reports);
    otherwise the one-alpha formula."""
    an = analytic_module()
    cfg = trace.get("config", {})
    alpha = alpha_from_trace(trace)
    if an is None or alpha is None or cfg.get("mode") == "regular":
        return None
    b, k = int(cfg.get("batch_size", 1)), int(cfg.get("draft_length", 0))
    try:
        if costs is not None:
            if k > 0 and cfg.get("controller", "fixed") == "fixed" and any(
                    q.get("output_token_ids") for q in trace.get("sequences", [])):
                from .sweep import predicted_ragged

                return predicted_ragged([trace], k, costs)
            return an.speedup_batch(b, k, alpha, costs.target, costs.draft, costs.overhead, costs.regular_overhead)
        return an.speedup_batch1(min(alpha, 1.0), k, cost_ratio)
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
