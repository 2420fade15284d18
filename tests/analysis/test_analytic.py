"""The analytic model: hand-computed values, limits, a Monte Carlo check, the cost-model fit."""

import math

import numpy as np
import pytest

from specviz.analysis import analytic
from specviz.analysis.analytic import CostModel, Costs

# A target that is flat (memory-bound) up to 100 tokens per forward, then 0.1 ms per token.
TARGET = CostModel(t_fixed=0.0, t_mem=0.010, t_token=1e-4)
DRAFT = CostModel(t_fixed=0.0, t_mem=0.001, t_token=1e-5)


# --- tokens per step ----------------------------------------------------------------------------


def test_expected_tokens_matches_hand_computed_values():
    assert analytic.expected_tokens_per_step(0.5, 2) == pytest.approx(1.75)  # 1 + .5 + .25
    assert analytic.expected_tokens_per_step(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)  # 3.3616
    assert analytic.expected_tokens_per_step(0.8, 4) == pytest.approx(3.3616)


def test_expected_tokens_limits():
    assert analytic.expected_tokens_per_step(0.0, 7) == 1.0
    assert analytic.expected_tokens_per_step(0.9, 0) == 1.0
    assert analytic.expected_tokens_per_step(1.0, 7) == 8.0
    assert analytic.expected_tokens_per_step(1 - 1e-12, 7) == pytest.approx(8.0, rel=1e-9)


def test_expected_accepted_is_tokens_minus_one():
    assert analytic.expected_accepted(0.5, 2) == pytest.approx(0.75)


@pytest.mark.parametrize("alpha, k", [(-0.1, 2), (1.1, 2), (0.5, -1), (0.5, 1.5)])
def test_invalid_inputs_raise(alpha, k):
    with pytest.raises(ValueError):
        analytic.expected_tokens_per_step(alpha, k)


# --- batch-1 speedup ----------------------------------------------------------------------------


def test_speedup_batch1_hand_computed():
    assert analytic.speedup_batch1(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2)
    assert analytic.speedup_batch1(0.8, 4, 0.05, verify_ratio=1.5) == pytest.approx(3.3616 / 1.7)


def test_speedup_batch1_with_free_draft_is_tokens_per_step():
    assert analytic.speedup_batch1(0.7, 5, 0.0) == pytest.approx(analytic.expected_tokens_per_step(0.7, 5))


def test_speedup_batch1_k0_is_regular_decoding():
    assert analytic.speedup_batch1(0.9, 0, 0.3) == 1.0


def test_speculation_never_helps_when_alpha_at_most_c():
    for k in range(1, 17):
        assert analytic.speedup_batch1(0.3, k, 0.3) <= 1.0 + 1e-12
        assert analytic.speedup_batch1(0.2, k, 0.3) < 1.0
    assert analytic.optimal_k_batch1(0.2, 0.3) == 0


def test_optimal_k_batch1_is_the_argmax():
    speedups = [analytic.speedup_batch1(0.8, k, 0.05) for k in range(17)]
    assert analytic.optimal_k_batch1(0.8, 0.05) == int(np.argmax(speedups))
    assert analytic.optimal_k_batch1(1.0, 0.0, k_max=16) == 16  # free draft, perfect acceptance


# --- ragged batch extension ---------------------------------------------------------------------


def test_expected_max_accepted_hand_computed():
    # j=1: 1 - .5*.5 = .75; j=2: 1 - .75*.75 = .4375
    assert analytic.expected_max_accepted([0.5, 0.5], 2) == pytest.approx(1.1875)
    assert analytic.expected_padded_waste([0.5, 0.5], 2) == pytest.approx(2 * 1.1875 - 2 * 0.75)


def test_expected_max_accepted_of_one_row_is_its_expectation():
    assert analytic.expected_max_accepted([0.7], 5) == pytest.approx(analytic.expected_accepted(0.7, 5))
    assert analytic.expected_padded_waste([0.7], 5) == pytest.approx(0.0)


def test_expected_max_accepted_limits():
    assert analytic.expected_max_accepted([1.0, 1.0, 1.0], 4) == pytest.approx(4.0)
    assert analytic.expected_padded_waste([1.0, 1.0, 1.0], 4) == pytest.approx(0.0)
    assert analytic.expected_max_accepted([0.0, 0.0], 4) == 0.0
    assert analytic.expected_max_accepted([0.9, 0.5], 0) == 0.0
    assert analytic.expected_max_accepted([], 4) == 0.0


def test_monte_carlo_agrees_with_closed_forms():
    """Simulate the model's assumptions: i.i.d. Bernoulli(alpha_i) per position, stop at the
    first rejection (truncated geometric A_i). 200k steps: standard errors are < 0.006 tokens,
    so a 0.03-token tolerance is ~5 standard errors."""
    rng = np.random.default_rng(0)
    alphas, k, steps = np.array([0.3, 0.6, 0.8, 0.9]), 5, 200_000
    passed = rng.random((steps, len(alphas), k)) < alphas[None, :, None]  # [steps, b, k]
    accepted = np.cumprod(passed, axis=2).sum(axis=2)  # [steps, b] leading run of passes
    for i, a in enumerate(alphas):
        assert accepted[:, i].mean() + 1 == pytest.approx(analytic.expected_tokens_per_step(a, k), abs=0.03)
    assert accepted.max(axis=1).mean() == pytest.approx(analytic.expected_max_accepted(alphas, k), abs=0.03)
    waste = (accepted.max(axis=1, keepdims=True) - accepted).sum(axis=1)
    assert waste.mean() == pytest.approx(analytic.expected_padded_waste(alphas, k), abs=0.06)


# --- cost model ---------------------------------------------------------------------------------


def test_cost_model_is_flat_then_linear():
    model = CostModel(t_fixed=0.002, t_mem=0.010, t_token=1e-4)
    assert model.knee_tokens == pytest.approx(100)
    assert model(1, 1) == pytest.approx(0.012)
    assert model(8, 5) == pytest.approx(0.012)  # 40 tokens: below the knee
    assert model(64, 5) == pytest.approx(0.002 + 320 * 1e-4)
    assert np.allclose(model(np.array([1, 64]), np.array([1, 5])), [0.012, 0.034])
    assert CostModel(0.0, 0.01, 0.0).knee_tokens == math.inf


def _synthetic(model, noise, seed=0):
    rng = np.random.default_rng(seed)
    grid = [(b, n) for b in (1, 2, 4, 8, 16, 32, 64) for n in (1, 2, 3, 5, 9)]
    return [(b, n, model(b, n) * (1 + noise * rng.standard_normal())) for b, n in grid]


def test_fit_recovers_known_parameters_exactly_without_noise():
    truth = CostModel(t_fixed=0.002, t_mem=0.010, t_token=1e-4)
    fitted, residuals = analytic.fit_cost_model(_synthetic(truth, noise=0.0))
    assert fitted.t_fixed == pytest.approx(truth.t_fixed, rel=1e-6)
    assert fitted.t_mem == pytest.approx(truth.t_mem, rel=1e-6)
    assert fitted.t_token == pytest.approx(truth.t_token, rel=1e-6)
    assert np.abs(residuals).max() < 1e-9


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fit_recovers_known_parameters_with_1pct_noise(seed):
    truth = CostModel(t_fixed=0.002, t_mem=0.010, t_token=1e-4)
    samples = _synthetic(truth, noise=0.01, seed=seed)
    fitted, residuals = analytic.fit_cost_model(samples)
    assert fitted.t_token == pytest.approx(truth.t_token, rel=0.05)
    assert fitted.t_fixed + fitted.t_mem == pytest.approx(truth.t_fixed + truth.t_mem, rel=0.05)  # flat level
    assert fitted.t_fixed == pytest.approx(truth.t_fixed, abs=0.001)
    assert fitted.knee_tokens == pytest.approx(truth.knee_tokens, rel=0.15)
    assert len(residuals) == len(samples)
    assert np.sqrt(np.mean(residuals**2)) < 0.02 * np.mean([s[2] for s in samples])


def test_fit_of_flat_only_data_is_a_constant():
    fitted, residuals = analytic.fit_cost_model([(1, 1, 0.010), (2, 1, 0.011), (4, 1, 0.009)])
    assert fitted.t_token == 0.0
    assert fitted(1000, 1000) == pytest.approx(0.010)
    assert np.abs(residuals).max() == pytest.approx(0.001)


def test_fit_needs_two_samples():
    with pytest.raises(ValueError):
        analytic.fit_cost_model([(1, 1, 0.01)])


# --- batched speedup and optimal k --------------------------------------------------------------


def test_step_time_adds_draft_verify_and_overhead():
    assert analytic.step_time(1, 4, TARGET, DRAFT, overhead=0.002) == pytest.approx(4 * 0.001 + 0.010 + 0.002)
    assert analytic.step_time(64, 4, TARGET, DRAFT) == pytest.approx(4 * 0.001 + 320 * 1e-4)
    assert analytic.step_time(8, 0, TARGET, DRAFT, overhead=0.001) == pytest.approx(TARGET(8, 1) + 0.001)


def test_speedup_batch_hand_computed():
    # b=1: step 0.014 s, regular 0.010 s: 3.3616 * 0.010 / 0.014
    assert analytic.speedup_batch(1, 4, 0.8, TARGET, DRAFT) == pytest.approx(3.3616 * 0.010 / 0.014)
    # b=64: verify of 320 tokens is compute-bound: 3.3616 * 0.010 / 0.036 < 1
    assert analytic.speedup_batch(64, 4, 0.8, TARGET, DRAFT) == pytest.approx(3.3616 * 0.010 / 0.036)


def test_speedup_batch_k0_is_one_even_with_overhead():
    assert analytic.speedup_batch(16, 0, 0.9, TARGET, DRAFT, overhead=0.003) == pytest.approx(1.0)


def test_speedup_batch_at_b1_with_flat_costs_is_the_batch1_formula():
    flat_target = CostModel(0.0, 0.020, 0.0)
    flat_draft = CostModel(0.0, 0.020 * 0.07, 0.0)  # c = 0.07
    for k in (1, 3, 8):
        expected = analytic.speedup_batch1(0.75, k, 0.07)
        assert analytic.speedup_batch(1, k, 0.75, flat_target, flat_draft) == pytest.approx(expected)


def test_speedup_batch_per_row_alphas_average_tokens():
    same = analytic.speedup_batch(2, 3, [0.6, 0.6], TARGET, DRAFT)
    assert same == pytest.approx(analytic.speedup_batch(2, 3, 0.6, TARGET, DRAFT))
    mixed = analytic.speedup_batch(2, 3, [0.2, 1.0], TARGET, DRAFT)
    mean_tokens = (analytic.expected_tokens_per_step(0.2, 3) + 4.0) / 2
    assert mixed == pytest.approx(mean_tokens * TARGET(2, 1) / analytic.step_time(2, 3, TARGET, DRAFT))
    with pytest.raises(ValueError):
        analytic.speedup_batch(3, 3, [0.5, 0.5], TARGET, DRAFT)


def test_optimal_k_shrinks_with_batch_size_to_off():
    costs = Costs(TARGET, DRAFT, overhead=0.0005)
    sizes = [1, 2, 4, 8, 16, 32, 64, 128]
    ks = [analytic.optimal_k(b, 0.8, costs) for b in sizes]
    speedups = [analytic.speedup_batch(b, k, 0.8, TARGET, DRAFT, costs.overhead, costs.regular_overhead)
                for b, k in zip(sizes, ks)]
    assert ks == sorted(ks, reverse=True)
    assert ks[0] >= 4
    assert ks[-1] == 0  # compute-bound: speculation off
    assert all(s >= 1.0 for s in speedups)
    assert speedups[-1] == pytest.approx(1.0)


def test_optimal_k_off_when_draft_too_costly():
    costly = Costs(TARGET, CostModel(0.0, 0.009, 1e-4))
    assert analytic.optimal_k(1, 0.5, costly) == 0


# --- ragged completion: a batch runs until its last row finishes ----------------------------------

FLAT = CostModel(t_fixed=1.0, t_mem=0.0, t_token=0.0)  # every forward takes 1 s whatever its size
FREE = CostModel(t_fixed=0.0, t_mem=0.0, t_token=0.0)


def test_ragged_hand_computed():
    # regular: 20 steps (the longer row); speculative: rows need 10 / E(0, 1) = 10 and
    # 20 / E(0.5, 1) = 13.33 steps -> 20 / 13.33 = 1.5
    assert analytic.speedup_ragged([10, 20], [0.0, 0.5], 1, FLAT, FREE) == pytest.approx(1.5)
    # the same rows, equal lengths: the row that accepts nothing sets the length -> no gain
    assert analytic.speedup_ragged([20, 20], [0.0, 0.5], 1, FLAT, FREE) == pytest.approx(1.0)
    # compute-bound costs T(b, n) = b n seconds: regular 10 steps at b=2 + 10 at b=1 = 30 s;
    # speculative (k=1 verifies 2 tokens per row): 10 steps at 4 s + 3.33 at 2 s = 46.67 s
    grow = CostModel(t_fixed=0.0, t_mem=0.0, t_token=1.0)
    assert analytic.speedup_ragged([10, 20], [0.0, 0.5], 1, grow, FREE) == pytest.approx(30 / (40 + 20 / 3))


@pytest.mark.parametrize("b,k,alpha", [(1, 2, 0.5), (4, 3, 0.7), (8, 1, 0.35), (16, 6, 0.9)])
def test_ragged_with_equal_rows_is_speedup_batch(b, k, alpha):
    expect = analytic.speedup_batch(b, k, alpha, TARGET, DRAFT, overhead=0.002)
    got = analytic.speedup_ragged([64] * b, [alpha] * b, k, TARGET, DRAFT, overhead=0.002)
    assert got == pytest.approx(expect, rel=1e-12)


def test_ragged_k0_is_one_and_unequal_alphas_cost_speedup():
    lengths, alphas = [64, 40, 64, 50], [0.2, 0.5, 0.8, 0.6]
    assert analytic.speedup_ragged(lengths, alphas, 0, TARGET, DRAFT, overhead=0.001) == pytest.approx(1.0)
    mean = float(np.mean(alphas))
    assert (analytic.speedup_ragged([64] * 4, alphas, 3, TARGET, DRAFT)
            < analytic.speedup_ragged([64] * 4, [mean] * 4, 3, TARGET, DRAFT))
    with pytest.raises(ValueError):
        analytic.speedup_ragged([64, 64], [0.5], 2, TARGET, DRAFT)


def test_ragged_monte_carlo():
    """Simulate rows of i.i.d. Bernoulli(alpha_i) acceptance until each has emitted L_i tokens,
    charge each step the cost at the number of rows still active, compare with the formula."""
    rng = np.random.default_rng(0)
    lengths, alphas, k = [400, 300, 400, 250], [0.3, 0.6, 0.8, 0.5], 3
    cost = CostModel(t_fixed=0.01, t_mem=0.0, t_token=0.002)
    draft = CostModel(t_fixed=0.001, t_mem=0.0, t_token=0.0)
    t_reg = t_spec = 0.0
    for _ in range(200):
        left = np.array(lengths, float)
        while (left > 0).any():
            b = int((left > 0).sum())
            t_spec += analytic.step_time(b, k, cost, draft)
            for i in np.flatnonzero(left > 0):
                a = 0
                while a < k and rng.random() < alphas[i]:
                    a += 1
                left[i] -= a + 1
        t_reg += sum((np.array(sorted(lengths)) - np.array([0] + sorted(lengths)[:-1])) *
                     [cost(len(lengths) - j, 1) for j in range(len(lengths))])
    assert t_reg / t_spec == pytest.approx(analytic.speedup_ragged(lengths, alphas, k, cost, draft), rel=0.02)
