"""The hybrid draft (default+suffix) on the packaged model: greedy fp32, ragged prompts, chains and token trees
at B = 1, 3, 8 and 13, under a request queue, and one merged tree per row: every row equals plain greedy at B = 1
(a divergence only at a reported near-tie), and both drafts drafted."""

import pytest

from specviz.engine.step import TreeShape
from specviz.measure.correctness import compare
from specviz.run import decoder_for_ids, make_proposer

from exact_default import RAGGED_PROMPTS, assert_exact, prompt_ids, references, target  # noqa: E402,F401  (shared fixtures)

PROMPTS = RAGGED_PROMPTS
MAX_NEW = 12
pytestmark = pytest.mark.slow  # the real model in fp32


def run_hybrid(target, prompt_ids, references, B, k, tree=None, requests=None, merge=False):
    """Rows (prompts cycled) through B lanes with a fresh default+suffix: (row checks, decoder, per-step choices)."""
    rows = [prompt_ids[i % len(prompt_ids)] for i in range(requests or B)]
    draft = make_proposer("default+suffix", target)
    draft.merge = merge
    dec = decoder_for_ids(target, draft, rows, k, MAX_NEW, lanes=B, tree=tree)
    choices = [list(draft.use_suffix) for _ in dec.steps()]
    refs = [references[i % len(prompt_ids)] for i in range(len(rows))]
    return compare(target, rows, [r.output for r in dec.rows], refs), dec, choices


@pytest.mark.parametrize("tree", [None, TreeShape(3, 8)], ids=["chain", "tree"])
@pytest.mark.parametrize("B", [1, 3, 8, 13])
def test_hybrid_rows_equal_batch_one_greedy(target, prompt_ids, references, B, tree):
    checks, dec, choices = run_hybrid(target, prompt_ids, references, B, 4, tree)
    assert len(checks) == B
    assert_exact(checks)
    assert sum(r.accepted for r in dec.rows) > 0
    picks = [s for step in choices for s in step]
    assert any(picks) and not all(picks)  # the suffix draft drafted for some rows and steps, the model for others
    if B > 1:  # some step mixed the two: the model drafted for the batch while a row took the suffix's tokens
        assert any(any(step) and not all(step) for step in choices)


@pytest.mark.parametrize("tree", [None, TreeShape(2, 6)], ids=["chain", "tree"])
def test_hybrid_requests_through_a_queue_equal_batch_one_greedy(target, prompt_ids, references, tree):
    checks, dec, choices = run_hybrid(target, prompt_ids, references, 3, 4, tree, requests=11)
    assert len(checks) == 11
    assert_exact(checks)
    assert any(s for step in choices for s in step)


def test_one_merged_tree_per_row_equals_batch_one_greedy(target, prompt_ids, references):
    checks, dec, _ = run_hybrid(target, prompt_ids, references, 3, 4, TreeShape(2, 6), merge=True)
    assert_exact(checks)
    assert sum(r.accepted for r in dec.rows) > 0
