"""Recommend a draft length k per batch size from measured acceptance per position and the cost model,
with an uncertainty from the acceptance sample size; k = 0 says speculation should be off there.

Goodput, as the goodput policy chooses k (SmartSpec, Liu et al. 2024, arXiv 2406.14066; on our cost
model: specviz.analysis.steady.step_goodput), for b rows that may each draft up to k tokens:

    G(b, k) = b E(k) / T_step(b, k)                      [output tokens / s]
    E(k)    = 1 + sum_{j=1..k} P(A >= j)                  [output tokens per row-step]
    P(A >= j) = prod_{i <= j} c_i,   c_i = n_i / n_{i-1}  (n_0: rows that could draft, n_i: rounds that
                                                           accepted at least i; acceptstats.PositionCounts)

T_step is steady.step_seconds (k = 0: regular decoding). With every c_i equal to alpha this is Leviathan
et al.'s E = (1 - alpha^(k+1)) / (1 - alpha) (analytic.expected_tokens_per_step) and the k picked is
steady.goodput_k's; per-position counts keep what the i.i.d. model loses (an n-gram draft's acceptance
rises with depth; a draft that stops early never reaches the later positions). Positions past the
longest measured one are extrapolated with the pooled alpha (successes / trials) and marked.

Uncertainty (our own, stated as such): the c_i are independent Beta(n_i + 1/2, n_{i-1} - n_i + 1/2)
posteriors (Jeffreys prior; the stick-breaking form of a Dirichlet posterior over the accepted count), the
pooled alpha Beta(s + 1/2, t - s + 1/2). Draws of them give G for every k: the 5th-95th percentile of G at
the chosen k, the share of draws in which that k is the best, and the share in which some k > 0 beats
regular decoding. An acceptance given as one fitted number (a sweep's) has no sample size: no interval.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np

from specviz.analysis import acceptance, steady
from specviz.analysis.acceptstats import PositionCounts
from specviz.analysis.analytic import CostModel, Costs

K_MAX = 8  # default longest draft considered: calibrate's default --k-max (its verify of k + 1 is measured)
DRAWS = 2000  # posterior draws: the interval's percentiles move by < 1% of G between seeds at this count
INTERVAL = (5.0, 95.0)  # percentiles: a 90% interval


@dataclasses.dataclass(frozen=True)
class Acceptance:
    """What the recommendation reads: acceptance per position as counts (or one fitted alpha)."""

    at_least: tuple[float, ...]  # [K] n_j: rounds that accepted >= j tokens
    base: float  # n_0: rows of speculative steps that could draft (rounds + rows that drafted nothing)
    successes: float  # pooled over positions, for positions past K...
    trials: float  # ...alpha = successes / trials
    counted: bool = True  # False: a fitted alpha without a sample size (no interval)

    @classmethod
    def from_counts(cls, c: PositionCounts) -> "Acceptance":
        return cls(tuple(float(n) for n in c.at_least), float(c.rounds + c.idle), float(c.successes), float(c.trials))

    @classmethod
    def from_alpha(cls, alpha: float) -> "Acceptance":
        """One i.i.d. alpha (e.g. a sweep's, fitted to its mean accepted count): every position at it."""
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"acceptance alpha must be in [0, 1], got {alpha}")
        return cls((), 1.0, float(alpha), 1.0, counted=False)

    @property
    def measured(self) -> int:
        """K: the longest draft position measured; later positions are extrapolated."""
        return len(self.at_least)

    @property
    def alpha(self) -> float:
        """acceptance.alpha: the pooled successes / trials (0 without trials)."""
        return acceptance.alpha(self.successes, self.trials, empty=0.0)

    def survival(self, k_max: int) -> np.ndarray:
        """[k_max] P(A >= j), j = 1..k_max (point estimate): acceptance per position over the base n_0."""
        head = (np.array(acceptance.acceptance_per_position(self.at_least[:k_max], self.base), float) if self.base
                else np.zeros(min(k_max, self.measured)))
        return _extend(head, np.full(1, self.alpha), k_max)[0]

    def survival_draws(self, k_max: int, draws: int, rng: np.random.Generator) -> np.ndarray:
        """[draws, k_max] P(A >= j) under posterior draws of the conditional rates (module docstring)."""
        n = np.array((self.base, *self.at_least[:k_max]), float)  # [K + 1]
        hits, tries = n[1:], n[:-1]
        c = rng.beta(hits + 0.5, np.maximum(tries - hits, 0.0) + 0.5, size=(draws, len(hits)))  # [draws, K]
        r = rng.beta(self.successes + 0.5, max(self.trials - self.successes, 0.0) + 0.5, size=draws)  # [draws]
        return _extend(np.cumprod(c, axis=1), r, k_max)


def _extend(head: np.ndarray, r: np.ndarray, k_max: int) -> np.ndarray:
    """[draws, k_max] survival: the measured head ([draws, K] or [K]), then each later position at rate r."""
    head = np.atleast_2d(head)
    last = head[:, -1:] if head.shape[1] else np.ones((len(r), 1))  # [draws, 1]
    tail = last * r[:, None] ** np.arange(1, k_max - head.shape[1] + 1)  # [draws, k_max - K]
    return np.concatenate([np.broadcast_to(head, (len(r), head.shape[1])), tail], axis=1)


# ---- goodput over k -------------------------------------------------------------------------------------

def tokens_per_step(survival: np.ndarray) -> np.ndarray:
    """[..., k_max + 1] E(k) for k = 0..k_max from [..., k_max] P(A >= j)."""
    zero = np.zeros(survival.shape[:-1] + (1,))
    return 1.0 + np.concatenate([zero, np.cumsum(survival, axis=-1)], axis=-1)


def goodput(survival: np.ndarray, b: int, costs: Costs) -> np.ndarray:
    """[..., k_max + 1] G(b, k) in output tokens per second of the cost model (module docstring)."""
    k_max = survival.shape[-1]
    seconds = np.array([steady.step_seconds(b, k, costs) for k in range(k_max + 1)])  # [k_max + 1]
    return b * tokens_per_step(survival) / seconds


def best_k(g: np.ndarray) -> int:
    """The k with the highest goodput, ties to the smaller k (0 = off), as steady.goodput_k breaks them."""
    return int(np.argmax(g >= g.max() * (1 - 1e-9)))


@dataclasses.dataclass(frozen=True)
class Choice:
    """The recommendation at one batch size."""

    batch_size: int
    k: int  # 0: speculation off
    goodput: float  # predicted output tokens / s at k
    goodput_off: float  # ... at k = 0 (regular decoding)
    curve: tuple[float, ...]  # [k_max + 1] predicted goodput for every k
    interval: tuple[float, float] | None  # 90% interval of the goodput at k (None: no sample size)
    p_best: float | None  # share of posterior draws in which k is the best k
    p_helps: float | None  # share of draws in which some k > 0 beats regular decoding
    extrapolated: bool  # k goes past the longest draft position measured

    @property
    def speedup(self) -> float:
        return self.goodput / self.goodput_off


def k_limit(acc: Acceptance, k_max: int | None = None) -> int:
    """The longest draft considered: ``k_max`` when given (past the measured positions it extrapolates),
    else the longest draft position measured (at most K_MAX), or K_MAX for a fitted alpha."""
    if k_max is not None:
        return k_max
    return min(acc.measured, K_MAX) if acc.counted and acc.measured else K_MAX


def recommend_k(acc: Acceptance, costs: Costs, b: int, k_max: int | None = None, draws: int = DRAWS,
                seed: int = 0) -> Choice:
    """The k in 0..k_limit(acc, k_max) with the best predicted goodput at batch size b, with its uncertainty."""
    k_max = k_limit(acc, k_max)
    g = goodput(acc.survival(k_max), b, costs)  # [k_max + 1]
    k = best_k(g)
    interval = p_best = p_helps = None
    if acc.counted and draws:
        gd = goodput(acc.survival_draws(k_max, draws, np.random.default_rng(seed)), b, costs)  # [draws, k_max + 1]
        lo, hi = np.percentile(gd[:, k], INTERVAL)
        interval = (float(lo), float(hi))
        wins = gd >= gd.max(axis=1, keepdims=True) * (1 - 1e-9)  # [draws, k_max + 1]
        p_best = float(np.mean(np.argmax(wins, axis=1) == k))  # the first winning k: ties to the smaller
        p_helps = float(np.mean(gd[:, 1:].max(axis=1) > gd[:, 0]))
    return Choice(batch_size=b, k=k, goodput=float(g[k]), goodput_off=float(g[0]), curve=tuple(map(float, g)),
                  interval=interval, p_best=p_best, p_helps=p_helps, extrapolated=k > acc.measured and acc.counted)


def recommend(acc: Acceptance, costs_at: Callable[[int], Costs], batch_sizes: Sequence[int],
              k_max: int | None = None, draws: int = DRAWS) -> list[Choice]:
    """:func:`recommend_k` at each batch size (``costs_at(b)``: the costs there, e.g. Calibration.costs)."""
    return [recommend_k(acc, costs_at(b), b, k_max, draws) for b in batch_sizes]


def k_by_batch(acc: Acceptance, costs_at: Callable[[int], Costs], max_b: int, k_max: int | None = None) -> list[int]:
    """[max_b] the point-estimate k for every batch size 1..max_b (what a per-batch-size schedule lists)."""
    s = acc.survival(k_limit(acc, k_max))
    return [best_k(goodput(s, b, costs_at(b))) for b in range(1, max_b + 1)]


def shortest_worth(choice: Choice) -> int | None:
    """The shortest draft that beats regular decoding at this batch size (llama.cpp's --draft-min drops
    shorter drafts); None when none does."""
    return next((k for k, g in enumerate(choice.curve) if k > 0 and g > choice.goodput_off), None)


# ---- costs from entered numbers -------------------------------------------------------------------------

def roofline_costs(target_step_s: float, draft_cost_ratio: float, knee_tokens: float) -> Costs:
    """Costs from three numbers: a target forward takes ``target_step_s`` seconds up to ``knee_tokens`` tokens
    (b x tokens per row) and grows linearly past them; a draft forward costs ``draft_cost_ratio`` of it with
    the same knee; no per-step overhead. The roofline of analytic.CostModel with t_fixed = 0 (the Speedup
    page's uncalibrated roofline, in seconds)."""
    if not (target_step_s > 0 and draft_cost_ratio >= 0 and knee_tokens > 0):  # NaN fails too
        raise ValueError("the roofline needs a target step > 0 s, a draft cost ratio >= 0 and a knee > 0 tokens "
                         f"(got {target_step_s}, {draft_cost_ratio}, {knee_tokens})")
    t, c = float(target_step_s), float(draft_cost_ratio)
    return Costs(target=CostModel(t_fixed=0.0, t_mem=t, t_token=t / knee_tokens),
                 draft=CostModel(t_fixed=0.0, t_mem=c * t, t_token=c * t / knee_tokens))
