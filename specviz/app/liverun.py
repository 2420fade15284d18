"""The app's run: one run (optionally raced against regular decoding) for one session.

A :class:`LiveRun` hands its run to the server's decode worker, a process of its own
(specviz.app.worker), and a thread here takes in what the worker streams back: the step records
so far, the rows' outputs, telemetry samples, then the finished trace. The page polls the
LiveRun (it never touches Streamlit). Sessions queue first come, first served on the model lock
(the worker decodes one run at a time): a waiting run is in state "queued", with its place in
line in :attr:`LiveRun.queue_position`.

Every poll refreshes the run's heartbeat (:meth:`LiveRun.beat`). A run whose page stopped
polling — the tab was closed — stops itself at its next step, as if Stop were pressed, so the
lock passes to the next queued session instead of being held until the run ends.
"""

from __future__ import annotations

import dataclasses
import itertools
import pickle
import threading
import time

from specviz.analysis.trace import TraceBuilder
from specviz.app import devicequeue, worker as workers
from specviz.app.worker import error_message, free_device_memory, oom_message, yield_cores  # noqa: F401
from specviz.runconfig import RunConfig
from specviz.run import iter_run, load_pair

RUNNING = ("queued", "loading", "running", "racing")

# A run the page has not polled for this long is abandoned. The page polls every 0.5-5 s, but a
# browser throttles timers in a hidden tab (Chrome: to once a minute after 5 minutes hidden), so
# a tab that is merely in the background must stay well inside this.
HEARTBEAT_TIMEOUT_S = 90.0
POLL_S = 0.2  # how often a waiting or quiet run checks its stop flag and heartbeat

_ids = itertools.count(1)


@dataclasses.dataclass(eq=False)
class LiveRun:
    """One run of one session, decoded by the decode worker process."""

    cfg: RunConfig
    lock: threading.Lock  # the model lock shared by every session
    race: bool = False
    heartbeat_timeout: float | None = None  # seconds without beat() before the run stops; None: never
    status: str = "queued"  # queued | loading | running | racing | done | stopped | error
    error: str | None = None
    abandoned: bool = False  # stopped because its page stopped polling
    steps: list = dataclasses.field(default_factory=list)  # specviz.records.Step so far (speculative run)
    trace: dict | None = None  # the finished (or stopped) speculative run
    regular_trace: dict | None = None  # the race partner, mode="regular"
    tokenizer: object = None
    started: float = dataclasses.field(default_factory=time.perf_counter)
    last_beat: float = dataclasses.field(default_factory=time.monotonic)
    notes: list = dataclasses.field(default_factory=list)
    id: int = dataclasses.field(default_factory=lambda: next(_ids))
    _rows: list = dataclasses.field(default_factory=list)  # [index, prompt, prompt ids, output, finish reason]
    _builder: TraceBuilder = None  # the trace of the steps so far (set in __post_init__)
    _prefill_s: float = 0.0
    _elapsed_s: float = 0.0  # seconds from the first step to the last step received
    _telemetry: list = dataclasses.field(default_factory=list)
    _worker: object = None  # the decode worker, while this run's job is on it
    _stop: bool = False
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self._builder = TraceBuilder(self.cfg.to_trace_config())

    # -- control (called from the page) --
    def start(self) -> "LiveRun":
        # The worker process loads and decodes with these (looked up now, so a test can swap them
        # for importable stand-ins, e.g. a tiny model: they travel to the child by reference).
        self._job = workers.Job(self.id, self.cfg, self.race, load_pair, iter_run)
        self._thread = threading.Thread(target=self._work, name=f"specviz-run-{self.id}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the current step; unfinished rows end as "stopped", output is kept."""
        self._stop = True
        w = self._worker
        if w is not None:
            try:
                w.send("stop", self.id)
            except OSError:
                pass

    def beat(self) -> None:
        """The page is still polling this run."""
        self.last_beat = time.monotonic()

    @property
    def running(self) -> bool:
        return self.status in RUNNING

    @property
    def queue_position(self) -> int | None:
        """1 for the next run to get the model, 2 behind it, ...; None when not waiting."""
        return devicequeue.position(self.lock, self)

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the receiving thread (never calls Streamlit) --
    def _stop_if_abandoned(self) -> None:
        """Stop, as Stop does, once the page has not polled for heartbeat_timeout seconds."""
        if (self.heartbeat_timeout is not None and not self._stop
                and time.monotonic() - self.last_beat > self.heartbeat_timeout):
            self.abandoned = True
            self.notes.append(f"stopped: the page did not poll for {self.heartbeat_timeout:.0f} s")
            self.stop()

    def _wait_turn(self) -> bool:
        """Take the model lock in arrival order (page jobs wait in the same line); False when
        stopped (or abandoned) while waiting."""
        def stopped() -> bool:
            self._stop_if_abandoned()
            return self._stop

        return devicequeue.take(self.lock, self, "a Live run", stopped)

    def _work(self) -> None:
        if not self._wait_turn():
            self.status = "stopped"
            return
        w = None
        try:
            w = workers.shared()
            while not w.use.acquire(timeout=POLL_S):  # another lock's run is on the worker (tests)
                self._stop_if_abandoned()
            try:
                self.status = "loading"
                try:
                    w.send("run", self._job)
                except OSError:  # the worker ended while idle: start a new one, once
                    workers.forget(w)
                    w.use.release()
                    w = workers.shared()
                    w.use.acquire()
                    w.send("run", self._job)
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
                e = RuntimeError(f"the run could not be sent to the decode worker: {e}")
            self._fail(error_message(e, self.cfg) if not isinstance(e, workers.WorkerDied) else str(e))
        finally:
            devicequeue.release(self.lock)

    def _fail(self, message: str) -> None:
        if self.trace is None and self.steps:
            self.trace = self.snapshot()  # partial output stays visible
        self.error = message
        self.status = "error"

    def _receive(self, w) -> None:
        while True:
            msg = w.recv(POLL_S)
            self._stop_if_abandoned()
            if msg is None or msg[0] != self.id:
                continue  # quiet, or the tail of an earlier run that gave up on the worker
            kind, payload = msg[1], msg[2:]
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
            elif kind == "status":
                self.status = payload[0]
            elif kind == "start":
                rows, self._prefill_s = payload
                self._rows = [[i, p, ids, [], None] for i, p, ids in rows]
            elif kind == "tokenizer":
                key, blob = payload
                if blob is not None:
                    w.tokenizers[key] = pickle.loads(blob)
                self.tokenizer = w.tokenizers.get(key)
            elif kind == "trace":
                self.trace = payload[0]
            elif kind == "regular_trace":
                self.regular_trace = payload[0]
            elif kind == "end":
                status, error, notes = payload
                self.notes.extend(notes)
                if status == "error":
                    self._fail(error)
                else:
                    self.status = "stopped" if status == "done" and self._stop else status
                return

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
              heartbeat_timeout: float | None = HEARTBEAT_TIMEOUT_S) -> LiveRun:
    """Start a run for a page, which must call beat() while it polls (appstate.current_run does)."""
    return LiveRun(cfg=cfg, lock=lock, race=race, heartbeat_timeout=heartbeat_timeout).start()


def warm_up() -> None:
    """Start the decode worker process now (a fresh interpreter imports torch: seconds), so the
    first Run does not wait for it."""
    workers.shared()
