"""The one line for device work: Live runs and the pages' jobs (Sweep, Correctness, peak
measurements) take turns on the model lock first come, first served, and a waiter can say its
place and what holds the device now. Never touches Streamlit or torch.

The line is keyed by the lock (every session shares one: specviz.app.state.model_lock), so
tests that pass a lock of their own get a line of their own.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

POLL_S = 0.2  # how often a waiter checks its stop flag while the device is busy

_lines: dict[int, list] = {}  # id(lock) -> waiters (any objects), first come first served
_holders: dict[int, str] = {}  # id(lock) -> what holds it now ("a Live run", "a Sweep", ...)
_guard = threading.Lock()


def take(lock: threading.Lock, who, what: str, stopped: Callable[[], bool]) -> bool:
    """Wait in line for ``lock`` and take it; False (not holding it) when ``stopped()`` turned true
    first. ``what`` names the holder for those queued behind it."""
    with _guard:
        _lines.setdefault(id(lock), []).append(who)
    try:
        while True:
            if stopped():
                return False
            with _guard:
                first = _lines[id(lock)][0] is who
            if first and lock.acquire(timeout=POLL_S):
                with _guard:
                    _holders[id(lock)] = what
                return True
            if not first:
                time.sleep(POLL_S / 4)
    finally:
        with _guard:
            line = _lines[id(lock)]
            line.remove(who)
            if not line:
                del _lines[id(lock)]


def release(lock: threading.Lock) -> None:
    """Give the device to the next in line (the holder's name goes with it)."""
    with _guard:
        _holders.pop(id(lock), None)
    lock.release()


def position(lock: threading.Lock, who) -> int | None:
    """1 for the next to get the device, 2 behind it, ...; None when ``who`` is not waiting."""
    with _guard:
        line = _lines.get(id(lock), [])
        return line.index(who) + 1 if who in line else None


def holder(lock: threading.Lock) -> str:
    """What holds the device now ("a Sweep", "a Live run", ...), said to those queued."""
    with _guard:
        return _holders.get(id(lock), "another run")


def hold(lock: threading.Lock, what: str | None) -> None:
    """Name (or, with None, forget) the holder of a lock taken outside :func:`take`."""
    with _guard:
        if what is None:
            _holders.pop(id(lock), None)
        else:
            _holders[id(lock)] = what


def queued_note(lock: threading.Lock, who, starts: str) -> str:
    """The sentence a page shows while ``who`` waits: what holds the device and ``who``'s place.
    ``starts`` names what begins when its turn comes ("this run", "the check")."""
    place = position(lock, who)
    ahead = f"; place in line: {place}" if place and place > 1 else ""
    return (f"queued: {holder(lock)} holds the model (in this tab or another); {starts} starts when it ends"
            f"{ahead}")
