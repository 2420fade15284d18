"""runlabel: one wording of a synthetic run, on a figure's title and in a page's note."""

from __future__ import annotations

import plotly.graph_objects as go

from specviz.figures import runlabel
from specviz.figures.charts import style

SYNTHETIC = {"config": {"synthetic_acceptance": 0.35}}


def test_a_synthetic_runs_figure_gets_the_label_under_its_title_with_room_for_it():
    fig = runlabel.mark(style(go.Figure(), "Where the time went", 260), SYNTHETIC)
    assert fig.layout.title.text.startswith("Where the time went<br>")
    assert "synthetic acceptance (alpha = 0.35): not the target's text" in fig.layout.title.text
    assert fig.layout.margin.t == 66 + 18


def test_an_exact_runs_figure_and_page_are_left_alone():
    fig = style(go.Figure(), "Where the time went", 260)
    assert runlabel.mark(fig, {"config": {}}).layout.title.text == "Where the time went"
    assert runlabel.page_note({"config": {}}) is None and runlabel.page_note(None) is None


def test_the_page_note_says_what_is_still_real():
    note = runlabel.page_note(SYNTHETIC)
    assert "α = 0.35" in note and "timings are real" in note and "no exactness check" in note
