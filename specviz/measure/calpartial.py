"""An interrupted calibration keeps the timing points it measured, and the same command resumes from them.

Each finished point (a target or draft forward at (batch size, tokens per row), or the engine's
overhead at one batch size) is written at once, atomically, to the pair's partial record
(:func:`specviz.analysis.costs.partial_path`): the calibration record's format with no fit yet
(``target_cost`` and ``draft_cost`` null), ``"partial": true`` and the points still ``missing``.
Ctrl-C, SIGTERM or a kill -9 loses only the point under way. Nothing reads a partial record as a
cost model (:func:`specviz.analysis.costs.read_calibration` refuses it): some batch sizes and no
overhead would mislead every prediction past them. A calibration of the same pair, device, dtype,
prefix length and repeats takes its points as done and measures the rest; a finished one removes it.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Callable

from specviz.analysis.costs import FORMAT, partial_path
from specviz.common import write_atomic

KINDS = ("target", "draft", "overhead")


class Points:
    """The grid of one calibration: ``grid[kind]`` lists its points ((b, n) for the forwards, b for the
    overhead); ``done[kind]`` maps the measured ones to seconds (an overhead point: its three parts,
    specviz.measure.calibrate.measure_overhead)."""

    def __init__(self, target, draft_name: str, grid: dict, prefix_len: int, repeats: int,
                 note: Callable[[str], None] | None = None):
        self.path = partial_path(target.name, draft_name, target.device, target.dtype)
        self.grid = {k: list(grid.get(k, [])) for k in KINDS}
        self.head = {"target": target.name, "draft": draft_name, "device": str(target.device),
                     "dtype": str(target.dtype).removeprefix("torch.")}
        # what else makes two points the same measurement (the format: what an overhead point holds)
        self.how = {"prefix_len": prefix_len, "repeats": repeats, "format": FORMAT}
        self.created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.done: dict[str, dict] = {k: {} for k in KINDS}
        self.resumed = self._take_earlier()
        if self.resumed:
            (note or (lambda m: print(m, file=sys.stderr)))(
                f"resuming an interrupted calibration: {self.resumed} timing point(s) kept from {self.path}")

    def _take_earlier(self) -> int:
        try:
            d = json.loads(self.path.read_text())
            if not d.get("partial") or any(d.get(k) != v for k, v in {**self.head, **self.how}.items()):
                return 0
            earlier = {"target": {(b, n): t for b, n, t in d["samples"]["target"]},
                       "draft": {(b, n): t for b, n, t in d["samples"]["draft"]},
                       "overhead": {int(b): t for b, t in d["overhead"].items()}}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):  # none, unreadable or another shape
            return 0
        for kind in KINDS:  # only points of this grid: a point is the same measurement in a bigger grid
            self.done[kind] = {p: earlier[kind][p] for p in self.grid[kind] if p in earlier[kind]}
        self.created = d.get("created") or self.created
        return self.count

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.done.values())

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.grid.values())

    def measure(self, kind: str, point, timer: Callable[[], float]) -> float:
        """The seconds of ``point``: kept from before, or measured now and written at once."""
        if point in self.done[kind]:
            return self.done[kind][point]
        seconds = timer()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(self.record({**self.done[kind], point: seconds}, kind), indent=1))
        self.done[kind][point] = seconds  # only once it is on disk: what the interrupted line counts is there
        return seconds

    def record(self, with_point: dict | None = None, kind: str | None = None) -> dict:
        done = {**self.done, kind: with_point} if kind else self.done
        return {**self.head, "target_cost": None, "draft_cost": None,
                "overhead": {str(b): t for b, t in done["overhead"].items()}, "residuals": {},
                "samples": {k: [[b, n, t] for (b, n), t in done[k].items()] for k in ("target", "draft")},
                "created": self.created, "partial": True, **self.how,
                "missing": {k: [list(p) if isinstance(p, tuple) else p for p in self.grid[k] if p not in done[k]]
                            for k in KINDS}}

    def finished(self) -> None:
        """The whole record is written: the partial one would only mislead the next run."""
        self.path.unlink(missing_ok=True)

    def kept_line(self) -> str:
        """What an interrupted calibration leaves, for the line after ``specviz: interrupted (SIGINT)``."""
        if not self.count:
            return "before the first timing point finished: nothing written"
        return (f"after {self.count} of {self.total} timing points: they are in {self.path}, marked partial (no cost "
                f"model is fitted on them); the same command again measures only the {self.total - self.count} left")
