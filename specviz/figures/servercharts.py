"""Charts of a watched vLLM server: pure functions from specviz.app.servermon's series rows and
predictions to plotly figures (no Streamlit)."""

from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from specviz.figures.charts import _empty, int_ticks, style
from specviz.figures.modelcharts import MEASURED

MODEL_LINE = {"dash": "dot", "color": "black"}


def _time_axis() -> dict:
    return {"title": "seconds since attached"}


def over_time(rows: Sequence[dict], fields: dict[str, str], title: str, yaxis: dict | str,
              model: dict[str, float] | None = None) -> go.Figure:
    """Lines of rows[i][key] vs rows[i]["t"], one per {label: key}; None values leave gaps.
    ``model`` adds horizontal dotted lines {label: value} (the analytic prediction)."""
    if not rows or all(r.get(key) is None for r in rows for key in fields.values()):
        return _empty(title, "nothing reported yet")
    fig = go.Figure()
    t = [r["t"] for r in rows]
    for label, key in fields.items():
        fig.add_trace(go.Scatter(x=t, y=[r.get(key) for r in rows], mode="lines+markers", name=label,
                                 connectgaps=False, marker={"size": 4}))
    for label, value in (model or {}).items():
        fig.add_trace(go.Scatter(x=[t[0], t[-1]], y=[value, value], mode="lines", name=label, line=MODEL_LINE))
    ax = {"title": yaxis} if isinstance(yaxis, str) else yaxis
    return style(fig, title, 300, xaxis=_time_axis(), yaxis=ax, legend={"orientation": "h", "y": -0.25})


def per_position_over_time(rows: Sequence[dict]) -> go.Figure:
    """Acceptance at each draft position j (accepted at j / drafts) over time, one line per j."""
    title = "Acceptance per draft position over time"
    k = max((len(r["per_position"]) for r in rows if r.get("per_position")), default=0)
    if not k:
        return _empty(title, "no per-position counters yet")
    fig = go.Figure()
    t = [r["t"] for r in rows]
    for j in range(k):
        ys = [r["per_position"][j] if r.get("per_position") else None for r in rows]
        fig.add_trace(go.Scatter(x=t, y=ys, mode="lines", name=f"position {j + 1}"))
    return style(fig, title, 300, xaxis=_time_axis(),
                 yaxis={"title": "accepted at j / drafts", "range": [0, 1.02]}, legend={"orientation": "h", "y": -0.25})


def per_position_vs_model(observed: Sequence[float] | None, predicted: Sequence[float] | None) -> go.Figure:
    """Since attached: measured acceptance at each position (bars) and the i.i.d. model's alpha^j."""
    title = "Acceptance per position: measured vs model α^j"
    if not observed and not predicted:
        return _empty(title, "no per-position counters")
    fig = go.Figure()
    if observed:
        fig.add_trace(go.Bar(x=list(range(1, len(observed) + 1)), y=list(observed), name="measured (since attached)"))
    if predicted:
        fig.add_trace(go.Scatter(x=list(range(1, len(predicted) + 1)), y=list(predicted), mode="lines+markers",
                                 name="model α^j", line=MODEL_LINE, marker=MEASURED | {"size": 9}))
    top = max(len(observed or []), len(predicted or []))
    return style(fig, title, 300, xaxis={"title": "draft position j", **int_ticks(top)},
                 yaxis={"title": "P(accepted ≥ j)", "range": [0, 1.02]}, legend={"orientation": "h", "y": -0.25})


# ---- what each chart shows, in a sentence (its numbers from the same rows the chart draws) ------------

def _latest(rows: Sequence[dict], key: str):
    """The last reported value of ``key`` and its time, or (None, None)."""
    return next(((r[key], r["t"]) for r in reversed(rows) if r.get(key) is not None), (None, None))


def per_position_sentence(rows: Sequence[dict]) -> str:
    """per_position_over_time: the latest window's acceptance at the first and the last position."""
    pos, t = _latest(rows, "per_position")
    if not pos:
        return "No per-position counters yet: this chart fills once the server has drafted."
    last = f"; at position {len(pos)}, {pos[-1]:.2f}" if len(pos) > 1 else ""
    return (f"In the latest window ({t:.0f} s after attaching), {pos[0]:.2f} of drafts had their first token "
            f"accepted{last}: acceptance falls with the position because a token counts only after all before it.")


def over_time_sentence(rows: Sequence[dict], fields: dict[str, str], unit: str = "", model: dict | None = None,
                       digits: int = 2) -> str:
    """over_time: each line's latest value, its range since attaching, and the model's line beside it."""
    parts = []
    for label, key in fields.items():
        values = [r[key] for r in rows if r.get(key) is not None]
        if values:
            parts.append(f"{label} {values[-1]:.{digits}f}{unit} in the latest window "
                         f"({min(values):.{digits}f}-{max(values):.{digits}f} since attaching)")
    if not parts:
        return "Nothing reported yet: this chart fills with the server's next windows."
    text = "; ".join(parts)
    text = text[0].upper() + text[1:]
    for label, value in (model or {}).items():
        text += f"; the {label} line is {value:.{digits}f}"
    return text + "."


def position_vs_model_sentence(observed: Sequence[float] | None, predicted: Sequence[float] | None) -> str:
    """per_position_vs_model: where the measured acceptance is furthest from the model's α^j."""
    if not observed or not predicted:
        return "No per-position counters on this server: the model's α^j has nothing to be compared with."
    j = max(range(min(len(observed), len(predicted))), key=lambda i: abs(observed[i] - predicted[i]))
    return (f"Since attaching, the largest gap is at position {j + 1}: measured {observed[j]:.2f}, the model's "
            f"α^{j + 1} {predicted[j]:.2f}. A measured bar above the line means later positions are accepted more "
            "often than one α for every position assumes.")
