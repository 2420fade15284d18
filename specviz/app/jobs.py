"""Background jobs for the pages that measure (Sweep, Correctness, peaks): a function run in a
worker thread that holds the shared model lock, reporting items as it goes. Like specviz.app.liverun
for Live, it never touches Streamlit: the page starts a job, then polls ``items``, ``note`` and
``status`` from a fragment, so the UI is never blocked. Jobs and Live runs wait in one first-come
line for the lock (specviz.app.devicequeue), so a job never jumps ahead of a queued run.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import traceback
from typing import Callable

from specviz.app import devicequeue
from specviz.common import SpecvizError

RUNNING = ("queued", "running")
HEARTBEAT_TIMEOUT_S = 90.0  # as a Live run: a job no page has polled for this long stops (tab closed)


@dataclasses.dataclass
class Job:
    """``fn(job)`` in a thread once ``lock`` is free; fn calls ``job.report(item)`` per result,
    ``job.say(note)`` for progress, and checks ``job.stopped`` between units of work."""

    fn: Callable[["Job"], object]
    lock: threading.Lock  # the model lock every session shares
    what: str = "a measurement"  # how a page queued behind it names it: "a Sweep", "an exactness check"
    status: str = "queued"  # queued | running | done | stopped | error
    note: str = ""
    items: list = dataclasses.field(default_factory=list)
    result: object = None
    error: str | None = None
    details: str | None = None  # a short traceback for unexpected errors
    heartbeat_timeout: float | None = HEARTBEAT_TIMEOUT_S  # None: never abandoned
    abandoned: bool = False  # stopped because no page polled it
    last_beat: float = dataclasses.field(default_factory=time.monotonic)
    _stop: bool = False
    _thread: threading.Thread | None = None

    def start(self) -> "Job":
        self._thread = threading.Thread(target=self._work, name="specviz-job", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop = True

    def beat(self) -> None:
        """A page is still polling this job."""
        self.last_beat = time.monotonic()

    @property
    def stopped(self) -> bool:
        """Stop pressed, or no page polled for heartbeat_timeout s (so the model lock goes to the next session)."""
        if (not self._stop and self.heartbeat_timeout is not None
                and time.monotonic() - self.last_beat > self.heartbeat_timeout):
            self.abandoned = True
            self._stop = True
        return self._stop

    @property
    def running(self) -> bool:
        return self.status in RUNNING

    @property
    def queue_position(self) -> int | None:
        """1 for the next to get the model, 2 behind it, ...; None when not waiting."""
        return devicequeue.position(self.lock, self)

    @property
    def stopping(self) -> bool:
        """Stop was pressed and the job has not ended yet (it ends after its current unit of work)."""
        return self._stop and self.running

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def report(self, item) -> None:
        self.items.append(item)

    def say(self, note: str) -> None:
        self.note = note

    def _work(self) -> None:
        acquired = False
        try:
            if not devicequeue.take(self.lock, self, self.what, lambda: self.stopped):
                self.status = "stopped"
                return
            acquired = True
            self.status = "running"
            self.result = self.fn(self)
            self.status = "stopped" if self._stop else "done"
        except BaseException as e:  # shown on the page; the app keeps working
            import torch

            if isinstance(e, SpecvizError):
                self.error = str(e)
            elif isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower():
                self.error = "out of memory: try a smaller batch size, draft length or fewer tokens"
            else:
                self.error = f"{type(e).__name__}: {e}"
                self.details = traceback.format_exc(limit=3)
            self.status = "error"
        finally:
            if acquired:
                devicequeue.release(self.lock)
