"""What a page says to explain a run, as numbers: one row-step taken apart, time per phase,
measured against predicted speedup and the model's reason for the gap, and whether the output
changed. Pure functions of a trace dict (specviz.analysis.trace format); no Streamlit, no torch.

Vocabulary (SPECDEC.md): of the k tokens a row *drafted* in a step, the *accepted* ones are the
prefix the target agreed with; at the first rejection the target's own choice there is the
*recovered* token; when every drafted token was accepted the target adds a *bonus* token (a
step that drafted nothing emits just that one, as regular decoding does). The *output* of the
step is accepted + (recovered or bonus).
"""

from __future__ import annotations

from specviz.analysis.trace import PHASES


# ---- one row-step, taken apart ---------------------------------------------------------------------

def token_kind(j: int, accepted: int, drafted: int, tree: dict | None = None) -> str:
    """The role of the j-th output token of a row-step: accepted, recovered or bonus.

    A chain's last token is a bonus when every drafted token was accepted. A tree (a v3 row-step's
    "tree") drafts more nodes than any path holds, so there it is a bonus when the accepted path
    ends at a leaf (no node has the path's last node as parent), and recovered otherwise."""
    if j < accepted:
        return "accepted"
    if tree is not None:
        last = tree["path"][-1] if tree.get("path") else -1
        return "recovered" if any(p == last for p in tree["parent"]) else "bonus"
    return "bonus" if accepted >= drafted else "recovered"


def step_detail(trace: dict, row: int, step_pos: int) -> dict | None:
    """Row ``row`` in the ``step_pos``-th step record: what was drafted, accepted, rejected, added.

    Returns None when that row was not active in that step. ``draft_tokens`` is None for traces
    recorded before the engine stored the drafted ids (then only the accepted ones are known).
    ``rejected`` is the draft token the target refused (None if none was); ``discarded`` are the
    drafted tokens after it, never checked. ``final`` is the recovered or bonus token (None when
    the row hit its token limit first)."""
    steps = trace.get("steps", [])
    if not 0 <= step_pos < len(steps):
        return None
    s = steps[step_pos]
    r = next((x for x in s["rows"] if x.get("index") == row and x.get("active")), None)
    if r is None:
        return None
    a, d, emitted = r["accepted"], r["drafted"], list(r["emitted"])
    drafts = r.get("draft_tokens")
    drafts = list(drafts) if drafts is not None and (drafts or d == 0) else None
    final_kind = token_kind(a, a, d, r.get("tree"))
    return {
        "step": s["step"], "k": s["k"], "row": row, "drafted": d, "accepted": a,
        "draft_tokens": drafts,
        "accepted_tokens": emitted[:a],
        "rejected_at": a if a < d else None,  # 0-based draft position of the first rejection
        "rejected": drafts[a] if drafts is not None and a < d else None,
        "discarded": drafts[a + 1:] if drafts is not None and a < d else [],
        "final": emitted[a] if len(emitted) > a else None,
        "final_kind": final_kind,
        "output": emitted,
    }


def active_steps(trace: dict, row: int) -> list[int]:
    """Positions (in trace["steps"]) of the steps in which ``row`` was active."""
    return [n for n, s in enumerate(trace.get("steps", []))
            if any(r.get("index") == row and r.get("active") for r in s["rows"])]


# ---- where the time went ---------------------------------------------------------------------------

def phase_totals(trace: dict) -> dict[str, dict]:
    """Seconds and % of wall time per phase: prefill, draft, verify, accept, bookkeeping, and
    "other" (Python between steps, the telemetry thread, ...: wall minus the rest).

    Sums the step records, so a run still in progress gets totals so far (wall = the end of its
    last step)."""
    steps = trace.get("steps", [])
    s = trace.get("summary", {})
    prefill = float(s.get("prefill_s") or 0.0)
    secs = {"prefill": prefill, **{p: sum(st.get(f"t_{p}", 0.0) for st in steps) for p in PHASES}}
    last_end = (steps[-1]["t_start"] + sum(steps[-1].get(f"t_{p}", 0.0) for p in PHASES)) if steps else prefill
    wall = float(s.get("wall_s") or last_end)
    secs["other"] = max(0.0, wall - sum(secs.values()))
    return {p: {"s": v, "pct": 100.0 * v / wall if wall else 0.0} for p, v in secs.items()}


# ---- measured against predicted ------------------------------------------------------------------------

def measured_speedup(trace: dict | None, regular: dict | None) -> float | None:
    """tokens/s of the speculative run over tokens/s of regular decoding on the same prompts."""
    spec = (trace or {}).get("summary", {}).get("tokens_per_s")
    reg = (regular or {}).get("summary", {}).get("tokens_per_s")
    return spec / reg if spec and reg else None


def ragged_tail(trace: dict) -> float | None:
    """Share of row-steps lost to the ragged tail: steps in which a row had already finished
    while the batch ran on for its slowest row (0 = every row busy every step)."""
    steps = trace.get("steps", [])
    row_steps = sum(len(s["rows"]) for s in steps)
    idle = sum(not r.get("active") for s in steps for r in s["rows"])
    return idle / row_steps if row_steps else None


def gap_reason(measured: float | None, predicted: float | None, alpha: float | None, c: float | None,
               verify_ratio: float | None, tail: float | None) -> str:
    """One line on why the measured speedup differs from the predicted one, in the model's terms:
    alpha (acceptance), c (draft cost per token / target step), the verify cost of k+1 tokens
    against one, and the ragged tail. The caller shows the two numbers; this says why."""
    if measured is None or predicted is None:
        return ""
    parts = []
    if alpha is not None and c is not None and alpha <= c:
        parts.append(f"α = {alpha:.2f} is not above c = {c:.2f}, so every drafted token costs more than it saves")
    if verify_ratio is not None and verify_ratio > 1.15:
        parts.append(f"verifying k+1 tokens costs {verify_ratio:.2f}× one regular step, not 1×")
    if tail is not None and tail > 0.1:
        parts.append(f"{100 * tail:.0f}% of row-steps idle in the ragged tail (finished rows wait for the slowest)")
    if abs(measured - predicted) < 0.05 * max(predicted, 1e-9):
        return "Within 5%: " + ("; ".join(parts) if parts else "the model's α, c and verify cost account for it")
    if measured > predicted:
        return ("Better than predicted: regular decoding paid more per step than the cost model assumes "
                "(and run-to-run noise on a shared CPU counts)" + ("; also " + "; ".join(parts) if parts else ""))
    if not parts:
        parts.append("per-step overhead outside the forwards (Python, sampling, cache bookkeeping) that the "
                     "cost model does not see, or noise on a shared CPU")
    return "Below the prediction: " + "; ".join(parts)


def verify_ratio(trace: dict, regular: dict | None) -> float | None:
    """Mean verify time per speculative step over the mean target forward of a regular step."""
    steps = [s for s in trace.get("steps", []) if s["k"] > 0]
    reg = [s for s in (regular or {}).get("steps", [])]
    if not steps or not reg:
        return None
    v = sum(s["t_verify"] for s in steps) / len(steps)
    r = sum(s["t_verify"] for s in reg) / len(reg)
    return v / r if r else None


# ---- did speculation change the output ---------------------------------------------------------------

def exactness(rows: list[dict]) -> dict:
    """From specviz.measure.correctness.divergence_rows: n of N rows identical, and for the others
    the first divergent position and the regular run's top-1 minus top-2 logit margin there."""
    diverged = [{"row": r["index"], "position": r["first_divergence"], "margin": r.get("margin")}
                for r in rows if not r["match"]]
    return {"identical": len(rows) - len(diverged), "rows": len(rows), "diverged": diverged}


# ---- why a bigger batch gains less ----------------------------------------------------------------

FREE_SHARE = 0.15  # a drafted token that adds at most this share of a one-token step to the verify "rides almost free"


def batch_gain_reason(target_cost, k: int, b_small: int = 1, b_large: int = 64, calibrated: bool = True) -> str:
    """Two sentences from the target's cost model (analytic.CostModel): what verifying k+1 tokens
    per row costs against one at a small and a large batch, and why that eats the gain."""
    k = max(k, 1)
    ratio = {b: target_cost(b, k + 1) / target_cost(b, 1) for b in (b_small, b_large)}
    knee = target_cost.knee_tokens
    where = "measured on this machine by the calibration" if calibrated else "an illustrative roofline: no calibration yet"
    knee_txt = f"about {knee:.0f} tokens per forward" if knee != float("inf") else "no knee in the measured range"
    extra = (ratio[b_small] - 1) / k  # what one drafted token adds to the verify, in one-token steps
    cheap = ("the drafted tokens ride almost free" if extra <= FREE_SHARE else
             f"each drafted token adds {extra:.2f} of a one-token step: not free even here")
    return (f"A target forward stays nearly flat in cost until it is compute-bound, at {knee_txt} ({where}); "
            f"below that the weights are read once whatever the batch, so at b = {b_small} verifying k + 1 = {k + 1} "
            f"tokens per row costs {ratio[b_small]:.2f}× one token: {cheap}. "
            f"At b = {b_large} the batch alone already fills {b_large} tokens per forward, so the same verify costs "
            f"{ratio[b_large]:.2f}× one step and pays back most of what acceptance saves: the bigger the batch, "
            f"the smaller the gain and the smaller the best k.")


DRIFT_FACTOR = 1.25  # a measured speedup this far past the tokens per step it had is the machine, not speculation


def drift_warning(cell: dict) -> str | None:
    """Why a cell's measured speedup cannot be speculation's, or None. A speculative step gives a row
    its mean acceptance length L of tokens and costs at least a regular step (its verify is a target
    forward over k + 1 slots), so a speedup well past L (or past k + 1, at all) means the machine's
    speed changed between the interleaved passes: another process, or throttling."""
    L, s, k = cell.get("mean_acceptance_length"), cell.get("measured_speedup"), cell.get("draft_length", 0)
    if s is None or L is None:
        return None
    if s > k + 1 or s > DRIFT_FACTOR * max(L, 1.0):
        return (f"measured {s:.2f}x is more than its {L:.2f} tokens per row-step allow: the machine's speed changed "
                "during this cell (another busy process?); measure it again with more repeats on an idle machine")
    return None
