"""The calibration record: fitted target and draft cost models, the engine's per-step overhead,
and where `python -m specviz calibrate` keeps it (one file per target, draft, device and dtype).
Records of random-weight models (target ``synthetic:...``, cost side only) are found by
:func:`synthetic_calibrations` in the cache and in the GPU script's results under bench/results."""

from __future__ import annotations

import calendar
import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from specviz.analysis.analytic import CostModel, Costs
from specviz.common import cache_dir

SYNTHETIC = "synthetic:"  # the name prefix of random-weight models (specviz.models.synthetic)
RESULTS_DIR = Path(__file__).resolve().parents[2] / "bench" / "results"  # where bench/gpu_check.sh's results are kept
# The record's format: raise it when what a record's numbers mean changes, and every record of an older
# format is stale (measured again on the pair's next Live run). Records from before the field are format 1.
# Format 2: ``overhead`` is the speculative step's work outside every forward, measured directly (format 1:
# the residual of the whole step after the fitted forwards, which the verify's run-to-run noise swamped), and
# the record adds the regular step's own overhead and the draft loop's work per draft forward. Format 3: the
# same fields; bf16 on an AVX2 CPU now runs through specviz.models.bf16linear (a verified token costs a
# fraction of what it did), so every older record's costs are the old path's. Format 4: the same fields; the
# lean forward's norms, rotary, MLP activation and attention run fused there too (a bf16 step's fixed cost
# fell), so format 3's costs are the unfused path's.
FORMAT = 4


@dataclasses.dataclass
class Calibration:
    target: str
    draft: str
    device: str
    dtype: str
    target_cost: CostModel
    draft_cost: CostModel
    overhead: dict  # batch size -> seconds of a speculative step's engine work outside the forwards
    residuals: dict  # model -> relative residuals of the fit
    samples: dict  # model -> [(b, n, seconds)]
    created: str = ""  # when it was measured (UTC, ISO 8601): a stale calibration misleads every prediction
    other_load: float | None = None  # cores other processes kept busy meanwhile (specviz.measure.hostload)
    cpus: int | None = None  # the machine's cores, for that number's scale
    format: int = 1  # FORMAT when it was written (records from before the field: 1)
    regular_overhead: dict | None = None  # batch size -> seconds of a regular step outside its forward
    draft_overhead: dict | None = None  # batch size -> seconds the draft loop adds to each draft forward

    def overhead_at(self, b: int) -> float:
        return _interp(self.overhead, b)

    def costs(self, b: int) -> Costs:
        """The cost model at batch size b. The draft's forward is charged as the engine's draft loop runs
        it (the fitted forward plus the loop's own work per forward: picking the token, feeding it back);
        a record without those parts (format 1) charges regular steps the speculative step's overhead."""
        draft = self.draft_cost
        if self.draft_overhead:
            draft = dataclasses.replace(draft, t_fixed=draft.t_fixed + _interp(self.draft_overhead, b))
        regular = _interp(self.regular_overhead, b) if self.regular_overhead else None
        return Costs(target=self.target_cost, draft=draft, overhead=self.overhead_at(b), regular_overhead=regular)

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        for key in ("overhead", "regular_overhead", "draft_overhead"):
            if d[key] is not None:
                d[key] = {str(k): v for k, v in d[key].items()}
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Calibration":
        d = dict(d)
        d["target_cost"] = CostModel(**d["target_cost"])
        d["draft_cost"] = CostModel(**d["draft_cost"])
        return cls(**d)


def _interp(by_batch: dict, b: int) -> float:
    """A per-batch-size number at b: linear between the measured sizes, flat beyond them."""
    keys = sorted(int(x) for x in by_batch)
    ys = [by_batch[str(x)] if str(x) in by_batch else by_batch[x] for x in keys]
    return float(np.interp(b, np.array(keys, float), np.array(ys, float)))


def calibration_path(target_name: str, draft_name: str, device, dtype) -> Path:
    dtype = str(dtype) if str(dtype).startswith("torch.") else f"torch.{dtype}"  # a trace records "bfloat16"
    safe = lambda s: "".join(c if c.isalnum() or c in "-_." else "_" for c in str(s))  # noqa: E731
    return cache_dir() / "calibration" / f"{safe(target_name)}__{safe(draft_name)}__{safe(device)}__{safe(dtype)}.json"


def partial_path(target_name: str, draft_name: str, device, dtype) -> Path:
    """Where an interrupted calibration keeps the points it measured (specviz.measure.calpartial): a
    folder below the records, so nothing that lists or globs them takes it for a whole calibration."""
    p = calibration_path(target_name, draft_name, device, dtype)
    return p.parent / "partial" / p.name


def partial_note(target, proposer) -> str:
    """One sentence about this pair's partial calibration when one is kept, else ""."""
    p = partial_path(target.name, getattr(proposer, "name", "none"), target.device, target.dtype)
    try:
        d = json.loads(p.read_text())
        kept = len(d["samples"]["target"]) + len(d["samples"]["draft"]) + len(d["overhead"])
        left = sum(len(v) for v in d["missing"].values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ""
    return (f"an interrupted calibration kept {kept} timing point(s) in {p}, {left} still missing: it is "
            "not used until the same "
            "`python -m specviz calibrate` command finishes it")


def load_calibration(target, proposer) -> Calibration | None:
    """The calibration of this loaded pair on its device and dtype, or None."""
    draft = getattr(proposer, "name", "none")
    return read_calibration(calibration_path(target.name, draft, target.device, target.dtype))


def target_cost(target) -> CostModel | None:
    """The target's forward cost on its device and dtype from the newest current-format record of any pair
    with this target (a model-free draft has no pair of its own to calibrate), or None."""
    pattern = calibration_path(target.name, "DRAFT", target.device, target.dtype).name.replace("__DRAFT__", "__*__")
    found = [c for c in map(read_calibration, (cache_dir() / "calibration").glob(pattern))
             if c is not None and c.format == FORMAT and c.target == target.name]
    return max(found, key=lambda c: c.created).target_cost if found else None


def trace_calibration(trace: dict | None) -> Calibration | None:
    """The calibration of the pair, device and dtype a trace was made with, or None (never another
    pair's: a prediction for the wrong pair misleads more than none)."""
    cfg = (trace or {}).get("config", {})
    names = [cfg.get("target_name"), cfg.get("draft_name"), cfg.get("device"), cfg.get("dtype")]
    if None in names:
        return None
    return read_calibration(calibration_path(*names))


def read_calibration(p: Path) -> Calibration | None:
    """The calibration record in ``p``, or None when there is none, it does not parse, or it is a partial
    one (``"partial": true``: an interrupted run's points, no fit yet; a cost model fitted on some batch
    sizes and no overhead would mislead every prediction past them)."""
    try:  # the name comes from a trace's config: one too long for the file system is no record either
        if not p.is_file():
            return None
        d = json.loads(p.read_text())
        return None if d.get("partial") else Calibration.from_json(d)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def stale_reason(cal: Calibration | None, models_changed: float | None = None) -> str | None:
    """Why ``cal`` should be measured again, or None while it stands: there is none; its format is not
    this specviz's (FORMAT); or a file of the pair's models changed after it was measured (``models_changed``:
    the newest such file's mtime, seconds since the epoch; None when unknown, e.g. a hub model)."""
    if cal is None:
        return "no calibration of this pair on this device and dtype yet"
    if cal.format != FORMAT:
        return f"its record is format {cal.format}, this specviz writes format {FORMAT}"
    measured = created_epoch(cal)
    if models_changed is not None and measured is not None and models_changed >= measured + 1:  # whole seconds
        return (f"a model file of the pair changed ({time.strftime('%Y-%m-%d %H:%M', time.gmtime(models_changed))} "
                f"UTC) after it was measured ({cal.created})")
    return None


def created_epoch(cal: Calibration) -> float | None:
    """When ``cal`` was measured, in seconds since the epoch (None for a record with no readable date)."""
    try:
        return float(calendar.timegm(time.strptime(cal.created, "%Y-%m-%dT%H:%M:%SZ")))
    except (TypeError, ValueError):
        return None


def synthetic_calibrations(folders=None) -> list[tuple[Path, Calibration]]:
    """(file, record) of every cost-side calibration of random-weight models, newest first: the cache's
    (``synthetic_*.json``) and those a GPU run left in bench/results (``calibration-synthetic*.json``,
    one folder down). The same measurement found in both places counts once."""
    folders = [cache_dir() / "calibration", RESULTS_DIR] if folders is None else [Path(f) for f in folders]
    found: dict = {}
    for folder in folders:
        if not folder.is_dir():
            continue
        for p in sorted([*folder.glob("synthetic_*.json"), *folder.glob("calibration-synthetic*.json"),
                         *folder.glob("*/calibration-synthetic*.json")]):
            cal = read_calibration(p)
            if cal is not None and cal.target.startswith(SYNTHETIC):
                found.setdefault((cal.target, cal.draft, cal.device, cal.dtype, cal.created), (p, cal))
    return sorted(found.values(), key=lambda pc: pc[1].created, reverse=True)
