"""The Live page's token-tree view (specviz.app.treeview): node roles, the tree figure and the depth x
rank heatmap on a hand-made tree and on a real tree trace from a tiny pair, and the page itself
(AppTest): a tree run shows both charts, a chain run shows neither."""

import os

import pytest

from specviz.analysis.trace import build_trace
from specviz.analysis.treestats import acceptance_by_depth_rank
from specviz.app import treeview

from fakes import perturbed_copy, ragged_prompts, tiny_llama
import locations

ROOT = str(locations.ROOT)
V = 64


def hand_row(path, emitted):
    # root -> 10 (rank 0) -> 11 ; root -> 20 (rank 1) -> 21 (rank 0), 22 (rank 1) ; root -> 30 (rank 2)
    tree = {"token": [10, 11, 20, 21, 22, 30], "parent": [-1, 0, -1, 2, 2, -1], "depth": [1, 2, 1, 2, 2, 1],
            "prob": [0.5, 0.9, 0.3, 0.6, 0.3, 0.1], "rank": [0, 0, 1, 0, 1, 2], "path": path}
    return {"index": 0, "active": True, "drafted": 6, "accepted": len(path), "emitted": emitted, "tree": tree}


def hand_trace(rows_per_step):
    steps = [{"step": n, "k": 2, "t_start": 0.1 * n, "t_draft": 0.01, "t_verify": 0.02, "t_accept": 0.001,
              "t_bookkeeping": 0.001, "rows": rows} for n, rows in enumerate(rows_per_step)]
    return {"version": 3, "config": {"mode": "speculative"}, "steps": steps, "sequences": []}


def test_a_first_child_rejected_and_second_accepted_marks_the_first_rejected_and_the_third_not_tried():
    roles, final = treeview.node_roles(hand_row([2, 4], [20, 22, 7])["tree"], [20, 22, 7])
    assert roles == ["rejected", "not reached", "accepted", "rejected", "accepted", "not tried"]
    assert final == "bonus"  # node 4 is a leaf: a full path


def test_a_row_whose_every_child_is_refused_gets_a_recovered_token_and_nothing_is_accepted():
    roles, final = treeview.node_roles(hand_row([], [99])["tree"], [99])
    assert roles == ["rejected", "not reached", "rejected", "not reached", "not reached", "rejected"]
    assert final == "recovered"


def test_a_row_that_hit_its_token_limit_inside_the_tree_has_no_final_token():
    roles, final = treeview.node_roles(hand_row([0, 1], [10])["tree"], [10])  # only 1 token was kept
    assert roles[:2] == ["accepted", "accepted"] and final is None


def test_the_tree_figure_draws_every_node_once_with_its_role_and_token_on_hover():
    trace = hand_trace([[hand_row([0], [10, 12])]])
    fig = treeview.tree_figure(trace, 0, 0, decode=lambda ids: f"<t{ids[0]}>")
    marks = {tr.name: tr for tr in fig.data if tr.mode == "markers+text"}
    assert set(marks) == {"root", "accepted", "rejected", "not tried", "not reached", "recovered"}
    assert sum(len(tr.x) for name, tr in marks.items() if name != "root") == 6 + 1  # nodes + recovered 12
    assert list(marks["accepted"].x) == [1] and "&lt;t10&gt;" in marks["accepted"].hovertext[0]
    assert list(marks["recovered"].x) == [2]  # the recovered token hangs off the accepted node at depth 1
    assert "sibling rank 0, draft p 0.500" in marks["accepted"].hovertext[0]
    bold = [tr for tr in fig.data if tr.mode == "lines" and tr.line.width == 3][0]
    assert len([v for v in bold.x if v is None]) == 2  # root -> 10 and 10 -> recovered
    assert "1 accepted, then a recovered token" in fig.layout.title.text


def test_an_ngram_tree_without_draft_probabilities_draws_with_plain_hover():
    row = hand_row([0], [10, 12])
    del row["tree"]["prob"]  # an n-gram tree has no draft probabilities
    fig = treeview.tree_figure(hand_trace([[row]]), 0, 0, decode=lambda ids: f"<t{ids[0]}>")
    marks = {tr.name: tr for tr in fig.data if tr.mode == "markers+text"}
    assert "accepted, depth 1" in marks["accepted"].hovertext[0] and "draft p" not in marks["accepted"].hovertext[0]


def test_the_heatmap_shows_accepted_over_tried_per_depth_and_rank():
    trace = hand_trace([[hand_row([2, 4], [20, 22, 7])], [hand_row([0, 1], [10, 11, 5])]])
    fig = treeview.depth_rank_heatmap(trace)
    hm = fig.data[0]
    want = acceptance_by_depth_rank(trace["steps"])
    assert want[(1, 1)] == (1, 2) and want[(1, 0)] == (1, 2)
    assert hm.z[0][1] == 0.5 and hm.text[0][1] == "1/2"
    assert hm.z[1][1] == want[(2, 1)][0] / want[(2, 1)][1]


def test_chain_traces_have_no_tree_view():
    chain = hand_trace([[{"index": 0, "active": True, "drafted": 2, "accepted": 1, "emitted": [3, 4]}]])
    assert not treeview.has_trees(chain)
    assert treeview.predicted_vs_measured(chain) is None
    assert "no tree" in treeview.tree_figure(chain, 0, 0).layout.annotations[0].text


@pytest.fixture(scope="module")
def tree_trace():
    from specviz.engine.proposers import ModelDraft
    from specviz.engine.step import TreeShape
    from specviz.run import decoder_for_ids

    target = tiny_llama(V)
    dec = decoder_for_ids(target, ModelDraft(perturbed_copy(target, 0.3)), ragged_prompts(3, V, seed=3), 3, 10,
                          tree=TreeShape(3, 8))
    steps = [s.to_json() for s in dec.steps()]
    seqs = [{"index": r.index, "output_token_ids": r.output, "prompt_token_ids": r.prompt_ids, "prompt": "p",
             "text": None, "finish_reason": "length"} for r in dec.rows]
    cfg = {"mode": "speculative", "batch_size": 3, "draft_length": 3, "tree_width": 3, "tree_nodes": 8,
           "policy": "fixed", "dtype": "float32", "device": "cpu", "temperature": 0.0}
    return build_trace(cfg, {}, seqs, steps, [], 1.0, 0.1)


def test_every_real_row_step_draws_its_accepted_path_and_one_final_token(tree_trace):
    for row in treeview.tree_rows(tree_trace):
        for pos in treeview.tree_steps(tree_trace, row):
            r = next(x for x in tree_trace["steps"][pos]["rows"] if x["index"] == row)
            roles, final = treeview.node_roles(r["tree"], r["emitted"])
            assert [i for i, x in enumerate(roles) if x == "accepted"] == r["tree"]["path"]
            assert (final is None) == (len(r["emitted"]) <= r["accepted"])  # cut at the token limit
            fig = treeview.tree_figure(tree_trace, row, pos)
            drawn = sum(len(tr.x) for tr in fig.data if tr.mode == "markers+text" and tr.name != "root")
            assert drawn == len(r["tree"]["token"]) + (final is not None)
    predicted, measured = treeview.predicted_vs_measured(tree_trace)
    assert measured > 1 and predicted == pytest.approx(measured, rel=0.25)


def test_the_live_page_shows_the_tree_view_for_a_tree_run_and_not_for_a_chain(tree_trace):
    from streamlit.testing.v1 import AppTest

    from specviz.app import state as appstate

    def page_with(trace):
        at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=60)
        at.run()
        at.session_state[appstate.TRACE_KEY] = trace
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    at = page_with(tree_trace)
    keys = {el.key for el in at.get("plotly_chart")}
    assert {"tree_view", "tree_depth_rank"} <= keys
    rows = treeview.tree_rows(tree_trace)
    at.selectbox(key="tree_row").set_value(rows[-1]).run()
    at.slider(key="tree_step_of_row").set_value(1).run()
    assert not at.exception and at.session_state["tree_step_of_row"] == 1
    chain = {**tree_trace, "steps": [{**s, "rows": [{k: v for k, v in r.items() if k != "tree"} for r in s["rows"]]}
                                     for s in tree_trace["steps"]]}
    keys = {el.key for el in page_with(chain).get("plotly_chart")}
    assert "tree_view" not in keys and "acceptance_heatmap" in keys


def test_suffix_branches_and_model_branches_get_two_marks_and_a_legend_sentence():
    row = hand_row([2, 4], [20, 22, 7])
    row["tree"]["origin"] = ["model", "model", "suffix", "suffix", "suffix", "model"]
    trace = hand_trace([[row]])
    fig = treeview.tree_figure(trace, 0, 0, decode=lambda ids: f"<t{ids[0]}>")
    legend = {t.name: t.marker.symbol for t in fig.data if (t.name or "").startswith("from ")}
    assert legend == {"from the model draft": "circle", "from the suffix structure": "diamond"}
    accepted = next(t for t in fig.data if t.name == "accepted")
    assert list(accepted.marker.symbol) == ["diamond", "diamond"]  # the accepted path came from the suffix
    assert "proposed by the suffix structure" in accepted.hovertext[0]
    sentence = treeview.origin_sentence(trace)
    assert "◆ the suffix structure (2 of 3 nodes accepted)" in sentence
    assert "● the model draft (0 of 3 nodes accepted)" in sentence


def test_a_tree_without_origins_draws_as_before_with_no_legend_sentence():
    trace = hand_trace([[hand_row([0], [10, 11])]])
    fig = treeview.tree_figure(trace, 0, 0)
    assert not [t for t in fig.data if (t.name or "").startswith("from ")]
    assert treeview.origin_sentence(trace) is None
