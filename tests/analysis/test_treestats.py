"""Token-tree statistics (issue 16): acceptance by depth x sibling rank from trace rows, and our
expected-output-tokens formula for a tree, which reduces to the chain's for a chain."""

import pytest

from specviz.analysis.analytic import expected_tokens_per_step
from specviz.analysis.treestats import acceptance_by_depth_rank, expected_tree_tokens, rates


def row(tokens, parents, depth, rank, path):
    return {"index": 0, "active": True, "tree": {"token": tokens, "parent": parents, "depth": depth,
                                                 "rank": rank, "path": path}}


def test_acceptance_counts_only_children_of_reached_nodes():
    # root -> a (rank 0) -> c; root -> b (rank 1) -> d. Step 1 accepts b then d; step 2 accepts nothing.
    shape = ([1, 2, 3, 4], [-1, -1, 0, 1], [1, 1, 2, 2], [0, 1, 0, 0])
    steps = [{"rows": [row(*shape, [1, 3])]}, {"rows": [row(*shape, [])]}]
    counts = acceptance_by_depth_rank(steps)
    # depth 1: both steps tried rank 0 and rank 1; step 1 accepted rank 1. Depth 2: only d was
    # reached-from (b accepted in step 1), and accepted; c's parent a was never reached.
    assert counts == {(1, 0): (0, 2), (1, 1): (1, 2), (2, 0): (1, 1)}
    assert rates(counts) == {(1, 0): 0.0, (1, 1): 0.5, (2, 0): 1.0}


@pytest.mark.parametrize("alpha,k", [(0.4, 3), (0.8, 5)])
def test_a_chain_gives_the_chain_formula(alpha, k):
    a = {(d, 0): alpha for d in range(1, k + 1)}
    e = expected_tree_tokens(list(range(-1, k - 1)), list(range(1, k + 1)), [0] * k, a)
    assert e == pytest.approx(expected_tokens_per_step(alpha, k))


def test_a_second_sibling_adds_its_own_reach():
    a = {(1, 0): 0.5, (1, 1): 0.3, (2, 0): 0.5}
    # root -> x (rank 0) -> y; root -> z (rank 1)
    assert expected_tree_tokens([-1, 0, -1], [1, 2, 1], [0, 0, 1], a) == pytest.approx(1 + 0.5 + 0.25 + 0.3)
