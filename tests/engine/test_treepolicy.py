"""The per-step tree shape policy (specviz.engine.treepolicy): its token prediction reduces to the
chain formula, N shrinks as the batch grows past the verify knee, it learns acceptance by depth x
rank from the trees it observes, and the engine decoding under it stays exact."""

import pytest

from specviz.analysis import analytic
from specviz.analysis.treestats import acceptance_by_depth_rank
from specviz.engine.policies import make_policy
from specviz.engine.treepolicy import TreeShapes, illustrative_costs, predicted_tokens, step_seconds
from specviz.records import TreeNodes

from fakes import perturbed_copy, ragged_prompts, reference_greedy, tiny_llama

# A CPU-like pair: the target's forward is flat up to 64 tokens (b (1 + N)), then linear.
COSTS = analytic.Costs(target=analytic.CostModel(t_fixed=0.002, t_mem=0.018, t_token=0.018 / 64),
                       draft=analytic.CostModel(t_fixed=0.0008, t_mem=0.0002, t_token=0.0002 / 64),
                       overhead=0.001)


def test_a_chain_shape_predicts_the_chain_formula():
    for alpha in (0.3, 0.6):
        for k in (1, 3, 5):
            got = predicted_tokens(k, 1, k, lambda d, r: alpha if r == 0 else 0.0)
            assert got == pytest.approx(analytic.expected_tokens_per_step(alpha, k))


def test_second_guesses_add_their_reach_and_n_caps_the_tree():
    a = lambda d, r: {0: 0.5, 1: 0.3}.get(r, 0.0)  # noqa: E731
    assert predicted_tokens(1, 2, 2, a) == pytest.approx(1 + 0.5 + 0.3)
    assert predicted_tokens(2, 2, 3, a) == pytest.approx(1 + 0.5 + 0.3 + 0.25)  # the best third node: 0.5 * 0.5
    assert predicted_tokens(2, 2, 3, a) < predicted_tokens(2, 2, 6, a)


def test_the_step_cost_counts_k_draft_forwards_and_one_verify_of_1_plus_n_slots():
    want = COSTS.draft(4, 1) + 2 * COSTS.draft(4, 3) + COSTS.target(4, 1 + 10) + COSTS.overhead
    assert step_seconds(4, 3, 3, 10, COSTS) == pytest.approx(want)
    assert step_seconds(4, 0, 1, 0, COSTS) == pytest.approx(COSTS.target(4, 1) + COSTS.overhead)


def test_n_shrinks_as_the_batch_grows_and_speculation_stops_past_the_knee():
    policy = TreeShapes(COSTS)
    shapes = {b: policy.choose(b) for b in (1, 4, 16, 64)}
    n = {b: s[2] for b, s in shapes.items()}
    assert n[1] >= n[4] >= n[16] and n[1] > n[16]
    assert shapes[1][1] > 1  # at batch 1 the free verify width buys a real tree
    assert shapes[64] == (0, 1, 0)  # b = 64 is at the knee already: regular decoding
    k = policy.next_k(1)
    assert (k, *policy.shape) == shapes[1]


def test_observed_second_guesses_raise_the_chosen_width():
    def tree(path):  # depth 1: ranks 0..2 under the root, each with one child
        return TreeNodes(token=(5,) * 6, parent=(-1, -1, -1, 0, 1, 2), depth=(1, 1, 1, 2, 2, 2), path=tuple(path),
                         rank=(0, 1, 2, 0, 0, 0))

    chains = TreeShapes(COSTS, prior_weight=1.0, decay=1.0)
    for _ in range(50):
        chains.observe_trees([tree([0, 3])])  # always the top guess, twice
    seconds = TreeShapes(COSTS, prior_weight=1.0, decay=1.0)
    for _ in range(50):
        seconds.observe_trees([tree([1, 4])])  # always the second guess
    assert chains.rate(1, 0) > 0.9 and chains.rate(1, 1) < 0.1
    assert seconds.rate(1, 1) > 0.9 and seconds.rate(1, 0) < 0.1
    steps = [{"rows": [{"tree": tree([1, 4]).to_json()}] * 50}]
    acc, tried = acceptance_by_depth_rank(steps)[(1, 1)]  # the same counting as the trace statistics
    assert seconds.counts[(1, 1)] == [acc, tried]
    assert seconds.choose(1)[1] >= 2 and chains.choose(1)[1] <= seconds.choose(1)[1]


def test_decoding_under_the_shape_policy_equals_batch_one_greedy_and_varies_the_shape():
    from specviz.engine.proposers import ModelDraft
    from specviz.engine.step import TreeShape
    from specviz.run import decoder_for_ids

    V = 64
    target = tiny_llama(V)
    prompts = ragged_prompts(3, V, seed=9)
    ref = reference_greedy(target, prompts, max_new=10)
    policy = TreeShapes(COSTS, k_max=4, w_max=3, prior_alpha=0.5)
    dec = decoder_for_ids(target, ModelDraft(perturbed_copy(target, 0.3)), prompts, 0, 10, policy=policy,
                          tree=TreeShape(1, 1))
    steps = [s.to_json() for s in dec.steps()]
    assert [r.output for r in dec.rows] == ref
    sizes = {len(r["tree"]["token"]) for s in steps for r in s["rows"] if r.get("tree")}
    assert max(sizes) > 1 and policy.counts  # it drafted trees and learned from them
    for s in steps:  # each step records the (W, N) it drafted with beside its k
        assert all(len(r["tree"]["token"]) <= s["tree_nodes"] for r in s["rows"] if r.get("tree"))
        assert all(max(r["tree"]["rank"]) < s["tree_width"] for r in s["rows"] if r.get("tree", {}).get("token"))
        if s["k"] == 0:
            assert (s["tree_width"], s["tree_nodes"]) == (1, 0)  # a regular step drafts no tree
    assert len({(s["k"], s["tree_width"], s["tree_nodes"]) for s in steps}) > 1  # the shape varies over the run


def test_a_regular_step_under_the_shape_policy_records_no_tree_for_its_rows():
    from specviz.engine.proposers import ModelDraft
    from specviz.engine.step import TreeShape
    from specviz.run import decoder_for_ids

    V = 64
    target = tiny_llama(V)
    prompts = ragged_prompts(2, V, seed=5)
    dear = analytic.Costs(target=COSTS.target, draft=analytic.CostModel(t_fixed=1.0, t_mem=0.0, t_token=0.0))
    dec = decoder_for_ids(target, ModelDraft(perturbed_copy(target, 0.3)), prompts, 0, 6,
                          policy=TreeShapes(dear), tree=TreeShape(1, 1))  # any draft costs more than it saves
    steps = [s.to_json() for s in dec.steps()]
    assert [r.output for r in dec.rows] == reference_greedy(target, prompts, max_new=6)
    assert all(s["k"] == 0 and (s["tree_width"], s["tree_nodes"]) == (1, 0) for s in steps)
    assert not any("tree" in r for s in steps for r in s["rows"])  # the tree view and statistics skip them


def test_the_tree_policy_takes_the_flags_as_bounds_and_shrinks_n_as_the_batch_grows():
    policy = make_policy("tree", 4, costs=COSTS, w_max=3, n_max=10)  # --draft-length 4 --tree-width 3 --tree-nodes 10
    assert isinstance(policy, TreeShapes) and policy.name == "tree"
    shapes = {b: policy.choose(b) for b in (1, 2, 4, 8, 16, 64)}
    assert all(k <= 4 and W <= 3 and N <= 10 for k, W, N in shapes.values())
    n = [shapes[b][2] for b in (1, 2, 4, 8, 16)]
    assert n == sorted(n, reverse=True) and n[0] > n[-1]  # the verify knee comes sooner at a larger batch
    assert shapes[1][1] > 1 and shapes[64] == (0, 1, 0)
    wide = make_policy("tree", 4, costs=COSTS, w_max=4, n_max=64)
    assert wide.choose(1)[2] >= shapes[1][2]  # a looser bound never picks a smaller tree at b = 1


def test_without_a_calibration_the_tree_policy_runs_on_the_illustrative_roofline():
    policy = make_policy("tree", 6)
    assert policy.costs == illustrative_costs(0.1, 64)
    assert policy.choose(1)[2] > policy.choose(32)[2]  # flat to 64 tokens: big trees at b = 1, small at b = 32
    knee = make_policy("tree", 6, knee="8", cost_ratio="0.05").costs  # --policy-arg strings
    assert knee == illustrative_costs(0.05, 8)
    with pytest.raises(Exception, match="needs --draft-length 1 or more"):
        make_policy("tree", 0)
