"""The Hardware page measures peaks in a job of the device process (the script thread never blocks on it) and then
shows them with MBU/MFU; a failing measurement is one message and the page keeps working."""

from __future__ import annotations

import os
import time

import pytest
import locations

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from specviz.app import state  # noqa: E402

pytestmark = pytest.mark.usefixtures("navigation_owns_the_pages")  # tests/conftest.py says why

ROOT = str(locations.ROOT)
APP = os.path.join(ROOT, "app.py")


def hardware_page(monkeypatch, job: str) -> AppTest:
    monkeypatch.setattr(state, "PEAKS_JOB", job)  # a stand-in registered in the device process (tests/workerfakes.py)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("pages/hardware.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def wait_for_job(at, timeout=60.0):
    job = at.session_state["hw_peaks_job"]
    deadline = time.monotonic() + timeout
    while job.running and time.monotonic() < deadline:
        time.sleep(0.1)
    return job


def test_measuring_peaks_runs_in_a_job_and_the_page_then_shows_them(monkeypatch):
    at = hardware_page(monkeypatch, "peaks-to-tmp")  # the real measurement, cached away from the user's cache
    at.button(key="measure_peaks").click().run()
    assert not at.exception, [e.value for e in at.exception]
    job = wait_for_job(at)
    assert job.status == "done", (job.status, job.error)
    at.run()
    labels = {m.label: m.value for m in at.metric}
    assert labels["peak bandwidth"].endswith("GB/s") and float(labels["peak bandwidth"].split()[0]) > 0
    assert labels["peak matmul"].endswith("TFLOP/s")
    assert os.path.exists(job.result["cache_file"])  # measured once, cached for the next visit


def test_a_failing_peak_measurement_is_one_message_and_the_page_keeps_working(monkeypatch):
    at = hardware_page(monkeypatch, "broken-peaks")
    at.button(key="measure_peaks").click().run()
    wait_for_job(at)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("peaks not measured: RuntimeError: copy failed" in e.value for e in at.error), [e.value for e in at.error]
    assert at.title[0].value == "Hardware"
