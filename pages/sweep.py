"""Sweep: measured vs predicted speedup over batch sizes x draft lengths, from the browser.

The page only starts and draws: ``python -m specviz sweep``'s own function
(specviz.measure.sweep.sweep_config: the cached calibration or a new one, then every cell
interleaved regular / speculative) runs as a job of the device process (specviz.device.devicejobs),
so the numbers are the CLI's and the UI is never blocked.
"""

import pandas as pd
import streamlit as st

from specviz.analysis.explain import drift_warning
from specviz.device import devicequeue
from specviz.figures import modelcharts, tokentext
from specviz.app import state as appstate
from specviz.common import SpecvizError
from specviz.prompts import sets as promptsets
from specviz.runconfig import RunConfig

JOB_KEY = "sweep_job"
POLL_S = 1.0

appstate.init_state()
st.session_state.setdefault("sweep_results", [])
st.title("Sweep: batch size × draft length")
appstate.run_banner()
st.caption("The same measurement as `python -m specviz sweep`: for every cell, each prompt runs at batch size b "
           "with regular decoding and with speculative decoding at draft length k, interleaved in one process; "
           "measured speedup = speculative tokens/s / regular tokens/s. Predictions come from the calibrated cost "
           "model (calibrated first if this pair has no calibration yet). The page starts on a quick grid (b 1, 4; "
           "k 2, 4; 16 new tokens); the command's default grid is b 1, 2, 4, 8 by k 1, 2, 4, 6, 8 at 64 tokens.")

job = st.session_state.get(JOB_KEY)
running = job is not None and job.running
for key, value in (("sweep_max_new", 16), ("sweep_prompts", list(promptsets.PROMPT_SETS)[2])):
    st.session_state.setdefault(key, value)
last_prompts = appstate.follow_last_run({"sweep_max_new": ("max_new_tokens", 4, 128)}, "sweep_prompts")
prompt_sets = {**({appstate.LAST_RUN_PROMPTS: last_prompts} if last_prompts else {}), **promptsets.PROMPT_SETS}
c1, c2, c3 = st.columns(3)
batches = c1.multiselect("batch sizes b", [1, 2, 4, 8, 16, 32, 64], [1, 4], key="sweep_b")
ks = c2.multiselect("draft lengths k", list(range(1, 17)), [2, 4], key="sweep_k")
repeats = c2.number_input("repeats per cell (median)", 1, 9, 1, key="sweep_repeats")
max_new = c3.slider("max new tokens", 4, 128, key="sweep_max_new")
pset = c3.selectbox("prompts", list(prompt_sets), key="sweep_prompts", format_func=tokentext.short_label,
                    help="the last Live run's prompts come first; " + " · ".join(promptsets.PROMPT_SETS))
b1, b2, _ = st.columns([1, 1, 6])
go = b1.button("Run sweep", key="sweep_run", type="primary", disabled=running)
stop = b2.button("Stop", key="sweep_stop", disabled=not running)


if go:
    v = appstate.sidebar_values(st.session_state)
    draft = appstate.draft_spec(st.session_state)
    cfg = RunConfig(target=v["target"], draft=draft, device=v["device"], dtype=v["dtype"],
                    prompts=prompt_sets[pset], max_new_tokens=int(max_new))
    try:
        if not batches or not ks:
            raise SpecvizError("choose at least one batch size and one draft length")
        if draft in ("none", ""):
            raise SpecvizError("the sweep needs a draft: pick one in the sidebar (not 'none')")
        cfg.validate()
    except SpecvizError as e:
        st.error(str(e))
    else:
        st.session_state["sweep_results"] = []
        job = appstate.start_job("sweep", appstate.model_lock(), "a Sweep", cfg=cfg, sizes=sorted(batches),
                                 lengths=sorted(set(ks)), repeats=int(repeats))
        st.session_state[JOB_KEY] = job
        st.session_state["sweep_grid"] = len(batches) * len(set(ks))
        st.rerun()  # draw the buttons again: Run sweep off and Stop on while the job runs
if stop and job is not None:
    job.stop()
    st.rerun()
if job is not None and job.stopping:
    st.info("Stopping after the current cell; the cells measured so far stay.")

COLUMNS = {"batch_size": "b", "draft_length": "k", "alpha": tokentext.ALPHA, "acceptance_rate": "acceptance rate",
           "measured_speedup": "measured speedup", "predicted_speedup": "predicted (ragged rows)",
           "predicted_speedup_iid": "predicted (i.i.d. rows)", "spec_tokens_per_s": "speculative tok/s",
           "regular_tokens_per_s": "regular tok/s"}


def cell_line(c: dict) -> str:
    """One cell as the CLI prints it."""
    return (f"B={c['batch_size']} k={c['draft_length']} alpha {c['alpha']:.3f}  measured {c['measured_speedup']:.2f}x  "
            f"predicted {c['predicted_speedup']:.2f}x (i.i.d. rows {c['predicted_speedup_iid']:.2f}x)")


def show() -> None:
    job = st.session_state.get(JOB_KEY)
    if job is not None:
        job.beat()
        cells = list(job.items)
        st.session_state["sweep_results"] = cells
        if job.running:
            st.info(f"{devicequeue.queued_note(job.lock, job, 'the sweep') if job.status == 'queued' else 'measuring'}: "
                    f"{len(cells)}/{st.session_state.get('sweep_grid', '?')} cells done. {job.note}")
        elif job.status == "error":
            st.error(job.error)
        elif job.status == "stopped":
            why = " (no page polled it for 90 s: tab closed)" if job.abandoned else ""
            st.info(f"stopped after {len(cells)} cells{why}")
        if not job.running and not getattr(job, "_shown_final", False):
            job._shown_final = True
            if st.session_state.get("_sweep_fragment"):
                st.rerun(scope="app")  # the buttons outside the fragment change state
    cells = st.session_state.get("sweep_results") or []
    if not cells:
        if job is None:
            st.info("no sweep yet: choose the grid and press Run sweep")
        return
    st.code("\n".join(cell_line(c) for c in cells), language=None)
    for c in cells:
        if drift := drift_warning(c):
            st.warning(f"b = {c['batch_size']}, k = {c['draft_length']}: {drift}.")
    st.dataframe(pd.DataFrame(cells)[list(COLUMNS)].rename(columns=COLUMNS), hide_index=True)
    st.caption(tokentext.ALPHA_FROM_MEAN_DEFINITION + " " + tokentext.ACCEPTANCE_RATE_DEFINITION)
    bs = sorted({c["batch_size"] for c in cells})
    kk = sorted({c["draft_length"] for c in cells})
    cell = {(c["batch_size"], c["draft_length"]): c for c in cells}
    left, right = st.columns(2)
    grids = {field: [[(cell.get((b, k)) or {}).get(field) for k in kk] for b in bs]
             for field in ("measured_speedup", "predicted_speedup")}
    zrange = modelcharts.speedup_range(*grids.values())  # one colour scale: the two maps compare cell by cell
    for col, what in ((left, "measured"), (right, "predicted")):
        z = grids[f"{what}_speedup"]
        col.plotly_chart(modelcharts.bk_heatmap(bs, kk, z, title=f"{what.capitalize()} speedup by (b, k)", zrange=zrange),
                         key=f"sweep_{what}")
        col.caption(modelcharts.bk_sentence(bs, kk, z, what=what))  # the best cell, and how many are below 1x
    result = job.result if job is not None and job.status == "done" else None
    if result:
        summary = result["summary"]
        st.subheader("Best k per batch size")
        if summary["median_abs_rel_error"] is not None:
            st.caption(f"median |predicted − measured| / measured: {summary['median_abs_rel_error']:.3f}")
        st.dataframe(pd.DataFrame([{"b": b, "best k (measured)": v["measured_best_k"],
                                    "k* (predicted)": v["predicted_k_star"],
                                    "k* (one α)": v["predicted_k_star_one_alpha"],
                                    "speedup": v["measured_best_speedup"]}
                                   for b, v in summary["per_batch_size"].items()]), hide_index=True)


if running:
    st.session_state["_sweep_fragment"] = True
    st.fragment(show, run_every=POLL_S)()
else:
    st.session_state["_sweep_fragment"] = False
    show()
