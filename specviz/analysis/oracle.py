"""The oracle bound: the best draft length per step in hindsight, from a trace, beside the best fixed k and
the schedule the trace ran, all judged by the same cost model. It says how much any fixed k leaves behind.

In hindsight a step's outcome is known for every k' up to the k it ran: a row that accepted A of its drafts
would have emitted min(A, k') + 1 tokens (accepted, then the recovered or bonus token), and the step would
have taken T_step(b, k') seconds (specviz.analysis.steady.step_seconds; b = the step's active rows). What a
longer draft would have accepted is not known, so k' never exceeds the step's own k.

The rate of a schedule k'_s over the steps is sum_s tokens_s(k'_s) / sum_s T_step(b_s, k'_s) (output tokens
per second of the cost model; the steps' order and the rows' lengths are held as they were). The oracle
maximises that ratio over per-step choices: a fractional program, solved exactly by Dinkelbach's iteration
(for the current rate L, each step takes the k' maximising tokens - L seconds; repeat until L stops rising).
Chains only: a token tree's nodes are not a prefix that a shorter draft keeps.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from specviz.analysis import steady
from specviz.analysis.analytic import Costs


def step_tokens(step: dict, k: int) -> int:
    """Output tokens the step's active rows would have emitted with draft length k (<= the step's k)."""
    return sum(min(r["accepted"], k) + 1 for r in step["rows"] if r["active"])


@dataclasses.dataclass(frozen=True)
class OracleBound:
    """Rates in output tokens per second of the cost model (per unit, for an illustrative roofline)."""

    as_run: float  # the trace's own k per step
    best_fixed_k: int  # the one k (up to the smallest k the trace ran) with the best rate over every step
    best_fixed: float
    oracle: float  # the best k per step in hindsight
    oracle_ks: tuple[int, ...]  # [steps] the oracle's k per step

    @property
    def left_behind(self) -> float:
        """oracle / best fixed - 1: the share of throughput no fixed k can reach on these steps."""
        return self.oracle / self.best_fixed - 1.0


def _table(steps: list[dict], costs_at: Callable[[int], Costs]) -> list[list[tuple[int, float]]]:
    """Per step, [(tokens, seconds)] for k' = 0..k."""
    out = []
    for s in steps:
        b = sum(1 for r in s["rows"] if r["active"])
        out.append([(step_tokens(s, k), steady.step_seconds(b, k, costs_at(b))) for k in range(s["k"] + 1)])
    return out


def _rate(table, ks) -> float:
    return sum(t[k][0] for t, k in zip(table, ks)) / sum(t[k][1] for t, k in zip(table, ks))


def oracle_bound(steps: list[dict], costs_at: Callable[[int], Costs]) -> OracleBound | None:
    """The bound over the trace's decode steps (None when it has none, or token trees)."""
    steps = [s for s in steps if any(r["active"] for r in s["rows"])]
    if not steps or any(r.get("tree") for s in steps for r in s["rows"]):
        return None
    table = _table(steps, costs_at)
    as_run = _rate(table, [s["k"] for s in steps])
    fixed = [_rate(table, [k] * len(steps)) for k in range(min(s["k"] for s in steps) + 1)]
    best_fixed_k = max(range(len(fixed)), key=lambda k: (fixed[k], -k))
    rate, ks = max(as_run, fixed[best_fixed_k]), None
    for _ in range(100):  # Dinkelbach: converges in a few rounds (finitely many schedules)
        ks = [max(range(len(t)), key=lambda k, t=t: (t[k][0] - rate * t[k][1], -k)) for t in table]
        new = _rate(table, ks)
        if new <= rate * (1 + 1e-12):
            break
        rate = new
    rate = max(rate, _rate(table, ks))
    return OracleBound(as_run=as_run, best_fixed_k=best_fixed_k, best_fixed=fixed[best_fixed_k], oracle=rate,
                       oracle_ks=tuple(ks))
