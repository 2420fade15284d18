"""Ctrl-C and SIGTERM in the CLI keep what was made.

The first signal is remembered (``Stop.signal``): ``run`` asks its decoder to end after the
current step (rows still going end as "stopped") and writes the trace so far; with
``at_once=True`` (bench, sweep, whose unit of work is a whole round or cell) it raises
``Interrupted`` right away and the caller writes the finished rounds or cells. A second signal
always raises at once.
"""

from __future__ import annotations

import signal
import threading


class Interrupted(KeyboardInterrupt):
    """Raised by a Stop's handler; ``str()`` is the signal's name."""


class Stop:
    def __init__(self, at_once: bool = False):
        self.signal: str | None = None  # "SIGINT" / "SIGTERM" once one arrived
        self.at_once = at_once
        self._old: dict = {}

    def __enter__(self) -> "Stop":
        if threading.current_thread() is threading.main_thread():  # signal handlers live on the main thread only
            for s in (signal.SIGINT, signal.SIGTERM):
                self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)
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
        return 128 + signal.Signals[self.signal].value if self.signal else 0
