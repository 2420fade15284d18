"""The Server page's Recommend panel, headless (AppTest), on a local HTTP server serving a real vLLM's captured
/metrics: it gives `specviz tune`'s answer (specviz.analysis.tune) for the server's counts since attached and
the costs chosen on the page, in the chosen engine's settings."""

from __future__ import annotations

import json
import re
import statistics

import pytest
from metricsserver import captured, captured_versions, without
from test_server_page import attached_page, no_model  # noqa: F401 - no_model is a fixture

pytest.importorskip("streamlit")

from specviz.analysis.acceptstats import counts_from_vllm  # noqa: E402
from specviz.analysis.tune import Acceptance, recommend_k  # noqa: E402
from specviz.app import servermon  # noqa: E402
from specviz.peers import metrics  # noqa: E402

VERSION = captured_versions()[-1]
RUNNING = 8.0  # the after-scrape's running requests: the batch size the server ran


def running(text: str, n: float) -> str:
    return re.sub(r"^(vllm:num_requests_running\{[^}]*\}) \S+$", rf"\g<1> {n}", text, flags=re.M)


def test_the_recommend_panel_gives_tunes_k_for_the_servers_counts_and_the_pages_costs(no_model):
    before, after = captured(VERSION, "before"), running(captured(VERSION, "after"), RUNNING)
    at = attached_page(before, after, server_c=0.3)  # a draft step 0.3 of a target step: fewer than its k = 4 pay
    d = metrics.delta(metrics.parse(before), metrics.parse(after))
    acc = Acceptance.from_counts(counts_from_vllm(d.drafts, d.accepted_per_position))
    costs = servermon.entered_costs(0.02, 0.3, 64, 0.0)  # the page's entered costs (20 ms, c, knee 64, no overhead)
    serve = max(1, round(statistics.median([metrics.parse(before).gauges["running"], RUNNING])))
    best = recommend_k(acc, costs, serve).k
    assert 0 < best < d.k  # the answer is the model's, not the server's own k
    assert "Recommend" in [h.value for h in at.subheader]
    table = next(t.value for t in at.dataframe if "goodput (tokens/s)" in t.value.columns)
    assert list(table["batch size"]) == [int(RUNNING)]
    assert list(table["k"]) == [str(recommend_k(acc, costs, int(RUNNING)).k)]
    assert at.selectbox(key="server_rec_engine").value == "vllm"
    (config,) = [json.loads(c.value) for c in at.code if c.value.startswith("{")]  # the --speculative-config JSON
    assert config["num_speculative_tokens"] == best and config["method"] == "ngram"
    assert any("specviz tune: k = " in c.value.replace("\\", "") for c in at.caption)  # its one-line explanation


def test_the_engine_selector_writes_the_same_k_in_llama_cpps_form(no_model):
    at = attached_page(captured(VERSION, "before"), captured(VERSION, "after"), server_c=0.3)
    config = next(json.loads(c.value) for c in at.code if c.value.startswith("{"))
    at.selectbox(key="server_rec_engine").set_value("llamacpp").run()
    assert not at.exception
    assert f"--draft-max {config['num_speculative_tokens']} " in next(c.value for c in at.code
                                                                      if c.value.startswith("--draft-max"))


def test_costs_that_make_speculation_lose_turn_it_off_with_the_reason(no_model):
    # a draft step as dear as a target step: no k pays, at any batch size
    at = attached_page(captured(VERSION, "before"), captured(VERSION, "after"), server_c=1.0)
    table = next(t.value for t in at.dataframe if "goodput (tokens/s)" in t.value.columns)
    assert set(table["k"]) == {"off"}
    assert not [c for c in at.code if c.value.startswith("{")]  # nothing to paste
    assert any("leave \\-\\-speculative\\-config out" in c.value for c in at.caption)
    assert any("Speculation off at batch size" in c.value for c in at.caption)


def test_a_server_without_spec_decoding_gets_no_recommendation_but_a_reason(no_model):
    at = attached_page(without(captured(VERSION, "before"), "vllm:spec_decode"),
                       without(captured(VERSION, "after"), "vllm:spec_decode"))
    assert any("No recommendation without speculative decoding" in c.value for c in at.caption)
    assert not [t for t in at.dataframe if "goodput (tokens/s)" in t.value.columns]
