"""Charts of the analytic model, of sweeps and of the correctness checks: pure functions from
numbers to plotly figures, and the sentence that states each chart's key number (no Streamlit).
Charts of one run's trace are in specviz.figures.charts."""

from __future__ import annotations

import html
from typing import Sequence

import plotly.graph_objects as go

from specviz.analysis.explain import exactness
from specviz.figures.charts import KIND_COLORS, _empty, int_ticks, style
from specviz.figures.safetext import md_escape

BATCH_TICKS = [1, 2, 4, 8, 16, 32, 64, 128, 256]
MEASURED = {"size": 13, "symbol": "x", "color": "black"}


def speedup_vs_k(curves: dict[int, Sequence[float]], measured: Sequence[dict] = ()) -> go.Figure:
    """Predicted speedup vs k, one line per batch size (batch sizes whose curves coincide share one line
    and one legend entry, so none hides under another); measured points ({"b", "k", "speedup"}) overlaid,
    each labelled with its b."""
    fig = go.Figure()
    kmax = 0
    lines: dict[tuple, list[int]] = {}
    for b, ys in curves.items():
        lines.setdefault(tuple(round(y, 4) for y in ys), []).append(b)
    for ys, bs in lines.items():
        kmax = max(kmax, len(ys) - 1)
        fig.add_trace(go.Scatter(x=list(range(len(ys))), y=list(ys), mode="lines",
                                 name=f"b={', '.join(map(str, bs))} (model)"))
    if measured:
        fig.add_trace(go.Scatter(x=[m["k"] for m in measured], y=[m["speedup"] for m in measured],
                                 mode="markers+text", textposition="top center",
                                 name="measured", marker=MEASURED, text=[f"b={m['b']}" for m in measured],
                                 hovertemplate="%{text}, k=%{x}: %{y:.2f}x<extra>measured</extra>"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="gray")
    return style(fig, "Speedup over regular decoding vs draft length k", 360,
                 xaxis={"title": "draft length k (tokens per step)", **int_ticks(kmax)},
                 yaxis_title="speedup (× regular tokens/s)")


def best_measured(measured: Sequence[dict]) -> list[dict]:
    """The fastest measured k per batch size, from points {"b", "k", "speedup"}. Regular decoding was
    measured beside each of them, so k = 0 at 1.0x is a candidate: a slowdown is never a best k."""
    best = {m["b"]: {"b": m["b"], "k": 0, "speedup": 1.0} for m in measured}
    for m in measured:
        if m["speedup"] > best[m["b"]]["speedup"]:
            best[m["b"]] = m
    return [best[b] for b in sorted(best)]


def optimal_k_curve(batch_sizes: Sequence[int], ks: Sequence[int], measured: Sequence[dict] = ()) -> go.Figure:
    fig = go.Figure(go.Scatter(x=list(batch_sizes), y=list(ks), mode="lines+markers", name="model k*(b)",
                               line_shape="hv"))
    if measured:
        fig.add_trace(go.Scatter(x=[m["b"] for m in measured], y=[m["k"] for m in measured], mode="markers",
                                 name="measured best (k = 0: regular was fastest)", marker=MEASURED,
                                 text=[f"{m['speedup']:.2f}x" for m in measured],
                                 hovertemplate="b=%{x}: best measured k=%{y} (%{text})<extra></extra>"))
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


def speedup_range(*grids: Sequence[Sequence[float | None]]) -> tuple[float, float]:
    """One colour range for heatmaps drawn side by side: symmetric about 1 (white = regular's speed),
    wide enough for every value in every grid."""
    values = [v for z in grids for row in z for v in row if v is not None]
    d = max([abs(v - 1.0) for v in values] + [0.05])
    return 1.0 - d, 1.0 + d


def bk_heatmap(batch_sizes: Sequence[int], ks: Sequence[int], z: Sequence[Sequence[float | None]],
               title: str = "Speedup by batch size and draft length",
               zrange: tuple[float, float] | None = None) -> go.Figure:
    """z[i][j] = speedup at batch_sizes[i], ks[j] (None = not measured); ``zrange`` (speedup_range)
    gives heatmaps shown together one colour scale."""
    lo, hi = zrange or speedup_range(z)
    wide = len(ks) > 8  # many columns: shorter labels, so they stay readable
    text = [[(f"{v:.1f}" if wide else f"{v:.2f}x") if v is not None else "" for v in row] for row in z]
    fig = go.Figure(go.Heatmap(z=z, x=[str(k) for k in ks], y=[str(b) for b in batch_sizes], text=text,
                               texttemplate="%{text}", textfont={"size": 11}, colorscale="RdBu", zmin=lo, zmax=hi,
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


# ---- each chart in a sentence, from the same numbers the chart draws ----------------------------------

def _best_k(ys: Sequence[float]) -> tuple[int, float]:
    """(k, speedup) at the top of one speedup-vs-k curve (the smallest such k on a tie)."""
    k = max(range(len(ys)), key=lambda j: (ys[j], -j))
    return k, ys[k]


def speedup_vs_k_sentence(curves: dict[int, Sequence[float]], b: int) -> str:
    """speedup_vs_k's curves: the best k and its speedup at batch size ``b`` and at the largest batch size."""
    if b not in curves or not curves[b]:
        return "No curve to show."
    k, s = _best_k(curves[b])
    text = f"At b = {b} the model's best draft length is **k = {k}, for {s:.2f}x**"
    if (big := max(curves)) != b:
        k2, s2 = _best_k(curves[big])
        text += f"; at b = {big} it is k = {k2}, for {s2:.2f}x"
    return text + "."


def optimal_k_sentence(batch_sizes: Sequence[int], ks: Sequence[int], measured: Sequence[dict] = ()) -> str:
    """optimal_k_curve's numbers: k* at the smallest and the largest batch size, and the measured best k."""
    if not ks:
        return "No batch size to show."
    (b0, k0), (b1, k1) = (batch_sizes[0], ks[0]), (batch_sizes[-1], ks[-1])
    move = (f"stays at **{k0}** from b = {b0} to b = {b1}" if k0 == k1 else
            f"{'falls' if k1 < k0 else 'rises'} from **{k0} at b = {b0} to {k1} at b = {b1}**")
    seen = "; ".join(f"k = {m['k']} at b = {m['b']} ({m['speedup']:.2f}x)" for m in measured)
    return f"The model's best draft length k* {move}." + (f" Measured best: {seen}." if seen else "")


def k_compare_sentence(batch_sizes: Sequence[int], series: dict[str, Sequence[int]]) -> str:
    """optimal_k_compare's lines: each one's k* at the smallest and the largest batch size. The names are
    optimal_k_compare's (HTML-escaped for plotly); the sentence shows them as Markdown text."""
    if not series or not batch_sizes:
        return "No cost model to compare."
    names = [md_escape(html.unescape(name)) for name in series]
    at = lambda i: " and ".join(f"{ks[i]} for {n}" for n, ks in zip(names, series.values()))  # noqa: E731
    return f"At b = {batch_sizes[0]} the best k is {at(0)}; at b = {batch_sizes[-1]}, {at(-1)}."


def bk_sentence(batch_sizes: Sequence[int], ks: Sequence[int], z: Sequence[Sequence[float | None]],
                what: str = "predicted") -> str:
    """bk_heatmap's cells: the fastest one, and how many are slower than regular decoding (below 1x)."""
    cells = [(v, b, k) for b, row in zip(batch_sizes, z) for k, v in zip(ks, row) if v is not None]
    if not cells:
        return f"No {what} cell yet."
    v, b, k = max(cells, key=lambda c: c[0])
    slower = sum(c[0] < 1.0 for c in cells)
    return (f"**The best {what} cell is {v:.2f}x, at b = {b}, k = {k}**; {slower} of {len(cells)} cells are below 1x "
            "(slower than regular decoding).")


def divergence_sentence(rows: Sequence[dict]) -> str:
    """divergence_chart's rows: how many are identical, and the earliest divergence with its margin."""
    if not rows:
        return "No rows checked yet."
    ex = exactness(list(rows))
    if not ex["diverged"]:
        return f"**All {ex['rows']} rows are identical to regular decoding** over their whole output."
    first = min(ex["diverged"], key=lambda d: d["position"] if d["position"] is not None else float("inf"))
    margin = f" (logit margin {first['margin']:.3g} there)" if first.get("margin") is not None else ""
    return (f"**{ex['identical']} of {ex['rows']} rows are identical to regular decoding**; row {first['row']} "
            f"diverged earliest, at output token {first['position']}{margin}.")


def distribution_sentence(counts: Sequence[float], expected: Sequence[float]) -> str:
    """distribution_chart's bars: the token whose observed count is furthest from n·p."""
    if not counts:
        return "No counts yet."
    j = max(range(len(counts)), key=lambda i: abs(counts[i] - expected[i]))
    return (f"Over {sum(counts):.0f} rows, **the largest gap is token {j}: {counts[j]:.0f} observed against "
            f"{expected[j]:.1f} expected**; every other token is closer to n·p.")
