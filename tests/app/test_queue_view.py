"""The request queue in the app (issue 17): the lane timeline, the queue-length chart and the
per-request latency distributions, drawn from real queued traces of the engine (a tiny model
here; the packaged one through the Live page), and the Live page's requests and arrival-rate
controls reaching the run's config, the race partner included."""

from __future__ import annotations

import json

import pytest

from specviz.analysis.trace import build_trace, sequence_record
from specviz.figures import queuecharts
from specviz.engine.proposers import NgramDraft
from specviz.run import decoder_for_ids

from fakes import ragged_prompts, tiny_llama

V = 64


def engine_trace(n=7, lanes=3, max_new=6, arrivals=None):
    """A real run of the engine on the tiny model, as a trace (what run.run would write)."""
    target = tiny_llama(V)
    dec = decoder_for_ids(target, NgramDraft(), ragged_prompts(n, V, seed=5), 2, max_new, lanes=lanes,
                          arrivals=arrivals)
    steps = [s.to_json() for s in dec.steps()]
    seqs = [sequence_record(r, None) for r in dec.rows]
    wall = queuecharts.step_end(steps[-1])
    cfg = {"batch_size": lanes, "requests": n if n != lanes else None, "arrival_rate": 1.0 if arrivals else 0.0,
           "draft_length": 2, "mode": "speculative"}
    return build_trace(cfg, {}, seqs, steps, [], wall, dec.prefill_s)


@pytest.fixture(scope="module")
def queued():
    return engine_trace()


def test_the_lane_timeline_puts_each_request_in_its_lane_from_join_to_leave(queued):
    spans = queuecharts.lane_spans(queued)
    seqs = {q["index"]: q for q in queued["sequences"]}
    assert sorted(x["index"] for x in spans) == list(range(7))  # each request once: it never changes lane
    for x in spans:
        q = seqs[x["index"]]
        assert (x["lane"], x["first_step"], x["last_step"]) == (q["lane"], q["join_step"], q["leave_step"])
        assert x["tokens"] == len(q["output_token_ids"]) and x["end_s"] == pytest.approx(q["leave_s"])
    for lane in range(3):  # one request at a time per lane
        held = sorted((x["start_s"], x["end_s"]) for x in spans if x["lane"] == lane)
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(held, held[1:]))
    fig = queuecharts.lane_timeline(queued)
    bars = {t.name: t for t in fig.data}
    assert len(bars["request"].x) == 7 and list(bars["request"].text) == [f"r{x['index']}" for x in spans]
    assert "Lane timeline" in fig.layout.title.text


def test_idle_lanes_fill_each_lane_to_the_runs_length(queued):
    """7 requests through 3 lanes: the queue drains, so some lane idles at the end; busy plus idle
    time is the run's length in every lane."""
    spans, idle = queuecharts.lane_spans(queued), queuecharts.idle_spans(queued)
    steps = queued["steps"]
    length = queuecharts.step_end(steps[-1]) - steps[0]["t_start"]
    assert idle and any(x["end_s"] == pytest.approx(queuecharts.step_end(steps[-1])) for x in idle)
    for lane in range(3):
        busy = sum(x["end_s"] - x["start_s"] for x in spans if x["lane"] == lane)
        free = sum(x["end_s"] - x["start_s"] for x in idle if x["lane"] == lane)
        assert busy + free == pytest.approx(length)
    assert "idle lane" in {t.name for t in queuecharts.lane_timeline(queued).data}


def test_lanes_wait_for_arrivals():
    """Two requests arrive 1.5 s in, long after the first two are done: both lanes show idle from
    the first requests' leave to the newcomers' first step."""
    trace = engine_trace(n=4, lanes=2, max_new=3, arrivals=[0.0, 0.0, 1.5, 1.5])
    idle = queuecharts.idle_spans(trace)
    seqs = trace["sequences"]
    start = {s["step"]: s["t_start"] for s in trace["steps"]}
    for early, late in ((seqs[0], seqs[2]), (seqs[1], seqs[3])):
        assert late["lane"] == early["lane"] and late["join_s"] >= 1.5 > early["leave_s"]
        gap = [x for x in idle if x["lane"] == late["lane"] and x["end_s"] == pytest.approx(start[late["join_step"]])]
        assert len(gap) == 1 and gap[0]["start_s"] == pytest.approx(early["leave_s"])
        assert gap[0]["end_s"] - gap[0]["start_s"] > 0.5  # the lane sat empty until the arrivals


def test_the_queue_chart_follows_the_steps(queued):
    fig = queuecharts.queue_length(queued)
    waiting, busy = fig.data
    assert list(waiting.y) == [s["queue_length"] for s in queued["steps"]] and waiting.y[0] == 4
    assert list(busy.y) == [s["batch_size"] for s in queued["steps"]] and max(busy.y) == 3
    assert list(waiting.x) == [s["t_start"] for s in queued["steps"]]


def test_latency_distributions_count_every_finished_request(queued):
    v = queuecharts.latency_values(queued)
    assert sorted(v["ttft_ms"]) == sorted(q["ttft_s"] * 1e3 for q in queued["sequences"])
    assert len(v["tpot_ms"]) == 7 and all(x > 0 for x in v["tpot_ms"])
    fig = queuecharts.latency_distributions(queued)
    hist = [t for t in fig.data if t.type == "histogram"]
    assert [sorted(h.x) for h in hist] == [sorted(v["ttft_ms"]), sorted(v["tpot_ms"])]
    partial = {**queued, "sequences": [{k: q[k] for k in ("index", "output_token_ids", "finish_reason")}
                                       for q in queued["sequences"]]}
    assert not queuecharts.latency_distributions(partial).data  # a run in progress: a message, no bars


def test_a_static_batch_is_not_a_queue(queued):
    static = engine_trace(n=3, lanes=3)
    assert queuecharts.is_queued(queued) and not queuecharts.is_queued(static)
    assert not queuecharts.is_queued({**queued, "config": {**queued["config"], "requests": None}, "steps": static["steps"]})


# ---- the Live page, headless, on the packaged model -------------------------------------------------

pytest.importorskip("streamlit")

from test_app import errors, finish, new_app, start_live_run  # noqa: E402
from specviz.app import state as appstate  # noqa: E402

pytestmark = pytest.mark.usefixtures("navigation_owns_the_pages")


def charts_drawn(at) -> dict[str, dict]:
    return {el.key: json.loads(el.proto.spec) for el in at.get("plotly_chart")}


def test_the_queue_controls_reach_the_run_and_the_race_and_its_charts_draw():
    at = new_app()
    at.checkbox(key="race").check()
    at.number_input(key="requests").set_value(5)
    at.number_input(key="arrival_rate").set_value(50.0)
    run = finish(at, start_live_run(at, batch=2, max_new=3))
    assert run.status == "done", run.error
    assert (run.cfg.requests, run.cfg.arrival_rate, run.cfg.batch_size) == (5, 50.0, 2)
    assert len(run.trace["sequences"]) == 5 and run.trace["config"]["requests"] == 5
    reg = run.regular_trace["config"]
    assert reg["mode"] == "regular" and (reg["requests"], reg["arrival_rate"]) == (5, 50.0)  # the same queue
    assert not at.exception and not errors(at)
    drawn = charts_drawn(at)
    assert "Lane timeline" in drawn["ragged_lengths"]["layout"]["title"]["text"]
    assert drawn["queue_length"]["data"] and drawn["latency_distributions"]["data"]
    assert any("requests finished" in c.value for c in at.caption)


def test_a_static_run_looks_as_before_and_too_few_requests_is_one_line():
    at = new_app()
    run = finish(at, start_live_run(at, batch=2, max_new=3))
    assert run.status == "done" and run.cfg.requests is None
    drawn = charts_drawn(at)
    assert "Ragged lengths" in drawn["ragged_lengths"]["layout"]["title"]["text"]
    assert "queue_length" not in drawn and "latency_distributions" not in drawn
    at.number_input(key="requests").set_value(1)
    at.button(key="run").click().run()
    assert errors(at) == ["1 requests cannot fill 2 lanes: give --requests >= --batch-size, or --batch-size 1"]
