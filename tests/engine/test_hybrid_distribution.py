"""Sampling with the hybrid draft keeps the target's distribution at T = 1, in a step where a quarter of the rows
draft with the model (its q) and the rest with the suffix draft (a point mass inside the same q tensor), and the
deliberately wrong rule that accepts every proposal fails the same check (the suffix draft's test's prompt
and check: specviz.measure.firsttoken.frequency_check, pass at p-value > 1e-3)."""

import pytest

from specviz.engine.hybrid import HybridDraft
from specviz.engine.sampling import SamplingParams
from specviz.engine.suffix import SuffixDraft
from specviz.engine.step import TreeShape
from specviz.measure.firsttoken import frequency_check, next_token_probs
from specviz.models.loading import encode_prompts
from specviz.run import DEFAULT_DRAFT_DIR, decoder_for_ids, make_proposer

from test_suffix_distribution import PROMPT, accept_always, accept_first_children, target  # noqa: F401

ROWS = 64  # 16 with the model, 48 with the suffix draft (half each: accept-always failed only at p = 0.001)

pytestmark = pytest.mark.slow  # the real model in fp32


class Alternating(HybridDraft):
    """Every fourth row takes the model, the others the suffix draft (the choice itself is a function of
    earlier steps only, so forcing it keeps the rule exact; here it makes one step mix both)."""

    def model_estimate(self, k):
        return [float("inf") if i % 4 == 0 else 0.0 for i in range(len(self.rows))]


def first_tokens(target, tree, wrong: bool) -> tuple[list[int], list[bool]]:
    ids = encode_prompts(target.tokenizer, [PROMPT], True)[0]
    model = make_proposer(str(DEFAULT_DRAFT_DIR), target)  # the packaged 2-layer token draft, in fp32 with the target
    draft = Alternating(model, SuffixDraft())
    dec = decoder_for_ids(target, draft, [ids] * ROWS, 3, 1, SamplingParams(1.0), tree=tree,
                          accept_fn=accept_always if wrong and tree is None else None)
    if wrong and tree is not None:
        dec.accept_tree_fn = accept_first_children
    step = next(dec.steps())
    assert all(r.drafted > 0 for r in step.rows)
    return [r.output[0] for r in dec.rows], list(draft.use_suffix)


@pytest.mark.parametrize("tree", [None, TreeShape(2, 6)], ids=["chain", "tree"])
def test_the_hybrid_keeps_the_targets_distribution_and_accept_always_does_not(target, tree):
    p = next_token_probs(target.model, encode_prompts(target.tokenizer, [PROMPT], True)[0], SamplingParams(1.0))
    toks, used = first_tokens(target, tree, wrong=False)
    assert any(used) and not all(used)  # one step, both drafts
    check = frequency_check(toks, p)
    assert check["passed"], check
    wrong, _ = first_tokens(target, tree, wrong=True)
    bad = frequency_check(wrong, p)
    assert not bad["passed"], bad
