"""The Server page before a server answers, headless (AppTest): it opens on an explanation instead of an error,
says how to get a vLLM server (installed here: a button that starts one as a child process, and Stop;
not installed: the commands), and a server that answered and stopped gets a clear message."""

from __future__ import annotations

import os
import sys
import time

import pytest
from metricsserver import captured, captured_versions
from test_localvllm import free_port, gone
from test_server_page import ALWAYS_CHARTS, attached_page, drawn, no_model, server_page  # noqa: F401 - no_model is a fixture
import locations

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from specviz.device import localvllm  # noqa: E402
from specviz.app import servermon

ROOT = str(locations.ROOT)
FAKE = os.path.join(ROOT, "tests", "fakevllm.py")
VERSION = captured_versions()[-1]
pytestmark = pytest.mark.usefixtures("navigation_owns_the_pages")  # the Start and Stop clicks (tests/conftest.py)


@pytest.fixture
def nothing_at_the_default(monkeypatch):
    """The page's default address is a loopback port where nothing listens; returns that address."""
    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setattr(servermon, "DEFAULT_URL", url)
    monkeypatch.setattr(localvllm, "_current", None)
    return url


@pytest.fixture
def vllm_installed(monkeypatch, tmp_path):
    """SPECVIZ_VLLM_PYTHON names a file that exists, as .venv-vllm/bin/python does after setup.sh --vllm."""
    monkeypatch.setenv("SPECVIZ_VLLM_PYTHON", sys.executable)


@pytest.fixture
def vllm_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECVIZ_VLLM_PYTHON", str(tmp_path / "no" / "python"))


def opened() -> AppTest:
    """The Server page as a newcomer opens it: the default address, nothing typed."""
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=60)
    at.session_state["server_poll"] = False  # the test polls by running the page
    at.switch_page("pages/server.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def local_buttons(at) -> list[str]:
    return [b.key for b in at.button if (b.key or "").startswith("server_local")]


def text(at) -> str:
    return "\n".join(el.value for kind in ("markdown", "caption", "code", "info", "warning", "success")
                     for el in at.get(kind))


def test_the_page_opens_on_an_explanation_not_an_error_when_no_server_answers(no_model, nothing_at_the_default,
                                                                              vllm_missing):
    at = opened()
    assert not at.error, [e.value for e in at.error]
    shown = text(at)
    assert "No vLLM server has answered at" in shown and "/metrics" in shown and "speculative config" in shown
    assert f"{localvllm.INSTALL}\n{localvllm.command_text(int(nothing_at_the_default.rsplit(':', 1)[1]))}" in \
        [c.value for c in at.code]  # not installed: the exact commands, and no button that would fail
    assert local_buttons(at) == []
    assert no_model == []


def test_with_vllm_installed_the_explanation_offers_a_start_button_instead_of_commands(no_model, nothing_at_the_default,
                                                                                       vllm_installed):
    at = opened()
    assert not at.error and local_buttons(at) == ["server_local_start"]
    assert localvllm.INSTALL not in text(at) and "127.0.0.1" in text(at)


def test_the_start_button_runs_a_loopback_server_the_page_attaches_to_and_stop_ends_it(
        no_model, nothing_at_the_default, vllm_installed, monkeypatch, tmp_path):
    record = tmp_path / "record.json"
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(record))  # tests/fakevllm.py stands for the CLI and vLLM
    monkeypatch.setattr(localvllm, "serve_argv", lambda port: [
        sys.executable, "-c", "import runpy, sys; print('vLLM serving (fake)', flush=True); "
        f"sys.argv = [{FAKE!r}] + sys.argv[1:]; runpy.run_path({FAKE!r}, run_name='__main__')",
        "--host", "127.0.0.1", "--port", str(port)])
    at = opened()
    at.button(key="server_local_start").click().run()
    local = localvllm.current()
    try:
        assert local is not None and local.port == int(nothing_at_the_default.rsplit(":", 1)[1])
        deadline = time.monotonic() + 30
        while not at.session_state["server_watch"].scrapes and time.monotonic() < deadline:
            time.sleep(0.3)
            at.run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        assert at.session_state["server_watch"].scrapes, text(at)  # attached: it answers /metrics
        assert any(servermon.plain("0.0-fake") in c.value for c in at.caption)  # the fake's /version, on the attached caption
        assert any("started here serves" in s.value for s in at.success)
        assert local_buttons(at) == ["server_local_stop"]
        at.button(key="server_local_stop").click().run()
        local.proc.wait(30)
        assert gone(int((tmp_path / "record.json.child").read_text()))  # Stop signals the group, not one pid
        at.run()
        assert not at.error and any("stopped answering" in w.value for w in at.warning)
        assert local_buttons(at) == ["server_local_start"]  # and it can start again
    finally:
        local = localvllm.current()
        if local is not None and local.running:
            local.stop()
            local.proc.wait(30)


def test_an_address_that_stops_answering_after_answering_says_so_and_keeps_its_numbers(no_model):
    at = attached_page(captured(VERSION, "before"), captured(VERSION, "after"))
    url = at.session_state["server_url"]
    at.run()  # the server is gone: its port refuses
    assert not at.exception and not at.error, [e.value for e in at.error]
    (warning,) = [w.value for w in at.warning]
    assert "stopped answering" in warning and "Connection refused" in warning and "start it again" in warning
    assert servermon.plain(url + "/metrics", 300) in warning
    assert "No vLLM server has answered" not in text(at)  # it did answer: no newcomer's explanation
    assert ALWAYS_CHARTS <= drawn(at)  # what it reported before stays on the charts


def test_a_typed_address_where_nothing_listens_is_an_error_with_the_explanation_under_it(no_model):
    at = server_page(f"http://127.0.0.1:{free_port()}")
    assert len(at.error) == 1 and "cannot reach" in at.error[0].value and "is the server running" in at.error[0].value
    assert "No vLLM server has answered at" in text(at)
