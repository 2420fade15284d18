"""The refilled batch (continuous batching): goodput per step and the steady-state throughput.

Units: seconds, tokens, requests; acceptance ``alpha`` in [0, 1] per draft position, i.i.d.
(as in :mod:`specviz.analysis.analytic`). Step times come from the calibrated cost model
(:class:`~specviz.analysis.analytic.Costs`).

The formulas here are our own, built on Leviathan et al.'s expected tokens per step
E(alpha, k) = (1 - alpha^(k+1)) / (1 - alpha) and the Synergy-style step time of analytic.py:

  goodput of one step (SmartSpec, arXiv 2406.14066, chooses k by it):
      G(k) = sum_i E(alpha_i, k) / T_step(b, k)          [output tokens / s]
  with T_step(b, 0) = T_target(b, 1) + regular overhead (regular decoding) and
  T_step(b, k) = k T_draft(b, 1) + T_target(b, k + 1) + overhead.

  steady state of B lanes that are refilled as soon as a request finishes, every request
  emitting L tokens (our own formula): request i holds its lane for L / E_i steps, so a lane
  emits, per step, the harmonic mean H = n / sum_i (1 / E_i) of E over requests (rows that
  accept little stay longer and weigh more), and B H / L requests finish per step, each paying
  a join prefill of T_join seconds:
      X(k) = B H / (T_step(B, k) + (B H / L) T_join)      [output tokens / s]
  speedup over regular decoding in the same queue: X(k) / X_regular, X_regular = X with
  E_i = 1, k = 0.

A finite queue (N requests, the last ones draining a part-empty batch) is
:func:`refilled_run_time`: the same fluid model stepped request by request.
"""

from __future__ import annotations

from typing import Sequence

from specviz.analysis.analytic import Costs, expected_tokens_per_step, step_time


def step_seconds(b: int, k: int, costs: Costs) -> float:
    """T_step(b, k) in seconds: regular decoding (k = 0) pays the regular overhead."""
    if k == 0:
        over = costs.overhead if costs.regular_overhead is None else costs.regular_overhead
        return costs.target(b, 1) + over
    return step_time(b, k, costs.target, costs.draft, costs.overhead)


def step_goodput(alphas: Sequence[float], k: int, costs: Costs) -> float:
    """G(k): expected output tokens of one step over its predicted seconds, b = len(alphas) rows."""
    return sum(expected_tokens_per_step(a, k) for a in alphas) / step_seconds(len(alphas), k, costs)


def goodput_k(alphas: Sequence[float], costs: Costs, k_max: int = 16) -> int:
    """The k in 0..k_max with the highest step goodput (ties to the smaller k; 0 = no drafting)."""
    g = [step_goodput(alphas, k, costs) for k in range(k_max + 1)]
    best = max(g)
    return next(k for k, x in enumerate(g) if x >= best * (1 - 1e-9))


def join_seconds(prompt_tokens: float, costs: Costs, draft_prefills: bool = True) -> float:
    """T_join: one request's prefill (all prompt tokens but the last) in the target and, for a model
    draft, the draft; from the cost model at b = 1 (an extrapolation: calibration measures decode)."""
    n = max(1.0, float(prompt_tokens) - 1)
    return costs.target(1, n) + (costs.draft(1, n) if draft_prefills else 0.0)


def harmonic_tokens(alphas: Sequence[float], k: int) -> float:
    """H: output tokens per lane-step of a refilled batch, the harmonic mean of E(alpha_i, k)."""
    alphas = list(alphas)
    return len(alphas) / sum(1.0 / expected_tokens_per_step(a, k) for a in alphas)


def steady_throughput(lanes: int, alphas: Sequence[float], k: int, costs: Costs, output_tokens: float,
                      join_s: float = 0.0) -> float:
    """X(k): output tokens / s of ``lanes`` rows kept full, requests emitting ``output_tokens`` each."""
    h = harmonic_tokens(alphas, k)
    finishing = lanes * h / output_tokens  # requests per step
    return lanes * h / (step_seconds(lanes, k, costs) + finishing * join_s)


def steady_speedup(lanes: int, alphas: Sequence[float], k: int, costs: Costs, output_tokens: float,
                   join_s: float = 0.0) -> float:
    """X(k) / X_regular: the same queue decoded with k = 0 (dimensionless)."""
    regular = steady_throughput(lanes, [0.0], 0, costs, output_tokens, join_s)
    return steady_throughput(lanes, alphas, k, costs, output_tokens, join_s) / regular


def refilled_run_time(lengths: Sequence[float], alphas: Sequence[float], lanes: int, k: int, costs: Costs,
                      join_s: float | Sequence[float] = 0.0) -> float:
    """Seconds for N requests, queued at t = 0 in this order, through ``lanes`` refilled rows.

    Request i needs L_i / E(alpha_i, k) steps (fluid); every step runs the b busy rows at
    T_step(b, k); a free lane takes the next request at once, paying its join prefill
    (``join_s``: one value, or one per request; the first ``lanes`` requests' prefill is the
    run's first prefill, counted too). The tail (fewer than ``lanes`` requests left) runs
    part-empty, as in the engine.
    """
    lengths, alphas = list(lengths), list(alphas)
    if len(lengths) != len(alphas) or not lengths:
        raise ValueError(f"need one alpha per request (got {len(lengths)} lengths, {len(alphas)} alphas)")
    joins = list(join_s) if isinstance(join_s, (list, tuple)) else [float(join_s)] * len(lengths)
    need = [L / expected_tokens_per_step(a, k) for L, a in zip(lengths, alphas)]  # steps per request
    queue = list(range(len(lengths)))
    busy: list[float] = []  # steps left per occupied lane
    total = 0.0
    while queue or busy:
        while queue and len(busy) < lanes:
            i = queue.pop(0)
            busy.append(need[i])
            total += joins[i]
        d = min(busy)
        total += d * step_seconds(len(busy), k, costs)
        busy = [s - d for s in busy if s - d > 1e-12]
    return total
