"""Ctrl-C and SIGTERM in the CLI keep what was made.

The first signal is remembered (``Stop.signal``): ``run`` asks its decoder to end after the
current step (rows still going end as "stopped") and writes the trace so far; with
``at_once=True`` (bench, sweep, whose unit of work is a whole round or cell) it raises
``Interrupted`` right away and the caller writes the finished rounds or cells. A second signal
always raises at once; ``run`` then still writes the finished steps' trace (interrupted_twice), and a
trace being written holds both signals off for the milliseconds that takes (save_trace_held).
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from specviz.common import EXIT_SIGNAL_BASE


class Interrupted(KeyboardInterrupt):
    """Raised by a Stop's handler; ``str()`` is the signal's name."""


class Stop:
    """``final=True`` (the CLI's commands): once a signal came, the process only reports and exits, so
    leaving the block ignores further signals instead of restoring the old handlers; a second Ctrl-C
    during that exit would otherwise print a KeyboardInterrupt traceback from Python's shutdown."""

    def __init__(self, at_once: bool = False, final: bool = False):
        self.signal: str | None = None  # "SIGINT" / "SIGTERM" once one arrived
        self.at_once, self.final = at_once, final
        self._old: dict = {}

    def __enter__(self) -> "Stop":
        if threading.current_thread() is threading.main_thread():  # signal handlers live on the main thread only
            for s in (signal.SIGINT, signal.SIGTERM):
                self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._old.items():
            signal.signal(s, signal.SIG_IGN if self.final and self.signal else handler)
        self._old.clear()

    def _handle(self, signum, frame) -> None:
        first = self.signal is None
        if first:
            self.signal = signal.Signals(signum).name
        if self.at_once or not first:
            raise Interrupted(self.signal)

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM)."""
        return EXIT_SIGNAL_BASE + signal.Signals[self.signal].value if self.signal else 0


def save_trace(trace: dict, path: str) -> str:
    """Write the trace to ``path``; if that fails now (the folder went away mid-run, a full disk),
    keep it in the temp folder instead, so the run is not lost. Returns where it went, said in one phrase."""
    import tempfile

    from specviz.analysis.trace import save_json

    try:
        save_json(trace, path)  # atomic: a second signal here leaves the old file or the whole new one
        return path
    except OSError as e:
        fd, alt = tempfile.mkstemp(prefix="specviz-trace-", suffix=".json")
        os.close(fd)
        save_json(trace, alt)
        return f"{alt} (--out {path} could not be written: {e.strerror or e})"


class held_signals:
    """Ctrl-C and SIGTERM held off (ignored) for the few milliseconds a trace takes to build or write,
    so a signal that comes meanwhile cannot lose it. Main thread only, like every signal handler."""

    def __enter__(self) -> None:
        on_main = threading.current_thread() is threading.main_thread()
        self._old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)} if on_main else {}

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


def save_trace_held(trace: dict, out: str) -> str:
    """save_trace under held_signals."""
    with held_signals():
        return save_trace(trace, out)


def interrupted_twice(trace: dict | None, out: str | None, stop) -> int:
    """``run`` stopped by a second signal in the middle of a step: write the finished steps' trace
    and say where."""
    steps = len(trace["steps"]) if trace else 0
    if trace is None or not steps:
        where = "no step had finished: nothing written"
    elif not out:
        where = f"{steps} steps had finished, but no --out was given, so nothing was written"
    else:
        where = f"the trace of the {steps} finished steps is in {save_trace_held(trace, out)}"
    print(f"\nspecviz: interrupted twice ({stop.signal}), in the middle of a step: {where}", file=sys.stderr)
    return stop.exit_code
