"""The Server page, headless (AppTest), against a real local HTTP server that serves /metrics text
captured from a real vLLM server (tests/data/vllm), and against the addresses users get wrong."""

from __future__ import annotations

import json
import os

import pytest
from metricsserver import MetricsServer, captured, captured_versions, without
import locations

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from specviz.app import servermon, state as appstate  # noqa: E402
from specviz.peers import metrics  # noqa: E402

ROOT = str(locations.ROOT)
VERSION = captured_versions()[-1]
SPEC_CHARTS = {"server_per_position", "server_acceptance", "server_length", "server_position_model"}
ALWAYS_CHARTS = {"server_throughput", "server_requests"}


@pytest.fixture
def no_model(monkeypatch):
    """Fails the test if anything asks the sidebar for a model."""
    calls = []
    monkeypatch.setattr(appstate, "model_facts", lambda *a: calls.append(a) or pytest.fail(f"model loaded: {a}"))
    return calls


def server_page(url: str, **state) -> AppTest:
    """The Server page at ``url``, run once; ``state``: other session keys set before (e.g. the costs)."""
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=60)
    at.session_state["server_url"] = url
    at.session_state["server_poll"] = False  # the test polls by running the page
    for key, value in state.items():
        at.session_state[key] = value
    at.switch_page("pages/server.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def attached_page(before: str, after: str, **state) -> AppTest:
    """The page attached to a server that served ``before``, then ``after``; the server is gone on return."""
    with MetricsServer() as srv:
        srv.metrics(before)
        at = server_page(srv.url, **state)
        srv.metrics(after)
        at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    return at


def drawn(at) -> set[str]:
    return {el.key for el in at.get("plotly_chart") if json.loads(el.proto.spec).get("data")}


def metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def test_the_page_plots_the_captured_counters_and_the_model_beside_them(no_model):
    before, after = captured(VERSION, "before"), captured(VERSION, "after")
    with MetricsServer() as srv:
        srv.metrics(before)
        at = server_page(srv.url)
        assert not at.error and any("next scrape" in i.value for i in at.info)
        srv.metrics(after)
        at.run()
        assert not at.exception and not at.error, [e.value for e in at.error]
    d = metrics.delta(metrics.parse(before), metrics.parse(after))
    assert metric(at, "acceptance rate") == f"{d.acceptance_rate:.3f}"
    assert metric(at, "mean acceptance length") == f"{d.mean_acceptance_length:.2f}"
    assert metric(at, "α (per position)") == f"{d.alpha:.3f}"
    assert float(metric(at, "output tokens/s")) > 0
    assert SPEC_CHARTS | ALWAYS_CHARTS <= drawn(at), SPEC_CHARTS | ALWAYS_CHARTS - drawn(at)
    table = at.dataframe[0].value
    running = int(metrics.parse(after).gauges["running"])
    assert list(table["batch size b"]) == ([running] if running else [1])
    assert (table["server's k"] == d.k).all() and table["suggested k*(b)"].between(0, servermon.K_MAX).all()
    assert no_model == []


def test_a_wrong_address_is_one_error_and_the_page_recovers_when_it_is_fixed(no_model):
    with MetricsServer() as srv:
        srv.metrics(captured(VERSION, "after"))
        good = srv.url
        at = server_page("http://127.0.0.1:9")
        assert [e.value for e in at.error] == ["cannot reach http://127.0.0.1:9/metrics: Connection refused "
                                               "(is the server running at that address?)"]
        at.text_input(key="server_url").set_value("not a url:x").run()
        assert not at.exception and len(at.error) == 1
        at.text_input(key="server_url").set_value(good).run()
        at.run()
        assert not at.exception and not at.error
        assert ALWAYS_CHARTS <= drawn(at)


@pytest.mark.parametrize("route,message", [((200, "text/html", "<html><body>a dashboard</body></html>"), "not Prometheus"),
                                           (None, "HTTP 404"),
                                           ((200, "text/plain", "process_cpu_seconds_total 3.5\n"), "not a vLLM server")])
def test_a_url_that_is_not_vllm_says_so(no_model, route, message):
    with MetricsServer() as srv:
        if route is not None:
            srv.routes["/metrics"] = route
        at = server_page(srv.url)
        at.run()
    assert not at.exception and len(at.error) == 1 and message in at.error[0].value
    assert at.title[0].value == "Server" and at.text_input(key="server_url").value == srv.url


def test_a_server_without_spec_decoding_shows_throughput_and_requests_with_a_clear_message(no_model):
    with MetricsServer() as srv:
        srv.metrics(without(captured(VERSION, "before"), "vllm:spec_decode"))
        at = server_page(srv.url)
        srv.metrics(without(captured(VERSION, "after"), "vllm:spec_decode"))
        at.run()
    assert not at.exception and not at.error
    assert metrics.NO_SPEC in [i.value for i in at.info]
    assert ALWAYS_CHARTS <= drawn(at) and not (SPEC_CHARTS & drawn(at))
    assert metric(at, "acceptance rate") == "—"


def test_an_old_vllm_without_per_position_counters_shows_the_rest_with_a_note(no_model):
    with MetricsServer() as srv:
        srv.metrics(without(captured(VERSION, "before"), metrics.PER_POSITION))
        at = server_page(srv.url)
        srv.metrics(without(captured(VERSION, "after"), metrics.PER_POSITION))
        at.run()
    assert not at.exception and not at.error
    assert any(metrics.PER_POSITION in i.value for i in at.info)
    assert {"server_acceptance", "server_length"} | ALWAYS_CHARTS <= drawn(at)
    assert not {"server_per_position", "server_position_model"} & drawn(at)
    assert metric(at, "mean acceptance length") != "—"


def test_a_restarted_server_starts_the_history_again(no_model):
    with MetricsServer() as srv:
        srv.metrics(captured(VERSION, "after"))
        at = server_page(srv.url)
        srv.metrics(captured(VERSION, "before"))
        at.run()
    assert not at.exception and any("restarted" in w.value for w in at.warning)
    assert len(at.session_state["server_watch"].scrapes) == 1


def test_a_calibration_file_gives_the_prediction_its_costs(no_model, tmp_path, monkeypatch):
    from specviz.analysis.analytic import CostModel
    from specviz.analysis.costs import Calibration, calibration_path

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    cal = Calibration(target="t", draft="ngram", device="cpu", dtype="torch.bfloat16",
                      target_cost=CostModel(0.001, 0.02, 0.0002), draft_cost=CostModel(0.0, 0.0, 0.0),
                      overhead={"1": 0.001, "8": 0.002}, residuals={}, samples={})
    path = calibration_path("t", "ngram", "cpu", "bfloat16")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(cal.to_json()))
    label = next(iter(servermon.calibration_files()))
    with MetricsServer() as srv:
        srv.metrics(captured(VERSION, "before"))
        at = server_page(srv.url)
        srv.metrics(captured(VERSION, "after"))
        at.radio(key="server_costs").set_value(label).run()
    assert not at.exception and not at.error
    d = metrics.delta(metrics.parse(captured(VERSION, "before")), metrics.parse(captured(VERSION, "after")))
    table = at.dataframe[0].value
    expected = servermon.prediction(d, cal.costs, list(table["batch size b"]))["rows"]
    assert list(table["suggested k*(b)"]) == [r["suggested k*(b)"] for r in expected]
