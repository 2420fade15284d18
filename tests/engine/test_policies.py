"""Draft-length policies, stepped through scripted acceptance sequences."""

import numpy as np
import pytest

from specviz.analysis import analytic
from specviz.analysis.analytic import CostModel, Costs
from specviz.engine.policies import Analytic, Bass, BassCapped, Fixed, Heuristic, Table, make_policy, parse_k_table
from specviz.common import SpecvizError


def run_script(policy, script, batch_size=2):
    """Feed [(drafted, accepted), ...] and return the k asked before each step and after the last."""
    ks = []
    for drafted, accepted in script:
        ks.append(policy.next_k(batch_size))
        policy.observe(drafted, accepted)
    ks.append(policy.next_k(batch_size))
    return ks


# --- fixed --------------------------------------------------------------------------------------


def test_fixed_never_changes():
    assert run_script(Fixed(3), [([3, 3], [3, 3]), ([3, 3], [0, 0])]) == [3, 3, 3]
    assert make_policy("fixed", 0).next_k(8) == 0


# --- heuristic ----------------------------------------------------------------------------------


def test_heuristic_grows_by_two_when_every_row_accepted_all():
    assert run_script(Heuristic(3), [([3, 3], [3, 3]), ([5, 5], [5, 5])]) == [3, 5, 7]


def test_heuristic_shrinks_by_one_when_any_row_fell_short():
    assert run_script(Heuristic(4), [([4, 4], [4, 3]), ([3, 3], [0, 3])]) == [4, 3, 2]


def test_heuristic_floors_at_one_and_caps_at_k_max():
    assert run_script(Heuristic(2), [([2], [0])] * 3) == [2, 1, 1, 1]
    assert run_script(Heuristic(5, k_max=6), [([5], [5]), ([6], [6])]) == [5, 6, 6]


def test_heuristic_ignores_rows_that_drafted_nothing_and_empty_steps():
    # A row near its token limit drafted 0: it neither blocks growth nor counts as a miss.
    assert run_script(Heuristic(3), [([3, 0], [3, 0]), ([], []), ([0], [0])]) == [3, 5, 5, 5]


def test_heuristic_starts_at_least_at_one():
    assert make_policy("heuristic", 0).next_k(1) == 1


# --- bass ---------------------------------------------------------------------------------------


def test_bass_follows_algorithm_1_step_by_step():
    policy = Bass()  # l_draft 7, l_incre 2, l_mod 10, l_limit 32 -> clamped to k_max 16
    script = [
        ([7, 7], [7, 2]),  # max x == 7: 7 + 2 = 9, s = 0
        ([9, 9], [3, 1]),  # short: max(1, 3, 9 - ceil(0.9) - 0) = 8, s = 1
        ([8, 8], [0, 0]),  # max(1, 0, 8 - 1 - 1) = 6
        ([6, 6], [0, 0]),  # 6 - 1 - 1 = 4
        ([4, 4], [0, 0]),  # 4 - 1 - 1 = 2
        ([2, 2], [0, 0]),  # max(1, 0, 2 - 1 - 1 = 0) = 1
        ([1, 1], [1, 0]),  # max x == 1: 1 + 2 = 3, s = 0
        ([3, 3], [2, 2]),  # max(1, 2, 3 - 1 - 0) = 2, s = 1
    ]
    assert run_script(policy, script) == [7, 9, 8, 6, 4, 2, 1, 3, 2]


def test_bass_keeps_the_longest_rows_acceptance():
    policy = Bass(l_draft=10)
    policy.observe([10, 10], [9, 0])  # max(1, 9, 10 - 1 - 0) = 9
    assert policy.next_k(2) == 9


def test_bass_growth_is_capped_by_k_max():
    policy = Bass(l_draft=15, k_max=16)
    assert run_script(policy, [([15], [15]), ([16], [16])], batch_size=1) == [15, 16, 16]
    assert Bass(l_draft=7, k_max=4).next_k(1) == 4


def test_make_policy_bass_starts_at_k():
    policy = make_policy("bass", 5, k_max=12)
    assert policy.next_k(4) == 5 and policy.l_limit == 12 and policy.name == "bass"


class ScriptedCap:
    """Stands in for the calibrated cap: returns the scripted k*(b) and records what it saw."""

    def __init__(self, caps):
        self.caps, self.seen = list(caps), []

    def next_k(self, batch_size):
        return self.caps.pop(0)

    def observe(self, drafted, accepted, rows=None, remaining=None):
        self.seen.append((drafted, accepted))


def test_bass_capped_runs_algorithm_1_below_the_cap():
    cap = ScriptedCap([9, 9, 3, 3, 16, 16])
    policy = BassCapped(Bass(l_draft=7), cap)
    script = [
        ([7, 7], [7, 2]),  # max x == 7: min(7 + 2, cap 9) = 9, s = 0
        ([9, 9], [9, 0]),  # max x == 9: min(11, 9) = 9
        ([3, 3], [3, 3]),  # the cap fell to 3: k = 3; all accepted: min(5, 3) = 3
        ([3, 3], [1, 0]),  # short: max(1, 1, 3 - 1 - 0) = 2, s = 1
        ([2, 2], [2, 0]),  # the cap reopened to 16; max x == 2: 4
    ]
    assert run_script(policy, script) == [7, 9, 3, 3, 2, 4]
    assert cap.seen == script  # the cap's acceptance estimate sees every step


def test_bass_capped_turns_speculation_off_when_the_cap_is_zero_and_resumes_after():
    cap = ScriptedCap([4, 0, 0, 5])
    policy = BassCapped(Bass(l_draft=4), cap)
    assert run_script(policy, [([4], [1]), ([0], [0]), ([0], [0])], batch_size=1) == [4, 0, 0, 3]
    assert cap.seen == [([4], [1])]  # steps with speculation off are not evidence about the draft
    assert policy.rule.s == 1  # ... nor steps for the BASS rule: its state is the one after step 1


def test_bass_capped_takes_its_cap_from_the_calibrated_model():
    costs = Costs(CostModel(0.0, 0.010, 1e-4), CostModel(0.0, 0.001, 1e-5), overhead=0.0005)
    policy = make_policy("bass-capped", 16, costs=costs, prior_alpha=0.8)
    assert policy.next_k(1) == analytic.optimal_k(1, 0.8, costs) < 16  # plain bass would draft 16
    assert make_policy("bass", 16).next_k(1) == 16
    assert policy.next_k(128) == 0


# --- table --------------------------------------------------------------------------------------


def test_parse_k_table():
    assert parse_k_table("1:4,4:3,16:1,64:0") == {1: 4, 4: 3, 16: 1, 64: 0}
    assert parse_k_table(" 8:2 , 1:5 ,") == {8: 2, 1: 5}


@pytest.mark.parametrize("text", ["", "1:4,1:3", "1-4", "0:4", "2:-1", "a:b", "1:2:3"])
def test_parse_k_table_rejects_bad_tables(text):
    with pytest.raises(SpecvizError):
        parse_k_table(text)


def test_table_uses_the_largest_batch_size_not_above_b():
    policy = make_policy("table", 4, table="1:4,4:3,16:1,64:0")
    assert [policy.next_k(b) for b in (1, 2, 3, 4, 15, 16, 63, 64, 500)] == [4, 4, 4, 3, 3, 1, 1, 0, 0]


def test_table_below_smallest_key_uses_the_smallest_entry():
    assert Table({4: 3, 16: 1}).next_k(2) == 3


def test_table_ignores_acceptance():
    policy = make_policy("table", 4, table={1: 4})
    assert run_script(policy, [([4], [0])] * 3, batch_size=1) == [4, 4, 4, 4]


def test_table_policy_needs_a_table():
    with pytest.raises(SpecvizError, match="needs a k table"):
        make_policy("table", 4)


def test_analytic_k_table_round_trips_into_the_table_policy():
    costs = Costs(CostModel(0.0, 0.010, 1e-4), CostModel(0.0, 0.001, 1e-5))
    ks = {b: analytic.optimal_k(b, 0.8, costs) for b in (1, 8, 64)}
    policy = make_policy("table", 0, table=",".join(f"{b}:{k}" for b, k in ks.items()))
    assert {b: policy.next_k(b) for b in ks} == ks


# --- analytic -----------------------------------------------------------------------------------


def test_analytic_starts_from_the_prior():
    policy = Analytic(prior_alpha=0.6, cost_ratio=0.1)
    assert policy.alpha == pytest.approx(0.6)
    assert policy.next_k(1) == analytic.optimal_k_batch1(0.6, 0.1)


def test_analytic_estimate_counts_positions_tried():
    # Row 1 accepted all 4 (4 trials, 4 passes); row 2 accepted 1 then was rejected (2 trials).
    policy = Analytic(prior_alpha=0.6, prior_weight=4.0, decay=0.8)
    policy.observe([4, 4], [4, 1])
    assert policy.alpha == pytest.approx((0.8 * 2.4 + 5) / (0.8 * 4 + 6))


def test_analytic_raises_k_on_full_acceptance_and_turns_off_on_rejection():
    policy = make_policy("analytic", 4, cost_ratio=0.1, prior_alpha=0.6)
    start = policy.next_k(1)
    for _ in range(20):
        k = policy.next_k(1)
        policy.observe([k], [k])
    assert policy.next_k(1) > start
    for _ in range(100):  # slower than growth: at k = 1 a rejected step is a single trial
        k = policy.next_k(1)
        if k == 0:
            break
        policy.observe([k], [0])
    assert policy.next_k(1) == 0
    assert policy.alpha < 0.1  # below c: speculation cannot pay


def test_analytic_estimate_is_unbiased_under_truncated_geometric_acceptance():
    """accepted / drafted would read ~0.42 here (alpha 0.8, k 8); the per-position count reads 0.8."""
    rng = np.random.default_rng(1)
    policy = Analytic(prior_alpha=0.3, decay=0.995, k_max=8, cost_ratio=0.0)  # free draft: k stays 8
    for _ in range(400):
        k = policy.next_k(8)
        accepted = np.cumprod(rng.random((8, k)) < 0.8, axis=1).sum(axis=1)  # [rows]
        policy.observe([k] * 8, accepted.tolist())
    assert policy.next_k(8) == 8
    assert policy.alpha == pytest.approx(0.8, abs=0.03)


def test_analytic_with_costs_turns_speculation_off_at_large_batch():
    costs = Costs(CostModel(0.0, 0.010, 1e-4), CostModel(0.0, 0.001, 1e-5), overhead=0.0005)
    policy = make_policy("analytic", 4, costs=costs, prior_alpha=0.8)
    assert policy.next_k(1) == analytic.optimal_k(1, 0.8, costs) >= 4
    assert policy.next_k(128) == 0


# A CPU-like cost model: a forward costs mostly its fixed part, so a batch that must keep
# stepping for one slow row pays nearly full price for every step of it.
CPU_LIKE = Costs(CostModel(0.040, 0.001, 0.001), CostModel(0.004, 0.0002, 0.0002), overhead=0.002)


def test_analytic_turns_off_when_one_row_rejects_everything_and_sets_the_batch_length():
    policy = make_policy("analytic", 2, costs=CPU_LIKE, prior_alpha=0.6)
    ks = []
    for _ in range(20):  # row 0 accepts all it drafts, row 1 nothing; both have 40 tokens left
        ks.append(policy.next_k(2))
        policy.observe([ks[-1]] * 2, [ks[-1], 0], rows=[0, 1], remaining=[40, 40])
    assert ks[0] >= 1 and ks[-1] == 0  # it tried, then learnt that row 1 sets the batch's length
    assert policy.row_alpha(0) > 0.8 > 0.2 > policy.row_alpha(1)
    # Row 1 will take 40 steps whatever k is, each dearer than a regular step: speculation only
    # costs. The per-step model at the batch's pooled acceptance would still speculate.
    assert policy.next_k(2) == 0
    assert analytic.optimal_k(2, policy.alpha, CPU_LIKE) >= 1


def test_analytic_ragged_choice_follows_the_rows_left():
    policy = make_policy("analytic", 2, costs=CPU_LIKE, prior_alpha=0.6)
    for _ in range(20):
        k = policy.next_k(2)
        policy.observe([k, k], [k, 0], rows=[0, 1], remaining=[40, 40])
    assert policy.next_k(2) == 0
    # the slow row finished: the fast one is alone and speculates again, judged on its own estimate
    policy.observe([0, 0], [0, 0], rows=[0, 1], remaining=[30, 0])
    assert policy.left == {0: 30}
    assert policy.row_alpha(0) > policy.alpha  # the pooled estimate, dragged down by row 1, undersells it
    assert policy.next_k(1) == analytic.optimal_k(1, policy.row_alpha(0), CPU_LIKE) >= 1
    # rows the policy has not heard of (b does not match): the per-step model
    assert policy.next_k(3) == analytic.optimal_k(3, policy.alpha, CPU_LIKE)


def test_analytic_run_with_one_row_keeps_the_per_step_model():
    policy = make_policy("analytic", 2, costs=CPU_LIKE, prior_alpha=0.6)
    for _ in range(10):
        k = policy.next_k(1)
        policy.observe([k], [min(k, 1)], rows=[0], remaining=[50])
    assert policy.next_k(1) == analytic.optimal_k(1, policy.alpha, CPU_LIKE)


def test_analytic_equal_rows_choose_what_the_per_step_model_chooses():
    policy = make_policy("analytic", 2, costs=CPU_LIKE, prior_alpha=0.6)
    policy.observe([2, 2, 2, 2], [1, 1, 1, 1], rows=[0, 1, 2, 3], remaining=[40, 40, 40, 40])
    alphas = {policy.row_alpha(r) for r in range(4)}
    assert len(alphas) == 1  # equal rows: the ragged model reduces to speedup_batch
    assert policy.next_k(4) == analytic.optimal_k(4, alphas.pop(), CPU_LIKE)


# --- registry -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["fixed", "heuristic", "bass", "bass-capped", "table", "analytic"])
def test_make_policy_builds_each_name_and_ignores_other_options(name):
    policy = make_policy(name, 3, table="1:3", k_max=8, cost_ratio=0.1, costs=None, unrelated=1)
    assert policy.name == name
    assert 0 <= policy.next_k(2) <= 8
    policy.observe([policy.next_k(2)] * 2, [0, 1])


def test_make_policy_accepts_cli_strings():
    # --policy-arg KEY=VALUE hands every value over as a string.
    assert make_policy("heuristic", 3, k_max="4").k_max == 4
    assert make_policy("bass", 3, k_max="8").l_limit == 8
    policy = make_policy("analytic", 3, cost_ratio="0.2", prior_alpha="0.9", decay="0.5", k_max="6")
    assert (policy.cost_ratio, policy.prior_alpha, policy.decay, policy.k_max) == (0.2, 0.9, 0.5, 6)


@pytest.mark.parametrize("name, options", [
    ("heuristic", {"k_max": "many"}),
    ("bass", {"k_max": "0"}),
    ("analytic", {"prior_alpha": "1.5"}),
    ("analytic", {"cost_ratio": "cheap"}),
    ("analytic", {"costs": "fitted.json"}),
])
def test_make_policy_rejects_bad_options_with_a_clear_error(name, options):
    with pytest.raises(SpecvizError, match="policy option"):
        make_policy(name, 3, **options)


def test_make_policy_rejects_unknown_names():
    with pytest.raises(SpecvizError, match="unknown policy"):
        make_policy("nope", 3)
