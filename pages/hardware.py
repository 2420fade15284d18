"""Hardware: device facts, utilization of the last run, measured peaks and calibration, kernels."""

import streamlit as st

from specviz import telemetry
from specviz.analysis.hardware import verify_use
from specviz.figures import chartcaptions, charts, runlabel
from specviz.device import devicequeue
from specviz.app import state as appstate
from specviz.figures.safetext import md_escape
from specviz.analysis.costs import trace_calibration
from specviz.common import SpecvizError
from specviz.measure.hostload import load_warning

appstate.init_state()
st.title("Hardware")
appstate.run_banner()

v = appstate.sidebar_values(st.session_state)
try:  # the device process's facts: this server holds no torch
    dev_facts = appstate.device_facts(v["device"], v["dtype"])
except appstate.DeviceBusy as e:
    st.info(f"{e}: this page shows the device once it ends (reload then).")
    st.stop()
except SpecvizError as e:
    st.error(f"the device process did not answer: {e}")
    st.stop()
if dev_facts["problem"]:
    st.error(dev_facts["problem"])
device = dev_facts["device"]

# ---- device facts ----------------------------------------------------------------------------
st.subheader("Device")
st.table({k: [md_escape(val)] for k, val in dev_facts["info"].items()})  # st.table reads Markdown: device names show as they are

# ---- utilization of the current trace ---------------------------------------------------------
st.subheader("Utilization of the last run")
trace = appstate.current_trace()
if trace is None:
    st.info("no run yet: press Run on the Live page (or load a trace there)")
else:
    if note := runlabel.page_note(trace):
        st.warning(note)
    st.plotly_chart(runlabel.mark(charts.utilization(trace, telemetry.UTIL_LABELS), trace), key="hw_utilization")
    st.caption(chartcaptions.utilization_sentence(trace, telemetry.UTIL_LABELS))
    sources = {s.get("source") for s in trace.get("telemetry") or []}
    if "nvml" in sources:
        st.caption("NVML utilization is kernel-busy % (a kernel ran during the sample window), not throughput.")
    elif "psutil" in sources:
        st.caption("CPU: this process's CPU time as % of the cores it may use (100% = all of them busy with it).")

# ---- peaks, MBU / MFU ----------------------------------------------------------------------------
st.subheader("Peaks and utilization ratios")
PEAKS_KEY = "hw_peaks_job"


job = st.session_state.get(PEAKS_KEY)
if st.button("Measure peaks (about 1 s)", key="measure_peaks", disabled=job is not None and job.running):
    # the peak copy and matmul, a job of the device process (never in the script thread)
    job = appstate.start_job(appstate.PEAKS_JOB, appstate.model_lock(), "a peak measurement", device=device)
    st.session_state[PEAKS_KEY] = job
    st.rerun()  # draw the button again, disabled while the job runs


def peaks_view() -> None:
    job = st.session_state.get(PEAKS_KEY)
    if job is not None:
        job.beat()
        if job.running:
            st.info(devicequeue.queued_note(job.lock, job, "this") if job.status == "queued" else job.note)
            return
        if job.status == "error":
            st.error(f"peaks not measured: {job.error}")
        if job.status == "done" and not getattr(job, "_facts_cleared", False):
            job._facts_cleared = True
            appstate.device_facts.clear()  # the device's facts now carry the peaks (for every session)
        if st.session_state.get("_hw_fragment"):  # the job ended while a fragment polled: redraw the page once
            st.session_state["_hw_fragment"] = False
            st.rerun(scope="app")
    peaks = (job.result if job is not None and job.status == "done" else None) or dev_facts["peaks"]
    if peaks is None:
        st.info("not calibrated yet: peak bandwidth and FLOP/s have not been measured on this device")
        return
    c1, c2 = st.columns(2)
    c1.metric("peak bandwidth", f"{peaks['peak_bytes_per_s'] / 1e9:.1f} GB/s")
    c2.metric("peak matmul", f"{peaks['peak_flops'] / 1e12:.2f} TFLOP/s")
    target = appstate.loaded_target()
    use = verify_use((trace or {}).get("steps", []), target["weight_bytes"], target["num_params"], peaks) if target else None
    if use is not None:
        c1.metric("MBU of the verify forward", f"{100 * use['mbu']:.1f}%",
                  help="(weights + KV bytes read once per forward) / forward time / peak bandwidth")
        c2.metric("MFU of the verify forward", f"{100 * use['mfu']:.2f}%", help="2 x params FLOPs per token processed")
        st.caption(f"mean verify forward: {use['t_verify_s'] * 1e3:.1f} ms over {use['tokens']:.0f} tokens")


if job is not None and job.running:
    st.session_state["_hw_fragment"] = True
    st.fragment(peaks_view, run_every=0.5)()
else:
    peaks_view()

st.subheader("Cost-model calibration")
costs = appstate.trace_costs(trace)
if costs is None:
    st.info("not calibrated yet: the analytic pages use the batch-1 formula and the sliders' cost ratio")
else:
    b_run = int(trace["config"].get("batch_size", 1))
    k_run = max(1, int(trace["config"].get("draft_length", 1)))
    st.dataframe([{"fitted cost (at the run's b = %d)" % b_run: name, "value": value} for name, value in (
        ("target forward, 1 token per row (ms)", f"{costs.target(b_run, 1) * 1e3:.2f}"),
        (f"target verify, k + 1 = {k_run + 1} tokens per row (ms)", f"{costs.target(b_run, k_run + 1) * 1e3:.2f}"),
        ("target knee: tokens per forward where compute-bound starts", f"{costs.target.knee_tokens:.0f}"),
        ("draft forward, 1 token per row (ms)", f"{costs.draft(b_run, 1) * 1e3:.2f}"),
        ("engine overhead per speculative step (ms)", f"{costs.overhead * 1e3:.2f}"))], hide_index=True)
    cal = trace_calibration(trace)
    if cal is not None and (busy := load_warning(cal.other_load, cal.cpus or 1, "the calibration")):
        st.warning(f"This calibration ({md_escape(cal.created or 'undated')}): {busy} "
                   "(`python -m specviz calibrate`, or the Sweep's next run after deleting it).")

# ---- kernels -------------------------------------------------------------------------------------
st.subheader("Kernels")
cuda = dev_facts["cuda"]
st.markdown("The fused Triton verification kernel (`kernels/spec_verify.py`) runs on **CUDA only**; on the CPU "
            "the engine uses the torch reference `specviz.engine.sampling.accept_reference` (the kernel's spec).")
c1, c2 = st.columns(2)
c1.metric("CUDA available", "yes" if cuda else "no")
c2.metric("triton installed", "yes" if dev_facts["triton"] else "no")
if not cuda:
    st.caption("No CUDA device here: the Triton kernel is not used (tests run it under TRITON_INTERPRET=1).")
