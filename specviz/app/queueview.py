"""The Live page's request queue (issue 17): its two controls and its charts. The page calls
``controls()`` among its widgets and ``draw(trace)`` after its chart grid (whose ragged-lengths place
shows the lane timeline under a queue: specviz.figures.chartcaptions.lengths_view); the state keys and
their RunConfig fields are specviz.app.state's QUEUE_DEFAULTS and queue_settings.

A lane is one of the batch's b rows; a request holds a lane from the step it joins until it finishes,
then the lane goes to the next queued request. A static run (requests = batch size, no arrivals) looks
as before: the ragged-lengths chart and no queue section.
"""

from __future__ import annotations

import streamlit as st

from specviz.figures import queuecharts, runlabel
from specviz.bounds import SLIDERS


def controls() -> None:
    st.number_input("Requests through the b lanes (0 = one static batch of b)", min_value=SLIDERS["requests"][0],
                    max_value=SLIDERS["requests"][1], step=SLIDERS["requests"][3], key="requests",
                    help="continuous batching: a lane is one of the batch's b rows; when a request finishes, the next "
                         "request's prompt is prefilled and takes its lane; prompts cycle to this many requests. The race runs regular decoding "
                         "under the same queue.")
    st.number_input("Arrival rate, requests/s (0 = all queued at the start)", min_value=SLIDERS["arrival_rate"][0],
                    max_value=SLIDERS["arrival_rate"][1], step=SLIDERS["arrival_rate"][3], key="arrival_rate",
                    help="Poisson arrivals, seeded by Seed")


def summary_line(trace: dict) -> str | None:
    s = trace.get("summary", {})
    if s.get("latency_p50_s") is None:
        return None
    parts = [f"{s.get('requests_finished', 0)} of {s.get('requests', 0)} requests finished",
             f"{s['throughput_requests_per_s']:.2f} requests/s" if s.get("throughput_requests_per_s") else None,
             f"goodput {s['goodput_tokens_per_s']:.1f} tokens/s" if s.get("goodput_tokens_per_s") else None,
             f"latency p50 {s['latency_p50_s']:.2f} s, p95 {s['latency_p95_s']:.2f} s",
             f"TTFT p50 {s['ttft_p50_s']:.2f} s" if s.get("ttft_p50_s") is not None else None,
             f"most waiting {s.get('max_queue_length', 0)}"]
    return "; ".join(p for p in parts if p)


def draw(trace: dict) -> None:
    """The queue section: waiting requests and busy lanes over time, per-request latencies."""
    if not queuecharts.is_queued(trace):
        return
    st.subheader("Request queue")
    line = summary_line(trace)
    if line:
        st.caption(line)
    left, right = st.columns(2)
    left.plotly_chart(runlabel.mark(queuecharts.queue_length(trace), trace), key="queue_length")
    left.caption(queuecharts.queue_sentence(trace))
    right.plotly_chart(runlabel.mark(queuecharts.latency_distributions(trace), trace), key="latency_distributions")
    right.caption(queuecharts.latency_sentence(trace))
