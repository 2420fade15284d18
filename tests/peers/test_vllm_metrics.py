"""specviz.peers.metrics on /metrics text captured from a real vLLM server (tests/data/vllm, the
version in the file name), and on what other servers send: none without spec decoding, an older
vLLM without some counters, something that is not vLLM at all, garbage."""

from __future__ import annotations

import random
import re

import pytest
from metricsserver import MetricsServer, captured, captured_versions, without

from specviz.common import SpecvizError
from specviz.peers import metrics

VERSIONS = captured_versions()
assert VERSIONS, "no captured vLLM /metrics in tests/data/vllm (metrics-<version>-{before,after}.txt)"


@pytest.fixture(params=VERSIONS)
def version(request) -> str:
    return request.param


def raw_total(text: str, name: str, label: str = "") -> float:
    """A counter's value summed straight from the text's `name_total{...} value` lines (an independent
    reading to check the parser against)."""
    pat = re.compile(rf"^{re.escape(name)}_total\{{([^}}]*)\}} (\S+)$", re.M)
    return sum(float(v) for labels, v in pat.findall(text) if label in labels)


def test_captured_scrape_has_every_spec_counter_the_generation_tokens_and_the_gauges(version):
    s = metrics.parse(captured(version, "after"))
    assert s.has_spec
    assert {"drafts", "draft_tokens", "accepted", "generation_tokens", "prompt_tokens"} <= set(s.counters)
    assert s.per_position is not None and len(s.per_position) >= 1
    assert {"running", "waiting"} <= set(s.gauges)
    assert s.models  # the model_name label


def test_parsed_counters_equal_the_total_lines_not_the_created_timestamps(version):
    text = captured(version, "after")
    s = metrics.parse(text)
    for ours, name in {**metrics.SPEC_COUNTERS, "generation_tokens": "vllm:generation_tokens"}.items():
        assert s.counters[ours] == raw_total(text, name), ours
    for j, v in enumerate(s.per_position):
        assert v == raw_total(text, metrics.PER_POSITION, f'position="{j}"')
    assert s.counters["drafts"] < 1e6  # a _created sample (a Unix time, ~1.7e9) was not added in


def test_counters_moved_consistently_between_the_captured_scrapes(version):
    d = metrics.delta(metrics.parse(captured(version, "before"), t=0.0), metrics.parse(captured(version, "after"), t=2.0))
    assert d.drafts > 0 and d.generation_tokens > 0
    assert 0 <= d.accepted <= d.draft_tokens <= d.k * d.drafts
    assert sum(d.accepted_per_position) == d.accepted  # every accepted token sits at one position
    assert list(d.accepted_per_position) == sorted(d.accepted_per_position, reverse=True)  # P(A >= j) falls with j
    assert d.acceptance_rate == d.accepted / d.draft_tokens
    assert 1.0 <= d.mean_acceptance_length == 1 + d.accepted / d.drafts <= d.k + 1
    assert 0.0 <= d.alpha <= 1.0 and d.alpha >= d.acceptance_rate  # trials <= draft tokens
    assert d.throughput == d.generation_tokens / 2.0
    assert d.notes() == [] or all("fewer than k" in n for n in d.notes())


def test_engines_are_summed_and_a_model_filter_keeps_one_model(version):
    text = captured(version, "after")
    one = metrics.parse(text)
    model = one.models[0]
    twin = re.sub(r'engine="0"', 'engine="1"', text)  # a second data-parallel engine
    other = re.sub(rf'model_name="{re.escape(model)}"', 'model_name="other"', text)
    both = metrics.parse(text + twin)
    assert both.counters["accepted"] == 2 * one.counters["accepted"]
    assert both.per_position == tuple(2 * v for v in one.per_position)
    mixed = metrics.parse(text + other, model=model)
    assert mixed.counters == one.counters and set(mixed.models) == {model, "other"}


def test_counters_without_the_total_suffix_read_the_same(version):
    text = captured(version, "after")
    bare = "".join(ln for ln in re.sub(r"_total([{ ])", r"\1", text).splitlines(keepends=True)
                   if not ln.startswith("#"))  # an exporter with untyped samples and no suffix
    a, b = metrics.parse(text), metrics.parse(bare)
    assert (a.counters, a.per_position, a.gauges) == (b.counters, b.per_position, b.gauges)


def test_a_server_without_spec_decoding_has_no_spec_counters_and_says_so(version):
    before, after = (without(captured(version, w), "vllm:spec_decode") for w in ("before", "after"))
    d = metrics.delta(metrics.parse(before, t=0.0), metrics.parse(after, t=1.0))
    assert not d.has_spec
    assert d.notes() == [metrics.NO_SPEC]
    assert d.acceptance_rate is None and d.mean_acceptance_length is None and d.alpha is None
    assert d.throughput > 0 and d.running is not None  # the rest is still there


def test_an_old_vllm_without_per_position_counters_still_gives_the_rest_with_a_note(version):
    before, after = (without(captured(version, w), metrics.PER_POSITION) for w in ("before", "after"))
    full = metrics.delta(metrics.parse(captured(version, "before")), metrics.parse(captured(version, "after")))
    d = metrics.delta(metrics.parse(before), metrics.parse(after))
    assert d.accepted_per_position is None and d.acceptance_per_position is None
    assert d.acceptance_rate == full.acceptance_rate and d.mean_acceptance_length == full.mean_acceptance_length
    assert d.k == round(full.draft_tokens / full.drafts) and 0 <= d.alpha <= 1  # from the mean accepted count
    assert any(metrics.PER_POSITION in n for n in d.notes())


def test_an_old_vllm_without_num_drafts_gives_the_acceptance_rate_only(version):
    before, after = (without(captured(version, w), "vllm:spec_decode_num_drafts", metrics.PER_POSITION)
                     for w in ("before", "after"))
    d = metrics.delta(metrics.parse(before), metrics.parse(after))
    assert d.acceptance_rate is not None and d.mean_acceptance_length is None and d.alpha is None
    assert any("num_drafts" in n for n in d.notes())


def test_counters_going_down_are_a_restart_not_negative_rates(version):
    before, after = metrics.parse(captured(version, "before")), metrics.parse(captured(version, "after"))
    assert metrics.counters_went_down(after, before) and not metrics.counters_went_down(before, after)
    with pytest.raises(SpecvizError, match="restarted"):
        metrics.delta(after, before)


@pytest.mark.parametrize("text", ["<!doctype html><html><body>Grafana</body></html>", '{"detail": "Not Found"}',
                                  'vllm:spec_decode_num_drafts_total{engine="0" 3', "vllm:num_requests_running two",
                                  "\x00\x01\x02 binary"])
def test_garbage_is_one_clear_error(text):
    with pytest.raises(SpecvizError, match="not Prometheus metrics text"):
        metrics.parse(text)


def test_prometheus_text_from_something_else_is_not_a_vllm_server():
    with pytest.raises(SpecvizError, match="not a vLLM server"):
        metrics.parse("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3.5\n")
    with pytest.raises(SpecvizError, match="not a vLLM server"):
        metrics.parse("")


def test_alpha_from_per_position_counts_recovers_iid_acceptance_and_the_rate_is_biased_low():
    rng, alpha, k, n = random.Random(0), 0.6, 4, 20000
    per_pos = [0] * k
    for _ in range(n):
        a = 0
        while a < k and rng.random() < alpha:
            a += 1
        for j in range(a):
            per_pos[j] += 1
    d = metrics.Delta(seconds=1.0, drafts=n, draft_tokens=n * k, accepted=sum(per_pos),
                      accepted_per_position=tuple(per_pos), generation_tokens=None, running=None, waiting=None,
                      has_spec=True)
    assert abs(d.alpha - alpha) < 0.01
    assert d.acceptance_rate < alpha - 0.1  # accepted / drafted counts positions after a rejection
    assert [round(p, 2) for p in d.acceptance_per_position] == pytest.approx([alpha ** (j + 1) for j in range(k)], abs=0.02)
    no_pos = metrics.Delta(**{**d.__dict__, "accepted_per_position": None})
    assert abs(no_pos.alpha - alpha) < 0.01  # inverted from E[accepted] at this k


@pytest.mark.parametrize("typed,expected", [("127.0.0.1:8000", "http://127.0.0.1:8000/metrics"),
                                            ("http://gpu-node:8000/", "http://gpu-node:8000/metrics"),
                                            ("https://h.example/vllm/metrics", "https://h.example/vllm/metrics")])
def test_an_address_becomes_its_metrics_url(typed, expected):
    assert metrics.metrics_url(typed) == expected


@pytest.mark.parametrize("typed,message", [("", "enter the server's address"), ("ftp://h", "not an http"),
                                           ("http://h:port", "not a valid port")])
def test_a_bad_address_is_one_line(typed, message):
    with pytest.raises(SpecvizError, match=message):
        metrics.metrics_url(typed)


def test_scrape_over_http_reads_the_captured_text_and_reports_what_went_wrong(version):
    with MetricsServer() as srv:
        srv.metrics(captured(version, "after"))
        assert metrics.scrape(srv.url).counters == metrics.parse(captured(version, "after")).counters
        srv.routes["/metrics"] = (200, "text/html", "<html><body>a dashboard</body></html>")
        with pytest.raises(SpecvizError, match="not Prometheus"):
            metrics.scrape(srv.url)
        del srv.routes["/metrics"]
        with pytest.raises(SpecvizError, match="HTTP 404"):
            metrics.scrape(srv.url)
        srv.routes["/version"] = (200, "application/json", '{"version": "9.9.9"}')
        assert metrics.server_version(srv.url) == "9.9.9"
        port = srv.url
    with pytest.raises(SpecvizError, match="cannot reach"):
        metrics.scrape(port)  # the server is gone: nothing listens there now
