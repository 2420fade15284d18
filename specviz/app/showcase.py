"""The Live page's showcase: one click runs a pair of workloads, one where speculation wins and one where it
loses, each raced against regular decoding in the device process (specviz.device.deviceclient), and puts their
speedups, acceptance and the cost model's reason side by side.

  wins   rewrite-text (fix the spelling of a given passage: the answer copies the prompt) with the
         suffix draft at B = 1 and k = 12: it drafts long runs it has seen, as deep as its match supports,
         and costs no model forward (bench/suffix_hybrid.py: 3.25x regular on this set, k = 12, bf16)
  loses  chat (fresh prompts) with the default draft at B = 16: a model draft accepts less there, and at
         B = 16 a verify of k + 1 tokens per row costs the target several regular steps

The runs take the sidebar's target, device and dtype; they wait their turn in the device's one line.
"""

from __future__ import annotations

import dataclasses

import streamlit as st

from specviz.analysis import explain
from specviz.app import state as appstate
from specviz.prompts.editing import REWRITE_TEXT
from specviz.prompts.sets import CHAT
from specviz.runconfig import RunConfig

KEY = "showcase_runs"  # session state: [(Case, LiveRun)]


@dataclasses.dataclass(frozen=True)
class Case:
    label: str
    why: str  # what the workload is, in a line
    prompts: tuple[str, ...]
    draft: str
    batch_size: int
    draft_length: int
    max_new_tokens: int


CASES = (
    Case("speculation wins", "rewrite a given text (the answer copies most of the prompt), the suffix draft, B = 1",
         tuple(REWRITE_TEXT[:2]), "suffix", 1, 12, 64),
    Case("speculation loses", "fresh chat prompts, the default model draft, B = 16", tuple(CHAT[:8]), "default", 16, 2,
         32),
)


def configs(state) -> list[tuple[Case, RunConfig]]:
    """Each case's run on the sidebar's target, device and dtype (validated: SpecvizError says why not)."""
    v = appstate.sidebar_values(state)
    out = []
    for c in CASES:
        cfg = RunConfig(target=v["target"], draft=c.draft, device=v["device"], dtype=v["dtype"], prompts=list(c.prompts),
                        batch_size=c.batch_size, draft_length=c.draft_length, max_new_tokens=c.max_new_tokens)
        cfg.validate()
        out.append((c, cfg))
    return out


def start(state) -> None:
    """Both runs, raced against regular decoding; the second waits in the device's line behind the first."""
    state[KEY] = [(c, appstate.start_run(cfg, appstate.model_lock(), race=True)) for c, cfg in configs(state)]


def outcome(trace: dict | None, regular: dict | None) -> dict:
    """A finished case's numbers: measured and predicted speedup, alpha, acceptance rate and the reason."""
    if not trace:
        return {}
    costs, c = appstate.trace_costs(trace), appstate.draft_cost_ratio(trace)
    alpha = appstate.alpha_from_trace(trace)
    measured = explain.measured_speedup(trace, regular)
    pred = appstate.predicted_speedup(trace, costs, cost_ratio=c if c is not None else 0.05)
    reason = explain.gap_reason(measured, pred, alpha, c, explain.verify_ratio(trace, regular),
                                explain.ragged_tail(trace)) if measured is not None and pred is not None else ""
    return {"measured": measured, "predicted": pred, "alpha": alpha,
            "acceptance": trace.get("summary", {}).get("acceptance_rate"), "reason": reason}


# ---- drawing ---------------------------------------------------------------------------------------

def _column(col, case: Case, run) -> None:
    col.markdown(f"**{case.label}**: {case.why}")
    if run.running:
        run.beat()  # the page is watching: not abandoned
        col.info(f"{run.status}…")
        return
    if run.status == "error":
        col.error(run.error)
        return
    o = outcome(run.trace, run.regular_trace)
    fmt = lambda v, f: f.format(v) if v is not None else "—"  # noqa: E731
    a, b = col.columns(2)
    a.metric(f"{case.label}: measured speedup", fmt(o.get("measured"), "{:.2f}x"))
    b.metric(f"{case.label}: predicted speedup", fmt(o.get("predicted"), "{:.2f}x"))
    a.metric(f"{case.label}: α", fmt(o.get("alpha"), "{:.3f}"))
    b.metric(f"{case.label}: acceptance rate", fmt(o.get("acceptance"), "{:.3f}"))
    if o.get("reason"):
        col.caption(f"Why: {o['reason']}.")


def section(state) -> None:
    """The showcase block: its button, then both cases side by side (running, or their results)."""
    with st.expander("Showcase: where speculation wins, and where it loses", expanded=KEY in state):
        st.caption("One click runs two workloads on the sidebar's target, each raced against regular decoding: "
                   + "; ".join(f"{c.label}: {c.why}" for c in CASES) + ".")
        if st.button("Run the showcase pair", key="showcase"):
            try:
                start(state)
            except Exception as e:  # a SpecvizError from the sidebar's settings: one line
                st.error(str(e))
        runs = state.get(KEY) or []
        if runs:  # redrawn on its own clock while a case runs
            st.fragment(_columns, run_every=2.0 if any(r.running for _, r in runs) else None)(runs)


def _columns(runs) -> None:
    for col, (case, run) in zip(st.columns(len(runs)), runs):
        _column(col, case, run)
