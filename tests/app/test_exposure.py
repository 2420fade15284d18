"""An app reachable from other machines (Streamlit's server.address not loopback) loads only the
SPECVIZ_MODELS SPECs and its Server page fetches only the SPECVIZ_SERVER_ALLOW hosts
(specviz.app.exposure); on loopback nothing is limited."""

from __future__ import annotations

import os

import pytest
from metricsserver import MetricsServer

from specviz.app import exposure, state as appstate
from specviz.common import SpecvizError
import locations

ROOT = str(locations.ROOT)
HOSTILE = ["HuggingFaceTB/SmolLM2-360M-Instruct", "gpt2@main", "/home/someone/models/llama", "/tmp/x.gguf", "ngram:x",
           "default ", "Default"]


@pytest.mark.parametrize("address", [None, "", "0.0.0.0", "::", "[::]", "192.168.1.20", "10.0.0.5", "gpu-box",
                                     "fe80::1", "::ffff:127.0.0.1"])
def test_every_address_but_loopback_counts_as_exposed(address):
    assert exposure.is_exposed(address)


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", " LOCALHOST "])
def test_loopback_addresses_are_not_exposed(address):
    assert not exposure.is_exposed(address)


@pytest.mark.parametrize("spec", ["default", "ngram", "ngram:3", "suffix", "none", "", None])
def test_the_default_allowlist_is_the_packaged_pair_and_the_model_free_drafts(spec):
    exposure.check_model_allowed(spec, exposed=True, env={})


@pytest.mark.parametrize("spec", HOSTILE)
def test_anything_else_is_refused_in_one_line_when_exposed(spec):
    with pytest.raises(SpecvizError) as e:
        exposure.check_model_allowed(spec, exposed=True, env={})
    assert "SPECVIZ_MODELS (default, default+suffix, ngram, none, suffix)" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("spec", HOSTILE)
def test_loopback_allows_every_spec(spec):
    exposure.check_model_allowed(spec, exposed=False, env={"SPECVIZ_MODELS": "default"})


def test_specviz_models_replaces_the_default_allowlist():
    env = {"SPECVIZ_MODELS": " gpt2@main , /srv/models/llama,,"}
    for spec in ("gpt2@main", "/srv/models/llama"):
        exposure.check_model_allowed(spec, exposed=True, env=env)
    for spec in ("default", "ngram", "ngram:2", "gpt2", "/srv/models"):
        with pytest.raises(SpecvizError, match=r"SPECVIZ_MODELS \(/srv/models/llama, gpt2@main\)"):
            exposure.check_model_allowed(spec, exposed=True, env=env)
    exposure.check_model_allowed("default", exposed=True, env={"SPECVIZ_MODELS": " , "})  # empty: the default


@pytest.fixture
def bound_to():
    """Sets Streamlit's server.address for the test (what `--server.address` sets on a real server)."""
    from streamlit import config

    before = config.get_option("server.address")
    yield lambda address: config.set_option("server.address", address)
    config.set_option("server.address", before)


def test_this_checkout_binds_loopback_so_nothing_is_limited():
    assert exposure.bind_address() == "127.0.0.1" and not exposure.exposed_now()


@pytest.mark.parametrize("state", [{"target": "gpt2"}, {"draft_kind": "model", "draft_spec": "/tmp/evil.gguf"}])
def test_the_session_accessors_every_run_and_job_reads_refuse_on_an_exposed_bind(bound_to, monkeypatch, state):
    monkeypatch.delenv("SPECVIZ_MODELS", raising=False)
    appstate.sidebar_values(state), appstate.draft_spec(state)  # loopback: anything goes
    bound_to("0.0.0.0")
    with pytest.raises(SpecvizError, match="not in SPECVIZ_MODELS"):
        appstate.sidebar_values(state), appstate.draft_spec(state)
    assert appstate.sidebar_values({})["target"] == "default"
    assert appstate.draft_spec({"draft_kind": "ngram"}) == "ngram"


# ---- the app ---------------------------------------------------------------------------------------

st_testing = pytest.importorskip("streamlit.testing.v1")


def server_page(state: dict):
    at = st_testing.AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=60)
    for k, v in {"server_poll": False, **state}.items():
        at.session_state[k] = v
    at.switch_page("pages/server.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.fixture
def no_model(monkeypatch):
    monkeypatch.setattr(appstate, "model_facts", lambda *a: pytest.fail(f"model loaded: {a}"))
    monkeypatch.setattr(appstate, "pair_problem", lambda *a: pytest.fail(f"model loaded: {a}"))


def test_an_exposed_app_stops_before_any_page_runs_with_a_refused_spec(bound_to, no_model, monkeypatch):
    monkeypatch.delenv("SPECVIZ_MODELS", raising=False)
    bound_to("0.0.0.0")
    with MetricsServer() as srv:
        at = server_page({"target": "/home/someone/model.gguf", "server_url": srv.url})
    assert [e.value for e in at.sidebar.error] == [
        "'/home/someone/model.gguf' is not in SPECVIZ_MODELS (default, default+suffix, ngram, none, suffix): this app listens beyond this "
        "machine, so it loads only the models listed there"]
    assert not at.title and srv.requests == []  # the page did not run: nothing fetched either
