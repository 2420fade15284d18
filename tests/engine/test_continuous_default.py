"""The packaged pair under a request queue (issue 17): greedy fp32, ragged prompts, every refilled
request's output equals its plain greedy output at B = 1, with the default draft and n-grams."""

import pytest

from specviz.engine.proposers import NgramDraft
from specviz.measure.correctness import check_exactness
from specviz.run import make_proposer

from exact_default import RAGGED_PROMPTS, prompt_ids, references, target  # noqa: E402,F401  (shared fixtures)

PROMPTS = RAGGED_PROMPTS[:7]
MAX_NEW = 6  # a few steps per request: joins still land while other rows are mid-output
pytestmark = pytest.mark.slow  # the real model in fp32: ~5 min CPU for the module (bench/exactness.py --requests for more)


@pytest.mark.parametrize("requests,lanes,k", [(13, 3, 3), (29, 8, 2)])
@pytest.mark.parametrize("draft", ["default", "ngram"])
def test_refilled_requests_equal_batch_one_greedy(target, prompt_ids, references, requests, lanes, k, draft):
    proposer = make_proposer("default", target) if draft == "default" else NgramDraft()
    checks = check_exactness(target, proposer, prompt_ids, lanes, k, MAX_NEW, references, requests=requests)
    assert len(checks) == requests
    for c in checks:  # a divergence is only acceptable at a near-tie of the reference's logits
        assert c.exact or c.margin < 1e-3, f"request {c.index} diverges at {c.first_divergence}, margin {c.margin}"
    assert sum(c.exact for c in checks) >= requests - 1
