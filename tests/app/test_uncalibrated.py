"""Until a calibration exists, "uncalibrated" sits next to every predicted number, with its one-line
reason, on the page that shows it (AppTest); a calibrated pair's numbers carry no such word."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("streamlit")

from specviz.figures import runlabel  # noqa: E402
from specviz.app import state as appstate
from test_app import errors, finish, new_app, no_run_left_behind, start_live_run  # noqa: E402,F401

pytestmark = pytest.mark.usefixtures("navigation_owns_the_pages")


def titles(at) -> dict[str, str]:
    return {el.key: json.loads(el.proto.spec)["layout"].get("title", {}).get("text", "") for el in at.get("plotly_chart")}


def test_the_speedup_page_says_uncalibrated_beside_each_prediction_and_why():
    at = new_app()
    at.switch_page("pages/speedup.py").run()  # no run: no pair, so no calibration stands behind the curves
    assert not at.exception
    labels = [m.label for m in at.metric]
    assert any(lb.startswith("predicted speedup at b=") and lb.endswith("(uncalibrated)") for lb in labels), labels
    assert any(lb.startswith("k*(b=") and lb.endswith("(uncalibrated)") for lb in labels), labels
    assert any(c.value == runlabel.WHY_ROOFLINE for c in at.caption)
    t = titles(at)
    assert all(t[key].endswith("(uncalibrated)") for key in ("speedup_vs_k", "optimal_k", "bk_heatmap")), t


def test_the_live_page_says_uncalibrated_beside_the_predicted_speedup_and_why():
    at = new_app()
    run = finish(at, start_live_run(at, max_new=4))
    assert run.status == "done", run.error
    trace = at.session_state[appstate.TRACE_KEY]
    # a pair no calibration on this machine can name: the prediction stands on assumed costs
    at.session_state[appstate.TRACE_KEY] = dict(trace, config=dict(trace["config"], draft_name="never-calibrated"))
    at.run()
    assert not at.exception and not errors(at)
    metric = next(m for m in at.metric if m.label.startswith("predicted speedup"))
    assert metric.label == "predicted speedup (uncalibrated)" and metric.value != "—"
    assert any(c.value == runlabel.WHY_LIVE for c in at.caption)


def test_a_calibrated_prediction_carries_no_such_word():
    assert runlabel.prediction_label("predicted speedup", True) == "predicted speedup"
    assert runlabel.prediction_label("predicted speedup", False) == "predicted speedup (uncalibrated)"
