"""Token-tree statistics from a trace (issue 16): acceptance by depth x sibling rank, and the
expected output tokens per step of a tree shape given those rates.

Our own formula (stated as such; it extends the chain's E = (1 - alpha^(k+1)) / (1 - alpha)):
with deterministic siblings the walk reaches a node only if its parent was reached and it is the
accepted child, so, writing a(d, r) for the probability that the child of rank r is the one
accepted at depth d given its parent was reached (and has such a child),

    E[output tokens per step] = 1 + sum over nodes v of  prod over u on the path root -> v of a(depth u, rank u)

(the 1 is the recovered or bonus token). A chain is the case rank = 0 everywhere, and with a
constant a(d, 0) = alpha it gives the chain's formula. The rates are read from traces (version 3,
rows with "tree"); treating them as independent of the context is the model's assumption.
"""

from __future__ import annotations

from specviz.analysis import acceptance


def acceptance_by_depth_rank(steps: list[dict]) -> dict[tuple[int, int], tuple[int, int]]:
    """{(depth, rank): (accepted, tried)}: tried counts row-steps whose walk reached a node at
    depth - 1 (the root is depth 0) that had a child of that rank; accepted counts those where that
    child was the accepted one."""
    counts: dict[tuple[int, int], list[int]] = {}
    for s in steps:
        for r in s["rows"]:
            t = r.get("tree")
            if not t:
                continue
            reached = [-1] + list(t["path"])  # the root, then the accepted nodes
            on_path = set(t["path"])
            for i, (p, d, k) in enumerate(zip(t["parent"], t["depth"], t["rank"])):
                if p in reached:
                    c = counts.setdefault((d, k), [0, 0])
                    c[1] += 1
                    c[0] += i in on_path
    return {key: (a, n) for key, (a, n) in sorted(counts.items())}


def rates(counts: dict[tuple[int, int], tuple[int, int]]) -> dict[tuple[int, int], float]:
    """a(d, r) = accepted / tried: each (depth, rank) cell's alpha (acceptance.alpha), for the cells tried."""
    return {key: acceptance.alpha(a, n) for key, (a, n) in counts.items() if n}


def expected_tree_tokens(parents: list[int], depth: list[int], rank: list[int],
                         a: dict[tuple[int, int], float]) -> float:
    """Expected output tokens per step for one tree (row-local parents, -1 = root) under rates a
    (cells never measured count as 0)."""
    reach: list[float] = []
    for p, d, k in zip(parents, depth, rank):
        reach.append((1.0 if p < 0 else reach[p]) * a.get((d, k), 0.0))
    return 1.0 + sum(reach)
