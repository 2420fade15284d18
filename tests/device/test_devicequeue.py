"""specviz.device.devicequeue: Live runs and page jobs take the device in one first-come line."""

from __future__ import annotations

import threading
import time

from specviz.device import devicequeue
from specviz.device.deviceclient import DeviceJob


def wait_until(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cond()


class Waiter:
    """A stand-in for a Live run: takes its turn in a thread, records when it got the device."""

    def __init__(self, lock, order, name, peek=None):
        self.lock, self.order, self.name, self.stop, self.peek = lock, order, name, False, peek
        self.thread = threading.Thread(target=self._go, daemon=True)
        self.thread.start()

    def _go(self):
        if devicequeue.take(self.lock, self, "a Live run", lambda: self.stop):
            self.order.append(self.name if self.peek is None else (self.name, self.peek()))
            devicequeue.release(self.lock)


def test_a_job_queued_after_a_live_run_waits_behind_it_and_says_its_place():
    lock, order = threading.Lock(), []
    lock.acquire()  # something holds the device
    devicequeue.hold(lock, "a Sweep")
    job = None
    run = Waiter(lock, order, "run", peek=lambda: job.status)  # what the job is doing when the run gets the device
    wait_until(lambda: devicequeue.position(lock, run) == 1)
    job = DeviceJob(name="count", lock=lock, what="an exactness check").start()
    wait_until(lambda: job.queue_position == 2)
    assert devicequeue.queued_note(lock, job, "the check") == (
        "queued: a Sweep holds the model (in this tab or another); the check starts when it ends; place in line: 2")
    devicequeue.release(lock)
    run.thread.join(10)
    job.join(60)
    assert order == [("run", "queued")] and job.items == [0, 1, 2]  # the job never jumped ahead of the run
    assert job.status == "done" and job.queue_position is None and not lock.locked()


def test_a_waiter_stopped_in_line_leaves_it_and_never_takes_the_device():
    lock, order = threading.Lock(), []
    lock.acquire()
    first = Waiter(lock, order, "first")
    second = Waiter(lock, order, "second")
    wait_until(lambda: devicequeue.position(lock, second) == 2)
    first.stop = True
    wait_until(lambda: devicequeue.position(lock, second) == 1)
    devicequeue.release(lock)
    second.thread.join(10)
    first.thread.join(10)
    assert order == ["second"] and devicequeue.position(lock, first) is None


def test_the_holder_is_named_while_it_holds_and_forgotten_after():
    lock = threading.Lock()
    me = object()
    assert devicequeue.take(lock, me, "a peak measurement", lambda: False)
    assert devicequeue.holder(lock) == "a peak measurement"
    devicequeue.release(lock)
    assert devicequeue.holder(lock) == "another run" and not lock.locked()
