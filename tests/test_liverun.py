"""The app's run worker (specviz.app.liverun) without Streamlit, on a tiny model: a run whose page
stops polling stops itself and hands the model lock on; a polled run goes to the end.

The page's polls are the test's beat() calls; timeouts are a fraction of a second."""

from __future__ import annotations

import threading
import time
import types

import pytest
from fakes import tiny_llama

from specviz.app import liverun
from specviz.engine.proposers import NgramDraft
from specviz.app.liverun import LiveRun
from specviz.run import RunConfig

STEP_S = 0.02  # a pause per step, so a run lasts long enough to watch (about 1-3 tokens per step)


@pytest.fixture(scope="module")
def target():
    t = tiny_llama()
    t.tokenizer = types.SimpleNamespace(eos_token_id=None, encode=lambda text: [1 + ord(c) % 63 for c in text],
                                        decode=lambda ids, **kw: " ".join(map(str, ids)))
    return t


@pytest.fixture(autouse=True)
def tiny_pair(monkeypatch, target):
    """The worker loads the tiny target with an n-gram draft and decodes slowly, without telemetry."""
    real_iter_run = liverun.iter_run

    def slow_iter_run(cfg, tgt, proposer):
        for dec, rec in real_iter_run(cfg, tgt, proposer, telemetry=False):
            if rec is not None:
                time.sleep(STEP_S)
            yield dec, rec

    monkeypatch.setattr(liverun, "load_pair", lambda cfg: (target, NgramDraft(device=target.device)))
    monkeypatch.setattr(liverun, "iter_run", slow_iter_run)


def config(max_new: int) -> RunConfig:
    return RunConfig(prompts=["abc abc abc"], batch_size=2, draft_length=2, max_new_tokens=max_new,
                     device="cpu", dtype="float32")


@pytest.fixture
def runs():
    """Start runs through this; any still going at the end are stopped (a decoding thread at exit
    aborts the process)."""
    started = []

    def start(max_new: int, lock: threading.Lock, heartbeat_timeout: float) -> LiveRun:
        started.append(LiveRun(cfg=config(max_new), lock=lock, heartbeat_timeout=heartbeat_timeout).start())
        return started[-1]

    yield start
    for run in started:
        run.stop()
        run.join(30)


def poll_until_done(run: LiveRun, timeout: float = 30.0) -> None:
    """What the page does while a run goes: look at it (beat) every redraw."""
    deadline = time.monotonic() + timeout
    while run.running and time.monotonic() < deadline:
        run.beat()
        run.join(0.05)
    run.join(max(0.0, deadline - time.monotonic()))


def test_unpolled_run_stops_keeps_its_output_and_releases_the_lock(runs):
    lock = threading.Lock()
    run = runs(2000, lock, heartbeat_timeout=0.5)
    run.join(30)
    assert run.status == "stopped" and run.abandoned and run.error is None
    assert not lock.locked()
    seqs = run.trace["sequences"]
    assert all(s["finish_reason"] == "stopped" for s in seqs)
    assert all(0 < len(s["output_token_ids"]) < 2000 for s in seqs)  # what it generated is kept
    assert len(run.steps) == len(run.trace["steps"]) > 0


def test_polled_run_outlives_the_timeout_and_finishes(runs):
    lock = threading.Lock()
    t0 = time.monotonic()
    run = runs(300, lock, heartbeat_timeout=1.0)  # >= 100 steps of STEP_S: longer than the timeout
    poll_until_done(run)
    assert time.monotonic() - t0 > 1.0
    assert run.status == "done" and not run.abandoned, (run.status, run.error)
    assert all(s["finish_reason"] == "length" and len(s["output_token_ids"]) == 300
               for s in run.trace["sequences"])
    assert not lock.locked()


def test_queued_run_gets_the_lock_when_the_run_ahead_is_abandoned(runs):
    lock = threading.Lock()
    ahead = runs(2000, lock, heartbeat_timeout=1.0)  # its tab was closed: nobody polls it
    deadline = time.monotonic() + 30
    while not ahead.steps and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ahead.status == "running" and lock.locked()
    queued = runs(20, lock, heartbeat_timeout=1.0)
    queued.beat()
    time.sleep(0.3)
    assert queued.status == "queued"
    poll_until_done(queued)
    assert ahead.status == "stopped" and ahead.abandoned
    assert all(s["output_token_ids"] for s in ahead.trace["sequences"])
    assert queued.status == "done" and not queued.abandoned, (queued.status, queued.error)
    assert not lock.locked()


def test_abandoned_queued_run_never_takes_the_lock(runs):
    lock = threading.Lock()
    assert lock.acquire(timeout=1)
    try:
        run = runs(20, lock, heartbeat_timeout=0.3)
        run.join(30)
        assert run.status == "stopped" and run.abandoned and run.trace is None
    finally:
        lock.release()


def test_runs_started_for_a_page_use_the_module_timeout_and_others_never_time_out():
    run = liverun.start_run(config(4), threading.Lock())
    run.join(30)
    assert run.heartbeat_timeout == liverun.HEARTBEAT_TIMEOUT_S and run.status == "done"
    assert LiveRun(cfg=config(4), lock=threading.Lock()).heartbeat_timeout is None
