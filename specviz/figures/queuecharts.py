"""Charts of a request queue (continuous batching, issue 17): pure functions from a trace dict
(specviz.analysis.trace, version 5) to plotly figures, like specviz.figures.charts.

  lane_timeline          which request holds which lane over time: joins, leaves, idle lanes
  queue_length           arrived requests waiting for a lane, and the busy lanes, per step
  latency_distributions  per-request time to first token and time per output token

A lane is one of the batch's B rows; a request holds a lane from the step it joins until it finishes,
then the lane goes to the next queued request.

Everything is read from the steps (each row record's "lane", each step's "joined", "left" and
"queue_length"), so a run still in progress draws too; the latency figures need the finished
run's per-request records (``sequences[i]["ttft_s"]``, ``["tpot_s"]``).
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.figures.charts import ROW_COLORS, _empty, int_ticks, step_end, style


def is_queued(trace: dict | None) -> bool:
    """True for a run with a request queue (more requests than lanes, or arrivals over time); a
    static batch (requests = batch size) keeps the static views."""
    if not trace:
        return False
    cfg = trace.get("config", {})
    requests, lanes = cfg.get("requests"), cfg.get("batch_size")
    if requests is not None and lanes is not None and requests > lanes:
        return True
    return bool(cfg.get("arrival_rate")) or any(s.get("joined") for s in trace.get("steps", [])[1:])


def lane_spans(trace: dict) -> list[dict]:
    """One span per request and lane it held: {"lane", "index", "first_step", "last_step",
    "start_s", "end_s", "tokens"} (seconds after the run started), in the order they began."""
    spans: dict[tuple[int, int], dict] = {}
    for s in trace.get("steps", []):
        for r in s.get("rows", []):
            if not r.get("active") or r.get("lane") is None:
                continue
            key = (r["lane"], r["index"])
            span = spans.get(key)
            if span is None:
                span = spans[key] = {"lane": r["lane"], "index": r["index"], "first_step": s["step"],
                                     "start_s": s["t_start"], "tokens": 0}
            span["last_step"], span["end_s"] = s["step"], step_end(s)
            span["tokens"] += len(r.get("emitted", []))
    return sorted(spans.values(), key=lambda x: (x["start_s"], x["lane"]))


def idle_spans(trace: dict, spans: list[dict] | None = None) -> list[dict]:
    """Per lane, the times nobody occupied it between the run's first step and its last: {"lane",
    "start_s", "end_s"} (a lane waiting for an arrival, or the drained tail of the queue)."""
    steps = trace.get("steps", [])
    if not steps:
        return []
    spans = lane_spans(trace) if spans is None else spans
    t0, t1 = steps[0]["t_start"], step_end(steps[-1])
    lanes = int(trace.get("config", {}).get("batch_size") or 0) or (1 + max((x["lane"] for x in spans), default=-1))
    out = []
    for lane in range(lanes):
        t = t0
        for x in (x for x in spans if x["lane"] == lane):
            if x["start_s"] > t + 1e-9:
                out.append({"lane": lane, "start_s": t, "end_s": x["start_s"]})
            t = max(t, x["end_s"])
        if t1 > t + 1e-9:
            out.append({"lane": lane, "start_s": t, "end_s": t1})
    return out


def lane_timeline(trace: dict, max_labels: int = 64) -> go.Figure:
    """Horizontal bars: one line per lane, one bar per request from its first step to the end of
    its last (it joins at the left edge, leaves at the right), grey where the lane is idle."""
    title = "Lane timeline: which request holds which lane"
    spans = lane_spans(trace)
    if not spans:
        return _empty(title, "no steps yet")
    idle = idle_spans(trace, spans)
    fig = go.Figure()
    if idle:
        fig.add_trace(go.Bar(y=[f"lane {x['lane']}" for x in idle], x=[x["end_s"] - x["start_s"] for x in idle],
                             base=[x["start_s"] for x in idle], orientation="h", name="idle lane",
                             marker_color="rgba(160,160,160,0.35)", hovertemplate="idle %{base:.2f}–%{x:.2f} s<extra></extra>"))
    fig.add_trace(go.Bar(
        y=[f"lane {x['lane']}" for x in spans], x=[x["end_s"] - x["start_s"] for x in spans],
        base=[x["start_s"] for x in spans], orientation="h", name="request",
        marker={"color": [ROW_COLORS[x["index"] % len(ROW_COLORS)] for x in spans], "line": {"width": 1, "color": "white"}},
        text=[f"r{x['index']}" for x in spans] if len(spans) <= max_labels else None, textposition="inside",
        customdata=[[x["index"], x["first_step"], x["last_step"], x["tokens"]] for x in spans],
        hovertemplate="request %{customdata[0]}: steps %{customdata[1]}–%{customdata[2]}, "
                      "%{customdata[3]} tokens<extra></extra>"))
    lanes = sorted({x["lane"] for x in spans} | {x["lane"] for x in idle})
    return style(fig, title, 120 + 28 * len(lanes), barmode="overlay", showlegend=bool(idle),
                 xaxis={"title": "s since start"},
                 yaxis={"categoryorder": "array", "categoryarray": [f"lane {s}" for s in reversed(lanes)]})


def queue_series(trace: dict) -> tuple[list[float], list[int], list[int]]:
    """Per step: (its start in s, requests waiting for a lane, lanes busy)."""
    steps = trace.get("steps", [])
    return ([s["t_start"] for s in steps], [s.get("queue_length", 0) for s in steps],
            [s.get("batch_size", sum(1 for r in s["rows"] if r.get("active"))) for s in steps])


def queue_length(trace: dict) -> go.Figure:
    """Per step: requests that had arrived and waited for a lane, and the lanes busy."""
    title = "Queue: waiting requests and busy lanes"
    steps = trace.get("steps", [])
    if not steps:
        return _empty(title, "no steps yet")
    t, waiting, busy = queue_series(trace)
    fig = go.Figure([
        go.Scatter(x=t, y=waiting, mode="lines", line_shape="hv", name="waiting requests", fill="tozeroy"),
        go.Scatter(x=t, y=busy, mode="lines", line_shape="hv", name="busy lanes", line={"dash": "dot"}),
    ])
    return style(fig, title, 280, xaxis={"title": "s since start"},
                 yaxis={"title": "requests", **int_ticks(max(waiting + busy))})


def p50(values: list[float]) -> float:
    """The median the latency chart marks (the upper middle value of an even count)."""
    return sorted(values)[len(values) // 2]


def latency_values(trace: dict) -> dict[str, list[float]]:
    """Finished requests' time to first token and time per output token, in milliseconds."""
    seqs = [q for q in trace.get("sequences", []) if q.get("finish_reason") in ("eos", "length")]
    return {"ttft_ms": [q["ttft_s"] * 1e3 for q in seqs if q.get("ttft_s") is not None],
            "tpot_ms": [q["tpot_s"] * 1e3 for q in seqs if q.get("tpot_s") is not None]}


def latency_distributions(trace: dict) -> go.Figure:
    """Histograms over requests: TTFT (arrival to the end of the step with its first token) and
    TPOT (the rest of its latency over its other output tokens), medians marked."""
    title = "Per-request latency"
    v = latency_values(trace)
    if not v["ttft_ms"]:
        return _empty(title, "per-request latencies appear when the run has finished")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("time to first token (ms)", "time per output token (ms)"))
    for col, (key, color) in enumerate((("ttft_ms", ROW_COLORS[0]), ("tpot_ms", ROW_COLORS[1])), start=1):
        xs = v[key]
        if not xs:
            continue
        fig.add_trace(go.Histogram(x=xs, nbinsx=min(30, max(5, len(xs))), marker_color=color, name=key,
                                   hovertemplate="%{x} ms: %{y} requests<extra></extra>"), row=1, col=col)
        med = p50(xs)
        fig.add_vline(x=med, line_dash="dash", row=1, col=col, annotation_text=f"p50 {med:.0f}")
    fig.update_yaxes(title_text="requests", row=1, col=1)
    return style(fig, title, 300, showlegend=False)


# ---- each chart in a sentence, from the same numbers (specviz.figures.chartcaptions for the run's charts) -------

def lane_timeline_sentence(trace: dict) -> str:
    """The lane timeline: how many requests went through how many lanes, and the share of lane time idle."""
    spans = lane_spans(trace)
    if not spans:
        return "No steps yet: this chart fills in as the run goes."
    idle = idle_spans(trace, spans)
    lanes = {x["lane"] for x in spans} | {x["lane"] for x in idle}
    busy_s = sum(x["end_s"] - x["start_s"] for x in spans)
    idle_s = sum(x["end_s"] - x["start_s"] for x in idle)
    share = idle_s / (busy_s + idle_s) if busy_s + idle_s else 0.0
    return (f"{len({x['index'] for x in spans})} requests went through {len(lanes)} lanes; **the lanes stood idle "
            f"{100 * share:.0f}% of the time** (grey), waiting for an arrival or after the queue ran dry.")


def queue_sentence(trace: dict) -> str:
    """The queue chart: the most requests that waited at once, and the mean of the busy lanes."""
    t, waiting, busy = queue_series(trace)
    if not t:
        return "No steps yet: this chart fills in as the run goes."
    busy_mean = f"{sum(busy) / len(busy):.1f} lanes were busy per step on average"
    most = max(range(len(t)), key=waiting.__getitem__)
    if not waiting[most]:
        return f"**No request waited for a lane**; {busy_mean}."
    who = "1 request" if waiting[most] == 1 else f"{waiting[most]} requests"
    return f"**At most {who} waited for a lane** (at {t[most]:.2f} s); {busy_mean}."


def latency_sentence(trace: dict) -> str:
    """The latency chart: the medians it marks, over the finished requests."""
    v = latency_values(trace)
    if not v["ttft_ms"]:
        return "Per-request latencies appear when the run has finished."
    tpot = f"; time per output token {p50(v['tpot_ms']):.0f} ms" if v["tpot_ms"] else ""
    return (f"Over {len(v['ttft_ms'])} finished requests, the median **time to first token was "
            f"{p50(v['ttft_ms']):.0f} ms**{tpot}.")
