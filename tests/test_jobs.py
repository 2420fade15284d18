"""specviz.app.jobs: the worker the Sweep and Correctness pages run their measurements in."""

from __future__ import annotations

import threading

from specviz.app.jobs import Job
from specviz.common import SpecvizError


def test_job_waits_for_the_model_lock_then_reports_items_and_a_result():
    lock = threading.Lock()
    lock.acquire()

    def fn(job):
        for i in range(3):
            job.report(i)
        job.say("done counting")
        return "result"

    job = Job(fn, lock).start()
    job.join(0.5)
    assert job.status == "queued" and job.items == []
    lock.release()
    job.join(10)
    assert (job.status, job.items, job.result, job.note) == ("done", [0, 1, 2], "result", "done counting")
    assert lock.acquire(timeout=1)  # released when the job ended


def test_a_job_stopped_while_queued_never_runs():
    lock = threading.Lock()
    lock.acquire()
    ran = []
    job = Job(lambda j: ran.append(1), lock).start()
    job.stop()
    job.join(10)
    lock.release()
    assert job.status == "stopped" and ran == []


def test_a_user_mistake_is_one_line_and_a_bug_keeps_its_traceback_aside():
    def mistake(job):
        raise SpecvizError("choose a draft")

    def bug(job):
        raise KeyError("x")

    lock = threading.Lock()
    a, b = Job(mistake, lock).start(), Job(bug, lock).start()
    a.join(10)
    b.join(10)
    assert (a.status, a.error, a.details) == ("error", "choose a draft", None)
    assert b.status == "error" and b.error == "KeyError: 'x'" and "KeyError" in b.details
    assert lock.acquire(timeout=1)


def test_a_job_no_page_polls_stops_at_its_next_check():
    """A closed tab must not keep the model lock for a whole sweep."""
    started = threading.Event()

    def fn(job):
        started.set()
        while not job.stopped:
            threading.Event().wait(0.01)
        return "stopped early"

    job = Job(fn, threading.Lock(), heartbeat_timeout=0.2).start()
    assert started.wait(5)
    job.join(10)
    assert job.status == "stopped" and job.abandoned and job.result == "stopped early"
    polled = Job(lambda j: j.stopped, threading.Lock(), heartbeat_timeout=60).start()
    polled.join(10)
    assert polled.status == "done" and polled.result is False and not polled.abandoned
