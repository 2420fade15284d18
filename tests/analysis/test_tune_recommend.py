"""The recommendation: the k the analytic model says is best for given numbers, off where acceptance is low
or the batch is past the knee, an interval that narrows with the sample size, and extrapolation only when
asked for."""

import numpy as np
import pytest

from specviz.analysis import analytic, steady
from specviz.analysis.acceptstats import PositionCounts
from specviz.analysis.analytic import CostModel, Costs
from specviz.analysis.engineconfig import batch_ranges
from specviz.analysis.tune import (K_MAX, Acceptance, k_by_batch, k_limit, recommend, recommend_k, roofline_costs,
                                   shortest_worth)

# A calibrated-looking pair: the target flat to 64 tokens per forward, then linear; a draft 5% of it; some
# per-step overhead (the shape specviz calibrate fits on this machine class).
COSTS = Costs(target=CostModel(t_fixed=0.004, t_mem=0.016, t_token=0.00025),
              draft=CostModel(t_fixed=0.0005, t_mem=0.0008, t_token=0.00002), overhead=0.002)


def geometric(alpha: float, rounds: int, k: int = 6) -> PositionCounts:
    """Counts of rounds whose accepted count is truncated-geometric: n_j = rounds alpha^j, exactly."""
    at_least = tuple(round(rounds * alpha**j) for j in range(1, k + 1))
    return PositionCounts(rounds=rounds, at_least=at_least, successes=sum(at_least), trials=rounds + sum(at_least[:-1]))


@pytest.mark.parametrize("alpha", [0.3, 0.55, 0.7, 0.85, 0.95])
@pytest.mark.parametrize("b", [1, 4, 16, 64])
def test_one_alpha_picks_the_k_the_analytic_model_and_the_goodput_policy_pick(alpha, b):
    choice = recommend_k(Acceptance.from_alpha(alpha), COSTS, b, draws=0)
    assert choice.k == analytic.optimal_k(b, alpha, COSTS, k_max=K_MAX) == steady.goodput_k([alpha] * b, COSTS, K_MAX)
    assert choice.speedup == pytest.approx(analytic.speedup_batch(b, choice.k, alpha, COSTS.target, COSTS.draft,
                                                                  COSTS.overhead))


def test_per_position_counts_reduce_to_leviathans_tokens_per_step():
    acc = Acceptance.from_counts(geometric(0.5, 64_000))
    tokens = 1.0 + np.concatenate([[0.0], np.cumsum(acc.survival(6))])
    assert tokens == pytest.approx([analytic.expected_tokens_per_step(0.5, k) for k in range(7)])


def test_low_acceptance_says_off_at_every_batch_size_and_is_sure_of_it():
    acc = Acceptance.from_counts(geometric(0.05, 4000, k=4))
    choices = recommend(acc, lambda b: COSTS, [1, 8, 64])
    assert [c.k for c in choices] == [0, 0, 0]
    assert all(c.speedup == 1.0 and c.p_helps < 0.05 for c in choices)
    assert shortest_worth(choices[0]) is None


def test_past_the_knee_the_same_acceptance_turns_speculation_off():
    acc = Acceptance.from_counts(geometric(0.7, 4000))
    ks = k_by_batch(acc, lambda b: COSTS, 256)
    assert ks[0] >= 2 and ks[-1] == 0  # the point: acceptance alone cannot decide it
    assert all(a >= b for a, b in zip(ks, ks[1:]))  # k*(b) falls with b on a roofline
    ranges = batch_ranges(ks)
    assert ranges[0][0] == 1 and ranges[-1][1] == 256 and ranges[-1][2] == 0


def test_the_interval_narrows_with_the_sample_size_and_holds_the_estimate():
    small, large = (recommend_k(Acceptance.from_counts(geometric(0.6, n, k=4)), COSTS, 4) for n in (30, 30_000))
    assert small.k == large.k
    for c in (small, large):
        assert c.interval[0] <= c.goodput <= c.interval[1]
    width = [c.interval[1] - c.interval[0] for c in (small, large)]
    assert width[1] < width[0] / 10  # ~1/sqrt(1000) of it
    assert large.p_best > small.p_best


def test_a_fitted_alpha_has_no_sample_size_so_no_interval():
    c = recommend_k(Acceptance.from_alpha(0.6), COSTS, 1)
    assert c.interval is None and c.p_best is None and not c.extrapolated


def test_k_stays_within_the_measured_positions_unless_k_max_asks_for_more():
    acc = Acceptance.from_counts(geometric(0.97, 4000, k=2))  # every draft accepted: longer would pay
    assert k_limit(acc) == 2 and recommend_k(acc, COSTS, 1).k == 2
    far = recommend_k(acc, COSTS, 1, k_max=8)
    assert far.k > 2 and far.extrapolated


def test_entered_costs_make_the_roofline_of_the_speedup_page():
    rc = roofline_costs(0.02, 0.1, 64)
    assert rc.target(1, 1) == pytest.approx(0.02) and rc.target(8, 8) == pytest.approx(0.02)  # flat to the knee
    assert rc.target(16, 8) == pytest.approx(0.04) and rc.draft(1, 1) == pytest.approx(0.002)
    with pytest.raises(ValueError):
        roofline_costs(float("nan"), 0.1, 64)


def tree_trace(steps: int = 40) -> dict:
    """One row per step, a tree of two first-level candidates with one child each: half the steps accept the
    first-rank path (2 tokens), half the second-rank one (2 tokens) -- which a chain of first-rank children
    would have missed entirely."""
    tree = {"parent": [-1, -1, 0, 1], "depth": [1, 1, 2, 2], "rank": [0, 1, 0, 0]}
    rows = [[{"index": 0, "active": True, "drafted": 4, "accepted": 2, "emitted": [0, 0, 0],
              "tree": dict(tree, path=[0, 2] if n % 2 else [1, 3])}] for n in range(steps)]
    return {"config": {"batch_size": 1, "draft": "org/draft-model", "tree_width": 2, "tree_nodes": 4},
            "steps": [{"step": n, "k": 2, "rows": r} for n, r in enumerate(rows)]}


def test_a_tree_trace_reads_as_its_first_rank_chains():
    from specviz.analysis.acceptstats import first_rank_rounds

    assert first_rank_rounds(tree_trace(4)["steps"]) == [(2, 0), (2, 2), (2, 0), (2, 2)]


def test_a_tree_that_pays_is_written_as_sglangs_tree_shape():
    from specviz.peers import tune

    free_draft = Costs(target=CostModel(0.0, 1.0, 0.0), draft=CostModel(0.0, 0.0, 0.0))  # verify width is free
    inputs = tune.Inputs(**tune.trace_parts(tree_trace()), costs_at=lambda b: free_draft, costs_note="flat",
                         batch_sizes=[1])
    ans = tune.answer(inputs, "sglang")
    # the chain: P(A >= 1) = P(A >= 2) = 1/2 -> 2 tokens a step; the tree keeps both candidates -> 3
    assert ans["serve"]["goodput"] == pytest.approx(2.0)
    assert ans["tree"] == {"depth": 2, "width": 2, "nodes": 4, "tokens_per_step": pytest.approx(3.0),
                           "goodput": pytest.approx(3.0)}
    assert ans["settings"]["text"] == ("--speculative-algorithm STANDALONE --speculative-draft-model-path org/draft-model "
                                       "--speculative-num-steps 2 --speculative-eagle-topk 2 "
                                       "--speculative-num-draft-tokens 5")
