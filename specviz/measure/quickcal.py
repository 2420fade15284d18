"""The first run's calibration: a short, bounded `specviz calibrate` of a Live run's pair, so the first
prediction a newcomer sees stands on costs measured on this machine instead of assumed ones.

It is the calibrate command's own function (specviz.measure.calibrate.calibrate_config) on a small grid:
batch sizes 1, 2 and 4 (and the run's own batch size up to MAX_RUN_BATCH), draft lengths up to K_MAX (the
run's own up to MAX_RUN_K), over a cached prefix of PREFIX_LEN tokens, so the packaged 135M pair takes
well under a minute on two CPU cores. Its
record goes where the command's goes (specviz.analysis.costs.calibration_path: one file per target, draft,
device and dtype), and a record already there is kept while it stands: it is measured again only when
stale (specviz.analysis.costs.stale_reason: an older record format, or a model file of the pair changed
after it was measured). A wider `specviz calibrate` of the same pair is never replaced by a short one
unless it is stale.

Stopping it between two timing points keeps the points measured (specviz.measure.calpartial): the next
calibration of the pair measures only the rest. Runs in the device process only (it imports torch).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from specviz.analysis.costs import calibration_path, read_calibration, stale_reason
from specviz.measure.calibrate import calibrate_config, calibration_steps
from specviz.run import load_pair
from specviz.runconfig import RunConfig

BATCH_SIZES = (1, 2, 4)  # always measured: the cost model's fit needs a few batch sizes
MAX_RUN_BATCH = 8  # the run's own batch size joins them up to this
K_MAX = 4  # draft lengths measured: tokens per row 1 .. K_MAX + 1
MAX_RUN_K = 6  # the run's own draft length raises K_MAX up to this
PREFIX_LEN = 64  # cached tokens per row under each timed forward: a Live run's prompt and output (the command's: 128)


class StopCalibration(KeyboardInterrupt):
    """Raised between two timing points when the job was asked to stop (calibrate() then says what it kept)."""


def bounds(cfg: RunConfig) -> tuple[list[int], int]:
    """The short grid for a run of ``cfg``: (batch sizes, k_max)."""
    sizes = set(BATCH_SIZES)
    if cfg.batch_size <= MAX_RUN_BATCH:
        sizes.add(cfg.batch_size)
    return sorted(sizes), min(max(K_MAX, cfg.draft_length), MAX_RUN_K)


def model_files(target, proposer) -> list[Path]:
    """The local files of the pair's models (the target's folder or file, a draft model's); none for a
    hub model, whose files the pages cannot watch."""
    loaded = [target, getattr(proposer, "loaded", None), getattr(getattr(proposer, "model", None), "loaded", None)]
    found: list[Path] = []
    for m in filter(None, loaded):
        for where in {getattr(m, "spec", ""), getattr(getattr(m.model, "config", None), "_name_or_path", "")}:
            p = Path(str(where)).expanduser() if where else None
            if p is None or not p.exists():
                continue
            found.extend([p] if p.is_file() else sorted(f for f in p.iterdir() if f.is_file()))
    return found


def models_changed(target, proposer) -> float | None:
    """The newest mtime among the pair's model files (None when it has none on this disk)."""
    times = [f.stat().st_mtime for f in model_files(target, proposer)]
    return max(times) if times else None


def first_run_calibration(cfg: RunConfig, should_stop: Callable[[], bool] = lambda: False,
                          note: Callable[[str], None] = lambda msg: None, force: bool = False,
                          grid: tuple[list[int], int] | None = None) -> dict:
    """Calibrate the pair of a Live run of ``cfg`` when it has no calibration standing (or ``force``).
    ``grid``: (batch sizes, k_max), bounds(cfg) when None. Returns what happened, as plain data:
    ``status`` "fresh" (the record stands: nothing measured), "calibrated" or "stopped"; ``path``;
    ``why`` (the stale reason that started it); ``created``; ``seconds``; ``kept`` (a stopped one's points)."""
    target, proposer = load_pair(cfg)
    path = calibration_path(target.name, getattr(proposer, "name", "none"), target.device, target.dtype)
    existing = read_calibration(path)
    why = stale_reason(existing, models_changed(target, proposer))
    out = {"path": str(path), "why": why, "kept": None}
    if why is None and not force:
        return {**out, "status": "fresh", "created": existing.created, "seconds": 0.0}
    sizes, k_max = grid or bounds(cfg)
    total = calibration_steps(proposer, sizes, k_max)
    note(f"calibrating: {why or 'asked to measure again'}; {total} timing points (batch sizes "
         f"{', '.join(map(str, sizes))}; k up to {k_max}), then the engine's overhead per step")
    t0, done = time.perf_counter(), [0]

    def progress(_total: int):
        def tick() -> None:
            done[0] += 1
            note(f"calibrating: timing point {done[0]} of {total}" if done[0] < total else
                 f"calibrating: {total} timing points done; timing the engine's overhead per step "
                 f"({2 * len(sizes)} short runs: speculative and regular at each batch size)")
            if should_stop():
                raise StopCalibration()
        return tick

    if should_stop():
        return {**out, "status": "stopped", "created": None, "seconds": 0.0}
    try:
        cal, written = calibrate_config(cfg, sizes, k_max, PREFIX_LEN, progress)
    except StopCalibration as e:
        return {**out, "status": "stopped", "created": None, "seconds": time.perf_counter() - t0,
                "kept": getattr(e, "kept", None)}
    return {**out, "path": str(written), "status": "calibrated", "created": cal.created,
            "seconds": time.perf_counter() - t0}
