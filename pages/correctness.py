"""Correctness: greedy speculative output must equal greedy regular output (checked in fp32),
and the sampled acceptance rule must reproduce the target distribution."""

import pandas as pd
import streamlit as st

from specviz.analysis.explain import exactness
from specviz.device import devicequeue
from specviz.figures import modelcharts, runlabel, tokentext
from specviz.app import state as appstate
from specviz.figures.safetext import md_escape
from specviz.common import SpecvizError
from specviz.prompts import sets as promptsets
from specviz.runconfig import RunConfig

JOB_KEY = "corr_job"

appstate.init_state()
st.title("Correctness")
appstate.run_banner()

# ---- greedy exactness ---------------------------------------------------------------------------
st.subheader("Greedy speculative vs regular decoding (fp32)")
st.caption("Both runs use the sidebar's target loaded in float32 and temperature 0. In bf16, logits often tie "
           "and a (k+1)-token verify may break ties differently, so exactness is checked in fp32; a divergence "
           "is shown with the regular run's top-1 minus top-2 logit margin at that position (a tiny margin "
           "means floating-point rounding, not a bookkeeping bug).")
for key, value in (("corr_b", 4), ("corr_k", 4), ("corr_max_new", 24), ("corr_prompts", list(promptsets.PROMPT_SETS)[2])):
    st.session_state.setdefault(key, value)
last_prompts = appstate.follow_last_run({"corr_b": ("batch_size", 1, 16), "corr_k": ("draft_length", 1, 16),
                                         "corr_max_new": ("max_new_tokens", 4, 128)}, "corr_prompts")
prompt_sets = {**({appstate.LAST_RUN_PROMPTS: last_prompts} if last_prompts else {}), **promptsets.PROMPT_SETS}
c1, c2, c3 = st.columns(3)
b = c1.slider("batch size", 1, 16, key="corr_b")
k = c2.slider("draft length", 1, 16, key="corr_k")
max_new = c3.slider("max new tokens", 4, 128, key="corr_max_new")
pset = c1.selectbox("prompts", list(prompt_sets), key="corr_prompts", format_func=tokentext.short_label,
                    help="the last Live run's settings come first; " + " · ".join(promptsets.PROMPT_SETS))

job = st.session_state.get(JOB_KEY)
if st.button("Check exactness", key="corr_run", type="primary", disabled=job is not None and job.running):
    v = appstate.sidebar_values(st.session_state)
    draft = appstate.draft_spec(st.session_state)
    cfg = RunConfig(target=v["target"], draft=draft if draft not in ("none", "") else "ngram", device=v["device"],
                    dtype="float32", prompts=prompt_sets[pset], batch_size=b, draft_length=k,
                    max_new_tokens=max_new, temperature=0.0)
    try:
        cfg.validate()
    except SpecvizError as e:
        st.error(str(e))
    else:
        st.session_state["corr_rows"] = None
        # both modes on the fp32 target, in the device process (specviz.device.devicejobs.exactness)
        job = appstate.start_job("exactness", appstate.model_lock(), "an exactness check", cfg=cfg)
        st.session_state[JOB_KEY] = job
        st.rerun()  # draw the button again, disabled while the job runs


def exactness_view() -> None:
    job = st.session_state.get(JOB_KEY)
    if job is not None:
        job.beat()
    if job is not None and job.running:
        st.info(devicequeue.queued_note(job.lock, job, "the check") if job.status == "queued" else job.note)
        return
    if job is not None and job.status == "error":
        st.error(job.error)
    elif job is not None and job.status == "done" and st.session_state.get("corr_rows") is None:
        st.session_state["corr_rows"] = job.result
        if st.session_state.get("_corr_fragment"):
            st.rerun(scope="app")
    rows = st.session_state.get("corr_rows")
    if rows:
        ex = exactness(rows)
        st.metric("rows identical to regular decoding", f"{ex['identical']} / {ex['rows']}")
        st.dataframe(pd.DataFrame([{"row": r["index"], "identical": r["match"],
                                    "first divergent position": r["first_divergence"],
                                    "regular top-1 − top-2 logit margin there": r["margin"], "tokens": r["length"]}
                                   for r in rows]), hide_index=True)
        st.plotly_chart(modelcharts.divergence_chart(rows), key="corr_chart")
        st.caption(modelcharts.divergence_sentence(rows))
    else:
        last = last_run_exactness()
        st.info("press Check exactness to run both modes on the same prompts in fp32" + (f". {last}" if last else ""))


def last_run_exactness() -> str:
    """What the Live page's race already showed, if the last run was greedy and raced."""
    trace, reg = appstate.current_trace(), st.session_state.get("regular_trace")
    if label := runlabel.run_label(trace):  # its text is not the target's: nothing to compare
        return f"The last Live run used {label}, so it is not checked; this check runs the real acceptance rule"
    if not trace or not reg or trace.get("config", {}).get("temperature", 0) != 0:
        return ""
    ex = exactness(appstate.divergence_rows(trace, reg))
    dtype = md_escape(trace["config"].get("dtype", ""))  # a trace's text (it may come from an upload)
    return (f"The last Live run ({dtype}, greedy, raced): output identical to regular decoding in "
            f"{ex['identical']}/{ex['rows']} rows")


job = st.session_state.get(JOB_KEY)
st.session_state["_corr_fragment"] = job is not None and job.running
if job is not None and job.running:
    st.fragment(exactness_view, run_every=1.0)()
else:
    exactness_view()

# ---- sampling: distribution check ----------------------------------------------------------------
st.subheader("Sampling: the acceptance rule reproduces the target distribution")
st.caption("Random target logits p and a random draft q over a small vocabulary; many rows go through "
           "`specviz.engine.sampling.accept_reference` (draft tokens drawn from q). The first output token of every row "
           "must be distributed as p (Leviathan et al. 2022): a chi-square test of its counts against n·p.")
d1, d2, d3 = st.columns(3)
n = d1.select_slider("rows", [2000, 5000, 20000, 50000], 20000, key="dist_n")
temp = d2.slider("temperature", 0.1, 2.0, 1.0, 0.1, key="dist_temp")
seed = d3.number_input("seed", 0, 10_000, 0, key="dist_seed")
if st.button("Run distribution check", key="dist_run"):
    try:
        with st.spinner("sampling the acceptance rule in the device process…"):
            st.session_state["dist"] = appstate.ask("distribution", appstate.model_lock(), "a distribution check",
                                                    n=int(n), temperature=float(temp), seed=int(seed))
    except SpecvizError as e:
        st.error(f"distribution check failed: {e}")
res = st.session_state.get("dist")
if res:
    m1, m2, m3 = st.columns(3)
    m1.metric("chi-square", f"{res['chi2']:.2f}", help=f"{res['dof']} degrees of freedom")
    m2.metric("p-value", f"{res['p_value']:.3f}", help="a p-value that is not tiny means no evidence against losslessness")
    m3.metric("draft acceptance rate", f"{res['acceptance_rate']:.2f}")
    st.plotly_chart(modelcharts.distribution_chart(res["counts"], res["expected"]), key="dist_chart")
    st.caption(modelcharts.distribution_sentence(res["counts"], res["expected"]))
    (st.success if res["p_value"] > 0.001 else st.error)(
        "consistent with the target distribution" if res["p_value"] > 0.001 else "counts differ from p (p < 0.001)")
