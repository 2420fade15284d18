"""The Live page's first-run calibration (Streamlit code): after a run of a pair that has no calibration
standing on this device and dtype, the device process calibrates the pair on a short grid (the job
"calibrate": specviz.measure.quickcal, the calibrate command's own function), with its progress and a
Stop on the page. Until it ends every prediction keeps "(uncalibrated)" beside it; when it ends the page
draws again and the last run's prediction comes from the new record (no new decode).

A record stands until it is stale (specviz.analysis.costs.stale_reason): this page checks that there is
one of this specviz's format; the job, once per pair in a server process, also checks that no model file
of the pair changed after it was measured (it returns at once when nothing did).

The job runs to its end even when the tab closes (no heartbeat): it is bounded (seconds for the packaged
pair) and its record serves every session. ``$SPECVIZ_AUTO_CALIBRATE=0`` turns it off (the test suite
does, except the tests of this module, so that no test writes a calibration into the user's cache).
"""

from __future__ import annotations

import os

import streamlit as st

from specviz.analysis.costs import stale_reason, trace_calibration
from specviz.app import state as appstate
from specviz.device.deviceclient import DeviceJob
from specviz.figures.safetext import md_escape
from specviz.common import cache_dir

ENV = "SPECVIZ_AUTO_CALIBRATE"
JOB = "calibrate"  # the device process's job (specviz.device.devicejobs.calibrate)
KEY = "first_calibration"  # session state: {"trace": the run's trace, "job": its DeviceJob}
POLL_S = 1.0  # how often the page redraws the calibration's progress
GRID = None  # (batch sizes, k_max) for the job; None: specviz.measure.quickcal.bounds of the run

_checked: set = set()  # pairs whose model files a job of this server process has checked


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip() != "0"


def pair_key(trace: dict) -> tuple:
    cfg = trace.get("config", {})
    return (cfg.get("target_name"), cfg.get("draft_name"), cfg.get("device"), cfg.get("dtype"), str(cache_dir()))


def wanted(trace: dict | None) -> str | None:
    """Why the pair of a finished Live run's ``trace`` should go to the calibration job now, or None: no
    record, one of another format, or its model files not yet checked by this server process."""
    if not enabled() or trace is None or trace.get("config", {}).get("mode") == "regular":
        return None
    why = stale_reason(trace_calibration(trace))
    if why is None and pair_key(trace) not in _checked:
        why = "check that no model file of the pair changed since it was calibrated"
    return why


def start(cfg) -> DeviceJob:
    """The calibration job for a run of ``cfg``, in the device's one line after whatever holds it."""
    params = {"cfg": cfg, "cache": str(cache_dir())}
    if GRID is not None:
        params["grid"] = GRID
    return DeviceJob(name=JOB, params=params, lock=appstate.model_lock(), what="a calibration",
                     heartbeat_timeout=None).start()


def follow(run, trace: dict | None) -> None:
    """On the Live page once a run has ended: start the pair's calibration when wanted (once per run),
    and say how it goes; when it ends, draw the whole page again with the new record."""
    state = st.session_state.get(KEY)
    if run is not None and trace is not None and trace is run.trace and (state is None or state["trace"] is not trace):
        if wanted(trace):
            st.session_state[KEY] = state = {"trace": trace, "job": start(run.cfg),
                                             "had_record": trace_calibration(trace) is not None}
    if state is None or state["trace"] is not trace:
        return
    job = state["job"]
    if job.running:
        st.fragment(_progress, run_every=POLL_S)()
        return
    if job.status == "done":
        _checked.add(pair_key(trace))
    outcome(job)


def _progress() -> None:
    state = st.session_state.get(KEY)
    if state is None:
        return
    job = state["job"]
    if not job.running:
        st.rerun(scope="app")  # the record is there: every prediction on the page draws again from it
    if job.status == "queued":
        what = "waits for the device"
    else:
        what = md_escape(job.note or "starts")
    if state.get("had_record"):
        st.info(f"Checking that this pair's calibration is current (a stale one is measured again): {what}.")
    else:
        st.info(f"Calibrating this pair's costs on this machine (a short `specviz calibrate`, once per pair, device "
                f"and dtype): {what}. Until it ends the predictions say *(uncalibrated)*.")
    if st.button("Stop calibration", key="stop_calibration", disabled=job.stopping):
        job.stop()


def outcome(job: DeviceJob) -> None:
    """One line on how the calibration ended (nothing when the record stood and nothing was measured)."""
    r = job.result or {}
    if job.status == "error":
        st.warning(f"The calibration failed: {md_escape(job.error)}. Predictions stay uncalibrated; "
                   "`python -m specviz calibrate` measures the costs from a terminal.")
    elif job.status == "stopped" or r.get("status") == "stopped":
        kept = f" ({md_escape(r['kept'])})" if r.get("kept") else ""
        st.info(f"Calibration stopped{kept}: predictions stay uncalibrated until the next run calibrates the pair.")
    elif r.get("status") == "calibrated":
        why = f" (because: {md_escape(r['why'])})" if r.get("why") else ""
        st.caption(f"Calibrated this pair just now in {r.get('seconds', 0):.0f} s{why}; "
                   f"the predictions on every page use it. Record: {md_escape(r.get('path', ''))}.")
