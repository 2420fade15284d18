"""A per-step tree shape policy (issue 16): pick (depth k, width W, nodes N) from the calibrated costs
and the running acceptance by depth x sibling rank. (A module of its own: policies.py is the chain
policies and near the 400-line cap.)

Prediction for a shape, our own model (stated as such), built on specviz.analysis.treestats:
  - the tree: grown as the drafter grows it (specviz.engine.treedraft), W children per frontier
    node, the W best nodes of a depth as the next frontier, the N best of all, but ranked by each
    node's *reach* r(v) = prod over u on the path root -> v of a(depth u, rank u) instead of the
    draft's scores; E[output tokens per step] = 1 + sum over kept nodes of r(v) (treestats' formula)
  - its cost: the draft's first forward (1 token per row) and k - 1 forwards of W tokens per row,
    one target forward over 1 + N slots per row, and the per-step overhead:
        T_step(b, k, W, N) = T_draft(b, 1) + (k - 1) T_draft(b, W) + T_target(b, 1 + N) + overhead
  - throughput b E / T_step against regular decoding's b / (T_target(b, 1) + regular overhead).
The target's roofline (analytic.CostModel) is flat up to its knee in b (1 + N) tokens, so as B
grows the knee comes at a smaller N and the chosen N shrinks, down to k = 0 (regular decoding)
when no shape beats it.

Acceptance: a(d, r) = accepted / tried per (depth, rank) cell (treestats' counting: a node is
tried when the walk reached its parent), exponentially weighted by ``decay`` per step, from a
prior a(d, r) = prior_alpha (1 - prior_alpha)^r worth ``prior_weight`` tries per cell.

``--policy tree`` (policies.POLICIES) builds one: --draft-length, --tree-width and
--tree-nodes bound k, W and N; without a calibration the costs are :func:`illustrative_costs`.
"""

from __future__ import annotations

import dataclasses

from specviz.analysis import acceptance, analytic
from specviz.records import TreeNodes


def reach_sorted(k: int, W: int, a) -> list[float]:
    """Every candidate's reach in the (k, W) growth under rates ``a(d, r)``, best first."""
    cand = [(a(1, r), 1) for r in range(W)]  # (reach, depth)
    frontier = list(range(W))
    for d in range(2, k + 1):
        first = len(cand)
        cand += [(cand[f][0] * a(d, r), d) for f in frontier for r in range(W)]
        frontier = sorted(range(first, len(cand)), key=lambda c: -cand[c][0])[:W]
    return sorted((c[0] for c in cand), reverse=True)  # reach falls along a path: ancestors come first


def predicted_tokens(k: int, W: int, N: int, a) -> float:
    """E[output tokens per step] of the (k, W, N) tree grown by reach under rates ``a(d, r)``."""
    return 1.0 + sum(reach_sorted(k, W, a)[:N]) if k and N else 1.0


def illustrative_costs(cost_ratio: float = 0.1, knee: float = 64.0) -> analytic.Costs:
    """The uncalibrated fallback (the Speedup page's illustrative roofline): a target forward is 1 unit,
    flat up to ``knee`` tokens (b x tokens per row), linear past it; a draft forward ``cost_ratio`` units,
    with the same knee; no per-step overhead."""
    if not 0 < knee < float("inf") or not 0 <= cost_ratio < float("inf"):
        raise ValueError(f"the illustrative roofline needs knee > 0 tokens and cost_ratio >= 0 (got {knee}, {cost_ratio})")
    return analytic.Costs(target=analytic.CostModel(t_fixed=0.0, t_mem=1.0, t_token=1.0 / knee),
                          draft=analytic.CostModel(t_fixed=0.0, t_mem=cost_ratio, t_token=cost_ratio / knee))


def step_seconds(b: int, k: int, W: int, N: int, costs: analytic.Costs) -> float:
    """T_step(b, k, W, N) (module docstring); k = 0 is a regular step."""
    if k == 0:
        reg = costs.overhead if costs.regular_overhead is None else costs.regular_overhead
        return costs.target(b, 1) + reg
    return costs.draft(b, 1) + (k - 1) * costs.draft(b, W) + costs.target(b, 1 + N) + costs.overhead


@dataclasses.dataclass
class TreeShapes:
    """Each step the (k, W, N) with the highest predicted throughput; ``next_k`` returns k and leaves
    (W, N) in ``shape`` for the tree step (specviz.engine.step reads it)."""

    costs: analytic.Costs
    k_max: int = 6
    w_max: int = 4
    n_choices: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 10, 12, 16, 24, 32)
    n_max: int | None = None  # a cap on N (--tree-nodes); a chain deeper than it keeps n_max nodes
    prior_alpha: float = 0.4
    prior_weight: float = 4.0
    decay: float = 0.95
    name: str = "tree"
    shape: tuple[int, int] = dataclasses.field(init=False, default=(1, 1))  # (W, N) for the coming step
    counts: dict = dataclasses.field(init=False, default_factory=dict)  # (depth, rank) -> [accepted, tried]

    def rate(self, d: int, r: int) -> float:
        prior = self.prior_alpha * (1 - self.prior_alpha) ** r
        acc, tried = self.counts.get((d, r), (0.0, 0.0))
        return acceptance.alpha(acc + self.prior_weight * prior, tried + self.prior_weight, empty=prior)

    def choose(self, b: int) -> tuple[int, int, int]:
        """(k, W, N) maximising b E / T_step; (0, 1, 0) when regular decoding is predicted faster."""
        best, best_rate = (0, 1, 0), b / step_seconds(b, 0, 1, 0, self.costs)
        for k in range(1, self.k_max + 1):
            for W in range(1, self.w_max + 1):
                reach = reach_sorted(k, W, self.rate)
                cap = min(len(reach), self.n_max or len(reach))
                ns = {min(n, cap) for n in (*self.n_choices, *([self.n_max] if self.n_max else []))}
                for N in [min(k, cap)] if W == 1 else sorted(ns):  # a chain: k nodes
                    rate = b * (1.0 + sum(reach[:N])) / step_seconds(b, k, W, N, self.costs)
                    if rate > best_rate * (1 + 1e-9):
                        best, best_rate = (k, W, N), rate
        return best

    def next_k(self, batch_size: int) -> int:
        k, W, N = self.choose(batch_size)
        self.shape = (W, N)
        return k

    def observe(self, drafted: list[int], accepted: list[int], rows=None, remaining=None) -> None:
        """Chain-level counts carry no ranks: the tree step reports through observe_trees."""

    def observe_trees(self, trees: list[TreeNodes]) -> None:
        """One step's row trees (parent, depth, rank and the accepted path of each node): decay, then count."""
        for c in self.counts.values():
            c[0] *= self.decay
            c[1] *= self.decay
        for t in trees:
            reached = {-1, *t.path}
            on_path = set(t.path)
            for i, (p, d, r) in enumerate(zip(t.parent, t.depth, t.rank)):
                if p in reached:
                    c = self.counts.setdefault((d, r), [0.0, 0.0])
                    c[1] += 1
                    c[0] += i in on_path
