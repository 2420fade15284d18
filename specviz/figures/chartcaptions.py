"""The sentence beside each chart of one run: what it shows, with its key number, readable without
the chart ("verify took 71% of the wall time"; "31% of verified slots produced nothing").

Each sentence is computed from the same function as its chart (specviz.analysis.runcounts,
specviz.analysis.explain.phase_totals, specviz.figures.charts' own helpers), so the two cannot disagree;
where a chart has nothing yet (no steps, no samples) its sentence says so. ``live_grid`` pairs the
Live page's charts with their sentences, in the page's order. Markdown strings; no Streamlit.
"""

from __future__ import annotations

import statistics

from specviz.analysis.explain import phase_totals
from specviz.analysis.runcounts import (accepted_grid, length_series, slot_use, step_seconds, telemetry_samples,
                                        token_latencies)
from specviz.figures import charts, queuecharts
from specviz.figures.charts import Decode

NO_STEPS = "No steps yet: this chart fills in as the run goes."


def _n(count: int, word: str) -> str:
    """'1 step', '3 steps'."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def timeline_sentence(trace: dict, max_steps: int = charts.TIMELINE_STEPS) -> str:
    """The step timeline: how long a step took on average, and the slowest step."""
    everything = trace.get("steps", [])
    steps = everything[-max_steps:]
    if not steps:
        return NO_STEPS
    secs = [step_seconds(s) for s in steps]
    slow = max(range(len(steps)), key=secs.__getitem__)
    shown = f"the last {len(steps)} of {len(everything)} steps" if len(steps) < len(everything) else _n(len(steps), "step")
    return (f"Each bar is one phase of one step: {shown}, **{sum(secs) / len(secs) * 1e3:.1f} ms per step** on "
            f"average; the slowest, step {steps[slow]['step']}, took {secs[slow] * 1e3:.1f} ms.")


def phases_sentence(trace: dict) -> str:
    """Where the time went: the largest phase and its share of the wall time, then the next one."""
    if not trace.get("steps"):
        return NO_STEPS
    tot = phase_totals(trace)
    top, nxt = sorted(tot, key=lambda p: -tot[p]["pct"])[:2]
    return (f"**{top.capitalize()} took {tot[top]['pct']:.0f}% of the wall time** ({tot[top]['s'] * 1e3:.0f} ms); "
            f"{nxt} came next with {tot[nxt]['pct']:.0f}%.")


def heatmap_sentence(trace: dict) -> str:
    """The acceptance heatmap: accepted draft tokens per row-step on average, and how many accepted none."""
    cells = [v for row in accepted_grid(trace, charts._row_indices(trace)) for v in row if v is not None]
    if not cells:
        return NO_STEPS
    kmax = max(s["k"] for s in trace["steps"])
    if kmax == 0:
        return f"No step drafted a token (k = 0: regular decoding), so all {_n(len(cells), 'row-step')} show 0."
    none = sum(v == 0 for v in cells)
    return (f"Each cell is one row-step: the {len(cells)} row-steps accepted **{sum(cells) / len(cells):.2f} drafted "
            f"tokens on average** (k up to {kmax}); {none} of them accepted none.")


def rate_sentence(trace: dict) -> str:
    """The acceptance rate per row: the row that accepted least and the one that accepted most."""
    rates = {i: r for i, r in charts.row_acceptance(trace).items() if r is not None}
    if not rates:
        return "No row has drafted a token yet, so there is no acceptance rate to show."
    lo, hi = min(rates, key=rates.get), max(rates, key=rates.get)
    if len(rates) == 1:
        return f"Row {lo}'s acceptance rate (accepted / drafted) is **{rates[lo]:.2f}**."
    overall = trace.get("summary", {}).get("acceptance_rate")
    return (f"**Row {lo} accepted least: acceptance rate {rates[lo]:.2f}**; row {hi} most: {rates[hi]:.2f}"
            + (f" (all rows {overall:.2f})." if overall is not None else "."))


def lengths_sentence(trace: dict) -> str:
    """Ragged lengths: the longest and the shortest row so far."""
    if not trace.get("steps"):
        return NO_STEPS
    final = {i: (ys[-1] if ys else 0) for i, (_, ys) in length_series(trace, charts._row_indices(trace)).items()}
    lo, hi = min(final, key=final.get), max(final, key=final.get)
    if len(final) == 1 or final[lo] == final[hi]:
        return f"Every row has **{final[hi]} output tokens** after {_n(len(trace['steps']), 'step')}."
    return (f"**Row {hi} is longest with {final[hi]} output tokens, row {lo} shortest with {final[lo]}**: rows "
            "accept different numbers of drafted tokens, so their lengths drift apart.")


def slots_sentence(trace: dict) -> str:
    """Verified slots: the share (and count) that produced nothing."""
    _, used, waste = slot_use(trace)
    total = sum(used) + sum(waste)
    if not total:
        return NO_STEPS
    return (f"**{100 * sum(waste) / total:.0f}% of verified slots produced nothing**: {sum(waste)} wasted slots of "
            f"{total} verified; the other {sum(used)} gave output tokens.")


def latency_sentence(trace: dict) -> str:
    """Per-token latency: the median over every output token, and the slowest row's median."""
    lat = {i: v for i, v in token_latencies(trace, charts._row_indices(trace)).items() if v}
    if not lat:
        return NO_STEPS
    med = statistics.median(t for v in lat.values() for t in v)
    rows = {i: statistics.median(v) for i, v in lat.items()}
    slow = max(rows, key=rows.get)
    return (f"**An output token took {med:.1f} ms at the median**"
            + (f"; row {slow}'s were slowest (median {rows[slow]:.1f} ms): a row that accepts less gets fewer "
               "tokens from each step." if len(rows) > 1 else "."))


def position_sentence(trace: dict) -> str:
    """Acceptance by draft position: the share at position 1 and at the last position."""
    pa = [p or 0 for p in trace.get("summary", {}).get("per_position_acceptance") or []]  # as the chart draws it
    if not pa:
        return "No drafted tokens yet, so no draft position to show."
    first = f"Of the row-steps that drafted, **{100 * pa[0]:.0f}% had their first drafted token accepted**"
    if len(pa) == 1:
        return first + "."
    return f"{first}; of those that drafted {len(pa)}, {100 * pa[-1]:.0f}% had all {len(pa)} accepted."


def utilization_sentence(trace: dict, util_labels: dict | None = None) -> str:
    """Utilization: the mean and peak of the sampled utilization, and the peak memory."""
    samples = telemetry_samples(trace)
    if not samples:
        return "No telemetry samples in this run, so there is no utilization to show."
    label = charts.util_label(samples, util_labels)
    util = [s["util_pct"] for s in samples if s.get("util_pct") is not None]
    mem = max((s.get("mem_bytes") or 0) / 2**30 for s in samples)
    head = (f"**{label[:1].upper()}{label[1:]} averaged {sum(util) / len(util):.0f}%** (peak {max(util):.0f}%) over "
            f"{_n(len(samples), 'sample')}" if util else f"{_n(len(samples), 'sample')}, none with a utilization")
    return f"{head}; memory peaked at {mem:.2f} GiB."


def race_caption(traces: dict[str, dict], until: float | None = None) -> str:
    """The race chart (charts.race, the same arguments): each run's output tokens and time, up to ``until``."""
    parts = []
    for name, tr in traces.items():
        t, n = charts.tokens_over_time(tr)
        done = [j for j, x in enumerate(t) if until is None or x <= until]
        tokens, secs = (n[done[-1]], t[done[-1]]) if done else (0, 0.0)
        parts.append(f"{name} {tokens}" + (f" in {secs:.2f} s" if until is None else ""))
    return (f"Output tokens at {until:.2f} s: " if until is not None else "All rows' output tokens: ") + ", ".join(parts) + "."


def lengths_view(trace: dict):
    """The ragged-lengths place on the grid: under a request queue the lane timeline, each with its sentence."""
    if queuecharts.is_queued(trace):
        return queuecharts.lane_timeline(trace), queuecharts.lane_timeline_sentence(trace)
    return charts.ragged_lengths(trace), lengths_sentence(trace)


def live_grid(trace: dict, decode: Decode | None, live: bool, util_labels: dict | None) -> list[tuple]:
    """The Live page's run charts in its order (left, right, left, ...): (key, figure, sentence) each."""
    return [("phase_timeline", charts.phase_timeline(trace), timeline_sentence(trace)),
            ("phase_totals", charts.phase_totals(trace), phases_sentence(trace)),
            ("acceptance_heatmap", charts.acceptance_heatmap(trace, decode, max_hover_steps=150 if live else 400),
             heatmap_sentence(trace)),
            ("acceptance_rate", charts.acceptance_rate_bars(trace), rate_sentence(trace)),
            ("ragged_lengths", *lengths_view(trace)),
            ("wasted_slots", charts.wasted_slots(trace), slots_sentence(trace)),
            ("token_latency", charts.token_latency(trace), latency_sentence(trace)),
            ("position_acceptance", charts.position_acceptance(trace), position_sentence(trace)),
            ("utilization", charts.utilization(trace, util_labels), utilization_sentence(trace, util_labels))]
