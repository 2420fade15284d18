"""The field's acceptance statistics, one function each, and the counts a draft-length recommendation
reads (specviz.analysis.tune). Names as the field uses them (SPECDEC.md, "Metric names the field uses"):

  round                      one row's share of one speculative step that drafted (vLLM: one *draft*)
  acceptance per position j  rounds that accepted at least j tokens / rounds
                             (vLLM: num_accepted_tokens_per_pos[j - 1] / num_drafts): P(A >= j)
  accepted length histogram  rounds by (draft length, accepted count) (vLLM's per-request histograms)
  zero-accept rate           rounds that accepted nothing / rounds (SGLang's roadmap: zero-accept rounds)
  wasted draft share         drafted tokens not accepted / drafted tokens (the wasted-draft ratio)

Each statistic's definition, over raw counts, is in specviz.analysis.acceptance; these functions count
a trace's rounds (or vLLM's counters) and hand the counts to it. A trace's rows carry ``drafted`` and
``accepted`` per row and step; rows of token trees (a ``tree``
field) are left to specviz.analysis.treestats: their ``drafted`` counts nodes, not a chain's positions.
Pure functions over the trace's dicts: no torch, no numpy.
"""

from __future__ import annotations

import dataclasses

from specviz.analysis import acceptance
from specviz.analysis.acceptance import positions_tried


def chain_rows(steps: list[dict]) -> list[dict]:
    """The active rows of every speculative step (k > 0) that drafted a chain, drafted or not."""
    return [r for s in steps if s.get("k", 0) > 0 for r in s["rows"] if r["active"] and not r.get("tree")]


def rounds_of(steps: list[dict]) -> list[tuple[int, int]]:
    """(drafted, accepted) of every round: an active chain row of a step that drafted at least one token."""
    return [(r["drafted"], r["accepted"]) for r in chain_rows(steps) if r["drafted"] > 0]


@dataclasses.dataclass(frozen=True)
class PositionCounts:
    """Acceptance per position as counts, the form vLLM's /metrics exports and a trace gives."""

    rounds: int  # rounds that drafted (vLLM: num_drafts)
    at_least: tuple[int, ...]  # [K] rounds that accepted >= j tokens, j = 1..K (vLLM: accepted per position)
    idle: int = 0  # rows of speculative steps that drafted nothing (an n-gram draft without a match)
    successes: int = 0  # accepted tokens, and...
    trials: int = 0  # ...positions tried (acceptance.positions_tried): alpha = acceptance.alpha(successes, trials)

    @property
    def alpha(self) -> float | None:
        """Alpha (per-position acceptance, acceptance.alpha): successes / trials."""
        return acceptance.alpha(self.successes, self.trials)


def counts_of(rounds: list[tuple[int, int]], idle: int = 0) -> PositionCounts:
    """Counts from (drafted, accepted) rounds."""
    longest = max((d for d, _ in rounds), default=0)
    at_least = tuple(sum(1 for _, a in rounds if a >= j) for j in range(1, longest + 1))
    return PositionCounts(rounds=len(rounds), at_least=at_least, idle=idle, successes=sum(a for _, a in rounds),
                          trials=sum(positions_tried(d, a) for d, a in rounds))


def position_counts(steps: list[dict]) -> PositionCounts:
    """Counts from a trace's steps (chain rows of speculative steps)."""
    return counts_of(rounds_of(steps), idle=sum(1 for r in chain_rows(steps) if r["drafted"] == 0))


def first_rank_rounds(steps: list[dict]) -> list[tuple[int, int]]:
    """A token-tree trace read as chains: each tree row's chain of first-rank children (the draft's top choice
    at each depth) is a round that drafted its length and accepted the leading first-rank nodes of the accepted
    path: what drafting that chain alone would have accepted."""
    out = []
    for s in steps:
        for r in s["rows"]:
            t = r.get("tree")
            if not (r["active"] and t):
                continue
            chain: set[int] = set()
            for i, (p, k) in enumerate(zip(t["parent"], t["rank"])):  # parents come before their children
                if k == 0 and (p < 0 or p in chain):
                    chain.add(i)
            accepted = 0
            for i in sorted(t["path"], key=lambda i: t["depth"][i]):
                if i not in chain:
                    break
                accepted += 1
            out.append((len(chain), accepted))
    return out


def counts_from_vllm(drafts: float, accepted_per_position) -> PositionCounts:
    """Counts from a vLLM server's counters over a window (specviz.peers.metrics.Delta): drafts and the
    accepted tokens per draft position. Trials count every draft at position 1 and, at position j > 1,
    the drafts that accepted j - 1 (exact when every draft had k tokens; with shorter n-gram drafts a
    full accept counts as a rejection, so alpha is a lower bound, as metrics.Delta.alpha says)."""
    at_least = tuple(int(round(x)) for x in accepted_per_position)
    n = int(round(drafts))
    return PositionCounts(rounds=n, at_least=at_least, successes=sum(at_least),
                          trials=acceptance.positions_tried_from_counts(n, at_least))


# ---- the field's statistics, one function each ----------------------------------------------------------

def acceptance_per_position(counts: PositionCounts) -> list[float]:
    """[K] acceptance per position (acceptance.acceptance_per_position): P(A >= j) = rounds that accepted
    at least j / rounds, as vLLM counts it."""
    return acceptance.acceptance_per_position(counts.at_least, counts.rounds) if counts.rounds else []


def accepted_length_histogram(steps: list[dict]) -> dict[int, dict[int, int]]:
    """{draft length: {accepted count: rounds}}: how long the accepted prefix was, for each length drafted."""
    hist: dict[int, dict[int, int]] = {}
    for d, a in rounds_of(steps):
        row = hist.setdefault(d, {})
        row[a] = row.get(a, 0) + 1
    return {d: dict(sorted(row.items())) for d, row in sorted(hist.items())}


def zero_accept_rate(steps: list[dict]) -> float | None:
    """Rounds that accepted no drafted token / rounds (None without rounds)."""
    rounds = rounds_of(steps)
    return sum(1 for _, a in rounds if a == 0) / len(rounds) if rounds else None


def wasted_draft_share(steps: list[dict]) -> float | None:
    """Drafted tokens that were not accepted / drafted tokens over the rounds (acceptance.wasted_draft_share;
    None when nothing was drafted)."""
    rounds = rounds_of(steps)
    return acceptance.wasted_draft_share(sum(a for _, a in rounds), sum(d for d, _ in rounds))


def field_statistics(steps: list[dict]) -> dict:
    """The four statistics of a trace, keyed by their names (JSON-ready: histogram keys as strings)."""
    counts = position_counts(steps)
    return {"rounds": counts.rounds,
            "acceptance_per_position": acceptance_per_position(counts),
            "accepted_length_histogram": {str(d): {str(a): n for a, n in row.items()}
                                          for d, row in accepted_length_histogram(steps).items()},
            "zero_accept_rate": zero_accept_rate(steps),
            "wasted_draft_share": wasted_draft_share(steps)}
