"""The Streamlit app, headless through streamlit.testing.v1.AppTest, on the packaged default model.

Runs are short (batch 2, a few tokens, n-gram drafts). st.cache_resource and specviz.run's
model cache persist across AppTest instances in one pytest process, so the model loads once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
import time

import pytest
import torch
import locations

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from specviz.device import deviceclient  # noqa: E402
from specviz.app import state as appstate
from specviz.figures.safetext import md_escape  # noqa: E402

ROOT = str(locations.ROOT)
APP = os.path.join(ROOT, "app.py")
PAGES = ["pages/live.py", "pages/speedup.py", "pages/sweep.py", "pages/correctness.py", "pages/hardware.py",
         "pages/server.py", "pages/lessons.py"]
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


pytestmark = [pytest.mark.usefixtures("navigation_owns_the_pages"),  # tests/conftest.py says why
              pytest.mark.slow]  # 29 real runs of the default model in the page: ~80 s in all


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


def test_live_names_the_sidebars_pair_and_runs_the_suffix_draft_chosen_there():
    at = new_app(draft_kind="suffix")
    caption = " ".join(c.value for c in at.caption if c.value.startswith("Target ")).replace("\\", "")  # markdown escapes
    assert "SmolLM2-135M-Instruct" in caption and "135M parameters" in caption, caption
    assert "suffix (earlier output)" in caption, caption
    run = finish(at, start_live_run(at, draft="suffix", prompts="Repeat: one two three one two three"))
    assert run.status == "done", run.error
    assert at.session_state[appstate.TRACE_KEY]["config"]["draft"] == "suffix" and not errors(at)


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
    monkeypatch.setattr(deviceclient, "RUN_JOB", "oom-run")  # a stand-in job in the worker process
    at = new_app()
    run = finish(at, start_live_run(at))
    assert run.status == "error"
    assert any("out of memory" in e and "smaller batch size" in e for e in errors(at))
    assert not at.exception


def test_slider_moved_mid_run_then_stop_keeps_partial_output(monkeypatch):
    # no EOS and a small pause per step: still running when we look (the worker process imports it)
    monkeypatch.setattr(deviceclient, "RUN_JOB", "endless-run")
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


def test_while_a_run_goes_the_page_redraws_without_fades_and_its_charts_on_their_own_clock(monkeypatch):
    """Issue 13: while a run goes, Streamlit's fades and running icon are off (they kept the
    browser compositing frames), the charts say how often they redraw, and all is back after it.
    The page that starts the run already shows Run disabled and Stop enabled (no rerun comes
    before the run ends)."""
    monkeypatch.setattr(deviceclient, "RUN_JOB", "endless-run")
    at = new_app()
    run = start_live_run(at, batch=1, max_new=400, prompts="Count from one to one thousand in words.")
    assert at.button(key="run").disabled and not at.button(key="stop").disabled
    while run.running and len(run.steps) < 2:
        run.join(0.1)
    at.run()
    assert any(m.value == appstate.QUIET_REDRAWS_CSS for m in at.markdown)
    # every 4 s, or longer when this machine drew them slowly (the interval follows the draw time)
    assert any(re.match(r"live: text every \d+ s, charts every \d+ s", c.value) for c in at.caption)
    assert "acceptance_heatmap" in {el.key for el in at.get("plotly_chart")}
    at.button(key="stop").click().run()
    finish(at, run, timeout=60)
    assert not any(m.value == appstate.QUIET_REDRAWS_CSS for m in at.markdown)
    assert not any(c.value.startswith("live: text every") for c in at.caption)


def test_second_session_is_queued_while_the_model_lock_is_held_and_told_by_what():
    from specviz.device import devicequeue

    lock = appstate.model_lock()
    assert lock.acquire(timeout=30)
    devicequeue.hold(lock, "a Sweep")  # as a Sweep job records itself when it takes the lock
    try:
        at = new_app()
        run = start_live_run(at, max_new=4)
        assert run.status == "queued"
        assert any("queued: a Sweep holds the model" in i.value for i in at.info)
    finally:
        devicequeue.hold(lock, None)
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
    assert any(md_escape("upload: other.json") in c.value for c in at.caption)  # the name shown as text


def test_a_job_names_itself_as_the_models_holder_while_it_runs():
    from specviz.device import devicequeue

    lock = threading.Lock()
    job = deviceclient.start_job("until-stopped", lock, "a Sweep")  # a stand-in job in the worker process
    deadline = time.monotonic() + 60
    while not job.items and time.monotonic() < deadline:
        job.beat()
        time.sleep(0.01)
    assert job.status == "running" and devicequeue.holder(lock) == "a Sweep"
    job.stop()
    job.join(30)
    assert job.status == "stopped" and devicequeue.holder(lock) == "another run"  # released: nobody named


def test_model_lock_is_one_lock_for_every_session():
    assert isinstance(appstate.model_lock(), type(threading.Lock()))
    assert appstate.model_lock() is appstate.model_lock()


def wait_job(at, key, timeout=180):
    job = at.session_state[key]
    deadline = time.monotonic() + timeout
    while job.running and time.monotonic() < deadline:
        job.beat()  # the page polls while the job goes; on a busy machine a job no page looks at stops itself
        job.join(1.0)
    assert not job.running, f"job still {job.status} after {timeout} s"
    at.run()
    return job


def test_sweep_page_runs_the_cli_sweep_in_a_job_and_shows_its_numbers():
    at = new_app(draft_kind="ngram")
    at.switch_page("pages/sweep.py").run()
    at.multiselect(key="sweep_b").set_value([1])
    at.multiselect(key="sweep_k").set_value([2])
    at.slider(key="sweep_max_new").set_value(4)
    at.selectbox(key="sweep_prompts").set_value("chat questions")  # short prompts: the copy-heavy ones take ~1 min
    lock = appstate.model_lock()
    lock.acquire()  # the job queues behind it, so the page is drawn while the job has not finished
    try:
        at.button(key="sweep_run").click().run()
        assert not at.exception and not errors(at)
        assert at.session_state["sweep_job"].running
        # the buttons are drawn again for the running job: no second sweep, and Stop works
        assert at.button(key="sweep_run").disabled and not at.button(key="sweep_stop").disabled
    finally:
        lock.release()
    job = wait_job(at, "sweep_job")
    assert not at.button(key="sweep_run").disabled and at.button(key="sweep_stop").disabled
    assert job.status == "done", job.error
    assert not at.exception and not errors(at)
    cells = at.session_state["sweep_results"]
    assert [(c["batch_size"], c["draft_length"]) for c in cells] == [(1, 2)]
    assert cells[0]["measured_speedup"] > 0 and cells[0]["predicted_speedup"] > 0
    assert any(f"B=1 k=2 alpha {cells[0]['alpha']:.3f}  measured {cells[0]['measured_speedup']:.2f}x" in c.value
               for c in at.code)  # the line the CLI prints
    assert {"sweep_measured", "sweep_predicted"} <= {el.key for el in at.get("plotly_chart")}


def test_sweep_stop_ends_a_queued_sweep_and_says_so():
    at = new_app(draft_kind="ngram")
    at.switch_page("pages/sweep.py").run()
    at.multiselect(key="sweep_b").set_value([1])
    at.multiselect(key="sweep_k").set_value([2])
    lock = appstate.model_lock()
    lock.acquire()
    try:
        at.button(key="sweep_run").click().run()
        at.button(key="sweep_stop").click().run()
        assert any("Stopping after the current cell" in i.value for i in at.info)
    finally:
        lock.release()
    assert wait_job(at, "sweep_job").status == "stopped"
    assert any("stopped after 0 cells" in i.value for i in at.info)
    assert not at.button(key="sweep_run").disabled


def test_correctness_page_checks_exactness_in_a_job_and_the_sampling_distribution():
    at = new_app(draft_kind="ngram")
    at.switch_page("pages/correctness.py").run()
    at.slider(key="corr_b").set_value(1)
    at.slider(key="corr_max_new").set_value(6)
    at.button(key="corr_run").click().run()
    assert not at.exception and not errors(at)
    assert wait_job(at, "corr_job").status == "done"
    rows = at.session_state["corr_rows"]
    assert len(rows) == 1 and rows[0]["match"], rows  # fp32 greedy: speculative == regular
    assert {m.label: m.value for m in at.metric}["rows identical to regular decoding"] == "1 / 1"
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


def test_cuda_graphs_box_is_off_without_cuda_and_a_graphs_run_is_recorded_and_exact():
    """The sidebar's CUDA graphs box is disabled on a machine without CUDA. Ticked (as on a GPU
    machine), the run goes through the static KV cache (eager off CUDA), says so in its trace, and
    its greedy rows equal its regular race partner's."""
    at = new_app()
    box = at.checkbox(key="cuda_graphs")
    assert box.disabled == (not torch.cuda.is_available()) and box.value is False  # the device process says so
    at.session_state["cuda_graphs"] = True
    run = finish(at, start_live_run(at, batch=2, max_new=6))
    assert run.status == "done", run.error
    assert run.trace["config"]["cuda_graphs"] is True and run.regular_trace["config"]["cuda_graphs"] is True
    assert ([s["output_token_ids"] for s in run.trace["sequences"]]
            == [s["output_token_ids"] for s in run.regular_trace["sequences"]])


@pytest.mark.parametrize("policy,fallback", [("bass-capped", "batch-1 formula"), ("tree", "illustrative roofline")])
def test_cost_aware_policies_say_when_uncalibrated_and_run(policy, fallback, monkeypatch):
    """analytic / bass-capped / tree need the calibrated cost model; without one the page says what they use."""
    monkeypatch.setattr(appstate, "trace_costs", lambda *a, **k: None)
    at = new_app()
    at.selectbox(key="policy").set_value(policy).run()
    assert any("Not calibrated yet" in c.value and fallback in c.value for c in at.caption)
    run = finish(at, start_live_run(at, batch=2, max_new=4))
    assert run.status == "done" and run.trace["config"]["policy"] == policy
    assert not at.exception and not errors(at)
    if policy == "tree":  # token trees with the page's bounds, each step's (W, N) in the trace
        assert (run.trace["config"]["tree_width"], run.trace["config"]["tree_nodes"]) == (4, 16)
        assert all(s["tree_width"] <= 4 and s["tree_nodes"] <= 16 for s in run.trace["steps"])
    at.selectbox(key="policy").set_value("fixed").run()
    assert not any("Not calibrated yet" in c.value for c in at.caption)


# ---- the page that teaches: a known trace, no model run ------------------------------------------------

def known_trace(b=2, k=3):
    """Two rows, three steps, every token id chosen by hand (config target_name unknown to the
    app, so tokens show as [id])."""
    from specviz.analysis.trace import build_trace

    def r(i, drafts, acc, out):
        return {"index": i, "active": True, "drafted": len(drafts), "accepted": acc, "emitted": out,
                "draft_tokens": drafts}

    plan = [[r(0, [10, 11, 12], 3, [10, 11, 12, 13]), r(1, [20, 21, 22], 0, [29])],
            [r(0, [14, 15, 16], 1, [14, 19]), r(1, [30, 31, 32], 2, [30, 31, 39])],
            [r(0, [40, 41, 42], 2, [40, 41, 49]), r(1, [50, 51, 52], 3, [50, 51, 52, 53])]]
    steps = [{"step": n, "k": k, "batch_size": b, "t_start": 0.01 + 0.03 * n, "t_draft": 0.004, "t_verify": 0.02,
              "t_accept": 0.001, "t_bookkeeping": 0.002, "rows": rows} for n, rows in enumerate(plan)]
    seqs = [{"index": i, "prompt": "p", "prompt_token_ids": [1, 2], "finish_reason": "length", "text": None,
             "output_token_ids": [t for rows in plan for x in rows if x["index"] == i for t in x["emitted"]]}
            for i in range(b)]
    cfg = {"batch_size": b, "draft_length": k, "policy": "fixed", "mode": "speculative", "temperature": 0.0,
           "target_name": "hand-made", "draft_name": "hand-made draft", "dtype": "float32", "device": "cpu",
           "draft_layers": 2, "draft_params": 40_000_000, "draft_own_params": 12_000_000, "target_layers": 30,
           "target_params": 135_000_000}
    return build_trace(cfg, {}, seqs, steps, [], 0.11, 0.01)


def with_trace(trace, regular=None) -> AppTest:
    at = new_app()
    at.session_state[appstate.TRACE_KEY] = trace
    at.session_state["regular_trace"] = regular
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def explained(at) -> str:
    return next(m.value for m in at.markdown if "drafted (k = " in m.value)


def test_step_explainer_shows_the_chosen_row_and_steps_tokens():
    at = with_trace(known_trace())
    at.selectbox(key="explain_row").set_value(0).run()
    at.slider(key="explain_step").set_value(1).run()
    h = explained(at)  # row 0, step 1: drafted 14 15 16, accepted 14, rejected 15, thrown away 16, recovered 19
    assert h.index("[14]") < h.index("[15]") < h.index("[16]") < h.index("[19]")
    assert "rejected draft position 2" in h and "thrown away" in h and "recovered" in h
    at.button(key="explain_next").click().run()  # like a slide: step 2 accepted 40 41, recovered 49
    assert at.session_state["explain_step"] == 2
    h = explained(at)
    assert "[40]" in h and "[49]" in h and "rejected draft position 3" in h
    at.selectbox(key="explain_row").set_value(1).run()  # row 1, step 2: all 3 accepted, bonus 53
    h = explained(at)
    assert "accepted all 3 drafted tokens" in h and "[53]" in h and "bonus" in h
    at.button(key="explain_prev").click().run()
    assert at.session_state["explain_step"] == 1 and "[39]" in explained(at)


def test_alpha_is_defined_once_and_shown_the_same_on_live_and_speedup():
    from specviz.figures import tokentext

    trace = known_trace()
    alpha = appstate.alpha_from_trace(trace)  # 11 accepted over 11 + 4 rejections checked
    assert alpha == pytest.approx(11 / 15)
    at = with_trace(trace)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["α (per-position acceptance)"] == f"{alpha:.3f}"
    assert metrics["acceptance rate"] == f"{11 / 18:.3f}"  # a different quantity, named differently
    assert any(tokentext.ALPHA_DEFINITION in m.value for m in at.markdown)
    legend = next(m.value for m in at.markdown if "■ accepted" in m.value)
    assert all(sentence in legend for sentence in tokentext.DEFINITIONS.values())
    # the chart terms (wasted slot, row-step, the phases...) are defined on the page too
    terms = next(m.value for m in at.markdown if "**wasted slot**" in m.value)
    assert all(f"**{term}**: {text}" in terms for term, text in tokentext.TERMS.items())
    at.switch_page("pages/speedup.py").run()
    assert at.slider(key="sp_alpha").value == pytest.approx(round(alpha, 3))
    assert any(tokentext.ALPHA_DEFINITION in m.value for m in at.markdown)


def test_speedup_page_opens_on_the_last_runs_values_with_its_measured_point():
    trace = known_trace(b=2, k=3)
    regular = dict(trace, summary=dict(trace["summary"], tokens_per_s=trace["summary"]["tokens_per_s"] / 1.25))
    at = with_trace(trace, regular)
    at.switch_page("pages/speedup.py").run()
    assert not at.exception
    assert at.slider(key="sp_b").value == 2 and at.slider(key="sp_k").value == 3
    assert at.slider(key="sp_c").value == pytest.approx(round(appstate.draft_cost_ratio(trace), 3))
    fig = json.loads(next(el for el in at.get("plotly_chart") if el.key == "speedup_vs_k").proto.spec)
    point = next(t for t in fig["data"] if t["name"] == "measured")
    assert point["x"] == [3] and point["y"] == [pytest.approx(1.25)]
    assert any("Why a bigger batch gains less" in m.value for m in at.markdown)
    at.slider(key="sp_b").set_value(8).run()  # the reader's move stays
    assert at.slider(key="sp_b").value == 8


def test_live_page_names_where_the_time_went_and_whether_the_output_changed():
    trace = known_trace()
    regular = dict(trace, config=dict(trace["config"], mode="regular"),
                   sequences=[dict(trace["sequences"][0]),
                              dict(trace["sequences"][1], output_token_ids=[29, 30, 31, 77, 50, 51, 52, 53])])
    at = with_trace(trace, regular)
    assert "phase_totals" in {el.key for el in at.get("plotly_chart")}
    warning = next(w.value for w in at.warning if "identical to regular decoding" in w.value)
    assert "1/2 rows" in warning and "row 1 from token 3" in warning
    assert any("Measured 1.00× vs predicted" in m.value for m in at.markdown)  # same tokens/s in both
    draft = next(c.value for c in at.caption if "What is this draft" in c.value)
    assert "2 layers, 12M parameters of its own, plus 28M it reuses from the target" in draft
    assert "30 layers and 135M" in draft and "cost ratio c = " in draft


def test_correctness_and_sweep_open_on_the_last_runs_settings_and_prompts():
    trace = known_trace(b=2, k=3)
    trace["config"]["max_new_tokens"] = 40
    at = with_trace(trace)
    at.switch_page("pages/correctness.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert (at.slider(key="corr_b").value, at.slider(key="corr_k").value, at.slider(key="corr_max_new").value) == (2, 3, 40)
    assert at.selectbox(key="corr_prompts").value == appstate.LAST_RUN_PROMPTS
    at.slider(key="corr_k").set_value(5).run()  # the user's own change stays until the next run
    assert at.slider(key="corr_k").value == 5
    at.switch_page("pages/sweep.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.slider(key="sweep_max_new").value == 40 and at.selectbox(key="sweep_prompts").value == appstate.LAST_RUN_PROMPTS


def test_a_race_on_a_busy_machine_keeps_the_numbers_and_says_the_comparison_is_unreliable():
    import copy

    trace, regular = known_trace(), known_trace()
    regular["config"]["mode"] = "regular"
    regular["summary"]["tokens_per_s"] = trace["summary"]["tokens_per_s"] / 1.5
    regular["host_load"] = {"other_cores": 1.4, "cpus": 2}
    at = with_trace(trace, copy.deepcopy(regular))
    said = " ".join(m.value for m in at.markdown)
    assert "**Measured 1.50× vs predicted" in said
    assert any("kept 1.4 of 2 cores busy during the regular run: the measured speedup is unreliable" in w.value
               for w in at.warning), [w.value for w in at.warning]
    regular["host_load"] = {"other_cores": 0.0, "cpus": 2}
    assert not any("unreliable" in w.value for w in with_trace(trace, regular).warning)


def test_the_showcase_runs_a_winning_and_a_losing_workload_and_shows_both(monkeypatch):
    from specviz.app import showcase

    small = tuple(dataclasses.replace(c, max_new_tokens=4, batch_size=min(c.batch_size, 4)) for c in showcase.CASES)
    monkeypatch.setattr(showcase, "CASES", small)  # the same two workloads, shorter
    at = new_app()
    at.button(key="showcase").click().run()
    runs = at.session_state[showcase.KEY]
    assert [c.draft for c, _ in runs] == ["suffix", "default"]
    deadline = time.monotonic() + 300
    while any(r.running for _, r in runs) and time.monotonic() < deadline:
        for _, r in runs:
            r.beat()  # the page polls both while they go (the second waits in the device's line)
        runs[-1][1].join(1.0)
    for _, run in runs:
        run.join(30)
        assert run.status == "done" and run.regular_trace["config"]["mode"] == "regular"  # raced
    at.run()
    assert not at.exception and not errors(at)
    metrics = {m.label: m.value for m in at.metric}
    for case in small:
        assert metrics[f"{case.label}: measured speedup"].endswith("x")
        assert metrics[f"{case.label}: acceptance rate"] != "—"
