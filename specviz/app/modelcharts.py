"""Charts of the analytic model, of sweeps and of the correctness checks: pure functions from
numbers to plotly figures (no Streamlit). Charts of one run's trace are in specviz.app.charts."""

from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from specviz.app.charts import KIND_COLORS, _empty, int_ticks, style

BATCH_TICKS = [1, 2, 4, 8, 16, 32, 64, 128, 256]
MEASURED = {"size": 13, "symbol": "x", "color": "black"}


def speedup_vs_k(curves: dict[int, Sequence[float]], measured: Sequence[dict] = ()) -> go.Figure:
    """Predicted speedup vs k, one line per batch size; measured points ({"b", "k", "speedup"}) overlaid."""
    fig = go.Figure()
    kmax = 0
    for b, ys in curves.items():
        kmax = max(kmax, len(ys) - 1)
        fig.add_trace(go.Scatter(x=list(range(len(ys))), y=list(ys), mode="lines", name=f"b={b} (model)"))
    if measured:
        fig.add_trace(go.Scatter(x=[m["k"] for m in measured], y=[m["speedup"] for m in measured], mode="markers",
                                 name="measured", marker=MEASURED, text=[f"b={m['b']}" for m in measured],
                                 hovertemplate="%{text}, k=%{x}: %{y:.2f}x<extra>measured</extra>"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="gray")
    return style(fig, "Speedup over regular decoding vs draft length k", 360,
                 xaxis={"title": "draft length k (tokens per step)", **int_ticks(kmax)},
                 yaxis_title="speedup (× regular tokens/s)")


def optimal_k_curve(batch_sizes: Sequence[int], ks: Sequence[int], measured: Sequence[dict] = ()) -> go.Figure:
    fig = go.Figure(go.Scatter(x=list(batch_sizes), y=list(ks), mode="lines+markers", name="model k*(b)",
                               line_shape="hv"))
    if measured:
        fig.add_trace(go.Scatter(x=[m["b"] for m in measured], y=[m["k"] for m in measured], mode="markers",
                                 name="measured best", marker=MEASURED))
    top_b = max(list(batch_sizes) + [m["b"] for m in measured] + [1])
    ticks = [t for t in BATCH_TICKS if t <= top_b]
    top_k = max(list(ks) + [m["k"] for m in measured] + [1])
    return style(fig, "Best draft length k*(b) by batch size", 320,
                 xaxis={"title": "batch size b (rows)", "type": "log", "tickvals": ticks,
                        "ticktext": [str(t) for t in ticks]},
                 yaxis={"title": "k* (draft tokens per step)", "range": [-0.3, top_k + 0.5], **int_ticks(top_k)})


def optimal_k_compare(batch_sizes: Sequence[int], series: dict[str, Sequence[int]]) -> go.Figure:
    """k*(b) of several cost models on one chart (e.g. the small pair and a 7B-shaped target), one line each."""
    fig = go.Figure()
    for name, ks in series.items():
        fig.add_trace(go.Scatter(x=list(batch_sizes), y=list(ks), mode="lines+markers", name=name, line_shape="hv"))
    ticks = [t for t in BATCH_TICKS if t <= max(list(batch_sizes) + [1])]
    top_k = max([k for ks in series.values() for k in ks] + [1])
    return style(fig, "Best draft length k*(b): the small pair and a 7B-shaped target", 340,
                 xaxis={"title": "batch size b (rows)", "type": "log", "tickvals": ticks,
                        "ticktext": [str(t) for t in ticks]},
                 yaxis={"title": "k* (draft tokens per step)", "range": [-0.3, top_k + 0.5], **int_ticks(top_k)},
                 legend={"orientation": "h", "y": -0.3})


def bk_heatmap(batch_sizes: Sequence[int], ks: Sequence[int], z: Sequence[Sequence[float | None]],
               title: str = "Speedup by batch size and draft length") -> go.Figure:
    """z[i][j] = speedup at batch_sizes[i], ks[j] (None = not measured)."""
    text = [[f"{v:.2f}x" if v is not None else "" for v in row] for row in z]
    fig = go.Figure(go.Heatmap(z=z, x=[str(k) for k in ks], y=[str(b) for b in batch_sizes], text=text,
                               texttemplate="%{text}", colorscale="RdBu", zmid=1.0,
                               colorbar={"title": "speedup<br>(× regular)"},
                               hovertemplate="b=%{y}, k=%{x}: %{z:.2f}x<extra></extra>"))
    return style(fig, title, 360, xaxis={"title": "draft length k", "type": "category"},
                 yaxis={"title": "batch size b", "type": "category"})


def divergence_chart(rows: Sequence[dict]) -> go.Figure:
    """Correctness rows {"index", "match", "first_divergence", "margin"}: first divergent position."""
    title = "First divergent position per row (green = identical over the whole output)"
    if not rows:
        return _empty(title, "no rows")
    y = [r["first_divergence"] if r["first_divergence"] is not None else r.get("length", 0) for r in rows]
    fig = go.Figure(go.Bar(
        x=[f"row {r['index']}" for r in rows], y=y,
        marker_color=[KIND_COLORS["accepted"] if r["match"] else "#d62728" for r in rows],
        text=["identical" if r["match"] else f"margin {r['margin']:.3g}" if r.get("margin") is not None else "diverged"
              for r in rows]))
    return style(fig, title, 300, yaxis={"title": "output token position", **int_ticks(max(y + [1]))})


def distribution_chart(counts: Sequence[float], expected: Sequence[float]) -> go.Figure:
    """Observed first-output-token counts of the acceptance rule against n·p."""
    x = list(range(len(counts)))
    fig = go.Figure([go.Bar(name="observed", x=x, y=list(counts)), go.Bar(name="expected n·p", x=x, y=list(expected))])
    return style(fig, "First output token: observed counts vs the target's n·p", 300, barmode="group",
                 xaxis={"title": "token id", "dtick": 1, "tickformat": "d"}, yaxis_title="count (rows)")
