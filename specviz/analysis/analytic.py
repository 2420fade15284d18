"""The analytic speedup model: expected tokens per step, a fitted forward-cost model, optimal k.

Units: times in seconds, draft length ``k`` in tokens, acceptance ``alpha`` in [0, 1] (the
probability that one draft position is accepted, assumed i.i.d. over positions).

Sources (see /work/shared/SPECDEC.md):
  - Leviathan, Kalman, Matias 2022, "Fast Inference from Transformers via Speculative
    Decoding", arXiv 2211.17192: expected tokens per step and the batch-1 walltime speedup.
  - Su, Giannoula, Pekhimenko 2023, "The Synergy of Speculative Decoding and Batching",
    arXiv 2310.18813: step time from a profiled T(b, tokens), an optimal k per batch size.
    Our formulas are a *reconstruction*; their exact formulas are unverified.
  - The ragged-batch terms (expected max accepted, padded waste) are our own extension.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np


# ---------------------------------------------------------------------------------------------
# Acceptance: tokens per step (batch 1 and per row)


def _check_k(k: int) -> None:
    if k < 0 or int(k) != k:
        raise ValueError(f"draft length k must be an integer >= 0, got {k}")


def _check(alpha: float, k: int) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"acceptance alpha must be in [0, 1], got {alpha}")
    _check_k(k)


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Expected output tokens per step for one sequence: E = (1 - alpha^(k+1)) / (1 - alpha).

    Leviathan et al. 2022 (arXiv 2211.17192), eq. (1), with i.i.d. acceptance alpha per draft
    position. Counts accepted + the recovered/bonus token, so E is in [1, k+1] tokens.
    Limits: alpha -> 1 gives k + 1; alpha = 0 or k = 0 gives 1.
    """
    _check(alpha, k)
    # The geometric sum 1 + alpha + ... + alpha^k equals the closed form and has no 0/0 at alpha = 1.
    return float(sum(alpha**j for j in range(int(k) + 1)))


def expected_accepted(alpha: float, k: int) -> float:
    """Expected accepted draft tokens of one row: E[A] = sum_{j=1..k} alpha^j = E - 1 (tokens).

    A is a truncated geometric count: P(A >= j) = alpha^j for j = 1..k (Leviathan et al. 2022).
    """
    return expected_tokens_per_step(alpha, k) - 1.0


def speedup_batch1(alpha: float, k: int, c: float, verify_ratio: float = 1.0) -> float:
    """Walltime speedup over regular decoding at batch 1: S = E(alpha, k) / (k c + verify_ratio).

    Leviathan et al. 2022 (arXiv 2211.17192), Theorem 3.8, where ``c`` = T_draft / T_target
    (cost of one draft step over one target step, dimensionless) and ``verify_ratio`` =
    T_target(k+1 tokens) / T_target(1 token) (1.0 in the paper's idealisation; measured
    1.0-1.1 in bf16 and 1.4-1.7 in fp32 on this CPU class). Speculation helps only if alpha > c
    (for verify_ratio = 1). k = 0 gives S = 1 / verify_ratio = 1.
    """
    _check(alpha, k)
    if k == 0:
        return 1.0
    return expected_tokens_per_step(alpha, k) / (k * c + verify_ratio)


# ---------------------------------------------------------------------------------------------
# Ragged batches: the longest row sets the padded length (our own extension)


def expected_max_accepted(alphas: Sequence[float], k: int) -> float:
    """Expected accepted count of the row that accepted most: E[max_i A_i] (tokens).

    E[max_i A_i] = sum_{j=1..k} [1 - prod_i (1 - alpha_i^j)], with independent rows and
    P(A_i >= j) = alpha_i^j. This batch extension is our own (not from a paper): a padded
    (BASS-PAD-like) step appends max_i A_i + 1 slots to every row.
    """
    alphas = list(alphas)
    for a in alphas:
        _check(a, k)
    if not alphas:
        return 0.0
    a = np.asarray(alphas, dtype=np.float64)  # [b]
    j = np.arange(1, int(k) + 1, dtype=np.float64)[:, None]  # [k, 1]
    return float(np.sum(1.0 - np.prod(1.0 - a[None, :] ** j, axis=1)))


def expected_padded_waste(alphas: Sequence[float], k: int) -> float:
    """Expected pad/hole slots per step when every row is padded to the longest: (tokens).

    E[sum_i (max A - A_i)] = b E[max_i A_i] - sum_i E[A_i] (our own extension, as above).
    """
    alphas = list(alphas)
    return len(alphas) * expected_max_accepted(alphas, k) - sum(expected_accepted(a, k) for a in alphas)


# ---------------------------------------------------------------------------------------------
# Forward cost: a roofline fitted to measured forwards


@dataclasses.dataclass(frozen=True)
class CostModel:
    """Time of one forward over b rows x n tokens per row: T = t_fixed + max(t_mem, t_token b n).

    A roofline in the number of tokens processed N = b n: flat (memory-bound: the weights are
    streamed once per forward) until the knee N* = t_mem / t_token, linear (compute-bound)
    past it. Attention's growth with context length is not modelled.
    """

    t_fixed: float  # seconds per forward whatever its size (launches, framework, Python)
    t_mem: float  # seconds of the memory-bound floor (weight streaming), on top of t_fixed
    t_token: float  # seconds per token processed once compute-bound (1 / token throughput)

    def __call__(self, b, tokens_per_row):
        """Seconds for one forward; works elementwise on numpy arrays too."""
        if isinstance(b, (int, float)) and isinstance(tokens_per_row, (int, float)):
            # The hot path (a policy calls this ~50 times a step): plain floats, no numpy.
            return float(self.t_fixed + max(self.t_mem, self.t_token * b * tokens_per_row))
        return self.t_fixed + np.maximum(self.t_mem, self.t_token * np.multiply(b, tokens_per_row))

    @property
    def knee_tokens(self) -> float:
        """Tokens per forward (b n) where the compute line meets the flat floor; inf if never."""
        return self.t_mem / self.t_token if self.t_token > 0 else math.inf


def _fit_line_above_knee(n: np.ndarray, t: np.ndarray, knee: float) -> tuple[float, float, float]:
    """Least squares of t = c0 + s max(knee, n) with c0, s >= 0; returns (c0, s, sse)."""
    x = np.maximum(knee, n)
    if np.ptp(x) == 0:  # every sample on the flat part: the slope is not identified
        c0 = float(t.mean())
        return c0, 0.0, float(np.sum((t - c0) ** 2))
    s, c0 = np.polyfit(x, t, 1)
    if s < 0:  # time cannot fall with more tokens: best non-negative fit is the constant
        s, c0 = 0.0, float(t.mean())
    elif c0 < 0:  # negative intercept: refit through the origin
        c0, s = 0.0, float(np.dot(x, t) / np.dot(x, x))
    sse = float(np.sum((t - (c0 + s * x)) ** 2))
    return float(c0), float(s), sse


def _hinge_knees(n: np.ndarray, t: np.ndarray) -> list[float]:
    """Knees where the free fit (flat mean left of a split, line right of it) is continuous.

    For each split between distinct token counts, the best unconstrained fit is the mean of
    the left points and a line through the right ones; if they meet inside the split, that
    meeting point is the exact least-squares knee for this split.
    """
    levels = np.unique(n)
    knees = []
    for lo, hi in zip(levels[:-1], levels[1:]):
        left, right = n <= lo, n >= hi
        if np.unique(n[right]).size < 2:
            continue
        s, c0 = np.polyfit(n[right], t[right], 1)
        if s > 0 and c0 >= 0:
            knee = (t[left].mean() - c0) / s
            if lo <= knee <= hi:
                knees.append(float(knee))
    return knees


def fit_cost_model(samples: Sequence[tuple[int, int, float]]) -> tuple[CostModel, np.ndarray]:
    """Fit a :class:`CostModel` to measured forwards [(b, tokens_per_row, seconds), ...].

    For a fixed knee N*, T = c0 + s max(N*, N) is linear in (c0, s): solve it by least squares,
    scan N* over the observed token counts, a geometric grid between them and the exact
    knee of each split between observed counts; keep the least squared error. (Then t_fixed =
    c0, t_token = s, t_mem = s N*.) numpy only, no scipy. Returns the model and the residuals
    (measured - predicted, seconds) in sample order. With every sample below the knee only
    the flat level is identified: t_token = 0.
    """
    arr = np.asarray(samples, dtype=np.float64)  # [num_samples, 3]
    if arr.ndim != 2 or arr.shape[1] != 3 or len(arr) < 2:
        raise ValueError("need at least 2 samples of (batch_size, tokens_per_row, seconds)")
    n = arr[:, 0] * arr[:, 1]  # [num_samples] tokens per forward
    t = arr[:, 2]  # [num_samples] seconds
    lo, hi = float(n.min()), float(n.max())
    grid = np.concatenate([n, np.geomspace(max(lo, 1e-9), hi, 64), _hinge_knees(n, t)])
    best = min((_fit_line_above_knee(n, t, knee) + (knee,) for knee in np.unique(grid)), key=lambda r: r[2])
    c0, s, _, knee = best
    model = CostModel(t_fixed=float(c0), t_mem=float(s * knee), t_token=float(s))
    return model, t - model(arr[:, 0], arr[:, 1])


@dataclasses.dataclass(frozen=True)
class Costs:
    """Everything the batched model needs about the hardware, all in seconds."""

    target: CostModel
    draft: CostModel
    overhead: float = 0.0  # per speculative step, outside the forwards
    regular_overhead: float | None = None  # per regular step; None = same as ``overhead``


# ---------------------------------------------------------------------------------------------
# Batched step time and speedup (Synergy-style reconstruction)


def step_time(b: int, k: int, target_cost: CostModel, draft_cost: CostModel, overhead: float = 0.0) -> float:
    """Seconds per speculative step: T_step(b, k) = k T_draft(b, 1) + T_target(b, k+1) + overhead.

    Reconstructed after Su et al. 2023 ("Synergy", arXiv 2310.18813); their exact formulas are
    unverified. k = 0 is regular decoding: T_target(b, 1) + overhead. The draft's first
    forward of a step may feed 2 tokens per row (the last accepted draft token plus the
    recovered/bonus one); that is counted as 1 here.
    """
    _check_k(k)
    return k * draft_cost(b, 1) + target_cost(b, k + 1) + overhead


def _row_alphas(b: int, alpha) -> list[float]:
    alphas = [float(a) for a in alpha]
    if len(alphas) != b:
        raise ValueError(f"got {len(alphas)} per-row alphas for batch size {b}")
    return alphas


def speedup_batch(
    b: int,
    k: int,
    alpha,
    target_cost: CostModel,
    draft_cost: CostModel,
    overhead: float = 0.0,
    regular_overhead: float | None = None,
) -> float:
    """Throughput speedup over regular decoding at batch b: (E / T_step(b, k)) / (1 / T_regular(b)).

    Reconstructed after Su et al. 2023 (arXiv 2310.18813; exact formulas unverified), with
    T_regular(b) = T_target(b, 1) + regular_overhead (defaults to ``overhead``: regular
    decoding runs through the same engine at k = 0, so k = 0 gives exactly 1.0; with zero
    overhead this is Synergy's (E / T_step) / (1 / T_target(b, 1))). ``alpha`` is one
    acceptance for every row or a sequence of b per-row values; E is then the row mean.
    """
    if np.ndim(alpha) == 0:
        mean_tokens = expected_tokens_per_step(float(alpha), k)  # per row per step
    else:
        mean_tokens = sum(expected_tokens_per_step(a, k) for a in _row_alphas(b, alpha)) / b
    t_regular = target_cost(b, 1) + (overhead if regular_overhead is None else regular_overhead)
    return mean_tokens * t_regular / step_time(b, k, target_cost, draft_cost, overhead)


# ---------------------------------------------------------------------------------------------
# Optimal draft length


def _ragged_time(steps: Sequence[float], step_seconds) -> float:
    """Wall time of a batch whose row i is active for steps[i] steps (continuous), when a step
    with b active rows takes step_seconds(b): sum over the stretches between row finishes."""
    n = sorted(float(x) for x in steps)
    total, done = 0.0, 0.0
    for i, s in enumerate(n):
        if s > done:
            total += (s - done) * step_seconds(len(n) - i)
            done = s
    return total


def ragged_batch_times(lengths: Sequence[int], alphas: Sequence[float], k: int, target_cost: CostModel,
                       draft_cost: CostModel, overhead: float = 0.0,
                       regular_overhead: float | None = None) -> tuple[float, float]:
    """(T_regular, T_speculative) for one ragged batch that runs until its last row finishes.

    Row i emits L_i tokens at acceptance alpha_i. Regular decoding keeps it for N_i = L_i steps,
    speculative decoding for N_i = L_i / E(alpha_i, k) steps (E: expected_tokens_per_step). The
    batch shrinks as rows finish, so with b_s = #{i : N_i > s} rows active at step s,

        T = integral_0^{max_i N_i} T_step(b_s) ds,
        T_step(b) = T_target(b, 1) + overhead_reg (regular),  step_time(b, k, ...) (speculative).

    With equal rows this is exactly speedup_batch's ratio; with unequal acceptance the rows that
    accept little set the batch's length, which the per-step model (i.i.d. acceptance, every
    row active every step) cannot see. Our reconstruction, not from a paper.
    """
    if len(lengths) != len(alphas) or not lengths:
        raise ValueError(f"need one alpha per row (got {len(lengths)} lengths, {len(alphas)} alphas)")
    _check_k(k)
    reg_over = overhead if regular_overhead is None else regular_overhead
    t_reg = _ragged_time(lengths, lambda b: target_cost(b, 1) + reg_over)
    spec_steps = [L / expected_tokens_per_step(a, k) for L, a in zip(lengths, alphas)]
    t_spec = _ragged_time(spec_steps, lambda b: step_time(b, k, target_cost, draft_cost, overhead))
    return t_reg, t_spec


def speedup_ragged(lengths: Sequence[int], alphas: Sequence[float], k: int, target_cost: CostModel,
                   draft_cost: CostModel, overhead: float = 0.0, regular_overhead: float | None = None) -> float:
    """T_regular / T_speculative of :func:`ragged_batch_times` (a batch runs to its last row)."""
    t_reg, t_spec = ragged_batch_times(lengths, alphas, k, target_cost, draft_cost, overhead, regular_overhead)
    return t_reg / t_spec


def _argmax_k(speedups: list[float]) -> int:
    # The smallest k within 1e-9 of the best: ties go to less speculation (k = 0 = off).
    best = max(speedups)
    return next(k for k, s in enumerate(speedups) if s >= best - 1e-9)


def optimal_k_ragged(lengths: Sequence[int], alphas: Sequence[float], costs: Costs, k_max: int = 16) -> int:
    """k in 0..k_max maximising :func:`speedup_ragged` (rows' own alphas and lengths left)."""
    return _argmax_k([speedup_ragged(lengths, alphas, k, costs.target, costs.draft, costs.overhead,
                                     costs.regular_overhead) for k in range(k_max + 1)])


def optimal_k(b: int, alpha, costs: Costs, k_max: int = 16) -> int:
    """k*(b) in 0..k_max maximising :func:`speedup_batch`; 0 means speculation off."""
    target, draft, overhead, regular = costs.target, costs.draft, costs.overhead, costs.regular_overhead
    return _argmax_k([speedup_batch(b, k, alpha, target, draft, overhead, regular) for k in range(k_max + 1)])


def optimal_k_batch1(alpha: float, c: float, k_max: int = 16, verify_ratio: float = 1.0) -> int:
    """k* in 0..k_max maximising :func:`speedup_batch1` (the uncalibrated fallback)."""
    return _argmax_k([speedup_batch1(alpha, k, c, verify_ratio) for k in range(k_max + 1)])
