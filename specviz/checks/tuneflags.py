"""``specviz tune``'s flags, beside their checks (specviz.checks runs ``check_tune_args`` in its pass, after the
number bounds of specviz.bounds; tests/checks/test_checks.py walks the flags against TUNE_CHECKED and TUNE_NO_CHECK).
It loads no model: every check here is cheap, and a file's contents are read once, by the command."""

from __future__ import annotations

import argparse
from pathlib import Path

from specviz.analysis.costs import read_calibration
from specviz.analysis.engineconfig import ENGINES, parse_version
from specviz.analysis.tune import K_MAX
from specviz.common import MissingResource, SpecvizError

TUNE_K_MAX = 32  # past this the calibrated verify cost is an extrapolation of an extrapolation
TUNE_CHECKED = {
    "trace": "a file that exists, not a folder; one of --trace, --sweep, --metrics-url",
    "sweep": "a folder holding sweep.csv",
    "metrics_url": "an http(s) address (host:port is enough); with it, costs from --calibration or entered numbers",
    "calibration": "a calibration record; not with entered numbers",
    "vllm_version": "a version number (0.24.0, v0.11.1rc2, ...)",
}
TUNE_NO_CHECK = {
    "engine": "choices=: argparse refuses anything else in one line (OneLineParser)",
    "as_json": "a switch: both values are valid",
}
# The numbers (window, target_step_ms, draft_cost_ratio, knee_tokens, serve_batch, k_max, batch_sizes) are
# bounded in specviz.bounds; --target-step-ms and --draft-cost-ratio are also checked to come together.


def add_tune_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("acceptance: one of")
    g.add_argument("--trace", metavar="TRACE.json", help="a trace of a speculative run (specviz run --out)")
    g.add_argument("--sweep", metavar="DIR", help="a finished sweep's folder (sweep.csv and sweep.json)")
    g.add_argument("--metrics-url", metavar="URL",
                   help="a vLLM server that speculates: its /metrics counters over --window seconds (put load on it)")
    g.add_argument("--window", type=float, default=30.0, metavar="S", help="seconds between the two /metrics reads")
    g = p.add_argument_group("costs (unset: the trace's or sweep's pair calibration)")
    g.add_argument("--calibration", metavar="FILE", help="a calibration record (specviz calibrate), from any machine")
    g.add_argument("--target-step-ms", type=float, metavar="MS", help="entered costs: one target decode step")
    g.add_argument("--draft-cost-ratio", type=float, metavar="C",
                   help="entered costs: a draft forward over a target forward (~0 for n-gram drafts)")
    g.add_argument("--knee-tokens", type=float, default=64.0, metavar="N",
                   help="entered costs: tokens per forward (batch x tokens per row) a forward takes as long as one")
    g = p.add_argument_group("recommendation and settings")
    g.add_argument("--engine", choices=ENGINES, default="vllm", help="whose settings to write")
    g.add_argument("--batch-sizes", default="1,2,4,8,16,32,64", metavar="LIST",
                   help="comma-separated batch sizes (concurrent requests) to recommend k for")
    g.add_argument("--serve-batch", type=int, metavar="B",
                   help="the batch size a single-k setting is for (unset: the server's median running requests, "
                        "the trace's batch size, or the sweep's middle one)")
    g.add_argument("--k-max", type=int, metavar="K",
                   help=f"longest draft considered, at most {TUNE_K_MAX}; past the longest measured one it extrapolates "
                        f"with the pooled alpha (unset: the longest measured, at most {K_MAX})")
    g.add_argument("--draft", metavar="SPEC", help="the draft the settings name: ngram[:N], suffix or a model (hub id "
                                                   "or folder) (unset: the trace's or sweep's)")
    g.add_argument("--vllm-version", metavar="V",
                   help="the vLLM the settings are for (unset: the server's /version with --metrics-url)")
    g = p.add_argument_group("output")
    g.add_argument("--json", dest="as_json", action="store_true", help="print the whole answer as one JSON object")


def _exists(path: str, flag: str) -> Path:
    p = Path(path).expanduser()
    if not p.exists():
        raise MissingResource(f"{flag} {path}: no such file or folder")
    return p


def check_tune_args(a) -> None:
    from specviz.peers.metrics import metrics_url  # checks sit above peers (tests/test_layout.py)
    from specviz.peers.tunecmd import NO_COSTS

    given = [flag for flag, v in (("--trace", a.trace), ("--sweep", a.sweep), ("--metrics-url", a.metrics_url)) if v]
    if not given:
        raise SpecvizError("give one of --trace TRACE.json, --sweep DIR or --metrics-url URL: where the acceptance "
                           "comes from")
    if len(given) > 1:
        raise SpecvizError(f"give only one of --trace, --sweep and --metrics-url (got {' and '.join(given)})")
    if a.trace and _exists(a.trace, "--trace").is_dir():
        raise SpecvizError(f"--trace {a.trace} is a directory: give a trace file (specviz run --out)")
    if a.sweep:
        folder = _exists(a.sweep, "--sweep")
        if not (folder / "sweep.csv").is_file():
            raise SpecvizError(f"--sweep {a.sweep} is not a sweep folder (no sweep.csv; specviz sweep --out-dir writes one)")
    if a.metrics_url:
        metrics_url(a.metrics_url)
    entered = (a.target_step_ms is not None, a.draft_cost_ratio is not None)
    if any(entered) and not all(entered):
        raise SpecvizError("--target-step-ms and --draft-cost-ratio go together: give both")
    if a.calibration:
        if any(entered):
            raise SpecvizError("give --calibration or entered costs (--target-step-ms, --draft-cost-ratio), not both")
        if _exists(a.calibration, "--calibration").is_dir() or read_calibration(Path(a.calibration).expanduser()) is None:
            raise SpecvizError(f"--calibration {a.calibration} is not a calibration record (specviz calibrate writes them "
                               "in ~/.cache/specviz/calibration)")
    if a.metrics_url and not a.calibration and not any(entered):
        raise MissingResource(NO_COSTS)
    if a.k_max is not None and a.k_max > TUNE_K_MAX:
        raise SpecvizError(f"--k-max {a.k_max}: tune considers drafts of at most {TUNE_K_MAX} tokens")
    if a.vllm_version is not None and parse_version(a.vllm_version) is None:
        raise SpecvizError(f"--vllm-version {a.vllm_version!r} is not a version number (e.g. 0.24.0)")
    if a.draft is not None:
        if a.draft.strip() in ("", "none"):
            raise SpecvizError("--draft names the draft the settings are for: ngram[:N], suffix or a model (none drafts "
                               "nothing)")
        if a.draft.startswith("ngram:"):
            n = a.draft.partition(":")[2]
            if not n.isdigit() or not 1 <= int(n) <= 64:
                raise SpecvizError(f"--draft ngram:N wants N from 1 to 64 (got {a.draft!r})")
