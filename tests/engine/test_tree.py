"""Token trees (issue 16): the flattened layout, the ancestor mask and the exact acceptance walk as
named claims on hand-made trees, and a distribution test that the tree rule's output is the target's."""

import pytest
import torch

from specviz.engine.sampling import SamplingParams, process_logits
from specviz.engine.tree import TokenTree, accept_tree, ancestor_mask

GREEDY = SamplingParams()


def peaked(argmaxes: list[list[int]], V: int = 8) -> torch.Tensor:
    """[B, T, V] logits whose argmax at row b, slot t is argmaxes[b][t]."""
    logits = torch.zeros(len(argmaxes), len(argmaxes[0]), V)
    for b, row in enumerate(argmaxes):
        for t, a in enumerate(row):
            logits[b, t, a] = 5.0
    return logits


def test_from_rows_flattens_with_offsets_depths_and_padding():
    tree = TokenTree.from_rows([[(5, -1), (7, 0), (9, -1)], [(3, -1)]])
    assert tree.tokens.tolist() == [5, 7, 9, 3] and tree.parents.tolist() == [-1, 0, -1, -1]
    assert tree.depth.tolist() == [1, 2, 1, 1] and tree.cu_nodes.tolist() == [0, 3, 4]
    tokens, parents, depth, real = tree.padded()
    assert tokens.tolist() == [[5, 7, 9], [3, 0, 0]] and parents.tolist() == [[-1, 0, -1], [-1, -2, -2]]
    assert real.tolist() == [[True] * 3, [True, False, False]]
    with pytest.raises(ValueError):
        TokenTree.from_rows([[(5, 0)]])  # a node cannot be its own parent


def test_a_node_sees_the_root_itself_and_its_ancestors_only():
    # root -> a(0) -> b(1); root -> c(2) -> d(3)
    tree = TokenTree.from_rows([[(1, -1), (2, 0), (3, -1), (4, 2)], [(6, -1)]])
    _, parents, _, real = tree.padded()
    seen = ancestor_mask(parents, real)  # [2, 5, 5]
    assert seen[0].int().tolist() == [
        [1, 0, 0, 0, 0],  # root
        [1, 1, 0, 0, 0],  # a
        [1, 1, 1, 0, 0],  # b: root, a, itself
        [1, 0, 0, 1, 0],  # c: not a or b
        [1, 0, 0, 1, 1],  # d
    ]
    assert seen[1].int().tolist()[:2] == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0]]
    assert seen[1, 2:].int().tolist() == [[0, 0, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 1]]  # padding: itself


def test_greedy_rejects_the_first_child_and_accepts_the_second():
    # root children: 4 (rank 0), 6 (rank 1); 6 has child 2. Target: root -> 6, at 6 -> 2, at 2 -> 5
    tree = TokenTree.from_rows([[(4, -1), (6, -1), (2, 1)]])
    v = accept_tree(peaked([[6, 0, 2, 5]]), tree, torch.zeros(1, 4), GREEDY)
    assert v.path == [[1, 2]] and v.num_accepted.tolist() == [2]
    assert v.emitted.tolist() == [[6, 2, 5]]  # accepted 6, 2, bonus 5
    assert v.keep_slots.tolist() == [[True, False, True, True]]


def test_the_steps_one_host_copy_holds_the_verdict_and_each_rows_nodes():
    """step.read_step (the tree walk's only device read) gives what the verdict and tree.row say."""
    from specviz.engine.step import read_step

    rows = [[(4, -1), (6, -1), (2, 1)], [], [(3, -1), (5, 0)]]
    tree = TokenTree.from_rows(rows, probs=[[0.5, 0.25, 0.125], [], [1.0, 0.75]], rank=[[0, 1, 0], [], [0, 0]])
    v = accept_tree(peaked([[6, 0, 2, 5], [3, 0, 0, 0], [3, 5, 1, 0]]), tree, torch.zeros(3, 4), GREEDY)
    host = read_step(tree, v)
    assert [h["num_accepted"] for h in host] == v.num_accepted.tolist() == [2, 0, 2]
    assert [h["path"] for h in host] == v.path == [[1, 2], [], [0, 1]]
    assert [h["emitted"] for h in host] == [[6, 2, 5], [3], [3, 5, 1]]
    assert [h["nodes"] for h in host] == [tree.row(b) for b in range(3)]


def test_greedy_first_miss_emits_the_argmax_as_recovered():
    tree = TokenTree.from_rows([[(4, -1), (6, -1), (2, 1)]])
    v = accept_tree(peaked([[6, 0, 7, 5]]), tree, torch.zeros(1, 4), GREEDY)  # at node 6 the target wants 7
    assert v.emitted.tolist() == [[6, 7]] and v.path == [[1]]


def test_sampling_rejects_a_child_of_zero_mass_and_accepts_the_second_child():
    # p at the root gives token 4 nothing, token 6 everything: c_1 = 4 is always rejected, then r is
    # renormalised over what is left (all on 6) and c_2 = 6 is accepted whatever its uniform
    logits = torch.full((1, 3, 8), float("-inf"))
    logits[0, 0, 6] = 10.0
    logits[0, 2, 3] = 10.0  # at node 6 the bonus is 3
    tree = TokenTree.from_rows([[(4, -1), (6, -1)]])
    v = accept_tree(logits, tree, torch.tensor([[0.0, 0.999, 0.5]]), SamplingParams(1.0))
    assert v.path == [[1]] and v.emitted.tolist() == [[6, 3]]


def test_a_one_node_tree_is_a_chain_of_one():
    tree = TokenTree.from_rows([[(3, -1)]])
    hit = accept_tree(peaked([[3, 1]]), tree, torch.zeros(1, 2), GREEDY)
    miss = accept_tree(peaked([[2, 1]]), tree, torch.zeros(1, 2), GREEDY)
    assert hit.emitted.tolist() == [[3, 1]] and miss.emitted.tolist() == [[2]]


def test_rows_with_trees_of_different_sizes_walk_independently():
    tree = TokenTree.from_rows([
        [(1, -1), (2, 0), (3, 1), (4, 0)],  # accepts 1, then 4 (second child), bonus
        [],  # drafted nothing: the bonus only
        [(5, -1), (6, -1)],  # rejects both: recovered 7
    ])
    logits = peaked([[1, 4, 0, 0, 2], [3, 0, 0, 0, 0], [7, 0, 0, 0, 0]])
    v = accept_tree(logits, tree, torch.zeros(3, 5), GREEDY)
    assert v.path == [[0, 3], [], []]
    assert v.emitted.tolist() == [[1, 4, 2], [3, -1, -1], [7, -1, -1]]
    assert v.num_accepted.tolist() == [2, 0, 0]
    assert v.keep_slots.tolist() == [[True, True, False, False, True], [True] + [False] * 4, [True] + [False] * 4]


def test_a_row_uses_only_its_own_uniforms():
    tree = TokenTree.from_rows([[(1, -1), (2, -1)], [(3, -1)]])
    logits = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(0))
    u = torch.rand(2, 3, generator=torch.Generator().manual_seed(1))
    a = accept_tree(logits, tree, u, SamplingParams(1.0))
    u2 = u.clone()
    u2[1] = torch.rand(3)
    b = accept_tree(logits, tree, u2, SamplingParams(1.0))
    assert a.emitted[0].tolist()[: a.num_accepted[0] + 1] == b.emitted[0].tolist()[: b.num_accepted[0] + 1]


# ---- the distribution test ----------------------------------------------------------------------

N = 100_000  # draws
V = 6
# The tree: root -> 0, 2, 5 (three siblings); node "0" -> 1, 4; node "2" -> 0. The first two output
# tokens take 3 * V + (V - 3) = 21 values (a child then any token; or a recovered non-child alone):
# chi-square with 20 degrees of freedom, P(X > 45.31) = 0.001. The seed is fixed: deterministic.
TREE = [(0, -1), (2, -1), (5, -1), (1, 0), (4, 0), (0, 1)]
CHI2_BOUND = 45.31


def first_two_tokens(params: SamplingParams, renormalise: bool = True, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(1 + len(TREE), V, generator=g) * 1.5  # one distribution per verify slot
    one = TokenTree.from_rows([TREE])
    n = len(TREE)
    tree = TokenTree(one.tokens.repeat(N), one.parents.repeat(N), one.depth.repeat(N), torch.arange(N + 1) * n)
    u = torch.rand(N, len(TREE) + 1, generator=g)
    v = accept_tree(logits.expand(N, -1, -1), tree, u, params, renormalise=renormalise)
    p = process_logits(logits, params)  # [7, V]
    first, second = v.emitted[:, 0], v.emitted[:, 1]
    child_slot = {tok: i + 1 for i, (tok, parent) in enumerate(TREE) if parent == -1}
    observed, expected = [], []
    for x in range(V):
        n_x = first == x
        if x in child_slot:  # then the next token is distributed as p at that child's slot
            counts = torch.bincount(second[n_x], minlength=V).float()
            observed.append(counts)
            expected.append(p[0, x] * p[child_slot[x]] * N)
        else:  # a recovered token ends the step
            assert bool((second[n_x] == -1).all())
            observed.append(n_x.sum().float().view(1))
            expected.append((p[0, x] * N).view(1))
    return torch.cat(observed), torch.cat(expected), v, p


def chi_square(observed: torch.Tensor, expected: torch.Tensor) -> float:
    mask = expected > 0
    assert observed[~mask].sum() == 0, "a token of probability 0 was emitted"
    return float(((observed[mask] - expected[mask]) ** 2 / expected[mask]).sum())


@pytest.mark.parametrize("params", [SamplingParams(1.0), SamplingParams(1.3, top_p=0.9)])
def test_tree_rule_output_is_distributed_as_the_target(params):
    observed, expected, v, p = first_two_tokens(params)
    assert chi_square(observed, expected) < CHI2_BOUND
    assert 0.5 * (observed - expected).abs().sum() / N < 0.01  # total variation
    first_accepted = v.keep_slots[:, 1:4]  # [N, 3] the root's three children: 0, 2, 5
    # every sibling the target allows was accepted sometimes (top-p may cut one to probability 0)
    assert first_accepted.any(0).tolist() == (p[0, [0, 2, 5]] > 0).tolist()
    assert bool((v.num_accepted == 0).any()) and bool((v.num_accepted == 2).any())


def test_a_rule_without_renormalisation_between_siblings_fails_it():
    observed, expected, _, _ = first_two_tokens(SamplingParams(1.0), renormalise=False)
    assert chi_square(observed, expected) > 10 * CHI2_BOUND
