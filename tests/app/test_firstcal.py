"""A first Live run of a pair with no calibration on disk: the page says "uncalibrated" beside the prediction
while the device process calibrates the pair on the short grid (the job "calibrate"), then draws the same
run's prediction from the new record, on Live and on Speedup, without decoding again (AppTest, real model).
The calibration goes to a scratch cache; the user's cache is not written."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("streamlit")

from specviz.analysis.costs import calibration_path, read_calibration  # noqa: E402
from specviz.app import firstcal, state as appstate  # noqa: E402
from specviz.figures import runlabel
from specviz.common import cache_dir  # noqa: E402
from specviz.measure import quickcal  # noqa: E402
from test_app import errors, finish, new_app, no_run_left_behind, start_live_run  # noqa: E402,F401

pytestmark = [pytest.mark.usefixtures("navigation_owns_the_pages"), pytest.mark.slow]

MODEL = "SmolLM2-135M-Instruct"


def snapshot(folder) -> dict:
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*")} if folder.is_dir() else {}


@pytest.fixture
def scratch_cache(tmp_path, monkeypatch):
    """The first-run calibration on, with a cache of its own that sees the converted packaged model; yields
    the user's calibration folder's files before, to compare after."""
    real = cache_dir()
    if (real / MODEL).is_dir():
        (tmp_path / MODEL).symlink_to(real / MODEL)
    before = snapshot(real / "calibration")
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setenv(firstcal.ENV, "1")
    monkeypatch.setattr(firstcal, "_checked", set())
    yield real, before


def wait(job, timeout=300):
    deadline = time.monotonic() + timeout
    while job.running and time.monotonic() < deadline:
        job.join(1.0)
    assert not job.running, f"calibration still {job.status} ({job.note}) after {timeout} s"


def prediction(at):
    return next(m for m in at.metric if m.label.startswith("predicted speedup"))


def test_a_first_run_without_a_calibration_ends_with_a_calibrated_prediction(scratch_cache):
    real, before = scratch_cache
    at = new_app()
    run = finish(at, start_live_run(at, batch=2, max_new=4))  # n-gram draft, raced against regular decoding
    assert run.status == "done", run.error
    trace = at.session_state[appstate.TRACE_KEY]
    assert read_calibration(calibration_path(*(trace["config"][k] for k in ("target_name", "draft_name", "device",
                                                                            "dtype")))) is None
    job = at.session_state[firstcal.KEY]["job"]
    try:
        # while it runs: the prediction says uncalibrated, and the page says a calibration is under way
        assert prediction(at).label == f"predicted speedup ({runlabel.UNCALIBRATED})"
        assert any(c.value == runlabel.WHY_LIVE for c in at.caption)
        assert any(i.value.startswith("Calibrating this pair's costs on this machine") for i in at.info), \
            [i.value for i in at.info]
        wait(job)
    finally:
        job.stop()
        job.join(60)
    assert job.status == "done" and job.result["status"] == "calibrated", (job.status, job.error, job.result)
    at.run()
    assert not at.exception and not errors(at)
    assert at.session_state[appstate.TRACE_KEY] is trace  # the same run: no new decode
    assert prediction(at).label == "predicted speedup" and prediction(at).value != "—"
    assert not any(c.value == runlabel.WHY_LIVE for c in at.caption)
    assert any(c.value.startswith("Calibrated this pair just now") for c in at.caption)

    cal = appstate.trace_calibration(trace)  # from the scratch cache, on the short grid of the run's b and k
    sizes, k_max = quickcal.bounds(run.cfg)
    assert job.result["path"].startswith(str(cache_dir()))
    assert sorted({b for b, _, _ in cal.samples["target"]}) == sizes == [1, 2, 4]
    assert max(n for _, n, _ in cal.samples["target"]) == k_max + 1 == quickcal.K_MAX + 1

    at.switch_page("pages/speedup.py").run()  # the other pages read the same record
    assert not at.exception
    assert not any(m.label.endswith(f"({runlabel.UNCALIBRATED})") for m in at.metric), [m.label for m in at.metric]
    assert snapshot(real / "calibration") == before  # nothing written to the user's cache


def test_a_run_of_a_calibrated_pair_measures_nothing_and_says_nothing(scratch_cache, monkeypatch):
    monkeypatch.setattr(firstcal, "GRID", ([1], 1))  # the first run's calibration on one batch size: any record will do
    at = new_app()
    finish(at, start_live_run(at, batch=2, max_new=4))
    wait(at.session_state[firstcal.KEY]["job"])  # the first run's calibration
    at.run()
    second = finish(at, start_live_run(at, batch=2, max_new=4))
    assert second.status == "done", second.error
    assert at.session_state[firstcal.KEY]["trace"] is not second.trace  # calibrated and checked: no job this time
    assert prediction(at).label == "predicted speedup"
    assert not any(i.value.startswith(("Calibrating", "Checking")) for i in at.info)


def test_the_calibrate_job_writes_where_the_server_reads_and_answers_in_plain_data(tmp_path, monkeypatch):
    import os

    from specviz.device import devicejobs
    from specviz.runconfig import RunConfig
    from test_deviceclient import modules_named_by

    class Ctx:
        def __init__(self):
            self.notes = []

        def say(self, note):
            self.notes.append(note)

        def stopped(self):
            return False

    own = os.environ.get("SPECVIZ_CACHE")  # the device process's own cache (its models): left as it was
    server = tmp_path / "server-cache"
    cfg = RunConfig(target="default", draft="ngram", device="cpu", dtype="float32", prompts=["Hello"], batch_size=1)
    ctx = Ctx()
    out = devicejobs.JOBS["calibrate"](ctx, cfg=cfg, cache=str(server), grid=([1], 1))
    assert out["status"] == "calibrated" and out["path"].startswith(str(server / "calibration"))
    assert os.environ.get("SPECVIZ_CACHE") == own
    monkeypatch.setenv("SPECVIZ_CACHE", str(server))  # as the server reads it
    assert read_calibration(calibration_path(MODEL, "ngram", "cpu", "float32")) is not None
    assert not modules_named_by(out) & {"torch", "transformers", "numpy"}, out
    assert ctx.notes[0] == "loading the model pair…" and any("timing point 1 of 2" in n for n in ctx.notes)
