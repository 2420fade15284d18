"""A Live run with synthetic acceptance (α set by hand) says so on the page, on every chart and on the
pages that show it, and is never compared with regular decoding (AppTest, the packaged default model)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("streamlit")

from specviz.app import state as appstate  # noqa: E402
from test_app import errors, finish, new_app, no_run_left_behind, start_live_run  # noqa: E402,F401

pytestmark = pytest.mark.usefixtures("navigation_owns_the_pages")
LABEL = "synthetic acceptance (alpha = 0.5): not the target's text"


def chart_titles(at) -> dict[str, str]:
    return {el.key: json.loads(el.proto.spec)["layout"].get("title", {}).get("text", "")
            for el in at.get("plotly_chart") if json.loads(el.proto.spec).get("data")}


def test_a_synthetic_run_is_labelled_on_the_live_page_every_chart_and_the_other_pages():
    at = new_app()
    at.checkbox(key="synthetic_on").check().run()
    at.slider(key="synthetic_alpha").set_value(0.5)
    run = finish(at, start_live_run(at, max_new=8))
    assert run.status == "done", run.error
    assert not at.exception and not errors(at)
    trace = at.session_state[appstate.TRACE_KEY]
    assert trace["config"]["synthetic_acceptance"] == 0.5
    assert "synthetic_acceptance" not in (at.session_state["regular_trace"] or {}).get("config", {})  # the race's partner
    assert any(LABEL in w.value for w in at.warning)
    titles = chart_titles(at)
    assert {"acceptance_heatmap", "phase_totals", "race_chart"} <= set(titles)
    assert all(LABEL in t for t in titles.values()), titles
    assert any("Not compared with regular decoding" in i.value for i in at.info)
    assert not any("Output identical to regular decoding" in s.value for s in at.success)
    assert any(LABEL in c.value for c in at.caption)  # under the generated text

    at.switch_page("pages/speedup.py").run()
    assert not at.exception and any(LABEL in w.value for w in at.warning)
    assert LABEL in chart_titles(at)["speedup_vs_k"]
    at.switch_page("pages/correctness.py").run()
    assert not at.exception and any("so it is not checked" in i.value for i in at.info)


def test_an_exact_run_carries_no_label():
    at = new_app()
    run = finish(at, start_live_run(at, max_new=4))
    assert run.status == "done", run.error
    assert "synthetic_acceptance" not in at.session_state[appstate.TRACE_KEY]["config"]
    assert not any("synthetic acceptance" in t for t in chart_titles(at).values())
