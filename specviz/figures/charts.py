"""Charts of one run: pure functions from a trace dict (specviz.analysis.trace format) to plotly
figures. Charts of the analytic model and of sweeps are in specviz.figures.modelcharts; the coloured
text, the definitions and the step explainer in specviz.figures.tokentext.

No Streamlit here: pages call these and draw the result. Every function accepts a partial
trace (a run still in progress) and an empty one. ``decode`` arguments map a list of token ids
to text (a tokenizer's decode); without one, ids are shown. Token roles (accepted / recovered /
bonus) follow specviz.analysis.explain.token_kind.
"""

from __future__ import annotations

import html
import re
from typing import Callable, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.analysis import acceptance
from specviz.analysis.explain import phase_totals as _phase_totals, token_kind
from specviz.analysis.runcounts import (accepted_grid, length_series, slot_use, step_seconds, telemetry_samples,
                                        token_latencies)
from specviz.analysis.trace import PHASES

PHASE_COLORS = {"prefill": "#7f7f7f", "draft": "#636efa", "verify": "#ef553b", "accept": "#00cc96",
                "bookkeeping": "#ab63fa", "other": "#c7c7c7"}
KIND_COLORS = {"accepted": "#2ca02c", "recovered": "#ff7f0e", "bonus": "#1f77b4"}
# Rows get these in order (D3's ten: no two alike, unlike the theme's paired light/dark shades).
ROW_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
              "#bcbd22", "#17becf")
Decode = Callable[[list[int]], str]


# ---- helpers -----------------------------------------------------------------------------------

def _ids(tokens: Sequence[int]) -> str:
    return " ".join(map(str, tokens))


SPECIAL = re.compile(r"<\|[^<>|\s]*\|>|</?s>")
END_NAMES = ("im_end", "endoftext", "eos", "s")


def special_label(match: str) -> str:
    """What a reader sees for a special token's raw text: <|im_end|> -> ⟨end of turn⟩."""
    name = match.strip("<>|/")
    return "⟨end of turn⟩" if name in END_NAMES else f"⟨{name}⟩"


def visible(text: str) -> str:
    """Decoded text with its special tokens (<|im_end|>, ...) replaced by readable markers."""
    return SPECIAL.sub(lambda m: special_label(m.group(0)), text)


def _text(tokens: Sequence[int], decode: Decode | None) -> str:
    if not tokens:
        return ""
    return visible(decode(list(tokens))) if decode is not None else _ids(tokens)


def _row_indices(trace: dict) -> list[int]:
    if trace.get("sequences"):
        return [s["index"] for s in trace["sequences"]]
    return sorted({r["index"] for s in trace.get("steps", []) for r in s["rows"]})


def int_ticks(top: float) -> dict:
    """Axis settings with integer ticks only, about 10 of them from 0 to ``top``."""
    step = next(d for d in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10**4, 10**5, 10**6)
                if d * 10 >= max(top, 1))
    return {"tick0": 0, "dtick": step, "tickformat": "d"}


def style(fig: go.Figure, title: str, height: int, **layout) -> go.Figure:
    """Common layout: the title in its own band under the plotly toolbar (which sits in the top
    28 px of the figure, where it used to cover long titles), and room for it above the plot."""
    fig.update_layout(title={"text": title, "x": 0.0, "xanchor": "left", "y": 1.0, "yref": "container",
                             "yanchor": "top", "pad": {"t": 30}, "font": {"size": 15}},
                      height=height, margin={"l": 10, "r": 10, "t": 66, "b": 30}, **layout)
    return fig


def _empty(title: str, message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font={"size": 16})
    return style(fig, title, 260, xaxis={"visible": False}, yaxis={"visible": False})


def step_end(step: dict) -> float:
    """Seconds from the run's start to the end of this step (when its tokens are out)."""
    return step["t_start"] + step_seconds(step)


def _max_step(steps: list[dict]) -> int:
    return max((s["step"] for s in steps), default=0)


def token_kinds(trace: dict) -> dict[int, list[tuple[int, str, int]]]:
    """Per row index: [(token id, kind, step)] in output order."""
    out: dict[int, list] = {i: [] for i in _row_indices(trace)}
    for s in trace.get("steps", []):
        for r in s["rows"]:
            if r["active"]:
                out.setdefault(r["index"], []).extend(
                    (t, token_kind(j, r["accepted"], r["drafted"], r.get("tree")), s["step"]) for j, t in enumerate(r["emitted"]))
    return out


def row_acceptance(trace: dict) -> dict[int, float | None]:
    """Per row: its acceptance rate over the run (acceptance.acceptance_rate; None if the row never drafted)."""
    drafted: dict[int, int] = {i: 0 for i in _row_indices(trace)}
    accepted = dict.fromkeys(drafted, 0)
    for s in trace.get("steps", []):
        for r in s["rows"]:
            if r["active"]:
                drafted[r["index"]] = drafted.get(r["index"], 0) + r["drafted"]
                accepted[r["index"]] = accepted.get(r["index"], 0) + r["accepted"]
    return {i: acceptance.acceptance_rate(accepted[i], drafted[i]) for i in drafted}


def tokens_over_time(trace: dict) -> tuple[list[float], list[int]]:
    """(t, cumulative output tokens of all rows) at each step's end."""
    t, n, total = [], [], 0
    for s in trace.get("steps", []):
        total += sum(len(r["emitted"]) for r in s["rows"] if r["active"])
        t.append(step_end(s))
        n.append(total)
    return t, n


def tokens_at(trace: dict, t: float) -> dict[int, list[int]]:
    """Per row: the output token ids emitted by time ``t`` (seconds since the run's start),
    replaying the recorded step timestamps."""
    out: dict[int, list[int]] = {i: [] for i in _row_indices(trace)}
    for s in trace.get("steps", []):
        if step_end(s) > t:
            break
        for r in s["rows"]:
            if r["active"]:
                out.setdefault(r["index"], []).extend(r["emitted"])
    return out


def run_duration(trace: dict) -> float:
    steps = trace.get("steps", [])
    return step_end(steps[-1]) if steps else 0.0


# ---- acceptance ----------------------------------------------------------------------------------

def acceptance_heatmap(trace: dict, decode: Decode | None = None, max_hover_steps: int = 400) -> go.Figure:
    """Sequences x steps, colour = accepted draft tokens; hover: drafted, accepted, output text.

    Hover text is built for the last ``max_hover_steps`` steps only (it dominates draw time).
    """
    title = "Acceptance per sequence and step: accepted draft tokens"
    steps = trace.get("steps", [])
    rows = _row_indices(trace)
    if not steps or not rows:
        return _empty(title, "no steps yet")
    pos = {i: n for n, i in enumerate(rows)}
    z = accepted_grid(trace, rows)  # the cells' numbers, which chartcaptions.heatmap_sentence states
    hover = [[""] * len(steps) for _ in rows]
    first_hover = max(0, len(steps) - max_hover_steps)
    for c, s in enumerate(steps[first_hover:], start=first_hover):
        for r in s["rows"]:
            if not r["active"] or r["index"] not in pos:
                continue
            drafted = r.get("draft_tokens")
            drafted_txt = f"<br>drafted: {html.escape(repr(_text(drafted, decode)))}" if drafted else ""
            hover[pos[r["index"]]][c] = (f"row {r['index']}, step {s['step']} (k={s['k']})<br>drafted {r['drafted']}, "
                                         f"accepted {r['accepted']}{drafted_txt}<br>output: "
                                         f"{html.escape(repr(_text(r['emitted'], decode)))}")
    kmax = max((s["k"] for s in steps), default=0)
    fig = go.Figure(go.Heatmap(
        z=z, x=[s["step"] for s in steps], y=[f"row {i}" for i in rows], text=hover,
        hovertemplate="%{text}<extra></extra>", colorscale="Viridis", zmin=0, zmax=max(kmax, 1),
        colorbar={"title": "accepted<br>tokens", "dtick": 1, "tickformat": "d"}, hoverongaps=False))
    return style(fig, title, max(260, 60 + 14 * len(rows)),
                 xaxis={"title": "step", **int_ticks(_max_step(steps))}, yaxis={"autorange": "reversed"})


def acceptance_rate_bars(trace: dict) -> go.Figure:
    """Per-sequence acceptance rate (accepted / drafted)."""
    title = "Acceptance rate per row (accepted / drafted)"
    rates = row_acceptance(trace)
    if not rates:
        return _empty(title, "no rows")
    idx = list(rates)
    fig = go.Figure(go.Bar(x=[f"row {i}" for i in idx], y=[rates[i] if rates[i] is not None else 0 for i in idx],
                           hovertemplate="%{x}: %{y:.2f}<extra></extra>", marker_color=KIND_COLORS["accepted"]))
    overall = trace.get("summary", {}).get("acceptance_rate")
    if overall is not None:
        fig.add_hline(y=overall, line_dash="dash", annotation_text=f"all rows {overall:.2f}")
    return style(fig, title, 280, yaxis={"title": "accepted / drafted", "range": [0, 1.05]})


def position_acceptance(trace: dict) -> go.Figure:
    """P(first j draft tokens accepted | drafted >= j), from the summary."""
    title = "Acceptance per position: share of drafts reaching position j whose first j tokens were accepted"
    pa = trace.get("summary", {}).get("per_position_acceptance") or []
    if not pa:
        return _empty(title, "no draft tokens")
    fig = go.Figure(go.Bar(x=list(range(1, len(pa) + 1)), y=[p or 0 for p in pa], marker_color=KIND_COLORS["accepted"]))
    return style(fig, title, 260, xaxis={"title": "draft position j", "dtick": 1, "tickformat": "d"},
                 yaxis={"title": "share accepted", "range": [0, 1.05]})


# ---- ragged lengths ----------------------------------------------------------------------------------

def ragged_lengths(trace: dict) -> go.Figure:
    """Each row's generated length after every step: rows diverge as acceptance differs."""
    title = "Ragged lengths: output tokens per row"
    steps = trace.get("steps", [])
    if not steps:
        return _empty(title, "no steps yet")
    series = length_series(trace, _row_indices(trace))
    if len(series) <= 16:
        data = [go.Scatter(x=xs, y=ys, mode="lines", name=f"row {i}",
                           line={"width": 2, "color": ROW_COLORS[n % len(ROW_COLORS)],
                                 "dash": ("solid", "dot")[n // len(ROW_COLORS) % 2]})
                for n, (i, (xs, ys)) in enumerate(series.items())]
    else:  # one trace with gaps: 64 separate traces cost ~5x more to build and draw
        x, y, text = [], [], []
        for i, (xs, ys) in series.items():
            x += list(xs) + [None]
            y += list(ys) + [None]
            text += [f"row {i}"] * len(xs) + [None]
        data = [go.Scatter(x=x, y=y, text=text, mode="lines", name="rows", line={"width": 1},
                           hovertemplate="%{text}: %{y} tokens<extra></extra>")]
    top = max((ys[-1] for _, ys in series.values() if ys), default=0)
    return style(go.Figure(data), title, 300, showlegend=len(series) <= 16,
                 xaxis={"title": "step", **int_ticks(_max_step(steps))}, yaxis={"title": "output tokens", **int_ticks(top)})


def wasted_slots(trace: dict) -> go.Figure:
    """Per step: verified slots that produced no output, sum over active rows of k - accepted
    ((k+1) slots verified, accepted + 1 tokens out)."""
    title = "Verified slots per step: output tokens vs wasted"
    steps = trace.get("steps", [])
    if not steps:
        return _empty(title, "no steps yet")
    x, used, waste = slot_use(trace)
    fig = go.Figure([go.Bar(x=x, y=used, name="output tokens", marker_color=KIND_COLORS["accepted"]),
                     go.Bar(x=x, y=waste, name="wasted slots", marker_color="#d62728")])
    return style(fig, title, 300, barmode="stack", xaxis={"title": "step", **int_ticks(_max_step(steps))},
                 yaxis={"title": "slots (tokens verified)", **int_ticks(max(u + w for u, w in zip(used, waste)))})


# ---- timing ----------------------------------------------------------------------------------------

TIMELINE_STEPS = 2000  # the step timeline draws the last this many steps (chartcaptions.timeline_sentence too)


def phase_timeline(trace: dict, max_steps: int = TIMELINE_STEPS) -> go.Figure:
    """Draft / verify / accept / bookkeeping of every step on one time axis (ms), one lane per phase."""
    title = "Step timeline: draft / verify / accept / bookkeeping"
    steps = trace.get("steps", [])[-max_steps:]
    if not steps:
        return _empty(title, "no steps yet")
    fig = go.Figure()
    prefill = trace.get("summary", {}).get("prefill_s")
    if prefill and len(steps) == len(trace["steps"]):
        fig.add_trace(go.Bar(y=["prefill"], x=[prefill * 1e3], base=[0], orientation="h", name="prefill",
                             marker_color=PHASE_COLORS["prefill"], hovertemplate="prefill %{x:.1f} ms<extra></extra>"))
    for p in PHASES:
        base, dur, text = [], [], []
        for s in steps:
            offset = s["t_start"] + sum(s.get(f"t_{q}", 0.0) for q in PHASES[:PHASES.index(p)])
            base.append(offset * 1e3)
            dur.append(s.get(f"t_{p}", 0.0) * 1e3)
            text.append(f"step {s['step']} k={s['k']}")
        fig.add_trace(go.Bar(y=[p] * len(steps), x=dur, base=base, orientation="h", name=p, text=text,
                             textposition="none", marker_color=PHASE_COLORS[p], marker_line_width=0,
                             hovertemplate="%{text}<br>" + p + " %{x:.2f} ms<extra></extra>"))
    return style(fig, title, 260, xaxis_title="ms since start", barmode="overlay", showlegend=False,
                 yaxis={"categoryorder": "array",
                        "categoryarray": ["bookkeeping", "accept", "verify", "draft", "prefill"]})


def phase_totals(trace: dict) -> go.Figure:
    """Time per phase over the whole run, as % of wall time (analysis.explain.phase_totals)."""
    title = "Where the time went: % of wall time per phase"
    if not trace.get("steps"):
        return _empty(title, "no steps yet")
    tot = _phase_totals(trace)
    names = [p for p in ("prefill", *PHASES, "other") if p in tot]
    fig = go.Figure(go.Bar(
        y=names, x=[tot[p]["pct"] for p in names], orientation="h",
        marker_color=[PHASE_COLORS[p] for p in names],
        text=[f"{tot[p]['pct']:.0f}% · {tot[p]['s'] * 1e3:.0f} ms" for p in names], textposition="auto",
        hovertemplate="%{y}: %{x:.1f}% of wall<extra></extra>"))
    return style(fig, title, 260, xaxis={"title": "% of wall time", "range": [0, 100]},
                 yaxis={"autorange": "reversed"})


def token_latency(trace: dict) -> go.Figure:
    """Per-token latency per row: a step's duration divided over the tokens it gave that row."""
    title = "Per-token latency per row (step time / tokens the row got)"
    steps = trace.get("steps", [])
    if not steps:
        return _empty(title, "no steps yet")
    lat = token_latencies(trace, _row_indices(trace))
    x = [f"row {i}" for i, v in lat.items() for _ in v]
    fig = go.Figure(go.Box(x=x, y=[t for v in lat.values() for t in v], boxpoints=False))
    return style(fig, title, 300, yaxis_title="ms per output token", showlegend=False)


# ---- hardware ----------------------------------------------------------------------------------------

def util_label(samples: list[dict], util_labels: dict | None) -> str:
    """What the utilization line measures, by the last sample's source (telemetry.UTIL_LABELS)."""
    return (util_labels or {}).get(samples[-1].get("source") if samples else None, "utilization %")


def utilization(trace: dict, util_labels: dict | None = None) -> go.Figure:
    """Telemetry samples over time: utilization % and memory (GiB)."""
    samples = telemetry_samples(trace)
    if not samples:
        return _empty("Utilization", "no samples")
    label = util_label(samples, util_labels)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12)
    t = [s["t"] for s in samples]
    fig.add_trace(go.Scatter(x=t, y=[s.get("util_pct") for s in samples], mode="lines", name="util %"), 1, 1)
    fig.add_trace(go.Scatter(x=t, y=[(s.get("mem_bytes") or 0) / 2**30 for s in samples], mode="lines",
                             name="memory"), 2, 1)
    fig.update_yaxes(title_text="%", range=[0, 105], row=1, col=1)
    fig.update_yaxes(title_text="GiB", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text="s since start", row=2, col=1)
    return style(fig, f"Utilization: {label} (top), memory (bottom)", 360, showlegend=False)


# ---- comparisons ----------------------------------------------------------------------------------------

RACE_COLOURS = {"speculative": "#0072B2", "regular": "#E69F00"}  # blue and orange: apart for every colour vision


def race_sentence(spec: dict, regular: dict) -> str:
    """Who finished the race first and when, and how the two runs were made."""
    a, b = run_duration(spec), run_duration(regular)
    first, t1, other, t2 = ("speculative", a, "regular", b) if a <= b else ("regular", b, "speculative", a)
    return (f"**{first.capitalize()} decoding finished first**, at {t1:.2f} s, {t2 - t1:.2f} s before {other} "
            f"decoding ({t2:.2f} s). The two runs decoded the same prompts one after the other on this machine "
            "(regular right after speculative), each timed from its own start.")


def race(traces: dict[str, dict], until: float | None = None) -> go.Figure:
    """Cumulative output tokens over time for several runs (e.g. speculative vs regular)."""
    fig = go.Figure()
    top = 0
    for name, tr in traces.items():
        t, n = tokens_over_time(tr)
        top = max([top] + n)
        if until is not None:
            keep = [j for j, x in enumerate(t) if x <= until]
            t, n = [t[j] for j in keep], [n[j] for j in keep]
        fig.add_trace(go.Scatter(x=[0.0] + t, y=[0] + n, mode="lines", name=name, line_shape="hv",
                                 line={"color": RACE_COLOURS.get(name), "width": 3}))
    if until is not None:
        end = max((run_duration(tr) for tr in traces.values()), default=0.0)
        fig.update_xaxes(range=[0, max(end, 1e-3)])
    return style(fig, "Race: output tokens over time", 300, xaxis_title="s since start",
                 yaxis={"title": "output tokens (all rows)", **int_ticks(top)})
