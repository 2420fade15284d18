"""The Server page fetches only the address it is given (specviz.peers.fetch through
specviz.peers.metrics): real local HTTP servers (tests/metricsserver.py) stand for a vLLM server, a
redirecting one, the address it redirects to, a proxy, and a server that answers with a page of its own."""

from __future__ import annotations

import os
import socket
import urllib.request

import pytest
from metricsserver import MetricsServer, captured, captured_versions

from specviz.app import exposure, servermon
from specviz.common import SpecvizError
from specviz.peers import fetch, metrics
from test_exposure import bound_to  # noqa: F401 - the fixture that sets Streamlit's server.address
import locations

ROOT = str(locations.ROOT)
VERSION = captured_versions()[-1]
SECRET = "SECRET-7f3a9c-do-not-show"
HTML = (200, "text/html; charset=utf-8", f"<html><body><h1>Admin</h1><p>{SECRET}</p></body></html>")


def test_redirect_is_reported_not_followed():
    with MetricsServer() as target, MetricsServer() as redirector:
        target.routes["/admin/secret"] = (200, "text/plain", SECRET)
        redirector.routes["/metrics"] = (302, "text/plain", "", {"Location": f"{target.url}/admin/secret"})
        with urllib.request.urlopen(f"{redirector.url}/metrics", timeout=5) as r:  # what urllib alone does
            assert r.read().decode() == SECRET and target.requests == ["/admin/secret"]
        target.requests.clear(), redirector.requests.clear()
        with pytest.raises(SpecvizError) as e:
            metrics.scrape(redirector.url)
        assert servermon.page_version(redirector.url) is None  # /version goes through the same fetch
    assert "302" in str(e.value) and "does not follow" in str(e.value) and SECRET not in str(e.value)
    assert target.requests == [] and redirector.requests == ["/metrics", "/version"]


def test_a_page_that_is_not_prometheus_is_named_by_status_and_type_never_quoted():
    with MetricsServer({"/metrics": HTML}) as srv:
        with pytest.raises(SpecvizError) as e:
            metrics.scrape(srv.url)
    assert str(e.value) == f"{srv.url}/metrics: not Prometheus text (HTTP 200, content type text/html)"


@pytest.mark.parametrize("body", [HTML[2], f"{SECRET} 1 2 3 4\n", f"process_cpu_{SECRET.replace('-', '_')} 1\n",
                                  f'vllm:spec_decode_num_accepted_tokens_per_pos{{position="{SECRET}"}} 1\n'])
def test_no_error_quotes_what_the_server_sent(body):
    with MetricsServer({"/metrics": (200, "text/plain", body)}) as srv:
        with pytest.raises(SpecvizError) as e:
            metrics.scrape(srv.url)
    assert SECRET not in str(e.value) and SECRET.replace("-", "_") not in str(e.value)


def test_an_error_status_shows_the_code_not_the_servers_reason_text():
    with MetricsServer() as srv:
        with pytest.raises(SpecvizError, match=r"answered HTTP 404 \(Not Found\)"):
            metrics.scrape(srv.url)


def test_proxy_variables_are_ignored(monkeypatch):
    with MetricsServer() as proxy, MetricsServer() as srv:
        srv.metrics(captured(VERSION, "after"))
        for name in ("http_proxy", "no_proxy", "NO_PROXY", "REQUEST_METHOD"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        with pytest.raises(OSError):  # a default urllib opener asks the proxy (which answers 404)
            urllib.request.build_opener().open(f"{srv.url}/metrics", timeout=5)
        assert proxy.requests == [f"{srv.url}/metrics"]
        proxy.requests.clear()
        assert metrics.scrape(srv.url).models == metrics.parse(captured(VERSION, "after")).models
    assert proxy.requests == [] and srv.requests == ["/metrics"]


@pytest.fixture
def no_connection(monkeypatch):
    """Fails the test if anything opens a TCP connection."""
    def connect(*a, **kw):
        pytest.fail(f"connected to {a}")
    monkeypatch.setattr(socket, "create_connection", connect)


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data", "http://169.254.10.20:8000",
                                 "http://[fe80::1]:8000", "http://[fd00:ec2::254]", "http://metadata.google.internal",
                                 "http://METADATA.google.internal./computeMetadata/v1",
                                 "http://[::ffff:169.254.169.254]"])
def test_link_local_and_metadata_addresses_are_refused_without_connecting(no_connection, url):
    with pytest.raises(fetch.Refused, match="metadata"):
        metrics.scrape(url)


def test_a_name_is_checked_on_every_address_it_resolves_to(no_connection, monkeypatch):
    real = socket.getaddrinfo

    def resolve(host, *a, **kw):  # a name that resolves to a fine address and to the metadata service
        if host == "vllm.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.5", 80)),
                    (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", 80))]
        return real(host, *a, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    with pytest.raises(fetch.Refused, match="vllm.example is a link-local or cloud-metadata address"):
        metrics.scrape("http://vllm.example")


def test_an_allowlist_fetches_only_its_hosts_and_asks_nothing_of_the_others():
    with MetricsServer() as srv:
        srv.metrics(captured(VERSION, "after"))
        port = int(srv.url.rsplit(":", 1)[1])
        for allow in (frozenset(), frozenset({"127.0.0.1:1"}), frozenset({"localhost"})):
            with pytest.raises(fetch.Refused, match=f"127.0.0.1:{port} is not in SPECVIZ_SERVER_ALLOW"):
                metrics.scrape(srv.url, allow=allow)
        assert srv.requests == []
        for allow in ({"127.0.0.1"}, {f"127.0.0.1:{port}"}, {"gpu-node:8000", f" 127.0.0.1:{port} "}):
            assert metrics.scrape(srv.url, allow=frozenset(allow)).models
        assert len(srv.requests) == 3


@pytest.mark.parametrize("entry,host,port,allowed", [
    ("gpu-node", "gpu-node", 8000, True), ("GPU-node:8000", "gpu-node", 8000, True),
    ("gpu-node:8000", "gpu-node", 8001, False), ("[::1]:8000", "::1", 8000, True), ("::1", "::1", 9, True),
    ("gpu", "gpu-node", 8000, False), ("gpu-node:port", "gpu-node", 8000, False)])
def test_allowlist_entries_are_a_host_or_a_host_and_port(entry, host, port, allowed):
    assert fetch.host_allowed(host, port, [entry]) is allowed


def test_the_page_fetch_limits_hosts_only_on_an_exposed_bind(monkeypatch):
    monkeypatch.delenv("SPECVIZ_SERVER_ALLOW", raising=False)
    assert exposure.server_fetch_allow(False, {"SPECVIZ_SERVER_ALLOW": "a"}) is None
    assert exposure.server_fetch_allow(True, {}) == frozenset()
    listed = {"SPECVIZ_SERVER_ALLOW": "GPU-node:8000, 10.0.0.5,"}
    assert exposure.server_fetch_allow(True, listed) == {"gpu-node:8000", "10.0.0.5"}
    with MetricsServer() as srv:  # this checkout's config binds 127.0.0.1: the page fetches any host
        srv.metrics(captured(VERSION, "after"))
        assert exposure.bind_address() == "127.0.0.1"
        assert servermon.page_scrape(srv.url).models


@pytest.mark.parametrize("text,shown", [("0.11.0", "0\\.11\\.0"),
                                        ("![x](http://e/i.png)", "\\!\\[x\\]\\(http\\:\\/\\/e\\/i\\.png\\)"),
                                        ("<img src=x onerror=alert(1)>", "\\<img src\\=x onerror\\=alert\\(1\\)\\>"),
                                        ("a\nb\x00c", "a b c"), ("$x$ **b**", "\\$x\\$ \\*\\*b\\*\\*")])
def test_a_servers_text_is_made_inert_for_markdown(text, shown):
    assert servermon.plain(text) == shown
    assert len(servermon.plain("v" * 500)) == 80


# ---- the page ----------------------------------------------------------------------------------------

st_testing = pytest.importorskip("streamlit.testing.v1")


def server_page(url: str):
    at = st_testing.AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=60)
    at.session_state["server_url"] = url
    at.session_state["server_poll"] = False
    at.switch_page("pages/server.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def page_text(at) -> str:
    """Everything the page sent to the browser, as protobuf text."""
    return "\n".join(str(getattr(node, "proto", "")) for block in (at.main, at.sidebar) for node in block)


def test_the_page_never_shows_a_servers_own_page_or_follows_its_redirect():
    with MetricsServer({"/metrics": HTML}) as html, MetricsServer() as target, MetricsServer() as redirector:
        target.routes["/admin/secret"] = (200, "text/plain", SECRET)
        redirector.routes["/metrics"] = (302, "text/plain", "", {"Location": f"{target.url}/admin/secret"})
        at = server_page(html.url)
        expected = f"{html.url}/metrics: not Prometheus text (HTTP 200, content type text/html)"
        assert [e.value for e in at.error] == [expected]
        assert SECRET not in page_text(at)
        at.text_input(key="server_url").set_value(redirector.url).run()
        assert not at.exception and len(at.error) == 1 and "302" in at.error[0].value
    assert target.requests == [] and SECRET not in page_text(at)


def test_the_page_escapes_the_version_and_model_names():
    after = captured(VERSION, "after").replace('model_name="', 'model_name="**bold**[l](http://e)')
    with MetricsServer({"/version": (200, "application/json", '{"version": "<b>![i](http://e/i.png)"}')}) as srv:
        srv.metrics(after)
        at = server_page(srv.url)
    caption = at.caption[0].value
    assert "vLLM \\<b\\>\\!\\[i\\]\\(http\\:\\/\\/e\\/i\\.png\\)" in caption and "\\*\\*bold\\*\\*\\[l\\]" in caption
    assert "](http" not in caption and "<b>" not in caption


def test_an_exposed_server_page_fetches_only_the_allowed_hosts(bound_to, monkeypatch):
    bound_to("0.0.0.0")
    monkeypatch.delenv("SPECVIZ_SERVER_ALLOW", raising=False)
    with MetricsServer() as srv:
        srv.metrics(captured(VERSION, "after"))
        at = server_page(srv.url)
        assert [e.value for e in at.error] == [f"127.0.0.1:{srv.url.rsplit(':', 1)[1]} is not in SPECVIZ_SERVER_ALLOW: "
                                               "this app listens beyond this machine, so the Server page fetches only "
                                               "the hosts listed there"]
        assert srv.requests == []
        monkeypatch.setenv("SPECVIZ_SERVER_ALLOW", f"gpu-node:8000,{srv.url.removeprefix('http://')}")
        at.run()
    assert not at.exception and not at.error and srv.requests == ["/metrics", "/version"]
