"""Every chart on the Live page after a run, and on the Speedup model page, has a sentence right beside it (a
caption or Markdown line in the same column) that a reader can take without the chart: with a number in it
wherever the chart draws something (AppTest; the Live run decodes the tiny stand-in pair of
tests/workerfakes.py in the device process)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1.element_tree import Block  # noqa: E402

from specviz.device import deviceclient  # noqa: E402
from specviz.app import state as appstate
from test_app import LIVE_CHARTS, errors, finish, new_app, no_run_left_behind, start_live_run  # noqa: E402,F401

pytestmark = pytest.mark.usefixtures("navigation_owns_the_pages")


def chart_sentences(at) -> dict[str, tuple[bool, str | None]]:
    """Per plotly chart (its key): (whether it draws data, the caption or Markdown right after it, or else right
    before it, in the same block; None if neither is text)."""
    out = {}

    def walk(block: Block) -> None:
        kids = [block.children[i] for i in sorted(block.children)]
        for n, node in enumerate(kids):
            if isinstance(node, Block):
                walk(node)
            elif node.type == "plotly_chart":
                near = [kids[j] for j in (n + 1, n - 1) if 0 <= j < len(kids)]
                text = next((x.value for x in near if getattr(x, "type", None) in ("caption", "markdown")), None)
                out[node.key] = (bool(json.loads(node.proto.spec).get("data")), text)

    walk(at.main)
    return out


def unexplained(at) -> dict[str, str | None]:
    """The charts without a sentence beside them, or whose sentence has no number though the chart has data."""
    return {key: text for key, (drawn, text) in chart_sentences(at).items()
            if not text or (drawn and not any(ch.isdigit() for ch in text))}


def test_every_chart_on_the_live_page_after_a_run_has_a_sentence_with_its_number(monkeypatch):
    monkeypatch.setattr(deviceclient, "RUN_JOB", "tiny-run")  # the tiny target with an n-gram draft
    at = new_app()
    run = finish(at, start_live_run(at, batch=2, max_new=6, prompts="abc abc abc abc\nxyz xyz xyz"))
    assert run.status == "done", run.error
    assert not at.exception and not errors(at)
    assert at.session_state[appstate.TRACE_KEY]["steps"]
    found = chart_sentences(at)
    assert LIVE_CHARTS | {"phase_totals", "race_chart"} <= set(found), set(found)
    assert unexplained(at) == {}
    # the sentences are the run's: the wasted-slot share and the largest phase's share of the wall time
    assert "of verified slots produced nothing" in found["wasted_slots"][1]
    assert "% of the wall time" in found["phase_totals"][1]


def test_every_chart_on_the_speedup_page_has_a_sentence_with_its_number():
    at = new_app()
    at.switch_page("pages/speedup.py").run()
    assert not at.exception, [e.value for e in at.exception]
    found = chart_sentences(at)
    assert {"speedup_vs_k", "optimal_k", "bk_heatmap"} <= set(found), set(found)
    assert unexplained(at) == {}
    assert "best draft length" in found["speedup_vs_k"][1]
