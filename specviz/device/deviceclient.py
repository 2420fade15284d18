"""The Streamlit server's one client of the device process: every device job of every session.

A :class:`DeviceJob` names a job of the decode worker (specviz.device.devicejobs: a run, a sweep, an
exactness check, a model's facts...), waits its turn in the one first-come line for the device
(specviz.device.devicequeue), hands the job to the worker process (specviz.device.worker) and takes in
what it streams back: progress notes, result items, then the result. A :class:`LiveRun` is the
job that decodes: it also gathers the step records so far, the rows' outputs and telemetry, then
the finished trace. Pages poll these objects (they never touch Streamlit here); :func:`ask` waits
for a short job's result.

Every poll refreshes a job's heartbeat (:meth:`DeviceJob.beat`). A job whose page stopped polling
(the tab was closed) stops itself at its next unit of work, as if Stop were pressed, so the device
passes to the next in line instead of being held until the job ends.

Nothing here imports torch, transformers or a model: the server holds none (tests check it).
"""

from __future__ import annotations

import dataclasses
import itertools
import pickle
import threading
import time

from specviz.analysis.trace import TraceBuilder
from specviz.device import devicequeue, worker as workers
from specviz.device.worker import error_message
from specviz.common import SpecvizError
from specviz.runconfig import RunConfig

RUNNING = ("queued", "loading", "running", "racing")

# A job the page has not polled for this long is abandoned. The page polls every 0.5-5 s, but a
# browser throttles timers in a hidden tab (Chrome: to once a minute after 5 minutes hidden), so
# a tab that is merely in the background must stay well inside this.
HEARTBEAT_TIMEOUT_S = 90.0
POLL_S = 0.2  # how often a waiting or quiet job checks its stop flag and heartbeat
RUN_JOB = "run"  # the worker's job for a Live run (tests name a stand-in registered in the worker)
PEAKS_JOB = "peaks"  # the worker's job for the Hardware page's peak measurement (likewise)

_ids = itertools.count(1)
_tokenizers: dict = {}  # a model's name -> tokenizers.Tokenizer (None: ids are shown), for the process
_tokenizers_lock = threading.Lock()


def page_tokenizer(name: str, tokenizer_json: str | None):
    """The tokenizer the pages decode ``name``'s ids with: the `tokenizers` library's object built
    from the JSON the device process sent (once per model and server process); None without one."""
    with _tokenizers_lock:
        if name not in _tokenizers or (_tokenizers[name] is None and tokenizer_json):
            tok = None
            if tokenizer_json:
                from tokenizers import Tokenizer

                try:
                    tok = Tokenizer.from_str(tokenizer_json)
                except Exception:
                    tok = None
            _tokenizers[name] = tok
        return _tokenizers[name]


@dataclasses.dataclass(eq=False, kw_only=True)
class DeviceJob:
    """``JOBS[name](ctx, **params)`` in the device process, once this job's turn comes."""

    lock: threading.Lock  # the device lock every session shares (specviz.app.state.model_lock)
    name: str = ""
    params: dict = dataclasses.field(default_factory=dict)
    what: str = "a measurement"  # how a page queued behind it names it: "a Sweep", "a Live run"
    heartbeat_timeout: float | None = None  # seconds without beat() before it stops; None: never (a page's: 90 s)
    status: str = "queued"  # queued | running (| loading | racing for a run) | done | stopped | error
    note: str = ""
    items: list = dataclasses.field(default_factory=list)
    result: object = None
    error: str | None = None
    details: str | None = None  # a short traceback for unexpected errors
    notes: list = dataclasses.field(default_factory=list)
    abandoned: bool = False  # stopped because no page polled it
    started: float = dataclasses.field(default_factory=time.perf_counter)
    last_beat: float = dataclasses.field(default_factory=time.monotonic)
    id: int = dataclasses.field(default_factory=lambda: next(_ids))
    _worker: object = None  # the decode worker, while this job is on it
    _stop: bool = False
    _thread: threading.Thread | None = None

    # -- control (called from the page) --
    def start(self) -> "DeviceJob":
        self._thread = threading.Thread(target=self._work, name=f"specviz-job-{self.id}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the current unit of work (a run's step); what was done is kept."""
        self._stop = True
        w = self._worker
        if w is not None:
            try:
                w.send("stop", self.id)
            except OSError:
                pass

    def beat(self) -> None:
        """A page is still polling this job."""
        self.last_beat = time.monotonic()

    @property
    def running(self) -> bool:
        return self.status in RUNNING

    @property
    def stopping(self) -> bool:
        """Stop was pressed and the job has not ended yet."""
        return self._stop and self.running

    @property
    def queue_position(self) -> int | None:
        """1 for the next to get the device, 2 behind it, ...; None when not waiting."""
        return devicequeue.position(self.lock, self)

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the receiving thread (never calls Streamlit) --
    def _stop_if_abandoned(self) -> bool:
        """Stop, as Stop does, once no page has polled for heartbeat_timeout seconds."""
        if (self.heartbeat_timeout is not None and not self._stop
                and time.monotonic() - self.last_beat > self.heartbeat_timeout):
            self.abandoned = True
            self.notes.append(f"stopped: the page did not poll for {self.heartbeat_timeout:.0f} s")
            self.stop()
        return self._stop

    def _work(self) -> None:
        if not devicequeue.take(self.lock, self, self.what, self._stop_if_abandoned):
            self.status = "stopped"
            return
        w = None
        try:
            w = workers.shared()
            while not w.use.acquire(timeout=POLL_S):  # another lock's job is on the worker (tests)
                self._stop_if_abandoned()
            try:
                self._begin()
                job = workers.Job(self.id, self.name, self.params)
                try:
                    w.send("job", job)
                except OSError:  # the worker ended while idle: start a new one, once
                    workers.forget(w)
                    w.use.release()
                    w = workers.shared()
                    w.use.acquire()
                    w.send("job", job)
                self._worker = w
                if self._stop:
                    w.send("stop", self.id)
                self._receive(w)
            finally:
                self._worker = None
                w.use.release()
        except BaseException as e:  # shown in the page; the app keeps working
            if isinstance(e, (workers.WorkerDied, OSError)) and w is not None:
                workers.forget(w)
                if not isinstance(e, workers.WorkerDied):
                    e = workers.WorkerDied(f"the decode worker process is gone ({type(e).__name__}: {e}); "
                                           "the next run starts a new one")
            if isinstance(e, pickle.PicklingError) or "pickle" in str(e).lower():
                e = RuntimeError(f"the job could not be sent to the decode worker: {e}")
            self._fail(str(e) if isinstance(e, workers.WorkerDied) else error_message(e, self.params.get("cfg")))
        finally:
            devicequeue.release(self.lock)

    def _begin(self) -> None:
        self.status = "running"

    def _fail(self, message: str) -> None:
        self.error = message
        self.status = "error"

    def _receive(self, w) -> None:
        while True:
            msg = w.recv(POLL_S)
            self._stop_if_abandoned()
            if msg is None or msg[0] != self.id:
                continue  # quiet, or the tail of an earlier job that gave up on the worker
            kind, payload = msg[1], msg[2:]
            if kind == "end":
                status, error, notes, result = payload
                self.notes.extend(notes)
                if status == "error":
                    if notes and not self.details:
                        self.details = notes[-1]
                    self._fail(error)
                else:
                    self.result = result
                    self.status = "stopped" if status == "done" and self._stop else status
                return
            self._take(kind, payload)

    def _take(self, kind: str, payload: tuple) -> None:
        if kind == "say":
            self.note = payload[0]
        elif kind == "item":
            self.items.append(payload[0])
        elif kind == "status":
            self.status = payload[0]


@dataclasses.dataclass(eq=False, kw_only=True)
class LiveRun(DeviceJob):
    """One Live run of one session (optionally raced against regular decoding): the job RUN_JOB."""

    cfg: RunConfig
    race: bool = False
    session: str | None = None  # the page session (a suffix draft learns across its runs)
    steps: list = dataclasses.field(default_factory=list)  # specviz.records.Step so far (speculative run)
    trace: dict | None = None  # the finished (or stopped) speculative run
    regular_trace: dict | None = None  # the race partner, mode="regular"
    tokenizer: object = None  # tokenizers.Tokenizer of the run's target, or None
    _rows: list = dataclasses.field(default_factory=list)  # [index, prompt, prompt ids, output, finish reason]
    _builder: TraceBuilder = None  # the trace of the steps so far (set in __post_init__)
    _prefill_s: float = 0.0
    _elapsed_s: float = 0.0  # seconds from the first step to the last step received
    _telemetry: list = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.name = self.name or RUN_JOB
        self.params = {"cfg": self.cfg, "race": self.race, "session": self.session}
        self.what = "a Live run"
        self._builder = TraceBuilder(self.cfg.to_trace_config())

    def _begin(self) -> None:
        self.status = "loading"

    def _fail(self, message: str) -> None:
        if self.trace is None and self.steps:
            self.trace = self.snapshot()  # partial output stays visible
        super()._fail(message)

    def _take(self, kind: str, payload: tuple) -> None:
        if kind == "step":
            rec, finish, elapsed, samples = payload
            for r in rec.rows:
                self._rows[r.index][3].extend(r.emitted)
            for i, reason in finish.items():
                self._rows[i][4] = reason
            self._telemetry.extend(samples)
            self._elapsed_s = elapsed
            self.steps.append(rec)
            self._builder.add(rec)
        elif kind == "start":
            rows, self._prefill_s = payload
            self._rows = [[i, p, ids, [], None] for i, p, ids in rows]
        elif kind == "tokenizer":
            self.tokenizer = page_tokenizer(*payload)
        elif kind == "trace":
            self.trace = payload[0]
        elif kind == "regular_trace":
            self.regular_trace = payload[0]
        else:
            super()._take(kind, payload)

    # -- what the page reads --
    def snapshot(self) -> dict:
        """A trace-shaped dict of the run so far (the finished trace once there is one)."""
        if self.trace is not None:
            return self.trace
        seqs = [{"index": i, "prompt": p, "prompt_token_ids": ids, "output_token_ids": list(out), "text": None,
                 "finish_reason": reason} for i, p, ids, out, reason in list(self._rows)]
        wall = max(self._elapsed_s, self._prefill_s)  # the engine's clock starts before the prefill
        return self._builder.partial(seqs, self._telemetry, wall, self._prefill_s)


def start_run(cfg: RunConfig, lock: threading.Lock, race: bool = False,
              heartbeat_timeout: float | None = HEARTBEAT_TIMEOUT_S, session: str | None = None) -> LiveRun:
    """Start a run for a page, which must call beat() while it polls (appstate.current_run does).
    ``session``: the page session, whose runs share what a suffix draft learns."""
    return LiveRun(cfg=cfg, lock=lock, race=race, session=session, heartbeat_timeout=heartbeat_timeout).start()


def start_job(name: str, lock: threading.Lock, what: str, **params) -> DeviceJob:
    """Start a page's job (a Sweep, an exactness check, a peak measurement) in the one line; the
    page must call beat() while it polls."""
    return DeviceJob(name=name, params=params, lock=lock, what=what, heartbeat_timeout=HEARTBEAT_TIMEOUT_S).start()


class DeviceBusy(SpecvizError):
    """Another job held the device for longer than the asker would wait in line."""


def ask(name: str, lock: threading.Lock, what: str, timeout: float | None = None,
        queue_timeout: float | None = None, **params):
    """A short job's result, waited for (the job waits its turn like any other). SpecvizError with
    its one line when it fails or ``timeout`` s pass; DeviceBusy when it is still in line after
    ``queue_timeout`` s (a page then draws without it instead of waiting for a whole Sweep)."""
    job = DeviceJob(name=name, params=params, lock=lock, what=what).start()
    if queue_timeout is not None:
        job.join(queue_timeout)
        if job.status == "queued":
            job.stop()
            raise DeviceBusy(f"{devicequeue.holder(lock)} holds the device")
    job.join(timeout)
    if job.running:
        job.stop()
        raise SpecvizError(f"{what} did not finish within {timeout:.0f} s: the device is busy")
    if job.status == "error":
        raise SpecvizError(job.error)
    return job.result


def warm_up() -> None:
    """Start the decode worker process now (a fresh interpreter imports torch: seconds), so the
    first job does not wait for it."""
    workers.shared()
