"""Hardware: device facts, utilization of the last run, measured peaks and calibration, kernels."""

import importlib.util

import streamlit as st
import torch

from specviz import telemetry
from specviz.analysis.hardware import verify_use
from specviz.app import charts, devicequeue, jobs, state as appstate
from specviz.app.safetext import md_escape
from specviz.analysis.costs import trace_calibration
from specviz.common import SpecvizError
from specviz.measure.calibrate import calibration_load_warning
from specviz.models.loading import resolve_device, resolve_dtype
from specviz.run import hardware_info

appstate.init_state()
st.title("Hardware")
appstate.run_banner()

v = appstate.sidebar_values(st.session_state)
try:
    device = resolve_device(v["device"])
    dtype = resolve_dtype(v["dtype"], device)
except SpecvizError as e:
    st.error(str(e))
    device, dtype = torch.device("cpu"), torch.float32

# ---- device facts ----------------------------------------------------------------------------
st.subheader("Device")
info = hardware_info(device, dtype)
st.table({k: [md_escape(val)] for k, val in info.items()})  # st.table reads Markdown: device names show as they are

# ---- utilization of the current trace ---------------------------------------------------------
st.subheader("Utilization of the last run")
trace = appstate.current_trace()
if trace is None:
    st.info("no run yet: press Run on the Live page (or load a trace there)")
else:
    st.plotly_chart(charts.utilization(trace, telemetry.UTIL_LABELS), key="hw_utilization")
    sources = {s.get("source") for s in trace.get("telemetry") or []}
    if "nvml" in sources:
        st.caption("NVML utilization is kernel-busy % (a kernel ran during the sample window), not throughput.")
    elif "psutil" in sources:
        st.caption("CPU: this process's CPU time as % of the cores it may use (100% = all of them busy with it).")

# ---- peaks, MBU / MFU ----------------------------------------------------------------------------
st.subheader("Peaks and utilization ratios")
PEAKS_JOB = "hw_peaks_job"


def peaks_job(dev: torch.device):
    """The peak copy and matmul, in a job's thread under the model lock (never in the script thread)."""
    def fn(job: jobs.Job) -> dict:
        job.say("measuring a large copy and a matmul…")
        return telemetry.measure_peaks(dev)
    return fn


job = st.session_state.get(PEAKS_JOB)
if st.button("Measure peaks (about 1 s)", key="measure_peaks", disabled=job is not None and job.running):
    job = jobs.Job(peaks_job(device), appstate.model_lock(), what="a peak measurement").start()
    st.session_state[PEAKS_JOB] = job
    st.rerun()  # draw the button again, disabled while the job runs


def peaks_view() -> None:
    job = st.session_state.get(PEAKS_JOB)
    if job is not None:
        job.beat()
        if job.running:
            st.info(devicequeue.queued_note(job.lock, job, "this") if job.status == "queued" else job.note)
            return
        if job.status == "error":
            st.error(f"peaks not measured: {job.error}")
        if st.session_state.get("_hw_fragment"):  # the job ended while a fragment polled: redraw the page once
            st.session_state["_hw_fragment"] = False
            st.rerun(scope="app")
    peaks = telemetry.cached_peaks(device) or (job.result if job is not None and job.status == "done" else None)
    if peaks is None:
        st.info("not calibrated yet: peak bandwidth and FLOP/s have not been measured on this device")
        return
    c1, c2 = st.columns(2)
    c1.metric("peak bandwidth", f"{peaks['peak_bytes_per_s'] / 1e9:.1f} GB/s")
    c2.metric("peak matmul", f"{peaks['peak_flops'] / 1e12:.2f} TFLOP/s")
    target = appstate.loaded_target()
    use = verify_use((trace or {}).get("steps", []), target.weight_bytes, target.num_params, peaks) if target else None
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
    if cal is not None and (busy := calibration_load_warning(cal)):
        st.warning(f"This calibration ({md_escape(cal.created or 'undated')}): {busy} "
                   "(`python -m specviz calibrate`, or the Sweep's next run after deleting it).")

# ---- kernels -------------------------------------------------------------------------------------
st.subheader("Kernels")
cuda = torch.cuda.is_available()
st.markdown("The fused Triton verification kernel (`kernels/spec_verify.py`) runs on **CUDA only**; on the CPU "
            "the engine uses the torch reference `specviz.engine.sampling.accept_reference` (the kernel's spec).")
c1, c2 = st.columns(2)
c1.metric("CUDA available", "yes" if cuda else "no")
c2.metric("triton installed", "yes" if importlib.util.find_spec("triton") else "no")
if not cuda:
    st.caption("No CUDA device here: the Triton kernel is not used (tests run it under TRITON_INTERPRET=1).")
