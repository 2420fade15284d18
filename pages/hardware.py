"""Hardware: device facts, utilization of the last run, measured peaks and calibration, kernels."""

import importlib.util

import streamlit as st
import torch

from specviz import telemetry
from specviz.analysis.hardware import verify_use
from specviz.app import charts, state as appstate
from specviz.common import SpecvizError
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
st.table({k: [str(val)] for k, val in info.items()})

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
peaks = telemetry.cached_peaks(device)
if peaks is None:
    st.info("not calibrated yet: peak bandwidth and FLOP/s have not been measured on this device")
if st.button("Measure peaks (about 1 s)", key="measure_peaks"):
    with st.spinner("measuring a large copy and a matmul…"):
        with appstate.model_lock():
            peaks = telemetry.measure_peaks(device)
if peaks:
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
