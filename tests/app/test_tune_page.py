"""The Speedup page's Recommend panel, headless (AppTest): for the current trace it shows the k per batch size
and the settings of the engine chosen there, without a model run and without error."""

import os

import pytest
import locations

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from specviz.analysis.trace import build_trace  # noqa: E402
from specviz.app import state as appstate  # noqa: E402

APP = os.path.join(str(locations.ROOT), "app.py")
pytestmark = pytest.mark.usefixtures("navigation_owns_the_pages")  # tests/conftest.py says why


def ngram_trace():
    """Two rows, three steps of k = 3, n-gram drafts (token ids by hand)."""
    def r(i, d, a):
        return {"index": i, "active": True, "drafted": d, "accepted": a, "emitted": list(range(a + 1)),
                "draft_tokens": list(range(d))}

    plan = [[r(0, 3, 3), r(1, 3, 0)], [r(0, 3, 1), r(1, 3, 2)], [r(0, 3, 2), r(1, 3, 3)]]
    steps = [{"step": n, "k": 3, "batch_size": 2, "t_start": 0.03 * n, "t_draft": 0.0005, "t_verify": 0.02,
              "t_accept": 0.001, "t_bookkeeping": 0.001, "rows": rows} for n, rows in enumerate(plan)]
    seqs = [{"index": i, "prompt": "p", "prompt_token_ids": [1, 2], "finish_reason": "length", "text": None,
             "output_token_ids": [t for rows in plan for x in rows if x["index"] == i for t in x["emitted"]]}
            for i in range(2)]
    cfg = {"batch_size": 2, "draft_length": 3, "policy": "fixed", "mode": "speculative", "temperature": 0.0,
           "target_name": "hand-made", "draft": "ngram", "draft_name": "ngram", "dtype": "float32", "device": "cpu"}
    return build_trace(cfg, {}, seqs, steps, [], 0.1, 0.01)


def speedup_page(trace) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.session_state[appstate.TRACE_KEY] = trace
    at.switch_page("pages/speedup.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_panel_shows_k_per_batch_size_and_the_chosen_engines_settings():
    at = speedup_page(ngram_trace())
    assert "Recommend" in [h.value for h in at.subheader]
    (table,) = [el.value for el in at.dataframe]  # the panel's is the page's one table
    assert list(table["batch size"]) == [1, 2, 4, 8, 16, 32, 64]
    assert any("acceptance per position" in c.value.lower() for c in at.caption)
    assert at.selectbox(key="sp_rec_engine").value == "vllm"
    assert any('"method": "ngram"' in c.value for c in at.code)  # the vLLM config for this n-gram trace
    at.text_input(key="sp_rec_vllm").input("0.32.0").run()
    at.selectbox(key="sp_rec_engine").set_value("llamacpp").run()
    assert not at.exception
    assert any(c.value.startswith("--draft-max ") for c in at.code)


def test_without_a_speculative_trace_the_panel_says_what_it_needs():
    regular = ngram_trace()
    for s in regular["steps"]:
        s["k"] = 0
        for r in s["rows"]:
            r.update(drafted=0, accepted=0)
    at = speedup_page(regular)
    assert any("the recommendation reads its acceptance per position" in c.value for c in at.caption)
