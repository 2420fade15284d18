"""The acceptance vocabulary: one function per quantity, over raw counts, each with its definition.
Every page, the CLI, the benchmarks, the vLLM counters (specviz.peers.metrics) and ``specviz tune``
compute these quantities here and nowhere else (tests/analysis/test_acceptance_vocabulary.py checks).

Names as vLLM uses them (its /metrics counters and its logger); a *draft* is one row's share of one
speculative step that drafted (a row-step, a round), and accepted counts accepted draft tokens only:

  acceptance rate          accepted / drafted tokens (biased low as an alpha: the drafted tokens after
                           a rejection count too)
  mean acceptance length   output tokens per draft: 1 + accepted / drafts (the accepted tokens plus the
                           one recovered or bonus token)
  acceptance per position  share of drafts whose position j was accepted: accepted at j / drafts
                           (vLLM: num_accepted_tokens_per_pos[j - 1] / num_drafts = P(A >= j))
  alpha (per-position acceptance)
                           accepted / positions the target tried (a position after a rejection is never
                           tried): the i.i.d. chance the analytic model assumes (Leviathan et al. 2022)
  alpha from the mean accepted count
                           the i.i.d. alpha whose expected accepted count per draft at k matches a
                           measured mean (what a sweep or an old vLLM without per-position counters gives)
  wasted draft share       drafted tokens not accepted / drafted tokens

Each ratio returns ``empty`` (None unless given) when its denominator is zero. Pure functions, no torch.
"""

from __future__ import annotations

from typing import Sequence

from specviz.analysis.analytic import expected_accepted

# The names a reader sees, one per quantity (pages, CLI, tables); ALPHA_ASCII where only ASCII is printed.
ACCEPTANCE_RATE = "acceptance rate"
MEAN_ACCEPTANCE_LENGTH = "mean acceptance length"
ACCEPTANCE_PER_POSITION = "acceptance per position"
ALPHA = "α"
ALPHA_ASCII = "alpha"
NAMES = (ACCEPTANCE_RATE, MEAN_ACCEPTANCE_LENGTH, ACCEPTANCE_PER_POSITION, ALPHA, ALPHA_ASCII)


def _ratio(num: float, den: float, empty):
    return num / den if den else empty


def acceptance_rate(accepted: float, drafted: float, empty: float | None = None) -> float | None:
    """Acceptance rate = accepted draft tokens / drafted tokens (vLLM: num_accepted_tokens /
    num_draft_tokens). Counts the drafted tokens thrown away after a rejection, so it sits below alpha."""
    return _ratio(accepted, drafted, empty)


def mean_accepted(accepted: float, drafts: float, empty: float | None = None) -> float | None:
    """Accepted draft tokens per draft (row-step): accepted / drafts, the mean acceptance length less one."""
    return _ratio(accepted, drafts, empty)


def mean_acceptance_length(accepted: float, drafts: float, empty: float | None = None) -> float | None:
    """Mean acceptance length = output tokens per draft (row-step) = 1 + accepted / drafts (vLLM's
    definition): the accepted drafts plus the one recovered or bonus token; regular decoding's is 1."""
    m = mean_accepted(accepted, drafts)
    return empty if m is None else 1.0 + m


def acceptance_per_position(accepted_at: Sequence[float], drafts: float | Sequence[float],
                            empty: float | None = None) -> list:
    """Acceptance per position: [j] share of drafts whose position j + 1 was accepted = accepted at
    position j + 1 / drafts (vLLM: num_accepted_tokens_per_pos[j] / num_drafts, i.e. P(A >= j + 1)).
    ``drafts`` is one count for every position (vLLM's form), or one per position: the drafts that
    reached it (drafts of varying length, the trace summary's form, P(A >= j + 1 | drafted >= j + 1)).
    An entry whose denominator is zero is ``empty``."""
    dens = [drafts] * len(accepted_at) if isinstance(drafts, (int, float)) else list(drafts)
    return [_ratio(a, d, empty) for a, d in zip(accepted_at, dens)]


def positions_tried(drafted: int, accepted: int) -> int:
    """Positions the target tried in one draft (Bernoulli trials): the accepted drafts, plus the rejected
    one unless all were accepted (positions after the first rejection are never tried)."""
    return accepted + (1 if accepted < drafted else 0)


def positions_tried_from_counts(drafts: float, accepted_at: Sequence[float]) -> float:
    """Positions tried, from per-position counts (vLLM's counters): every draft tries position 1, and a
    draft tries position j > 1 only if it accepted j - 1 before it: drafts + accepted at 1..k-1. Exact
    when every draft had k tokens; a shorter draft's full accept counts as a rejection (a lower bound)."""
    return drafts + sum(accepted_at[:-1])


def alpha(accepted: float, tried: float, empty: float | None = None) -> float | None:
    """Alpha (per-position acceptance) = accepted draft tokens / positions the target tried
    (:func:`positions_tried`): the chance a drafted token is accepted given every token before it in the
    draft was, the i.i.d. alpha the analytic model assumes. Accepted / drafted would be biased low."""
    return _ratio(accepted, tried, empty)


def alpha_from_accepted(mean_accepted: float, k: int) -> float:
    """Alpha from the mean accepted count: invert E[accepted] = alpha (1 - alpha^k) / (1 - alpha)
    (i.i.d. acceptance, Leviathan et al. 2022) by bisection, the alpha whose expected accepted count
    per draft at draft length k matches ``mean_accepted``. Differs from the counted :func:`alpha` when
    acceptance is not the same at every position."""
    if k == 0:
        return 0.0
    mean_accepted = min(max(mean_accepted, 0.0), float(k))
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if expected_accepted(mid, k) < mean_accepted:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def wasted_draft_share(accepted: float, drafted: float, empty: float | None = None) -> float | None:
    """Wasted draft share = drafted tokens not accepted / drafted tokens (1 - acceptance rate): each cost a
    draft step and a verify slot and was thrown away."""
    return _ratio(drafted - accepted, drafted, empty)
