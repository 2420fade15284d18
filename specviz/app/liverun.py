"""The app's run worker: one run in a background thread, holding the shared model lock.

A :class:`LiveRun` drives :func:`specviz.run.iter_run` in a worker thread (it never
touches Streamlit) and publishes what the page needs: the step records so far, the rows'
outputs, telemetry samples, then the finished trace. The page polls it. Holding the model
lock for the whole run means two browser sessions never decode on one model at once: the
second run waits in state "queued".

Every poll refreshes the run's heartbeat (:meth:`LiveRun.beat`). A run whose page stopped
polling — the tab was closed — stops itself at its next step, as if Stop were pressed, so the
lock passes to the next queued session instead of being held until the run ends.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import traceback

from specviz.common import SpecvizError
from specviz.run import RunConfig, iter_run, load_pair
from specviz.analysis.trace import summarize

RUNNING = ("queued", "loading", "running", "racing")

# A run the page has not polled for this long is abandoned. The page polls every 0.5-5 s, but a
# browser throttles timers in a hidden tab (Chrome: to once a minute after 5 minutes hidden), so
# a tab that is merely in the background must stay well inside this.
HEARTBEAT_TIMEOUT_S = 90.0


def oom_message(b: int, k: int) -> str:
    return (f"out of memory at batch size {b}, draft length {k}: memory was freed; "
            "try a smaller batch size or draft length (or fewer max new tokens)")


def free_device_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def error_message(e: BaseException, cfg: RunConfig) -> str:
    """One clear sentence for a failure of a run."""
    import torch

    if isinstance(e, SpecvizError):
        return str(e)
    if isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower():
        free_device_memory()
        return oom_message(cfg.batch_size, cfg.draft_length)
    return f"{type(e).__name__}: {e}"


@dataclasses.dataclass
class LiveRun:
    """One run (optionally raced against regular decoding) in a worker thread."""

    cfg: RunConfig
    lock: threading.Lock  # the model lock shared by every session
    race: bool = False
    heartbeat_timeout: float | None = None  # seconds without beat() before the run stops; None: never
    status: str = "queued"  # queued | loading | running | racing | done | stopped | error
    error: str | None = None
    abandoned: bool = False  # stopped because its page stopped polling
    steps: list = dataclasses.field(default_factory=list)  # step records so far (speculative run)
    trace: dict | None = None  # the finished (or stopped) speculative run
    regular_trace: dict | None = None  # the race partner, mode="regular"
    tokenizer: object = None
    started: float = dataclasses.field(default_factory=time.perf_counter)
    last_beat: float = dataclasses.field(default_factory=time.monotonic)
    notes: list = dataclasses.field(default_factory=list)
    _dec: object = None
    _sampler: object = None
    _stop: bool = False
    _thread: threading.Thread | None = None

    # -- control (called from the page) --
    def start(self) -> "LiveRun":
        self._thread = threading.Thread(target=self._work, name="specviz-run", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the current step; unfinished rows end as "stopped", output is kept."""
        self._stop = True
        if self._dec is not None:
            self._dec.stop()

    def beat(self) -> None:
        """The page is still polling this run."""
        self.last_beat = time.monotonic()

    @property
    def running(self) -> bool:
        return self.status in RUNNING

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the worker (never calls Streamlit) --
    def _stop_if_abandoned(self) -> None:
        """Stop, as Stop does, once the page has not polled for heartbeat_timeout seconds."""
        if (self.heartbeat_timeout is not None and not self._stop
                and time.monotonic() - self.last_beat > self.heartbeat_timeout):
            self.abandoned = True
            self.notes.append(f"stopped: the page did not poll for {self.heartbeat_timeout:.0f} s")
            self.stop()

    def _work(self) -> None:
        acquired = False
        try:
            while not self.lock.acquire(timeout=0.2):
                self._stop_if_abandoned()
                if self._stop:
                    self.status = "stopped"
                    return
            acquired = True
            self.status = "loading"
            self.cfg.validate()
            target, proposer = load_pair(self.cfg)
            self.tokenizer = target.tokenizer
            self._stop_if_abandoned()
            if self._stop:
                self.status = "stopped"
                return
            self.status = "running"
            self.trace = self._decode(self.cfg, target, proposer, record=True)
            if self.race and not self._stop:
                self.status = "racing"
                reg = dataclasses.replace(self.cfg, mode="regular")
                self.regular_trace = self._decode(reg, target, None, record=False)
            self.status = "stopped" if self._stop else "done"
        except BaseException as e:  # shown in the page; the app keeps working
            if self.trace is None and self._dec is not None and self.steps:
                self.trace = self.snapshot()  # partial output stays visible
            self._dec = None  # drop the decoder's caches before freeing memory
            if not isinstance(e, SpecvizError):
                self.notes.append(traceback.format_exc(limit=3))
            self.error = error_message(e, self.cfg)
            self.status = "error"
        finally:
            self._dec = None
            if acquired:
                self.lock.release()

    def _decode(self, cfg: RunConfig, target, proposer, record: bool) -> dict:
        trace = None
        for dec, rec in iter_run(cfg, target, proposer):  # its sampler runs on the engine's clock
            if self._dec is not dec:
                self._dec = dec
                if record:
                    self._sampler = dec.sampler
                if self._stop:
                    dec.stop()
            if rec is None:
                trace = dec.trace
                continue
            self._stop_if_abandoned()
            if record:
                self.steps.append(rec)
        return trace

    # -- what the page reads --
    def snapshot(self) -> dict:
        """A trace-shaped dict of the run so far (the finished trace once there is one)."""
        if self.trace is not None:
            return self.trace
        dec = self._dec
        steps = list(self.steps)
        seqs = []
        if dec is not None:
            for r in dec.rows:
                out = list(r.output)
                seqs.append({"index": r.index, "prompt": r.prompt, "prompt_token_ids": r.prompt_ids,
                             "output_token_ids": out, "text": None, "finish_reason": r.finish_reason})
        wall = time.perf_counter() - dec.t0 if dec is not None and dec.t0 else 0.0
        prefill = dec.prefill_s if dec is not None else 0.0
        return {"version": 1, "config": self.cfg.to_trace_config(), "hardware": {}, "sequences": seqs,
                "steps": steps, "telemetry": self._sampler.samples if self._sampler is not None else [],
                "summary": summarize(steps, seqs, max(wall, prefill), prefill), "partial": True}


def start_run(cfg: RunConfig, lock: threading.Lock, race: bool = False,
              heartbeat_timeout: float | None = HEARTBEAT_TIMEOUT_S) -> LiveRun:
    """Start a run for a page, which must call beat() while it polls (appstate.current_run does)."""
    return LiveRun(cfg=cfg, lock=lock, race=race, heartbeat_timeout=heartbeat_timeout).start()
