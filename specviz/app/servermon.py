"""The Server page's logic, without Streamlit: watch a vLLM server's /metrics (one scrape per poll),
turn the scrapes into time series of what speculative decoding did, and put the analytic model's
prediction beside them (for the observed alpha, the calibrated or entered costs, and the batch sizes
the server ran). No model is loaded: everything comes from the server's counters.
"""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path
from typing import Callable

from specviz.analysis import analytic as an
from specviz.analysis.costs import read_calibration
from specviz.analysis.engineconfig import Draft, draft_of
from specviz.app import exposure
from specviz.common import SpecvizError, cache_dir
from specviz.peers import metrics, tune

DEFAULT_URL = "http://127.0.0.1:8000"  # where `python -m specviz vllm serve` listens unless told otherwise
HISTORY = 900  # scrapes kept per watch: 15 minutes at one a second
ANSWERED_KEY = "server_answered"  # session key: the /metrics addresses that answered at least once
UNREACHABLE = "cannot reach"  # how specviz.peers.fetch's error starts when nothing listens at the address
K_MAX = 16


@dataclasses.dataclass
class Watch:
    """One server being watched: its scrapes, oldest first, and what went wrong last."""

    url: str
    scrapes: list = dataclasses.field(default_factory=list)  # metrics.Scrape, at most HISTORY
    error: str | None = None  # the last poll's problem, one line; None when it read fine
    restarted: bool = False  # the counters went down at the last poll: the history started again
    version: str | None = None  # from the server's /version, when it has one
    polls: int = 0


def page_scrape(url: str) -> metrics.Scrape:
    """The page's scrape: on an exposed bind only the SPECVIZ_SERVER_ALLOW hosts (specviz.app.exposure)."""
    return metrics.scrape(url, allow=exposure.server_fetch_allow(exposure.exposed_now()))


def page_version(url: str) -> str | None:
    return metrics.server_version(url, allow=exposure.server_fetch_allow(exposure.exposed_now()))


def plain(text, limit: int = 80) -> str:
    """A server's text (a version, a model name) made inert for Markdown: every ASCII punctuation mark
    backslash-escaped (no links, images, HTML or formulas), control characters as spaces, cut at ``limit``."""
    text = re.sub(r"[\x00-\x1f\x7f]", " ", str(text))[:limit]
    return re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", text)


def poll(watch: Watch, fetch: Callable = page_scrape, version: Callable = page_version) -> None:
    """Scrape once and append; a failed scrape sets ``watch.error`` and keeps the history."""
    watch.polls += 1
    try:
        s = fetch(watch.url)
    except SpecvizError as e:
        watch.error = str(e)
        return
    watch.error = None
    watch.restarted = bool(watch.scrapes) and metrics.counters_went_down(watch.scrapes[-1], s)
    if watch.restarted:
        watch.scrapes.clear()
    if not watch.scrapes and watch.version is None:
        watch.version = version(watch.url)
    watch.scrapes.append(s)
    del watch.scrapes[:-HISTORY]


def watch_for(state, url: str, key: str = "server_watch") -> Watch:
    """This session's Watch of ``url`` (a new one when the address changed)."""
    w = state.get(key)
    if w is None or w.url != url:
        w = state[key] = Watch(url=url)
    return w


def answered_before(state, watch: Watch) -> bool:
    """Whether a scrape of ``watch.url`` ever succeeded in this session (under this Watch or an earlier one)."""
    answered = state.setdefault(ANSWERED_KEY, set())
    if watch.scrapes:
        answered.add(watch.url)
    return watch.url in answered


def unreachable(watch: Watch) -> bool:
    """The last poll found nothing listening (refused, no route, no such host), not a wrong answer."""
    return bool(watch.error) and watch.error.startswith(UNREACHABLE)


def stopped_message(watch: Watch, now: float | None = None) -> str:
    """What to say when an address that answered before fails now (Markdown: the error is escaped)."""
    since = ""
    if watch.scrapes:
        since = f" {max(0.0, (time.monotonic() if now is None else now) - watch.scrapes[-1].t):.0f} s ago"
    what = ("stopped answering: the server stopped, restarted elsewhere or its port closed"
            if unreachable(watch) else "answered before and fails now")
    return (f"The server at {plain(watch.url, 300)} {what} (last answered{since or ' earlier in this session'}): "
            f"{plain(watch.error, 300)}. The numbers and charts below are from before; start it again (or fix the "
            "address) and the page carries on by itself.")


# ---- scrapes -> time series ---------------------------------------------------------------------------

def series(scrapes: list, window: int = 1) -> list[dict]:
    """One row per scrape after the first: what happened over the last ``window`` scrape intervals.

    Keys: t (seconds since the first scrape), and the Delta's acceptance_rate, mean_acceptance_length,
    alpha, throughput (output tokens/s), running, waiting, per_position ([k] or None); None where the
    server does not report it or nothing was drafted in the window."""
    out = []
    if not scrapes:
        return out
    t0 = scrapes[0].t
    for i in range(1, len(scrapes)):
        d = metrics.delta(scrapes[max(0, i - max(1, window))], scrapes[i])
        out.append({"t": scrapes[i].t - t0, "acceptance_rate": d.acceptance_rate,
                    "mean_acceptance_length": d.mean_acceptance_length, "alpha": d.alpha,
                    "throughput": d.throughput, "running": d.running, "waiting": d.waiting,
                    "per_position": d.acceptance_per_position})
    return out


def since_attached(scrapes: list) -> metrics.Delta | None:
    """Everything from the first scrape to the last (None before there are two)."""
    return metrics.delta(scrapes[0], scrapes[-1]) if len(scrapes) >= 2 else None


def observed_batch_sizes(scrapes: list) -> list[int]:
    """The distinct numbers of running requests the server reported (> 0), smallest first."""
    return sorted({int(round(s.gauges["running"])) for s in scrapes if s.gauges.get("running", 0) >= 0.5})


# ---- costs: calibrated (specviz calibrate) or entered ---------------------------------------------------

def entered_costs(target_step_s: float, cost_ratio: float, knee_tokens: float, overhead_s: float = 0.0) -> an.Costs:
    """A roofline from four numbers: a target forward costs ``target_step_s`` up to ``knee_tokens``
    tokens (memory-bound), linearly more past it; a draft forward costs ``cost_ratio`` of that."""
    if target_step_s <= 0 or knee_tokens <= 0 or cost_ratio < 0 or overhead_s < 0:
        raise SpecvizError("costs must be positive: target step time and knee > 0, c and overhead >= 0")
    target = an.CostModel(t_fixed=0.0, t_mem=target_step_s, t_token=target_step_s / knee_tokens)
    draft = an.CostModel(t_fixed=0.0, t_mem=cost_ratio * target_step_s, t_token=cost_ratio * target_step_s / knee_tokens)
    return an.Costs(target=target, draft=draft, overhead=overhead_s)


def calibration_files(folder: Path | None = None) -> dict[str, Path]:
    """The calibrations `python -m specviz calibrate` wrote: label (target, draft, device, dtype) -> file."""
    folder = folder or cache_dir() / "calibration"
    if not folder.is_dir():
        return {}
    return {p.stem.replace("__", " · "): p for p in sorted(folder.glob("*.json"))}


def calibrated_costs(path: Path) -> Callable[[int], an.Costs]:
    """costs_at(b) from a calibration file (its overhead interpolated at b)."""
    cal = read_calibration(Path(path))
    if cal is None:
        raise SpecvizError(f"{path} is not a readable calibration")
    return cal.costs


# ---- the model beside the measurement -------------------------------------------------------------------

def prediction(d: metrics.Delta | None, costs_at: Callable[[int], an.Costs], batch_sizes: list[int],
               k_max: int = K_MAX) -> dict | None:
    """The analytic model at the observed alpha and k: expected output tokens per draft (to compare with
    the measured mean acceptance length), acceptance per position alpha^(j+1), and per observed batch
    size b the predicted speedup at the server's k and the suggested k*(b). None when there is no
    alpha yet (nothing drafted, or no spec decoding)."""
    if d is None or d.alpha is None or d.k is None:
        return None
    alpha, k = min(1.0, max(0.0, d.alpha)), d.k
    rows = []
    for b in batch_sizes or [1]:
        cs = costs_at(b)
        speed = lambda kk: an.speedup_batch(b, kk, alpha, cs.target, cs.draft, cs.overhead, cs.regular_overhead)  # noqa: E731
        best = an.optimal_k(b, alpha, cs, k_max)
        rows.append({"batch size b": b, "server's k": k, "predicted speedup at k": speed(k),
                     "suggested k*(b)": best, "predicted speedup at k*": speed(best)})
    return {"alpha": alpha, "k": k, "expected_length": an.expected_tokens_per_step(alpha, k),
            "per_position": [alpha ** (j + 1) for j in range(k)], "rows": rows}


# ---- the recommendation from the counters since attached -----------------------------------------------

DRAFT_KINDS = {"ngram": "n-grams (prompt lookup)", "suffix": "suffix decoding", "model": "a draft model"}


def server_draft(kind: str, model: str = "") -> Draft:
    """The draft the settings name: /metrics does not say which the server runs, so the page asks."""
    if kind == "model":
        return Draft("model", model.strip() or "DRAFT_MODEL")
    return draft_of(kind if kind in ("ngram", "suffix") else "ngram")


def tune_inputs(total: metrics.Delta, scrapes: list, url: str, costs_at: Callable[[int], an.Costs], costs_note: str,
                draft: Draft, version: str | None = None) -> tune.Inputs | None:
    """``specviz tune``'s inputs from a server's counters since attached: acceptance per position, the costs
    chosen on the page, the batch sizes it ran and its median running requests for a single-k setting. None
    while nothing was drafted (or the server does not speculate)."""
    if not total.has_spec or not total.drafts:
        return None
    acc, counts = tune.vllm_acceptance(total)
    served = tune.median_batch([s.gauges.get("running") for s in scrapes]) or 1
    return tune.Inputs(acceptance=acc, counts=counts, costs_at=costs_at, costs_note=costs_note, draft=draft,
                       batch_sizes=observed_batch_sizes(scrapes) or [1], serve_batch=served, vllm_version=version,
                       source={"kind": "vllm", "where": url, "drafts": total.drafts, "k": total.k,
                               "median_running": served}, notes=total.notes())
