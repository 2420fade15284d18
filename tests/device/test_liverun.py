"""The app's run (specviz.device.deviceclient.LiveRun) and its decode worker process (specviz.device.worker), without
Streamlit, on a tiny model: a run whose page stops polling stops itself and hands the model lock
on; a polled run goes to the end; sessions queue first come, first served and each sees only its
own run; Stop, errors and a dead worker end a run with its output kept and the next run works.

The worker is a real child process; the tiny model and its slow step loop reach it as importable
stand-in jobs (tests/workerfakes.py, registered in the worker by name). The page's polls are the
test's beat() calls; timeouts are a fraction of a second."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time

import pytest

from specviz.device import deviceclient, worker
from specviz.device.deviceclient import LiveRun
from specviz.runconfig import RunConfig
import locations


@pytest.fixture(autouse=True)
def tiny_pair(monkeypatch):
    """The worker loads the tiny target with an n-gram draft and decodes slowly, without telemetry."""
    monkeypatch.setattr(deviceclient, "RUN_JOB", "tiny-run")


def config(max_new: int, prompts=("abc abc abc",), batch_size: int = 2) -> RunConfig:
    return RunConfig(prompts=list(prompts), batch_size=batch_size, draft_length=2, max_new_tokens=max_new,
                     device="cpu", dtype="float32")


@pytest.fixture
def runs():
    """Start runs through this; any still going at the end are stopped."""
    started = []

    def start(max_new: int, lock: threading.Lock, heartbeat_timeout: float | None = None, **kw) -> LiveRun:
        race = kw.pop("race", False)
        started.append(LiveRun(cfg=config(max_new, **kw), lock=lock, race=race,
                               heartbeat_timeout=heartbeat_timeout).start())
        return started[-1]

    yield start
    for run in started:
        run.stop()
        run.join(30)


def poll_until_done(run: LiveRun, timeout: float = 60.0) -> None:
    """What the page does while a run goes: look at it (beat) every redraw."""
    deadline = time.monotonic() + timeout
    while run.running and time.monotonic() < deadline:
        run.beat()
        run.join(0.05)
    run.join(max(0.0, deadline - time.monotonic()))


def wait_for_steps(run: LiveRun, n: int = 1, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while len(run.steps) < n and run.running and time.monotonic() < deadline:
        run.beat()
        time.sleep(0.01)
    assert len(run.steps) >= n, (run.status, run.error)


def test_unpolled_run_stops_keeps_its_output_and_releases_the_lock(runs):
    lock = threading.Lock()
    run = runs(2000, lock)
    wait_for_steps(run)  # the first run also starts the worker process and loads the model
    run.heartbeat_timeout = 0.5
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


def test_snapshot_mid_run_is_a_prefix_of_the_finished_trace(runs):
    run = runs(200, threading.Lock())
    wait_for_steps(run, 5)
    mid = run.snapshot()
    assert mid["partial"] and mid["summary"]["tokens"] > 0 and mid["summary"]["wall_s"] > 0
    poll_until_done(run)
    assert run.status == "done", run.error
    for part, full in zip(mid["sequences"], run.trace["sequences"]):
        assert part["prompt_token_ids"] == full["prompt_token_ids"]
        assert 0 < len(part["output_token_ids"]) <= len(full["output_token_ids"])
        assert full["output_token_ids"][:len(part["output_token_ids"])] == part["output_token_ids"]
    assert run.tokenizer is not None and run.tokenizer.decode([1, 2]) == "1 2"  # sent over from the worker


def test_stop_mid_run_keeps_the_output_and_the_next_run_reuses_the_worker(runs):
    lock = threading.Lock()
    run = runs(2000, lock)
    wait_for_steps(run, 3)
    w = worker.shared()
    run.stop()
    poll_until_done(run)
    assert run.status == "stopped" and not run.abandoned
    assert all(s["finish_reason"] == "stopped" and s["output_token_ids"] for s in run.trace["sequences"])
    again = runs(6, lock)
    poll_until_done(again)
    assert again.status == "done" and worker.shared() is w and w.alive()


def test_race_runs_regular_decoding_on_the_same_prompts_in_the_same_worker(runs):
    run = runs(24, threading.Lock(), race=True)
    poll_until_done(run)
    assert run.status == "done", run.error
    spec, reg = run.trace, run.regular_trace
    assert spec["config"]["mode"] == "speculative" and reg["config"]["mode"] == "regular"
    assert [s["prompt_token_ids"] for s in spec["sequences"]] == [s["prompt_token_ids"] for s in reg["sequences"]]
    # greedy fp32 on one model: speculation does not change the text
    assert [s["output_token_ids"] for s in spec["sequences"]] == [s["output_token_ids"] for s in reg["sequences"]]
    assert all(r["drafted"] == 0 for st in reg["steps"] for r in st["rows"])
    # each run says how busy the rest of the machine was meanwhile (None: too short to tell)
    for t in (spec, reg):
        assert set(t["host_load"]) == {"other_cores", "cpus"} and t["host_load"]["cpus"] >= 1, t["host_load"]


def test_three_sessions_queue_in_order_and_each_sees_only_its_own_run(runs):
    lock = threading.Lock()
    first = runs(150, lock, prompts=["aaa aaa"], batch_size=1)
    wait_for_steps(first)
    second = runs(10, lock, prompts=["bb bb bb", "b b"], batch_size=2)
    third = runs(10, lock, prompts=["c c c c c"], batch_size=3)
    deadline = time.monotonic() + 10
    while (second.queue_position, third.queue_position) != (1, 2) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert first.status == "running" and first.queue_position is None
    assert (second.status, third.status) == ("queued", "queued")
    assert (second.queue_position, third.queue_position) == (1, 2)
    assert second.snapshot()["steps"] == [] and third.snapshot()["sequences"] == []
    while first.running:
        first.beat()
        first.join(0.02)
        assert third.status == "queued"  # the second in line never overtakes the first
    poll_until_done(second)
    poll_until_done(third)
    for run, prompts, b in ((first, ["aaa aaa"], 1), (second, ["bb bb bb", "b b"], 2), (third, ["c c c c c"], 3)):
        assert run.status == "done", (run.status, run.error)
        assert run.trace["config"]["batch_size"] == b and len(run.trace["sequences"]) == b
        assert [s["prompt"] for s in run.trace["sequences"]] == [prompts[i % len(prompts)] for i in range(b)]
        assert len(run.steps) == len(run.trace["steps"])
    assert [len(s["output_token_ids"]) for s in first.trace["sequences"]] == [150]
    assert all(len(s["output_token_ids"]) == 10 for r in (second, third) for s in r.trace["sequences"])
    assert not lock.locked()


def test_queued_run_gets_the_lock_when_the_run_ahead_is_abandoned(runs):
    lock = threading.Lock()
    ahead = runs(2000, lock, heartbeat_timeout=5.0)  # its tab was closed: nobody polls it
    wait_for_steps(ahead)
    ahead.heartbeat_timeout = 1.0
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
        assert run.queue_position is None
    finally:
        lock.release()


def test_a_failing_load_is_one_line_and_the_worker_keeps_serving(runs, monkeypatch):
    monkeypatch.setattr(deviceclient, "RUN_JOB", "oom-run")
    lock = threading.Lock()
    run = runs(4, lock)
    poll_until_done(run)
    assert run.status == "error" and "out of memory at batch size 2" in run.error and "smaller batch" in run.error
    assert "\n" not in run.error and not lock.locked()
    monkeypatch.setattr(deviceclient, "RUN_JOB", "tiny-run")
    again = runs(4, lock)
    poll_until_done(again)
    assert again.status == "done", again.error


def test_a_killed_worker_ends_the_run_with_a_message_and_the_next_run_starts_a_new_one(runs):
    lock = threading.Lock()
    run = runs(2000, lock)
    wait_for_steps(run, 2)
    w = worker.shared()
    os.kill(w.proc.pid, signal.SIGKILL)  # as the kernel's OOM killer would
    poll_until_done(run)
    assert run.status == "error" and "decode worker process ended unexpectedly" in run.error
    assert all(s["output_token_ids"] for s in run.trace["sequences"])  # the steps received so far are kept
    assert not lock.locked()
    again = runs(4, lock)
    poll_until_done(again)
    assert again.status == "done", again.error
    assert worker.shared() is not w


def test_runs_started_for_a_page_use_the_module_timeout_and_others_never_time_out():
    run = deviceclient.start_run(config(4), threading.Lock())
    poll_until_done(run)
    assert run.heartbeat_timeout == deviceclient.HEARTBEAT_TIMEOUT_S and run.status == "done"
    assert LiveRun(cfg=config(4), lock=threading.Lock()).heartbeat_timeout is None



def test_a_bad_model_spec_is_the_loaders_one_line_from_the_worker(runs, monkeypatch):
    monkeypatch.setattr(deviceclient, "RUN_JOB", "run")  # the real job and loader, in the worker process
    run = LiveRun(cfg=dataclasses.replace(config(4), target="./no/such/model"), lock=threading.Lock()).start()
    poll_until_done(run)
    assert run.status == "error" and "./no/such/model" in run.error and "\n" not in run.error.strip(), run.error
    assert "Traceback" not in run.error and run.trace is None


def test_a_run_sent_while_an_orphaned_job_decodes_stops_that_job_and_runs(runs):
    w = worker.shared()
    orphan = worker.Job(10**9, "tiny-run", {"cfg": config(2000), "race": False})
    with w.use:
        w.send("job", orphan)  # a parent that gave up on its job: nobody reads its messages
    time.sleep(0.5)
    run = runs(6, threading.Lock())
    poll_until_done(run, timeout=60)
    assert run.status == "done", (run.status, run.error)
    assert all(len(s["output_token_ids"]) == 6 for s in run.trace["sequences"])


def test_a_worker_started_from_a_page_thread_that_yielded_the_cores_keeps_the_servers_priority():
    """The Live page's drawing threads run nicer than the server (worker.yield_cores); a decode
    worker started after that, e.g. to replace a dead one, must not inherit their nice value (a
    child inherits its starting thread's), or it would lose the cores to the page's drawing."""
    base = os.getpriority(os.PRIO_PROCESS, os.getpid())
    if base + 1 > 19 or worker.server_nice() == 0:
        pytest.skip("this process already runs at the lowest priority, or SPECVIZ_SERVER_NICE=0")
    old = worker.shared()
    os.kill(old.proc.pid, signal.SIGKILL)
    old.proc.wait(10)
    got = {}

    def page_thread():
        worker.yield_cores()
        got["page"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        got["worker"] = worker.shared()

    t = threading.Thread(target=page_thread)
    t.start()
    t.join(120)
    assert got["page"] == min(19, base + worker.server_nice())
    assert got["worker"] is not old and got["worker"].alive()
    assert os.getpriority(os.PRIO_PROCESS, got["worker"].proc.pid) == base


# A server that starts its decode worker as Worker() does and dies before connecting: the worker waits in
# accept() for a parent that will never come, so only its own watch on the parent can end it.
SERVER = """
import os, subprocess, sys, tempfile, time
address = os.path.join(tempfile.mkdtemp(), "sock")
proc = subprocess.Popen([sys.executable, "-m", "specviz.device.worker", address], stdin=subprocess.PIPE,
                        env={**os.environ, "SPECVIZ_WORKER_PARENT": str(os.getpid())})
proc.stdin.write(os.urandom(32).hex().encode() + b"\\n")
proc.stdin.close()
print(proc.pid, flush=True)
time.sleep(120)
"""


def test_the_decode_worker_exits_soon_after_its_server_is_killed():
    """A server killed with SIGKILL runs no cleanup and closes no connection the worker would notice (here it
    never connected): the worker sees by itself that its parent is gone."""
    import subprocess
    import sys
    from pathlib import Path

    root = str(locations.ROOT)
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": root}, cwd=root)
    pid = int(server.stdout.readline())
    alive = lambda: Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"  # noqa: E731
    try:
        assert alive()
        server.send_signal(signal.SIGKILL)
        server.wait()
        deadline = time.time() + 30
        while alive() and time.time() < deadline:
            time.sleep(0.1)
        assert not alive(), "the decode worker outlived its server"
    finally:
        if alive():
            os.kill(pid, signal.SIGKILL)


def test_a_suffix_draft_learns_across_the_runs_of_one_page_session_only(runs, monkeypatch):
    monkeypatch.setattr(deviceclient, "RUN_JOB", "run")  # the real job: the default target and the suffix draft
    cfg = dataclasses.replace(config(24), draft="suffix", prompts=["Repeat: one two three four five six seven"])

    def learnt(session):
        run = LiveRun(cfg=cfg, lock=threading.Lock(), session=session).start()
        poll_until_done(run)
        assert run.status == "done", run.error
        return run.trace["config"]["suffix_corpus_tokens"], run.trace["summary"]["acceptance_rate"]

    first, again, other = learnt("session-a"), learnt("session-a"), learnt("session-b")
    assert first[0] == 0 and again[0] > 0 and other[0] == 0  # the second run of a session starts knowing the first
    assert again[1] > first[1]  # and accepts more of the same request
