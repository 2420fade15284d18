"""The field's acceptance statistics and the oracle bound, checked against values worked out by hand on a
small written-out trace (three steps of two rows, k = 3)."""

import pytest

from specviz.analysis import acceptstats as st
from specviz.analysis.analytic import CostModel, Costs
from specviz.analysis.oracle import oracle_bound, step_tokens
from specviz.analysis.tune import Acceptance, recommend_k


def row(i, drafted, accepted):
    return {"index": i, "active": True, "drafted": drafted, "accepted": accepted, "emitted": [0] * (accepted + 1)}


def make_steps(plan, k=3):
    """[[(drafted, accepted) per row] per step] -> trace steps."""
    return [{"step": n, "k": k, "rows": [row(i, d, a) for i, (d, a) in enumerate(rows)]} for n, rows in enumerate(plan)]


# Row 1 of step 2 drafted nothing (an n-gram draft without a match): not a round, but a row that could draft.
PLAN = [[(3, 3), (3, 0)],
        [(3, 1), (3, 1)],
        [(3, 0), (0, 0)]]
STEPS = make_steps(PLAN)
# A target forward takes 1 s whatever its size, a draft forward 0.1 s: T_step(b, k) = 1 + 0.1 k.
FLAT = Costs(target=CostModel(t_fixed=0.0, t_mem=1.0, t_token=0.0), draft=CostModel(t_fixed=0.0, t_mem=0.1, t_token=0.0))


def test_acceptance_per_position_counts_rounds_that_accepted_at_least_j():
    counts = st.position_counts(STEPS)
    assert counts.rounds == 5 and counts.idle == 1
    assert counts.at_least == (3, 1, 1)  # accepted >= 1: 3, 1, 1; >= 2: the 3; >= 3: the 3
    assert st.acceptance_per_position(counts) == pytest.approx([3 / 5, 1 / 5, 1 / 5])
    # positions tried: 3 (all accepted), 1, 2, 2, 1 -> alpha = 5 / 9
    assert (counts.successes, counts.trials) == (5, 9) and counts.alpha == pytest.approx(5 / 9)


def test_accepted_length_histogram_groups_rounds_by_draft_length():
    steps = STEPS + make_steps([[(2, 2), (1, 0)]], k=2)
    assert st.accepted_length_histogram(steps) == {1: {0: 1}, 2: {2: 1}, 3: {0: 2, 1: 2, 3: 1}}


def test_zero_accept_rate_and_wasted_share_count_rounds_not_idle_rows():
    assert st.zero_accept_rate(STEPS) == pytest.approx(2 / 5)
    assert st.wasted_draft_share(STEPS) == pytest.approx(10 / 15)  # 15 drafted, 5 accepted
    assert st.zero_accept_rate(make_steps([[(0, 0)]])) is None and st.wasted_draft_share([]) is None


def test_regular_steps_and_tree_rows_are_not_rounds():
    regular = make_steps([[(0, 0), (0, 0)]], k=0)
    tree = [{"step": 0, "k": 2, "rows": [dict(row(0, 3, 1), tree={"parent": [-1, -1, 0], "depth": [1, 1, 2],
                                                                   "rank": [0, 1, 0], "path": [0]})]}]
    assert st.position_counts(regular + tree) == st.PositionCounts(rounds=0, at_least=(), idle=0)


def test_counts_from_vllm_match_the_servers_own_alpha():
    # tests/data/vllm's capture: 23 drafts, accepted per position 11, 10, 6, 5 (metrics.Delta.alpha: 32 / 49)
    counts = st.counts_from_vllm(23.0, (11.0, 10.0, 6.0, 5.0))
    assert counts.at_least == (11, 10, 6, 5) and counts.alpha == pytest.approx(32 / (23 + 11 + 10 + 6))


def test_field_statistics_gathers_the_four_under_their_names():
    s = st.field_statistics(STEPS)
    assert s["accepted_length_histogram"] == {"3": {"0": 2, "1": 2, "3": 1}}
    assert s["rounds"] == 5 and s["zero_accept_rate"] == pytest.approx(0.4)


def test_step_tokens_keep_each_rows_accepted_prefix_up_to_k():
    assert [step_tokens(STEPS[0], k) for k in range(4)] == [2, 3, 4, 5]
    assert [step_tokens(STEPS[1], k) for k in range(4)] == [2, 4, 4, 4]
    assert [step_tokens(STEPS[2], k) for k in range(4)] == [2, 2, 2, 2]


def test_oracle_bound_takes_the_best_k_per_step_in_hindsight():
    b = oracle_bound(STEPS, lambda _: FLAT)
    # fixed k: k=0 6/3, k=1 9/3.3, k=2 10/3.6, k=3 11/3.9; the oracle: k = 3, 1, 0 -> (5 + 4 + 2) / (1.3 + 1.1 + 1)
    assert b.best_fixed_k == 3 and b.best_fixed == pytest.approx(11 / 3.9)
    assert b.as_run == pytest.approx(11 / 3.9)
    assert b.oracle_ks == (3, 1, 0) and b.oracle == pytest.approx(11 / 3.4)
    assert b.left_behind == pytest.approx((11 / 3.4) / (11 / 3.9) - 1)


def test_oracle_beats_every_schedule_on_a_brute_force_search():
    import itertools

    from specviz.analysis import steady

    plan = [[(4, 4), (4, 2), (4, 0)], [(4, 1), (4, 0), (4, 3)], [(4, 0), (4, 0), (4, 4)], [(4, 2), (4, 2), (4, 2)]]
    steps = make_steps(plan, k=4)
    costs = Costs(target=CostModel(t_fixed=0.002, t_mem=0.01, t_token=0.001), draft=CostModel(0.0, 0.001, 0.0001))
    best = max(sum(step_tokens(s, k) for s, k in zip(steps, ks)) / sum(steady.step_seconds(3, k, costs) for k in ks)
               for ks in itertools.product(range(5), repeat=len(steps)))
    assert oracle_bound(steps, lambda _: costs).oracle == pytest.approx(best)


def test_recommendation_on_the_hand_trace_counts_the_idle_row_as_a_miss():
    acc = Acceptance.from_counts(st.position_counts(STEPS))
    # P(A >= j) over the 6 rows that could draft: 3/6, 1/6, 1/6 -> E(k) = 1, 1.5, 5/3, 11/6
    assert acc.survival(3) == pytest.approx([0.5, 1 / 6, 1 / 6])
    choice = recommend_k(acc, FLAT, 1)
    assert choice.curve == pytest.approx([1.0, 1.5 / 1.1, (5 / 3) / 1.2, (11 / 6) / 1.3])
    assert choice.k == 3 and not choice.extrapolated
