"""Charts: pure functions from a trace dict (specviz.analysis.trace format) to plotly figures.

No Streamlit here: pages call these and draw the result. Every function accepts a partial
trace (a run still in progress) and an empty one. ``decode`` arguments map a list of token ids
to text (a tokenizer's decode); without one, ids are shown.

Vocabulary (SPECDEC.md): per row-step, emitted[:accepted] are *accepted* draft tokens; the
token at position ``accepted`` is the *bonus* token when the row accepted everything it drafted
(drafted > 0), the *recovered* token otherwise, and a plain *target* token when nothing was
drafted (regular decoding).
"""

from __future__ import annotations

import html
from typing import Callable, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

PHASES = ("draft", "verify", "accept", "bookkeeping")
PHASE_COLORS = {"draft": "#636efa", "verify": "#ef553b", "accept": "#00cc96", "bookkeeping": "#ab63fa"}
KIND_COLORS = {"accepted": "#2ca02c", "recovered": "#ff7f0e", "bonus": "#1f77b4", "target": "#7f7f7f"}
Decode = Callable[[list[int]], str]


# ---- helpers -----------------------------------------------------------------------------------

def _ids(tokens: Sequence[int]) -> str:
    return " ".join(map(str, tokens))


def _text(tokens: Sequence[int], decode: Decode | None) -> str:
    if not tokens:
        return ""
    return decode(list(tokens)) if decode is not None else _ids(tokens)


def _row_indices(trace: dict) -> list[int]:
    if trace.get("sequences"):
        return [s["index"] for s in trace["sequences"]]
    return sorted({r["index"] for s in trace.get("steps", []) for r in s["rows"]})


def _empty(title: str, message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font={"size": 16})
    fig.update_layout(title=title, xaxis={"visible": False}, yaxis={"visible": False}, height=260)
    return fig


def step_end(step: dict) -> float:
    """Seconds from the run's start to the end of this step (when its tokens are out)."""
    return step["t_start"] + sum(step.get(f"t_{p}", 0.0) for p in PHASES)


def token_kind(j: int, accepted: int, drafted: int) -> str:
    """The role of the j-th emitted token of a row-step (see the module docstring)."""
    if j < accepted:
        return "accepted"
    if drafted == 0:
        return "target"
    return "bonus" if accepted >= drafted else "recovered"


def token_kinds(trace: dict) -> dict[int, list[tuple[int, str, int]]]:
    """Per row index: [(token id, kind, step)] in output order."""
    out: dict[int, list] = {i: [] for i in _row_indices(trace)}
    for s in trace.get("steps", []):
        for r in s["rows"]:
            if r["active"]:
                out.setdefault(r["index"], []).extend(
                    (t, token_kind(j, r["accepted"], r["drafted"]), s["step"]) for j, t in enumerate(r["emitted"]))
    return out


def row_acceptance(trace: dict) -> dict[int, float | None]:
    """Per row: accepted / drafted over the run (None if the row never drafted)."""
    drafted: dict[int, int] = {i: 0 for i in _row_indices(trace)}
    accepted = dict.fromkeys(drafted, 0)
    for s in trace.get("steps", []):
        for r in s["rows"]:
            if r["active"]:
                drafted[r["index"]] = drafted.get(r["index"], 0) + r["drafted"]
                accepted[r["index"]] = accepted.get(r["index"], 0) + r["accepted"]
    return {i: (accepted[i] / drafted[i] if drafted[i] else None) for i in drafted}


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
    """Sequences x steps, colour = accepted draft tokens; hover: drafted, accepted, emitted text.

    Hover text is built for the last ``max_hover_steps`` steps only (it dominates draw time).
    """
    steps = trace.get("steps", [])
    rows = _row_indices(trace)
    if not steps or not rows:
        return _empty("Acceptance per sequence and step", "no steps yet")
    pos = {i: n for n, i in enumerate(rows)}
    z = [[None] * len(steps) for _ in rows]
    hover = [[""] * len(steps) for _ in rows]
    first_hover = max(0, len(steps) - max_hover_steps)
    for c, s in enumerate(steps):
        for r in s["rows"]:
            if not r["active"] or r["index"] not in pos:
                continue
            y = pos[r["index"]]
            z[y][c] = r["accepted"]
            if c >= first_hover:
                drafted = r.get("draft_tokens")
                drafted_txt = f"<br>drafted: {html.escape(repr(_text(drafted, decode)))}" if drafted else ""
                hover[y][c] = (f"row {r['index']}, step {s['step']} (k={s['k']})<br>drafted {r['drafted']}, "
                               f"accepted {r['accepted']}{drafted_txt}<br>emitted: "
                               f"{html.escape(repr(_text(r['emitted'], decode)))}")
    kmax = max((s["k"] for s in steps), default=0)
    fig = go.Figure(go.Heatmap(
        z=z, x=[s["step"] for s in steps], y=[f"row {i}" for i in rows], text=hover,
        hovertemplate="%{text}<extra></extra>", colorscale="Viridis", zmin=0, zmax=max(kmax, 1),
        colorbar={"title": "accepted"}, hoverongaps=False))
    fig.update_layout(title="Acceptance per sequence and step (accepted draft tokens)", xaxis_title="step",
                      yaxis={"autorange": "reversed"}, height=max(260, 40 + 14 * len(rows)),
                      margin={"l": 10, "r": 10, "t": 40, "b": 30})
    return fig


def acceptance_rate_bars(trace: dict) -> go.Figure:
    """Per-sequence acceptance rate (accepted / drafted)."""
    rates = row_acceptance(trace)
    if not rates:
        return _empty("Acceptance rate per sequence", "no rows")
    idx = list(rates)
    fig = go.Figure(go.Bar(x=[f"row {i}" for i in idx], y=[rates[i] if rates[i] is not None else 0 for i in idx],
                           hovertemplate="%{x}: %{y:.2f}<extra></extra>", marker_color="#2ca02c"))
    overall = trace.get("summary", {}).get("acceptance_rate")
    if overall is not None:
        fig.add_hline(y=overall, line_dash="dash", annotation_text=f"all rows {overall:.2f}")
    fig.update_layout(title="Acceptance rate per sequence (accepted / drafted)", yaxis={"range": [0, 1.05]}, height=280,
                      margin={"l": 10, "r": 10, "t": 40, "b": 30})
    return fig


def position_acceptance(trace: dict) -> go.Figure:
    """P(first j draft tokens accepted | drafted >= j), from the summary."""
    pa = trace.get("summary", {}).get("per_position_acceptance") or []
    if not pa:
        return _empty("Acceptance per draft position", "no draft tokens")
    fig = go.Figure(go.Bar(x=list(range(1, len(pa) + 1)), y=[p or 0 for p in pa]))
    fig.update_layout(title="Acceptance per draft position j", xaxis_title="j", yaxis={"range": [0, 1.05]}, height=260)
    return fig


# ---- ragged lengths ----------------------------------------------------------------------------------

def ragged_lengths(trace: dict) -> go.Figure:
    """Each row's generated length after every step: rows diverge as acceptance differs."""
    steps = trace.get("steps", [])
    if not steps:
        return _empty("Ragged lengths", "no steps yet")
    length = dict.fromkeys(_row_indices(trace), 0)
    series: dict[int, tuple[list, list]] = {i: ([], []) for i in length}
    for s in steps:
        for r in s["rows"]:
            if r["active"]:
                length[r["index"]] = length.get(r["index"], 0) + len(r["emitted"])
                xs, ys = series.setdefault(r["index"], ([], []))
                xs.append(s["step"])
                ys.append(length[r["index"]])
    if len(series) <= 16:
        data = [go.Scatter(x=xs, y=ys, mode="lines", name=f"row {i}", line={"width": 1.5})
                for i, (xs, ys) in series.items()]
    else:  # one trace with gaps: 64 separate traces cost ~5x more to build and draw
        x, y, text = [], [], []
        for i, (xs, ys) in series.items():
            x += list(xs) + [None]
            y += list(ys) + [None]
            text += [f"row {i}"] * len(xs) + [None]
        data = [go.Scatter(x=x, y=y, text=text, mode="lines", name="rows", line={"width": 1},
                           hovertemplate="%{text}: %{y} tokens<extra></extra>")]
    fig = go.Figure(data)
    fig.update_layout(title="Ragged lengths: generated tokens per row", xaxis_title="step", yaxis_title="tokens",
                      height=300, showlegend=len(series) <= 16, margin={"l": 10, "r": 10, "t": 40, "b": 30})
    return fig


def wasted_slots(trace: dict) -> go.Figure:
    """Per step: verified slots that produced no output, sum over active rows of k - accepted
    ((k+1) slots verified, accepted + 1 tokens out)."""
    steps = trace.get("steps", [])
    if not steps:
        return _empty("Padded / wasted slots", "no steps yet")
    waste = [sum(s["k"] - r["accepted"] for r in s["rows"] if r["active"]) for s in steps]
    used = [sum(r["accepted"] + 1 for r in s["rows"] if r["active"]) for s in steps]
    x = [s["step"] for s in steps]
    fig = go.Figure([go.Bar(x=x, y=used, name="output tokens", marker_color="#2ca02c"),
                     go.Bar(x=x, y=waste, name="wasted slots", marker_color="#d62728")])
    fig.update_layout(barmode="stack", title="Verified slots per step: output vs padded/wasted", xaxis_title="step",
                      yaxis_title="slots", height=300, margin={"l": 10, "r": 10, "t": 40, "b": 30})
    return fig


# ---- timing ----------------------------------------------------------------------------------------

def phase_timeline(trace: dict, max_steps: int = 2000) -> go.Figure:
    """Draft / verify / accept / bookkeeping of every step on one time axis (ms), one lane per phase."""
    steps = trace.get("steps", [])[-max_steps:]
    if not steps:
        return _empty("Step timeline", "no steps yet")
    fig = go.Figure()
    prefill = trace.get("summary", {}).get("prefill_s")
    if prefill and len(steps) == len(trace["steps"]):
        fig.add_trace(go.Bar(y=["prefill"], x=[prefill * 1e3], base=[0], orientation="h", name="prefill",
                             marker_color="#7f7f7f", hovertemplate="prefill %{x:.1f} ms<extra></extra>"))
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
    fig.update_layout(title="Step timeline: draft / verify / accept / bookkeeping", xaxis_title="ms since start",
                      barmode="overlay", height=260, yaxis={"categoryorder": "array",
                                                            "categoryarray": ["bookkeeping", "accept", "verify", "draft", "prefill"]},
                      margin={"l": 10, "r": 10, "t": 40, "b": 30})
    return fig


def phase_breakdown(trace: dict) -> go.Figure:
    """Per step: ms spent in each phase (stacked)."""
    steps = trace.get("steps", [])
    if not steps:
        return _empty("Phase time per step", "no steps yet")
    x = [s["step"] for s in steps]
    fig = go.Figure([go.Bar(x=x, y=[s.get(f"t_{p}", 0.0) * 1e3 for s in steps], name=p, marker_color=PHASE_COLORS[p])
                     for p in PHASES])
    fig.update_layout(barmode="stack", title="Phase time per step", xaxis_title="step", yaxis_title="ms", height=280,
                      margin={"l": 10, "r": 10, "t": 40, "b": 30})
    return fig


def token_latency(trace: dict) -> go.Figure:
    """Per-token latency per row: a step's duration divided over the tokens it gave that row."""
    steps = trace.get("steps", [])
    if not steps:
        return _empty("Per-token latency", "no steps yet")
    lat: dict[int, list[float]] = {i: [] for i in _row_indices(trace)}
    for s in steps:
        dur = sum(s.get(f"t_{p}", 0.0) for p in PHASES)
        for r in s["rows"]:
            if r["active"] and r["emitted"]:
                lat.setdefault(r["index"], []).extend([dur / len(r["emitted"]) * 1e3] * len(r["emitted"]))
    x = [f"row {i}" for i, v in lat.items() for _ in v]
    fig = go.Figure(go.Box(x=x, y=[t for v in lat.values() for t in v], boxpoints=False))
    fig.update_layout(title="Per-token latency per row (step time / tokens the row got)", yaxis_title="ms / token",
                      height=300, showlegend=False, margin={"l": 10, "r": 10, "t": 40, "b": 30})
    return fig


# ---- hardware ----------------------------------------------------------------------------------------

def utilization(trace: dict, util_labels: dict | None = None) -> go.Figure:
    """Telemetry samples over time: utilization % and memory (GiB)."""
    samples = [s for s in (trace.get("telemetry") or []) if "t" in s]
    if not samples:
        return _empty("Utilization", "no samples")
    source = samples[-1].get("source")
    label = (util_labels or {}).get(source, "utilization %")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=(label, "memory (GiB)"))
    t = [s["t"] for s in samples]
    fig.add_trace(go.Scatter(x=t, y=[s.get("util_pct") for s in samples], mode="lines", name="util %"), 1, 1)
    fig.add_trace(go.Scatter(x=t, y=[(s.get("mem_bytes") or 0) / 2**30 for s in samples], mode="lines",
                             name="memory"), 2, 1)
    fig.update_layout(title="Utilization", height=360, showlegend=False, margin={"l": 10, "r": 10, "t": 60, "b": 30})
    fig.update_xaxes(title_text="s since start", row=2, col=1)
    return fig


# ---- text ---------------------------------------------------------------------------------------------

def token_html(trace: dict, decode: Decode | None = None, max_rows: int | None = None) -> list[tuple[int, str]]:
    """Per row: (index, HTML) of its output with accepted / recovered / bonus / target tokens coloured."""
    out = []
    finish = {s["index"]: s.get("finish_reason") for s in trace.get("sequences", [])}
    for i, toks in list(token_kinds(trace).items())[:max_rows]:
        spans = []
        for t, kind, step in toks:
            piece = html.escape(_text([t], decode) if decode is not None else f"[{t}]")
            spans.append(f'<span style="color:{KIND_COLORS[kind]}" title="{kind}, step {step}">{piece}</span>')
        reason = finish.get(i)
        tail = f' <span style="color:#999">[{reason}]</span>' if reason else ""
        out.append((i, f'<div style="white-space:pre-wrap;font-family:monospace">{"".join(spans)}{tail}</div>'))
    return out


def legend_html() -> str:
    return " ".join(f'<span style="color:{c}">■ {k}</span>' for k, c in KIND_COLORS.items())


# ---- comparisons ----------------------------------------------------------------------------------------

def race(traces: dict[str, dict], until: float | None = None) -> go.Figure:
    """Cumulative output tokens over time for several runs (e.g. speculative vs regular)."""
    fig = go.Figure()
    for name, tr in traces.items():
        t, n = tokens_over_time(tr)
        if until is not None:
            keep = [j for j, x in enumerate(t) if x <= until]
            t, n = [t[j] for j in keep], [n[j] for j in keep]
        fig.add_trace(go.Scatter(x=[0.0] + t, y=[0] + n, mode="lines", name=name, line_shape="hv"))
    if until is not None:
        end = max((run_duration(tr) for tr in traces.values()), default=0.0)
        fig.update_xaxes(range=[0, max(end, 1e-3)])
    fig.update_layout(title="Race: output tokens over time", xaxis_title="s since start", yaxis_title="tokens",
                      height=300, margin={"l": 10, "r": 10, "t": 40, "b": 30})
    return fig


def speedup_vs_k(curves: dict[int, Sequence[float]], measured: Sequence[dict] = ()) -> go.Figure:
    """Predicted speedup vs k, one line per batch size; measured points ({"b", "k", "speedup"}) overlaid."""
    fig = go.Figure()
    for b, ys in curves.items():
        fig.add_trace(go.Scatter(x=list(range(len(ys))), y=list(ys), mode="lines", name=f"b={b}"))
    if measured:
        fig.add_trace(go.Scatter(x=[m["k"] for m in measured], y=[m["speedup"] for m in measured], mode="markers",
                                 name="measured", marker={"size": 11, "symbol": "x", "color": "black"},
                                 text=[f"b={m['b']}" for m in measured],
                                 hovertemplate="%{text}, k=%{x}: %{y:.2f}x<extra>measured</extra>"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="gray")
    fig.update_layout(title="Speedup over regular decoding vs draft length k", xaxis_title="k",
                      yaxis_title="speedup (x)", height=340)
    return fig


def optimal_k_curve(batch_sizes: Sequence[int], ks: Sequence[int], measured: Sequence[dict] = ()) -> go.Figure:
    fig = go.Figure(go.Scatter(x=list(batch_sizes), y=list(ks), mode="lines+markers", name="model k*(b)",
                               line_shape="hv"))
    if measured:
        fig.add_trace(go.Scatter(x=[m["b"] for m in measured], y=[m["k"] for m in measured], mode="markers",
                                 name="measured best", marker={"size": 11, "symbol": "x", "color": "black"}))
    fig.update_layout(title="Optimal draft length k*(b)", xaxis_title="batch size b", xaxis_type="log",
                      yaxis_title="k*", height=300)
    return fig


def bk_heatmap(batch_sizes: Sequence[int], ks: Sequence[int], z: Sequence[Sequence[float | None]],
               title: str = "Speedup by batch size and draft length") -> go.Figure:
    """z[i][j] = speedup at batch_sizes[i], ks[j] (None = not measured)."""
    text = [[f"{v:.2f}x" if v is not None else "" for v in row] for row in z]
    fig = go.Figure(go.Heatmap(z=z, x=[str(k) for k in ks], y=[str(b) for b in batch_sizes], text=text,
                               texttemplate="%{text}", colorscale="RdBu", zmid=1.0, colorbar={"title": "x"},
                               hovertemplate="b=%{y}, k=%{x}: %{z:.2f}x<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="draft length k", yaxis_title="batch size b", height=360,
                      xaxis={"type": "category"}, yaxis={"type": "category"})
    return fig


def divergence_chart(rows: Sequence[dict]) -> go.Figure:
    """Correctness rows {"index", "match", "first_divergence", "margin"}: first divergent position."""
    if not rows:
        return _empty("Correctness", "no rows")
    fig = go.Figure(go.Bar(
        x=[f"row {r['index']}" for r in rows],
        y=[r["first_divergence"] if r["first_divergence"] is not None else r.get("length", 0) for r in rows],
        marker_color=["#2ca02c" if r["match"] else "#d62728" for r in rows],
        text=["exact" if r["match"] else f"margin {r['margin']:.3g}" if r.get("margin") is not None else "diverged"
              for r in rows]))
    fig.update_layout(title="First divergent position per row (green = exact match over the whole output)",
                      yaxis_title="token position", height=300)
    return fig
