"""How busy the rest of the machine was while a measurement ran.

On a small CPU a second busy process slows torch's threads badly (a calibration taken beside
another benchmark read a 135M forward as 1.7 s instead of ~30 ms), and nothing in the numbers
themselves shows it. ``OtherLoad`` reads the machine's busy CPU time (psutil's system-wide times,
steal included: a VM host taking the cores counts too) and this process's own, before and after;
the difference over the wall time is how many cores something else kept busy.

    with OtherLoad() as load:
        ...measure...
    load.cores        # other processes' (and steal's) mean busy cores over the block
    load.warning()    # one sentence when that is enough to distort the numbers, else None
"""

from __future__ import annotations

import os
import time

import psutil

BUSY_SHARE = 0.25  # of the machine's cores, on average over the measurement


def _busy_s() -> float:
    t = psutil.cpu_times()
    return sum(v for k, v in t._asdict().items() if k not in ("idle", "iowait", "guest", "guest_nice"))


def _own_s(also: tuple[int, ...] = ()) -> float:
    """This process's CPU time and its children's, plus the processes ``also`` (gone ones count 0)."""
    total = 0.0
    for pid in (None, *also):
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + (t.children_user + t.children_system if pid is None else 0.0)
    return total


class OtherLoad:
    """``also``: pids that count as this measurement's own (the app's server drawing the run it measures)."""

    def __init__(self, what: str = "this measurement", also: tuple[int, ...] = ()):
        self.what = what
        self.also = tuple(also)
        self.cpus = psutil.cpu_count() or os.cpu_count() or 1
        self.cores: float | None = None

    def __enter__(self) -> "OtherLoad":
        self._t, self._busy, self._own = time.monotonic(), _busy_s(), _own_s(self.also)
        return self

    def __exit__(self, *exc) -> None:
        wall = time.monotonic() - self._t
        if wall > 0.5:  # shorter blocks are all noise in the kernel's tick-based accounting
            self.cores = max(0.0, (_busy_s() - self._busy) - (_own_s(self.also) - self._own)) / wall

    def warning(self) -> str | None:
        return load_warning(self.cores, self.cpus, self.what)


def is_busy(cores: float | None, cpus: int) -> bool:
    """Other processes kept enough of the machine's cores busy to distort a measurement."""
    return isinstance(cores, (int, float)) and cores >= max(BUSY_SHARE * cpus, 0.3)


def load_warning(cores: float | None, cpus: int, what: str = "this measurement") -> str | None:
    """One sentence when other processes kept enough of the machine busy to distort ``what``."""
    if not is_busy(cores, cpus):
        return None
    return (f"while {what} ran, other processes (or the VM host) kept {cores:.1f} of {cpus} cores busy, so its times "
            "are likely too slow; measure again on an idle machine")
