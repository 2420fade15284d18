"""Tree verify in the engine (issue 16): ONE batched target forward over every row's tree, the
accepted path kept and every other node a hole, through our lean forward and transformers'.
A scripted tree draft puts the reference's next token at a chosen sibling rank, so the claims are
exact: greedy output equals batch-1 greedy whatever the trees look like."""

import pytest
import torch

from specviz.engine.step import TreeShape
from specviz.engine.tree import TokenTree
from specviz.run import decoder_for_ids

from fakes import ScriptedDraft, ragged_prompts, reference_greedy, tiny_llama

V = 64


@pytest.fixture(scope="module")
def target():
    return tiny_llama(V)


class ScriptedTree(ScriptedDraft):
    """Per row a chain of depth k along the reference's continuation, each true node with a wrong
    sibling: "first" (the true token is the top child), "second" (a wrong sibling comes first),
    "none" (only wrong tokens), "wide" (the true path plus a wrong subtree under the root).
    Row bookkeeping (joins, leaves) is ScriptedDraft's."""

    kind = name = "scripted-tree"

    def __init__(self, prompts, reference, behaviour):
        super().__init__(prompts, reference, behaviour, V)
        self.commits = []

    def propose_tree(self, contexts, k, width, nodes, params):
        rows = []
        for b, ctx in enumerate(contexts):
            i = self.rows[b]
            done = len(ctx) - len(self.prompts[i])
            truth = (self.reference[i][done:done + k] + [0] * k)[:k]
            mode = self.behaviour[i]
            out, parent = [], -1
            for t in truth:
                wrong = (t + 1) % V
                if mode == "none":
                    out.append((wrong, parent))
                    parent = len(out) - 1
                    continue
                pair = [(t, parent), (wrong, parent)] if mode in ("first", "wide") else [(wrong, parent), (t, parent)]
                out += pair
                parent = len(out) - 2 if mode in ("first", "wide") else len(out) - 1
            if mode == "wide":  # a wrong subtree hanging from the root, after the true path
                out += [((truth[0] + 2) % V, -1), ((truth[0] + 3) % V, len(out))]
            rows.append(out[:nodes])
        return TokenTree.from_rows(rows)

    def commit_tree(self, paths, emitted, fed_slots, features=None):
        self.commits.append(paths)


def run(target, prompts, draft, k, nodes=16, max_new=12, eos=None, **kw):
    dec = decoder_for_ids(target, draft, prompts, k, max_new, tree=TreeShape(2, nodes), **kw)
    if eos is not None:
        dec.eos = {eos}
    return dec, [s.to_json() for s in dec.steps()]


@pytest.mark.parametrize("lean", ["1", "0"])
def test_rows_of_different_trees_equal_batch_one_greedy_through_both_forwards(target, monkeypatch, lean):
    monkeypatch.setenv("SPECVIZ_LEAN_FORWARD", lean)
    prompts = ragged_prompts(4, V, seed=3)
    ref = reference_greedy(target, prompts, max_new=12)
    draft = ScriptedTree(prompts, ref, ["first", "second", "none", "wide"])
    dec, steps = run(target, prompts, draft, 3)
    assert [r.output for r in dec.rows] == ref
    first = steps[0]["rows"]
    assert [r["accepted"] for r in first] == [3, 3, 0, 3]
    assert [r["drafted"] for r in first] == [6, 6, 3, 8]  # trees of different sizes in one verify
    assert first[1]["tree"]["path"] == [1, 3, 5]  # the second sibling at every depth
    assert steps[0]["verify_width"] == 9


def test_rejected_nodes_become_holes_and_the_kept_path_keeps_its_positions(target):
    prompts = ragged_prompts(2, V, seed=5)
    ref = reference_greedy(target, prompts, max_new=4)
    draft = ScriptedTree(prompts, ref, ["second", "wide"])
    dec = decoder_for_ids(target, draft, prompts, 2, 8, tree=TreeShape(2, 16))
    for i, s in enumerate(dec.steps()):
        if i == 0:
            # each row: the root + 2 accepted nodes are valid slots; the other nodes are holes
            assert all(r.accepted == 2 for r in s.rows)
            assert dec.kv.lengths.tolist() == [len(p) - 1 + 3 for p in prompts]
            assert s.cache_holes > 0
    assert [r.output for r in dec.rows] == reference_greedy(target, prompts, max_new=8)


def test_a_row_finishing_inside_its_tree_stops_at_eos_and_at_max_tokens(target):
    prompts = ragged_prompts(3, V, seed=11)
    ref = reference_greedy(target, prompts, max_new=10)
    eos = ref[0][4]  # row 0 meets it on a tree path in its second step
    ref_eos = reference_greedy(target, prompts, max_new=10, eos=eos)
    draft = ScriptedTree(prompts, ref, ["first", "second", "wide"])
    dec, _ = run(target, prompts, draft, 3, max_new=10, eos=eos)
    assert [r.output for r in dec.rows] == ref_eos
    assert dec.rows[0].finish_reason == "eos" and dec.rows[0].output[-1] == eos
    dec, _ = run(target, prompts, ScriptedTree(prompts, ref, ["first", "second", "wide"]), 4, max_new=6)
    assert [r.output for r in dec.rows] == [o[:6] for o in ref]  # a path longer than what is left
    assert all(r.finish_reason == "length" for r in dec.rows)


def test_a_tree_of_one_node_per_row_is_a_chain_of_one(target):
    prompts = ragged_prompts(3, V, seed=2)
    ref = reference_greedy(target, prompts, max_new=8)
    dec, steps = run(target, prompts, ScriptedTree(prompts, ref, ["first", "second", "none"]), 3, nodes=1, max_new=8)
    assert [r.output for r in dec.rows] == ref
    assert steps[0]["verify_width"] == 2


def test_requests_joining_a_tree_batch_stay_exact(target):
    prompts = ragged_prompts(7, V, seed=9)
    ref = reference_greedy(target, prompts, max_new=8)
    draft = ScriptedTree(prompts, ref, ["first", "second", "none", "wide"] * 2)
    dec, steps = run(target, prompts, draft, 3, max_new=8, lanes=3)
    assert [r.output for r in dec.rows] == ref
    assert sum(len(s["joined"]) for s in steps) == 4
