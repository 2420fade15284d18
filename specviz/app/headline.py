"""The Live page's headline: the run's numbers in six tiles, measured against predicted speedup with
the reason for the gap, what the draft is, and (greedy runs raced against regular decoding) whether
speculation changed any output, with the margins the device process measures and each diverged row's
two texts around their first difference (Streamlit code)."""

from __future__ import annotations

import streamlit as st

from specviz.analysis import explain
from specviz.analysis.divergence import first_difference
from specviz.analysis.trace import synthetic_label
from specviz.figures import runlabel, tokentext
from specviz.app import state as appstate
from specviz.figures.difftext import first_difference_markdown
from specviz.common import SpecvizError
from specviz.measure.hostload import is_busy


def headline(trace: dict, regular: dict | None) -> None:
    s = trace.get("summary", {})
    cfg = trace.get("config", {})
    # two rows of three: six tiles in one row cut their labels off
    top, bottom = st.columns(3), st.columns(3)
    fmt = lambda v, f: f.format(v) if v is not None else "—"  # noqa: E731
    alpha = appstate.alpha_from_trace(trace)
    measured = explain.measured_speedup(trace, regular)
    costs = appstate.trace_costs(trace)
    c = appstate.draft_cost_ratio(trace)
    pred = appstate.predicted_speedup(trace, costs, cost_ratio=c if c is not None else 0.05)
    top[0].metric("tokens/s", fmt(s.get("tokens_per_s"), "{:.1f}"), help="output tokens of all rows / wall time")
    top[1].metric("measured speedup", fmt(measured, "{:.2f}x"),
                  help="tokens/s over regular decoding of the same prompts, run right after (Race)")
    top[2].metric(runlabel.prediction_label("predicted speedup", costs is not None), fmt(pred, "{:.2f}x"),
                  help=("fitted cost model; each row's own α and length, the batch running to its last row"
                        if costs is not None else
                        f"not calibrated yet: batch-1 formula with the measured α and c = {c or 0.05:.3f}"))
    if costs is None and pred is not None:
        top[2].caption(runlabel.WHY_LIVE)
    bottom[0].metric("α (per-position acceptance)", fmt(alpha, "{:.3f}"),
                     help="accepted draft tokens / draft positions the target checked (defined below)")
    bottom[1].metric("acceptance rate", fmt(s.get("acceptance_rate"), "{:.3f}"),
                     help="accepted / drafted (defined below)")
    bottom[2].metric("mean acceptance length", fmt(s.get("mean_acceptance_length"), "{:.2f}"),
                     help="output tokens per row-step (defined below)")
    st.markdown(" ".join((tokentext.ALPHA_DEFINITION, tokentext.ACCEPTANCE_RATE_DEFINITION,
                          tokentext.MEAN_ACCEPTANCE_LENGTH_DEFINITION)))
    if cfg.get("mode") == "regular":
        return
    if measured is None and not trace.get("partial"):
        st.caption("measured speedup: tick *Race against regular decoding* and run again to measure it.")
    busy = machine_busy(trace, regular)
    if measured is not None and pred is not None:
        reason = ("" if busy else  # the method is not to blame for a machine that was busy
                  explain.gap_reason(measured, pred, alpha, c, explain.verify_ratio(trace, regular),
                                     explain.ragged_tail(trace)) + ".")
        uncal = "" if costs is not None else f" ({runlabel.UNCALIBRATED})"
        st.markdown(f"**Measured {measured:.2f}× vs predicted {pred:.2f}×{uncal} ({measured - pred:+.2f}).** {reason}")
    if measured is not None and busy:
        st.warning(f"{busy[0].upper()}{busy[1:]}: the measured speedup is unreliable. Run again on an idle machine.")
    if line := tokentext.draft_text(cfg, c):  # what this draft is: its size against the target's, its measured cost
        st.caption(line)
    exactness_line(trace, regular)


def exactness_line(trace: dict, regular: dict | None) -> None:
    """After a greedy run with its regular baseline: did speculation change the output?"""
    if regular is not None and (label := synthetic_label(trace.get("config", {}))):
        st.info(f"Not compared with regular decoding: this run used {label}.")
        return
    if regular is None or trace.get("partial") or trace.get("config", {}).get("temperature", 0) != 0:
        return
    cache = st.session_state.setdefault("_exactness", {})
    key = (id(trace), id(regular))
    if key not in cache:
        rows = appstate.divergence_rows(trace, regular)
        if any(not r["match"] for r in rows):  # the margins need one target forward per diverged row
            v = appstate.sidebar_values(st.session_state)
            try:  # in the device process, where the run's target is loaded; without margins if it is busy
                rows = appstate.ask("divergence", appstate.model_lock(), "the divergence margins", 30.0,
                                    spec=trace, regular=regular, target=v["target"], device=v["device"],
                                    dtype=v["dtype"])
            except SpecvizError:
                pass
        cache.clear()
        cache[key] = (explain.exactness(rows), rows)
    ex, rows = cache[key]
    line = tokentext.exactness_text(ex, trace.get("config", {}).get("dtype", ""))
    (st.success if not ex["diverged"] else st.warning)(line)
    if ex["diverged"]:
        diverged_texts(trace, rows)


SHOWN_DIVERGED = 4  # diverged rows whose two texts the page shows


def diverged_texts(trace: dict, rows: list[dict]) -> None:
    """Each diverged row's speculative and regular text around their first difference, that token marked."""
    decode = appstate.trace_decoder(trace) or (lambda ids: "".join(f"[{t}]" for t in ids))  # no tokenizer: ids
    diverged = [r for r in rows if not r["match"]]
    with st.expander(f"Where the outputs differ ({len(diverged)} row{'s' if len(diverged) != 1 else ''})"):
        for r in diverged[:SHOWN_DIVERGED]:
            diff = first_difference(r["speculative"], r["regular"], r["first_divergence"], decode)
            st.markdown(first_difference_markdown(r["index"], diff))
        if len(diverged) > SHOWN_DIVERGED:
            st.caption(f"{len(diverged) - SHOWN_DIVERGED} more diverged rows are not shown here.")


def machine_busy(trace: dict, regular: dict | None) -> str | None:
    """How busy other processes kept the machine during the run or its race, when enough to distort the
    speedup (the device process measures it; the server drawing the run counts as the run's own)."""
    said = []
    for what, t in (("the speculative run", trace), ("the regular run", regular)):
        load = (t or {}).get("host_load") or {}
        cores, cpus = load.get("other_cores"), load.get("cpus") or 1
        if is_busy(cores, cpus):
            said.append(f"other processes kept {cores:.1f} of {cpus} cores busy during {what}")
    return "; ".join(said) or None
