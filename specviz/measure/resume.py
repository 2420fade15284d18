"""A sweep that is interrupted keeps its finished cells and resumes where it stopped.

Each finished cell is written at once (atomically) to ``sweep.resume.json`` beside sweep.csv,
under a key made of every argument that changes what a cell measures. Re-run with the same
arguments, the sweep takes those cells as done and measures only the rest; with other
arguments the file is ignored (and replaced as the new sweep goes). A sweep that finishes
removes it, so the next run measures afresh.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
from pathlib import Path

from specviz.common import write_atomic

RESUME_FILE = "sweep.resume.json"


def sweep_key(cfg, repeats: int, recalibrate: bool) -> dict:
    """What makes two sweeps' cells the same measurement: the run config (batch size and draft
    length are per cell), the prompts (hashed), repeats and --recalibrate."""
    d = dataclasses.asdict(cfg)
    for per_cell in ("batch_size", "draft_length", "prompts"):
        d.pop(per_cell)
    d["prompts_sha256"] = hashlib.sha256(json.dumps(cfg.prompts).encode()).hexdigest()
    return {"config": d, "repeats": repeats, "recalibrate": recalibrate}


def resume_path(out_dir) -> Path:
    return Path(out_dir).expanduser() / RESUME_FILE


def load_cells(out_dir, key: dict) -> dict[tuple[int, int], dict]:
    """The finished cells of an interrupted sweep with the same key, by (batch size, draft length)."""
    try:
        saved = json.loads(resume_path(out_dir).read_text())
    except (OSError, ValueError):  # none yet, or unreadable: start from nothing
        return {}
    if not isinstance(saved, dict) or saved.get("key") != json.loads(json.dumps(key)):
        return {}
    return {(c["batch_size"], c["draft_length"]): c for c in saved.get("cells", [])}


def other_sweep(out_dir, key: dict) -> tuple[int, list[str]] | None:
    """An interrupted sweep with other settings in ``out_dir`` (which this one will replace): its
    finished cells and the settings that differ, or None."""
    try:
        saved = json.loads(resume_path(out_dir).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict) or not saved.get("cells"):
        return None
    ours, theirs = json.loads(json.dumps(key)), saved.get("key") or {}
    if theirs == ours:
        return None
    flat = lambda d: {**{k: v for k, v in d.items() if not isinstance(v, dict)},  # noqa: E731
                      **{s: v2 for v in d.values() if isinstance(v, dict) for s, v2 in v.items()}}
    ours, theirs = flat(ours), flat(theirs)  # the run config's own fields, not just "config"
    differ = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
    return len(saved["cells"]), differ


def save_cells(out_dir, key: dict, cells: list[dict]) -> Path:
    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    return write_atomic(out / RESUME_FILE, json.dumps({"key": key, "cells": cells}))


def clear(out_dir) -> None:
    resume_path(out_dir).unlink(missing_ok=True)


def write_cells_csv(out_dir, cells: list[dict]) -> Path:
    """sweep.csv with the cells finished so far (an interrupted sweep has no summary to go with it)."""
    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=list(cells[0]))
    w.writeheader()
    w.writerows(cells)
    return write_atomic(out / "sweep.csv", buf.getvalue())
