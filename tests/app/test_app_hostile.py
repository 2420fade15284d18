"""The Live page under hostile input: each bad upload gets one clear message and the trace on screen
stays as it was; prompts the run cannot take are refused in the page, and odd ones run."""

from __future__ import annotations

import json
import os

import pytest
import locations

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from specviz.analysis.trace import build_trace  # noqa: E402
from specviz.app import state as appstate  # noqa: E402
from specviz.app import upload as uploadmod  # noqa: E402
from specviz.figures.safetext import md_escape  # noqa: E402

ROOT = str(locations.ROOT)
APP = os.path.join(ROOT, "app.py")


pytestmark = pytest.mark.usefixtures("navigation_owns_the_pages")  # tests/conftest.py says why


def hand_trace(k: int = 2) -> dict:
    """One row, two steps, ids chosen by hand."""
    rows = [[{"index": 0, "active": True, "drafted": k, "accepted": 1, "emitted": [10, 11], "draft_tokens": [10, 12]}],
            [{"index": 0, "active": True, "drafted": k, "accepted": 2, "emitted": [13, 14, 15], "draft_tokens": [13, 14]}]]
    steps = [{"step": n, "k": k, "batch_size": 1, "t_start": 0.01 + 0.03 * n, "t_draft": 0.004, "t_verify": 0.02,
              "t_accept": 0.001, "t_bookkeeping": 0.002, "rows": r} for n, r in enumerate(rows)]
    seqs = [{"index": 0, "prompt": "p", "prompt_token_ids": [1, 2], "finish_reason": "length", "text": None,
             "output_token_ids": [10, 11, 13, 14, 15]}]
    cfg = {"batch_size": 1, "draft_length": k, "policy": "fixed", "mode": "speculative", "temperature": 0.0,
           "target_name": "hand-made", "draft_name": "hand-made draft", "dtype": "float32", "device": "cpu"}
    return build_trace(cfg, {}, seqs, steps, [], 0.08, 0.01)


def app_showing(trace) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.session_state[appstate.TRACE_KEY] = trace
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _broken_row() -> bytes:
    t = hand_trace()
    t["steps"][1]["rows"][0].pop("active")
    return json.dumps(t).encode()


def _too_many_accepted() -> bytes:
    t = hand_trace()
    t["steps"][0]["rows"][0]["accepted"] = 5
    return json.dumps(t).encode()


GOOD = json.dumps(hand_trace()).encode()
HOSTILE = [
    ("notjson.json", b"{not json", "not a specviz trace: invalid JSON"),
    ("truncated.json", GOOD[: len(GOOD) // 2], "not a specviz trace: invalid JSON"),
    ("latin1.json", b'{"version": 1, "config": "caf\xe9"}', "not a specviz trace: not UTF-8 text"),
    ("list.json", b"[1, 2, 3]", "not a specviz trace: missing version"),
    ("path.json", b"/etc/passwd", "not a specviz trace: invalid JSON"),  # bytes are the document, never a path
    ("shape.json", json.dumps({"version": 1, "config": {}, "sequences": "x", "steps": [], "summary": {}}).encode(),
     "sequences and steps must be lists"),
    ("row.json", _broken_row(), "steps[1].rows[0] needs active: true/false"),
    ("accepted.json", _too_many_accepted(), "steps[0].rows[0] accepted more tokens than it drafted"),
    ("future.json", json.dumps(dict(hand_trace(), version=99)).encode(), "unsupported trace version 99"),
    ("deep.json", b"[" * 200_000, "not a specviz trace"),
]


@pytest.mark.parametrize("name,data,message", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_upload_is_one_message_and_the_trace_on_screen_stays(name, data, message):
    before = hand_trace(k=3)
    at = app_showing(before)
    at.file_uploader(key="upload").set_value((name, data, "application/json")).run()
    assert not at.exception, [e.value for e in at.exception]
    shown = [e.value for e in at.error]  # Markdown that shows the message as it is (the name and content escaped)
    assert len(shown) == 1 and shown[0].startswith(md_escape(f"{name}: ")) and md_escape(message) in shown[0], shown
    assert at.session_state[appstate.TRACE_KEY] is before
    assert at.session_state[appstate.TRACE_KEY]["config"]["draft_length"] == 3


def test_a_very_large_upload_is_refused_before_it_is_parsed():
    big = b'{"version": 1, "pad": "' + b"x" * (200 * 2**20) + b'"}'  # 200 MB
    with pytest.raises(ValueError, match=r"^big.json: 200 MB is more than the 100 MB a trace may be here$"):
        uploadmod.read_trace_upload("big.json", big)


def test_a_large_upload_in_the_page_keeps_the_trace(monkeypatch):
    monkeypatch.setattr(uploadmod, "MAX_TRACE_BYTES", 2**20)  # the page path, without moving 100 MB through AppTest
    before = hand_trace(k=3)
    at = app_showing(before)
    at.file_uploader(key="upload").set_value(("big.json", GOOD + b" " * 2**20, "application/json")).run()
    assert not at.exception
    assert any("is more than the 1 MB a trace may be here" in e.value for e in at.error)
    assert at.session_state[appstate.TRACE_KEY] is before


def test_a_good_upload_after_a_bad_one_is_shown():
    at = app_showing(hand_trace(k=3))
    at.file_uploader(key="upload").set_value(("bad.json", b"{", "application/json")).run()
    at.file_uploader(key="upload").set_value(("good.json", GOOD, "application/json")).run()
    assert not at.exception and not at.error
    assert at.session_state[appstate.TRACE_KEY]["config"]["draft_length"] == 2


# ---- the prompts text area -------------------------------------------------------------------

def run_prompts(text: str, batch: int = 2, timeout: float = 180) -> AppTest:
    """A short run of the real default model (n-gram drafts) on the text area's prompts."""
    import time

    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.session_state["draft_kind"] = "ngram"
    at.slider(key="batch_size").set_value(batch)
    at.slider(key="max_new_tokens").set_value(4)
    at.text_area(key="prompts_text").set_value(text)
    at.button(key="run").click().run()
    run = at.session_state[appstate.RUN_KEY] if appstate.RUN_KEY in at.session_state else None
    deadline = time.monotonic() + timeout
    while run is not None and run.running and time.monotonic() < deadline:
        run.beat()  # the page polls while the run goes
        run.join(1.0)
    if run is not None:
        run.stop()
        run.join(30)
        assert not run.running
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_prompt_past_the_context_is_refused_in_the_page():
    at = run_prompts("word " * 9000 + "\nshort prompt", batch=2)
    assert any("past the 8192-token context" in e.value for e in at.error), [e.value for e in at.error]
    assert appstate.TRACE_KEY not in at.session_state or at.session_state[appstate.TRACE_KEY] is None


def test_a_thousand_prompts_with_control_characters_run():
    odd = ["tab\there", "bell\x07 and escape \x1b[31mred\x1b[0m", "nul \x00 byte", "emoji \U0001f600 and \u202eRTL"]
    text = "\n".join(odd + [f"prompt number {i}" for i in range(996)])
    at = run_prompts(text, batch=4)
    assert not at.error, [e.value for e in at.error]
    trace = at.session_state[appstate.TRACE_KEY]
    assert [s["prompt"] for s in trace["sequences"]] == odd  # batch 4: the first four prompts
    assert all(len(s["output_token_ids"]) >= 1 for s in trace["sequences"])


# ---- model SPECs ------------------------------------------------------------------------------

@pytest.mark.parametrize("spec,message", [
    (os.path.relpath("/etc"), "is not a model"),  # path traversal (from wherever the checkout sits) to a folder that is not a model
    (os.path.relpath("/etc/passwd"), "is not a model"),
    ("HuggingFaceTB/SmolLM2-135M-Instruct@no-such-revision", "could not load model"),
])
def test_a_hostile_model_spec_is_one_message_and_the_app_keeps_working(spec, message, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the revision is not in the local cache: no network wait
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["target"] = spec
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("target not loaded" in e.value and message in e.value for e in at.error), [e.value for e in at.error]
    at.switch_page("pages/speedup.py").run()
    assert not at.exception and at.title
