"""The Streamlit app, headless through streamlit.testing.v1.AppTest, on the packaged default model.

Runs are short (batch 2, a few tokens, n-gram drafts). st.cache_resource and specviz.run's
model cache persist across AppTest instances in one pytest process, so the model loads once.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
import torch

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from specviz.app import state as appstate, liverun  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP = os.path.join(ROOT, "app.py")
PAGES = ["pages/live.py", "pages/speedup.py", "pages/sweep.py", "pages/correctness.py", "pages/hardware.py"]
LIVE_CHARTS = {"acceptance_heatmap", "acceptance_rate", "ragged_lengths", "wasted_slots", "phase_timeline",
               "token_latency", "utilization", "position_acceptance"}


def new_app(**sidebar) -> AppTest:
    """A fresh session, with sidebar values (widget keys) set as session state up front."""
    at = AppTest.from_file(APP, default_timeout=60)
    for key, value in sidebar.items():
        at.session_state[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def errors(at) -> list[str]:
    return [e.value for e in at.error]


def start_live_run(at, batch=2, max_new=8, prompts=None, draft="ngram"):
    at.session_state["draft_kind"] = draft
    at.slider(key="batch_size").set_value(batch)
    at.slider(key="max_new_tokens").set_value(max_new)
    if prompts is not None:
        at.text_area(key="prompts_text").set_value(prompts)
    at.button(key="run").click()
    at.run()
    return at.session_state[appstate.RUN_KEY] if appstate.RUN_KEY in at.session_state else None


def finish(at, run, timeout=120):
    deadline = time.monotonic() + timeout
    while run.running and time.monotonic() < deadline:
        run.beat()  # the page polls while the run goes; without it a long model load looks abandoned
        run.join(1.0)
    run.join(max(0.0, deadline - time.monotonic()))  # and the worker has released the model lock
    assert not run.running, f"run still {run.status} after {timeout} s"
    at.run()
    return run


@pytest.fixture(autouse=True)
def navigation_owns_the_pages(monkeypatch):
    """AppTest resets Streamlit's "pages/ folder" flag before every run, so each rerun would run
    the page file alone (old-style multipage mode: no app.py, no sidebar) and the page would
    rerun through app.py, dropping button clicks. On a live server the flag is cleared for good
    by app.py's first st.navigation call; do the same here."""
    from streamlit.runtime.pages_manager import PagesManager

    real_init = PagesManager.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        PagesManager.uses_pages_directory = False

    monkeypatch.setattr(PagesManager, "__init__", init)


@pytest.fixture(autouse=True)
def no_run_left_behind():
    """Stop any run a failing test left going (a decoding thread at exit aborts the process)."""
    runs = []
    real_start = appstate.LiveRun.start

    def start(self):
        runs.append(self)
        return real_start(self)

    appstate.LiveRun.start = start
    yield
    appstate.LiveRun.start = real_start
    for run in runs:
        run.stop()
        run.join(60)


# ---------------------------------------------------------------------------------------------------

def test_every_page_renders_without_exception():
    at = new_app()
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        assert at.title, page


def test_live_run_on_default_model_fills_every_chart():
    at = new_app()
    run = finish(at, start_live_run(at))
    assert run.status == "done", run.error
    assert not at.exception and not errors(at)
    trace = at.session_state[appstate.TRACE_KEY]
    assert trace["config"]["batch_size"] == 2 and len(trace["sequences"]) == 2
    assert all(0 < len(s["output_token_ids"]) <= 8 for s in trace["sequences"])
    drawn = {el.key for el in at.get("plotly_chart") if json.loads(el.proto.spec).get("data")}
    expected = LIVE_CHARTS if trace.get("telemetry") else LIVE_CHARTS - {"utilization"}
    assert expected <= drawn, expected - drawn
    metrics = {m.label: m.value for m in at.metric}
    assert float(metrics["tokens/s"]) > 0 and metrics["mean acceptance length"] != "—"
    assert any("color:#" in m.value and "row 0" in m.value for m in at.markdown)  # coloured text
    assert {b.proto.label for b in at.get("download_button")} >= {"Trace (JSON)", "Tables (CSV zip)"}


def test_trace_survives_a_page_switch_and_every_page_shows_it():
    at = new_app()
    finish(at, start_live_run(at, max_new=4))
    trace = at.session_state[appstate.TRACE_KEY]
    for page in PAGES[1:] + PAGES[:1]:
        at.switch_page(page).run()
        assert not at.exception, page
        assert at.session_state[appstate.TRACE_KEY] is trace
    assert "acceptance_heatmap" in {el.key for el in at.get("plotly_chart")}


def test_empty_prompt_list_and_empty_prompt_line_show_errors():
    at = new_app()
    assert start_live_run(at, prompts="   \n") is None
    assert any("no prompts" in e for e in errors(at))
    assert start_live_run(at, prompts="first prompt\n \nthird prompt") is None
    assert any("prompt 2 is empty" in e for e in errors(at))


def test_bad_target_spec_shows_error_and_the_app_keeps_working():
    at = new_app(target="/no/such/model.gguf")
    assert not at.exception
    assert any("target not loaded" in e and "not found" in e for e in errors(at))
    at.switch_page("pages/speedup.py").run()
    assert not at.exception and at.title


@pytest.fixture(scope="module")
def foreign_model_dir(tmp_path_factory):
    """A tiny model whose tokenizer has nothing in common with the default's."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    d = tmp_path_factory.mktemp("foreign")
    tok = Tokenizer(models.WordLevel({"<unk>": 0, "a": 1, "b": 2, "c": 3}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<unk>").save_pretrained(d)
    cfg = LlamaConfig(vocab_size=4, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1)
    LlamaForCausalLM(cfg).save_pretrained(d)
    return str(d)


def test_incompatible_tokenizers_show_error(foreign_model_dir):
    at = new_app(draft_kind="model", draft_spec=foreign_model_dir)
    assert not at.exception
    assert any("incompatible" in e for e in errors(at))
    at.button(key="run").click().run()
    assert appstate.RUN_KEY not in at.session_state or at.session_state[appstate.RUN_KEY] is None
    assert any("incompatible" in e for e in errors(at))


def test_out_of_memory_frees_memory_and_suggests_smaller_batch(monkeypatch):
    def oom(cfg):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(liverun, "load_pair", oom)
    at = new_app()
    run = finish(at, start_live_run(at))
    assert run.status == "error"
    assert any("out of memory" in e and "smaller batch size" in e for e in errors(at))
    assert not at.exception


def test_slider_moved_mid_run_then_stop_keeps_partial_output(monkeypatch):
    real_iter_run = liverun.iter_run

    def long_iter_run(*args, **kwargs):  # no EOS and a small pause per step: still running when we look
        for dec, rec in real_iter_run(*args, **kwargs):
            dec.eos = set()
            time.sleep(0.02)
            yield dec, rec

    monkeypatch.setattr(liverun, "iter_run", long_iter_run)
    at = new_app()
    run = start_live_run(at, batch=1, max_new=400, prompts="Count from one to one thousand in words.")
    assert run is not None
    while run.running and len(run.steps) < 2:
        run.join(0.1)
    at.slider(key="batch_size").set_value(3).run()
    assert any("continues with its start config" in w.value for w in at.warning)
    at.switch_page("pages/hardware.py").run()  # a page switch does not stop the run
    assert run.running and any("background" in i.value for i in at.info)
    at.switch_page("pages/live.py").run()
    at.button(key="stop").click().run()
    finish(at, run, timeout=60)
    assert run.status == "stopped"
    trace = at.session_state[appstate.TRACE_KEY]
    assert trace["sequences"][0]["finish_reason"] == "stopped"
    assert 0 < len(trace["sequences"][0]["output_token_ids"]) < 400
    assert any("Stopped" in i.value for i in at.info)
    assert any("row 0" in m.value for m in at.markdown)


def test_second_session_is_queued_while_the_model_lock_is_held():
    lock = appstate.model_lock()
    assert lock.acquire(timeout=30)
    try:
        at = new_app()
        run = start_live_run(at, max_new=4)
        assert run.status == "queued"
        assert any("queued: another run is in progress" in i.value for i in at.info)
    finally:
        lock.release()
    finish(at, run)
    assert run.status == "done"


def test_uploaded_trace_is_shown_and_a_bad_file_keeps_the_current_one(tmp_path):
    at = new_app()
    finish(at, start_live_run(at, max_new=4))
    good = at.session_state[appstate.TRACE_KEY]
    at.file_uploader(key="upload").set_value(("broken.json", b"{not json", "application/json")).run()
    assert any("not a specviz trace" in e for e in errors(at))
    assert at.session_state[appstate.TRACE_KEY] is good
    other = dict(good, config=dict(good["config"], batch_size=2, draft_length=7))
    at.file_uploader(key="upload").set_value(("other.json", json.dumps(other).encode(), "application/json")).run()
    assert not at.exception
    assert at.session_state[appstate.TRACE_KEY]["config"]["draft_length"] == 7
    assert any("upload: other.json" in c.value for c in at.caption)


def test_model_lock_is_one_lock_for_every_session():
    assert isinstance(appstate.model_lock(), type(threading.Lock()))
    assert appstate.model_lock() is appstate.model_lock()


def test_sweep_page_measures_a_small_grid():
    at = new_app(draft_kind="ngram")
    at.switch_page("pages/sweep.py").run()
    at.multiselect(key="sweep_b").set_value([1])
    at.multiselect(key="sweep_k").set_value([2])
    at.slider(key="sweep_max_new").set_value(4)
    at.button(key="sweep_run").click().run()
    assert not at.exception and not errors(at)
    cells = at.session_state["sweep_results"]
    assert [(c["b"], c["k"]) for c in cells] == [(1, 0), (1, 2)]
    assert cells[0]["speedup"] == pytest.approx(1.0) and cells[1]["speedup"] > 0
    assert {"sweep_measured", "sweep_predicted"} <= {el.key for el in at.get("plotly_chart")}


def test_correctness_page_checks_exactness_and_the_sampling_distribution():
    at = new_app(draft_kind="ngram")
    at.switch_page("pages/correctness.py").run()
    at.slider(key="corr_b").set_value(1)
    at.slider(key="corr_max_new").set_value(6)
    at.button(key="corr_run").click().run()
    assert not at.exception and not errors(at)
    rows = at.session_state["corr_rows"]
    assert len(rows) == 1 and rows[0]["match"], rows  # fp32 greedy: speculative == regular
    at.button(key="dist_run").click().run()
    res = at.session_state["dist"]
    assert res["p_value"] > 1e-3 and sum(res["counts"]) == res["n"]
    assert not errors(at)


def test_speedup_page_draws_the_analytic_model_without_a_run():
    at = new_app()
    at.switch_page("pages/speedup.py").run()
    assert not at.exception
    assert {"speedup_vs_k", "optimal_k", "bk_heatmap"} <= {el.key for el in at.get("plotly_chart")}
    assert any("not calibrated yet" in i.value for i in at.info)  # no run yet: no pair to take a calibration from
    assert len(at.get("latex")) >= 3


def test_race_runs_regular_decoding_and_replays_both():
    at = new_app()
    at.checkbox(key="race").check()
    run = finish(at, start_live_run(at, batch=1, max_new=3))
    assert run.status == "done" and run.regular_trace["config"]["mode"] == "regular"
    assert not at.exception and not errors(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["measured speedup"].endswith("x")
    assert "race_chart" in {el.key for el in at.get("plotly_chart")}
    at.button(key="replay").click().run()
    assert not at.exception
    assert "race_replay" in {el.key for el in at.get("plotly_chart")} or at.session_state["replay_t0"] is None


def test_cost_aware_policies_say_when_uncalibrated_and_run(monkeypatch):
    """analytic / bass-capped need the calibrated cost model; without one the page says what they use."""
    monkeypatch.setattr(appstate, "trace_costs", lambda *a, **k: None)
    at = new_app()
    at.selectbox(key="controller").set_value("bass-capped").run()
    assert any("Not calibrated yet" in c.value for c in at.caption)
    run = finish(at, start_live_run(at, batch=2, max_new=4))
    assert run.status == "done" and run.trace["config"]["controller"] == "bass-capped"
    assert not at.exception and not errors(at)
    at.selectbox(key="controller").set_value("fixed").run()
    assert not any("Not calibrated yet" in c.value for c in at.caption)
