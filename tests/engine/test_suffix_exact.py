"""The suffix draft on the packaged model: greedy fp32, ragged prompts, chains and token trees at B = 1, 3, 8
and 13, and under a request queue (where repeated prompts draft from the global structure): every row
equals plain greedy at B = 1; a divergence only at a reported near-tie."""

import pytest

from specviz.analysis.analytic import CostModel
from specviz.engine.suffix import SuffixDraft
from specviz.engine.step import TreeShape
from specviz.measure.correctness import compare
from specviz.run import decoder_for_ids

from exact_default import RAGGED_PROMPTS, assert_exact, prompt_ids, references, target  # noqa: E402,F401  (shared fixtures)

PROMPTS = RAGGED_PROMPTS
MAX_NEW = 10
pytestmark = pytest.mark.slow  # the real model in fp32


def run_suffix(target, prompt_ids, references, B, k, tree=None, requests=None):
    """Rows (prompts cycled) through B lanes with a fresh suffix draft: (row checks, the decoder, the draft)."""
    rows = [prompt_ids[i % len(prompt_ids)] for i in range(requests or B)]
    draft = SuffixDraft()
    dec = decoder_for_ids(target, draft, rows, k, MAX_NEW, lanes=B, tree=tree)
    for _ in dec.steps():
        pass
    refs = [references[i % len(prompt_ids)] for i in range(len(rows))]
    return compare(target, rows, [r.output for r in dec.rows], refs), dec, draft


@pytest.mark.parametrize("tree", [None, TreeShape(3, 8)], ids=["chain", "tree"])
@pytest.mark.parametrize("B", [1, 3, 8, 13])
def test_suffix_rows_equal_batch_one_greedy(target, prompt_ids, references, B, tree):
    checks, dec, _ = run_suffix(target, prompt_ids, references, B, 4, tree)
    assert len(checks) == B
    assert_exact(checks)
    assert sum(r.accepted for r in dec.rows) > 0  # the draft proposed, and the target took some of it


@pytest.mark.parametrize("tree", [None, TreeShape(2, 6)], ids=["chain", "tree"])
def test_suffix_requests_through_a_queue_equal_batch_one_greedy(target, prompt_ids, references, tree):
    checks, dec, draft = run_suffix(target, prompt_ids, references, 3, 4, tree, requests=13)
    assert len(checks) == 13
    assert_exact(checks)
    assert draft.corpus.requests == 13  # every finished request joined the global structure
    repeats = dec.rows[8:]  # requests 8..12 repeat prompts 0..4, answered while the first ones are in the corpus
    assert sum(r.accepted for r in repeats) > sum(r.accepted for r in dec.rows[:5])


@pytest.mark.parametrize("tree", [None, TreeShape(3, 8)], ids=["chain", "tree"])
def test_suffix_rows_sized_by_goodput_equal_batch_one_greedy(target, prompt_ids, references, tree):
    """A cost where every verified token costs a tenth of a step: the batch drafts fewer nodes, and stays exact."""
    rows = [prompt_ids[i % len(prompt_ids)] for i in range(8)]
    draft = SuffixDraft(costs=CostModel(t_fixed=0.01, t_mem=0.0, t_token=0.001))
    dec = decoder_for_ids(target, draft, rows, 8, MAX_NEW, lanes=8, tree=tree)
    for _ in dec.steps():
        pass
    assert_exact(compare(target, rows, [r.output for r in dec.rows], references[:8]))
    assert sum(r.accepted for r in dec.rows) > 0
