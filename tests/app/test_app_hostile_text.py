"""Nothing from an uploaded trace becomes markup on any page (AppTest, the packaged default model).

The trace is a real run (batch 2, 8 tokens, n-gram drafts) with every string value replaced by an
HTML payload, as a reviewer did: refused in one line by its finish_reason. With the finish_reasons
kept (and the target's name, so its ids are decoded) it is shown, its text escaped, on every page.
Token ids outside the tokenizer's vocabulary are refused at upload, and a trace that reaches the
session with one anyway draws the id instead of breaking the page.
"""

from __future__ import annotations

import copy
import json
import os
import re

import pytest
import locations

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from specviz.analysis import costs  # noqa: E402
from specviz.app import state as appstate  # noqa: E402
from specviz.figures.safetext import md_escape  # noqa: E402

ROOT = str(locations.ROOT)
APP = os.path.join(ROOT, "app.py")
PAGES = ["pages/live.py", "pages/speedup.py", "pages/sweep.py", "pages/correctness.py", "pages/hardware.py"]
PAYLOAD = "<img src=x id=pwned onerror=alert(1)><b id=pwnedb>x</b> ![x](http://127.0.0.1:9/x.png) :red[x] $x$"
RAW_TAG = re.compile(r"(?<!\\)<(img|b id)")  # the payload's tags, not written as text (\< or &lt;)

pytestmark = pytest.mark.usefixtures("navigation_owns_the_pages")  # tests/conftest.py says why


@pytest.fixture(scope="module")
def real_trace() -> dict:
    """A short run of the default model, as `python -m specviz run` writes it (telemetry included)."""
    from specviz.runconfig import RunConfig
    from specviz.run import get_model, make_proposer, run

    target = get_model("default", "auto", "auto")  # the sidebar's pair: the same cached model
    cfg = RunConfig(prompts=["Hi there", "Name a colour."], batch_size=2, max_new_tokens=8, draft="ngram")
    return run(cfg, target, make_proposer("ngram", target))


@pytest.fixture(autouse=True)
def calibration_folder(tmp_path, monkeypatch):
    """An existing calibration folder: a trace's long names then reach the file system (a name too
    long for it raised OSError on Live, Speedup and Hardware)."""
    (tmp_path / "calibration").mkdir()
    monkeypatch.setattr(costs, "cache_dir", lambda: tmp_path)


def every_text_replaced(o, keep=()):
    if isinstance(o, dict):
        return {k: o[k] if k in keep else every_text_replaced(v, keep) for k, v in o.items()}
    if isinstance(o, list):
        return [every_text_replaced(v, keep) for v in o]
    return PAYLOAD if isinstance(o, str) else o


def texts(at) -> list[str]:
    """Every Markdown body on the page (unsafe_allow_html ones included)."""
    return [e.value for kind in ("markdown", "caption", "info", "warning", "error", "success", "title", "subheader")
            for e in getattr(at, kind)]


def assert_no_markup_from_the_trace(at, page: str) -> None:
    assert not at.exception, (page, [e.value for e in at.exception])
    raw = [t for t in texts(at) if RAW_TAG.search(t)]
    assert raw == [], (page, raw)


def upload(at, name: str, trace: dict) -> AppTest:
    at.file_uploader(key="upload").set_value((name, json.dumps(trace).encode(), "application/json")).run()
    return at


def visit_every_page(at) -> None:
    for page in PAGES:
        at.switch_page(page).run()
        assert_no_markup_from_the_trace(at, page)


def test_html_in_every_text_of_a_real_trace_is_refused_in_one_line_and_no_page_shows_markup(real_trace):
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    upload(at, PAYLOAD + ".json", every_text_replaced(real_trace))
    assert_no_markup_from_the_trace(at, "live")
    shown = [e.value for e in at.error]
    assert len(shown) == 1 and "\n" not in shown[0], shown
    assert shown[0].startswith(md_escape(PAYLOAD + ".json: not a specviz trace: sequences[0].finish_reason")), shown
    assert at.session_state[appstate.TRACE_KEY] is None  # the page keeps what it had: nothing
    visit_every_page(at)


def test_a_real_trace_with_html_in_its_texts_is_shown_as_text_on_every_page(real_trace):
    hostile = every_text_replaced(real_trace, keep=("finish_reason", "target_name"))  # its ids decode here
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    upload(at, PAYLOAD + ".json", hostile)
    assert not at.error, [e.value for e in at.error]
    assert at.session_state[appstate.TRACE_KEY]["config"]["policy"] == PAYLOAD
    assert_no_markup_from_the_trace(at, "live")
    captions = [c.value for c in at.caption]
    assert any(f"policy={md_escape(PAYLOAD)}" in c for c in captions), captions
    assert any(md_escape(f"upload: {PAYLOAD}.json") in c for c in captions), captions
    assert any("What is this draft:** " + md_escape(PAYLOAD) in c for c in captions), captions
    assert any("Hello" in m.value and "color:#" in m.value for m in at.markdown)  # the ids decoded, coloured
    visit_every_page(at)


@pytest.mark.parametrize("where", ["output_token_ids", "emitted", "draft_tokens"])
@pytest.mark.parametrize("bad", [-1, "vocab"])
def test_a_token_id_outside_the_loaded_tokenizer_is_refused_and_the_trace_on_screen_stays(real_trace, where, bad):
    target = appstate.loaded_target
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    vocab = target()["vocab_size"]
    t = copy.deepcopy(real_trace)
    rows = [r for s in t["steps"] for r in s["rows"] if r.get("draft_tokens")]
    ids = {"output_token_ids": t["sequences"][0]["output_token_ids"], "emitted": t["steps"][0]["rows"][0]["emitted"],
           "draft_tokens": rows[0]["draft_tokens"] if rows else t["steps"][0]["rows"][0].setdefault("draft_tokens", [])}
    ids[where].append(vocab if bad == "vocab" else bad)
    upload(at, "ids.json", real_trace)
    before = at.session_state[appstate.TRACE_KEY]
    upload(at, "bad-ids.json", t)
    assert not at.exception, [e.value for e in at.exception]
    shown = [e.value for e in at.error]
    assert len(shown) == 1 and md_escape(f"token ids in [0, {vocab})") in shown[0], shown
    assert at.session_state[appstate.TRACE_KEY] is before


def test_a_trace_in_the_session_with_an_id_the_tokenizer_lacks_draws_it_as_the_id(real_trace):
    """The upload check keeps such ids out; a page's decode must not break the session if one gets in."""
    t = copy.deepcopy(real_trace)
    t["sequences"][0]["output_token_ids"][0] = -1
    t["steps"][0]["rows"][0]["emitted"][0] = -1
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.session_state[appstate.TRACE_KEY] = t
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("[-1]" in m.value and "color:#" in m.value for m in at.markdown)
    at.run()  # and again: the session keeps working
    assert not at.exception
