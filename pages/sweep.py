"""Sweep: measure a grid of batch sizes x draft lengths from the browser; measured speedup vs
regular decoding (k = 0 at the same batch size), the model's prediction, best k per b."""

import dataclasses
import time

import pandas as pd
import streamlit as st

from specviz.analysis import analytic as an
from specviz.app import state as appstate, charts

from specviz.prompts import sets as promptsets
from specviz.common import SpecvizError
from specviz.run import RunConfig, load_pair, run

appstate.init_state()
st.session_state.setdefault("sweep_results", [])
st.title("Sweep: batch size x draft length")
appstate.run_banner()
st.caption("Each cell is one run on the sidebar's pair; speedup = tokens/s at (b, k) / tokens/s at (b, 0) "
           "(regular decoding through the same engine).")

c1, c2, c3 = st.columns(3)
batches = c1.multiselect("batch sizes", [1, 2, 4, 8, 16, 32, 64], [1, 4], key="sweep_b")
ks = c2.multiselect("draft lengths (k = 0 is always run as the baseline)", list(range(1, 17)), [2, 4], key="sweep_k")
max_new = c3.slider("max new tokens", 4, 128, 16, key="sweep_max_new")
pset = c3.selectbox("prompts", list(promptsets.PROMPT_SETS), index=2, key="sweep_prompts")
go = st.button("Run sweep", key="sweep_run", type="primary")


def cell_result(b: int, k: int, trace: dict) -> dict:
    s = trace["summary"]
    return {"b": b, "k": k, "tokens_per_s": s["tokens_per_s"], "acceptance_rate": s["acceptance_rate"],
            "mean_acceptance_length": s["mean_acceptance_length"], "alpha": appstate.alpha_from_trace(trace),
            "c": appstate.draft_cost_ratio(trace), "wall_s": s["wall_s"], "speedup": None}


def with_speedups(results: list[dict]) -> list[dict]:
    base = {r["b"]: r["tokens_per_s"] for r in results if r["k"] == 0}
    return [{**r, "speedup": r["tokens_per_s"] / base[r["b"]] if base.get(r["b"]) and r["tokens_per_s"] else None}
            for r in results]


if go:
    v = appstate.sidebar_values(st.session_state)
    draft = appstate.draft_spec(st.session_state)
    grid = [(b, k) for b in sorted(batches) for k in [0] + sorted(set(ks))]
    base = RunConfig(target=v["target"], draft=draft, device=v["device"], dtype=v["dtype"],
                     prompts=promptsets.PROMPT_SETS[pset], max_new_tokens=max_new)
    try:
        if not grid:
            raise SpecvizError("choose at least one batch size")
        if draft in ("none", ""):
            raise SpecvizError("the sweep needs a draft: pick one in the sidebar (not 'none')")
        base.validate()
        lock = appstate.model_lock()
        waiting = st.empty()
        while not lock.acquire(timeout=0.5):
            waiting.info("queued: another run is in progress")
        waiting.empty()
        try:
            target, proposer = load_pair(base)
            results = []
            st.session_state["sweep_results"] = results
            bar = st.progress(0.0, text="starting…")
            t0 = time.perf_counter()
            for n, (b, k) in enumerate(grid):
                cfg = dataclasses.replace(base, batch_size=b, draft_length=k)
                results.append(cell_result(b, k, run(cfg, target, proposer, telemetry=False)))
                st.session_state["sweep_results"] = with_speedups(results)
                elapsed = time.perf_counter() - t0
                left = elapsed / (n + 1) * (len(grid) - n - 1)
                bar.progress((n + 1) / len(grid), text=f"{n + 1}/{len(grid)} cells, {elapsed:.0f} s; about {left:.0f} s left")
        finally:
            lock.release()
    except SpecvizError as e:
        st.error(str(e))
    except Exception as e:
        st.error(appstate.error_message(e, base))

results = st.session_state.get("sweep_results") or []
if not results:
    st.info("no sweep yet: choose the grid and press Run sweep")
    st.stop()

df = pd.DataFrame(results)
st.dataframe(df, hide_index=True)
bs = sorted(df["b"].unique().tolist())
kk = sorted(df["k"].unique().tolist())
cell = {(r["b"], r["k"]): r for r in results}
left, right = st.columns(2)
left.plotly_chart(charts.bk_heatmap(bs, kk, [[(cell.get((b, k)) or {}).get("speedup") for k in kk] for b in bs],
                                    title="Measured speedup by (b, k)"), key="sweep_measured")

if True:
    costs = appstate.trace_costs(appstate.current_trace())

    def predict(b, k):
        r = cell.get((b, k))
        if r is None or r["alpha"] is None:
            return 1.0 if k == 0 else None
        if costs is not None:
            return an.speedup_batch(b, k, r["alpha"], costs.target, costs.draft, costs.overhead, costs.regular_overhead)
        return an.speedup_batch1(r["alpha"], k, r["c"] or 0.0)

    right.plotly_chart(charts.bk_heatmap(bs, kk, [[predict(b, k) for k in kk] for b in bs],
                                         title="Predicted speedup (measured α per cell)"), key="sweep_predicted")
    if costs is None:
        right.caption("not calibrated yet: batch-1 formula with each cell's measured α and cost ratio c")

best = [max((r for r in results if r["b"] == b and r["speedup"] is not None), key=lambda r: r["speedup"], default=None)
        for b in bs]
st.subheader("Best k per batch size")
st.dataframe(pd.DataFrame([{"batch size": r["b"], "best k": r["k"], "speedup": r["speedup"]} for r in best if r]),
             hide_index=True)
