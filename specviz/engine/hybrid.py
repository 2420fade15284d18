"""A model draft and the suffix draft together (``MODEL+suffix``, e.g. ``default+suffix``).

Per row and step, the draft with the higher expected accepted length drafts:
  suffix  its draft's score: the sum of its nodes' path probabilities by the counts (specviz.engine.suffix),
          times the run's calibration: accepted / score summed over the steps rows drafted with it (shrunk
          toward 1 by PRIOR_STEPS tokens), since counts from one or two occurrences overstate the chance
  model   sum_{i=1..k} prod_{j<=i} alpha_j, with alpha_j the row's running acceptance at draft position
          (tree: depth) j over the steps it drafted with the model (accepted there / reached there), shrunk
          toward the run's pooled rate at j by PRIOR_STEPS pseudo-steps; the pooled rate starts at
          PRIOR_ALPHA the same way. A row that always takes the suffix draft keeps its last estimate.
A short match scores low (a match of L tokens drafts at most L deep), so a fresh prompt drafts with the
model; a long, frequent match scores high and beats a model that accepts less. Arctic Inference's
hybrid chooses between its suffix trees and its model speculator per step in the same spirit (it
compares the suffix score with the model's speculation length; here the model's expected accepted
length stands in, which its running acceptance gives).

Depth: the model drafts k tokens, and so does the suffix side (still at most L), unless the spec names
its own depth: ``MODEL+suffix:D`` lets it draft up to max(k, D) deep, so a row copying a long stretch
verifies more of it in one step while the model's draft still costs k forwards (the engine asks
``deepest(k)`` for the verify's width; SuffixDecoding and Arctic Inference bound the speculation by the
match length, not by a fixed k). Off by default: on this project's 2-core AMD EPYC, where a verified token
costs time, D = 12 at k = 4 was slower than D = k on every predictable set at B = 1 and level or slower
at B = 8 (BENCHMARKS.md, "The hybrid's suffix side past k"); it is for hardware where a wider verify
costs about what a narrow one does (not yet measured on such hardware).

Cost: the model draft runs only when some row chooses it; a step where every row takes the suffix draft
runs no model forward. When it runs, it drafts for every row (its cache is one batch), and a row that
took the suffix draft drops the model's tokens. The draft cache stays in sync either way (the
ModelDraft invariant: it holds the context except ``pending``): a step without the model queues the
emitted tokens as a backlog the next model step feeds; a step with it keeps the model's fed tokens only
on rows that drafted with the model (a suffix row keeps none and queues all it emitted).

``merge=True`` (token trees only) grows one tree per row instead: the model's tree with the suffix's
nodes added where they differ (a trie: a node both proposed appears once). The model runs every step.

Exactness: each row's proposal is the chosen draft's, a function of the context and of acceptances in
earlier steps only; a suffix row's q is a point mass (one-hot), a model row's the draft's q, so the
acceptance rule is exact for each (SPECDEC.md); trees of either kind are deterministic given the context.
"""

from __future__ import annotations

import dataclasses

import torch

from specviz.engine.proposers import Proposal
from specviz.engine.transfer import host_tensor
from specviz.engine.tree import TokenTree

PRIOR_ALPHA = 0.7  # the model's acceptance per position before this run saw any: 1.8 tokens expected at k = 4,
# so a one-token match (score <= 1) never beats a fresh model draft and a two-token one that recurs does
SUFFIX_FACTOR = 1.0  # the hybrid's suffix draft drafts at most L deep for a match of L tokens (Arctic's default),
# so a short match scores low against the model draft (the plain suffix draft drafts deeper: suffix.FACTOR)
PRIOR_STEPS = 2.0  # pseudo-steps of the pooled rate in a row's estimate (and of PRIOR_ALPHA in the pooled one)


@dataclasses.dataclass
class Acceptance:
    """Per draft position j: steps that reached j, and of those, steps whose token at j was accepted."""

    reached: list[float] = dataclasses.field(default_factory=list)
    accepted: list[float] = dataclasses.field(default_factory=list)

    def observe(self, drafted: int, accepted: int) -> None:
        """A step that drafted ``drafted`` and had ``accepted`` of them accepted (a prefix)."""
        grow = drafted - len(self.reached)
        if grow > 0:
            self.reached += [0.0] * grow
            self.accepted += [0.0] * grow
        for j in range(min(accepted + 1, drafted)):
            self.reached[j] += 1
            self.accepted[j] += j < accepted

    def rate(self, j: int, prior: float, weight: float = PRIOR_STEPS) -> float:
        r, a = (self.reached[j], self.accepted[j]) if j < len(self.reached) else (0.0, 0.0)
        return (a + weight * prior) / (r + weight)


def expected_accepted(row: Acceptance, pooled: Acceptance, k: int) -> float:
    """sum_i prod_{j<=i} alpha_j over the k positions (the module docstring's model estimate)."""
    total, reach = 0.0, 1.0
    for j in range(k):
        reach *= row.rate(j, pooled.rate(j, PRIOR_ALPHA))
        total += reach
    return total


def _host_rows(tree: TokenTree) -> list[dict[str, list]]:
    """Every row's nodes on the host (token, parent, prob, rank, fed_slot), one read per field."""
    sizes = tree.sizes()
    cols = {name: x.tolist() for name, x in (("token", tree.tokens), ("parent", tree.parents), ("prob", tree.probs),
                                             ("rank", tree.rank), ("fed_slot", tree.fed_slot)) if x is not None}
    out, s = [], 0
    for n in sizes:
        row = {name: col[s:s + n] for name, col in cols.items()}
        row.setdefault("prob", [1.0] * n)
        row.setdefault("rank", [0] * n)
        row.setdefault("fed_slot", [-1] * n)
        out.append(row)
        s += n
    return out


def _suffix_row(d) -> dict[str, list]:
    return {"token": list(d.tokens), "parent": list(d.parents), "prob": list(d.probs), "rank": list(d.ranks),
            "fed_slot": [-1] * len(d.tokens), "origin": ["suffix"] * len(d.tokens)}


def merge_rows(model: dict[str, list], suffix: dict[str, list]) -> dict[str, list]:
    """One tree from a model row and a suffix row: the model's nodes, then the suffix's that differ (a
    trie: the suffix's node under a parent that already has its token maps onto it, marked "both")."""
    out = {name: list(v) for name, v in model.items()}
    out["origin"] = ["model"] * len(model["token"])
    child = {(p, t): i for i, (t, p) in enumerate(zip(model["token"], model["parent"]))}
    n_kids: dict[int, int] = {}
    for p in model["parent"]:
        n_kids[p] = n_kids.get(p, 0) + 1
    where: list[int] = []  # suffix node -> merged node
    for t, p, q in zip(suffix["token"], suffix["parent"], suffix["prob"]):
        par = -1 if p < 0 else where[p]
        i = child.get((par, t))
        if i is not None:
            out["origin"][i] = "both"
        else:  # a new branch: its ancestors are merged nodes already, so parents stay before children
            i = child[(par, t)] = len(out["token"])
            for name, v in (("token", t), ("parent", par), ("prob", q), ("rank", n_kids.get(par, 0)),
                            ("fed_slot", -1), ("origin", "suffix")):
                out[name].append(v)
            n_kids[par] = n_kids.get(par, 0) + 1
        where.append(i)
    return out


def tree_of(rows: list[dict[str, list]], device) -> TokenTree:
    tree = TokenTree.from_rows([list(zip(r["token"], r["parent"])) for r in rows], device,
                               probs=[r["prob"] for r in rows], rank=[r["rank"] for r in rows])
    tree.fed_slot = host_tensor([s for r in rows for s in r["fed_slot"]], device)
    tree.origin = [o for r in rows for o in r["origin"]]
    return tree


class HybridDraft:
    """``MODEL+suffix``: per row and step, the suffix draft or the model draft (the module docstring)."""

    kind = "hybrid"
    wants_features = False  # a feature draft is refused as the model side

    def __init__(self, model, suffix, merge: bool = False, suffix_depth: int = 0):
        if getattr(model, "wants_features", False):
            raise ValueError("MODEL+suffix takes a token draft (a model or a distilled token draft); a feature "
                             "draft reads the target's features, which this hybrid does not pass on")
        self.model, self.suffix, self.merge = model, suffix, merge
        self.suffix_depth = suffix_depth  # the suffix side's own cap on its depth (0: the step's k)
        self.name = f"{model.name}+suffix" + (f":{suffix_depth}" if suffix_depth else "")
        self.device = suffix.device
        self.rows: list[Acceptance] = []  # per row: the model draft's acceptance by position
        self.pooled = Acceptance()  # every row's, this run
        self.suffix_score = self.suffix_accepted = 0.0  # summed over the rows and steps that drafted with the suffix
        self.use_suffix: list[bool] = []  # per row, this step: the suffix draft drafted
        self.ran = False  # the model drafted this step
        self._model_n: list[int] = []  # per row, this step: the model's proposals (when it ran)

    @property
    def corpus(self):  # the suffix draft's global structure (run.py and the app share it as the suffix draft's)
        return self.suffix.corpus

    @corpus.setter
    def corpus(self, value) -> None:
        self.suffix.corpus = value

    def load_corpus(self, path, tokenizer: str, vocab_size: int) -> None:
        self.suffix.load_corpus(path, tokenizer, vocab_size)

    def save_corpus(self, path, tokenizer: str):
        return self.suffix.save_corpus(path, tokenizer)

    # ---- rows --------------------------------------------------------------------------------

    def start(self, contexts: list[list[int]], features=None) -> None:
        self.model.start(contexts)
        self.suffix.start(contexts)
        self.rows, self.pooled = [Acceptance() for _ in contexts], Acceptance()
        self.suffix_score = self.suffix_accepted = 0.0

    def add_rows(self, contexts: list[list[int]], features=None) -> None:
        self.model.add_rows(contexts)
        self.suffix.add_rows(contexts)
        self.rows += [Acceptance() for _ in contexts]

    def select_rows(self, rows: torch.Tensor) -> None:
        self.model.select_rows(rows)
        self.suffix.select_rows(rows)
        self.rows = [self.rows[i] for i in rows.tolist()]

    def deepest(self, k: int) -> int:
        """The deepest proposal at the step's draft length k: the suffix side may draft past it."""
        return max(k, self.suffix_depth) if k else 0

    # ---- the choice --------------------------------------------------------------------------

    def model_estimate(self, k: int) -> list[float]:
        """Per row: the model draft's expected accepted length at k (the module docstring)."""
        return [expected_accepted(r, self.pooled, k) for r in self.rows]

    def calibration(self) -> float:
        """The suffix draft's accepted tokens per unit of score this run (1 before it drafted)."""
        return (self.suffix_accepted + PRIOR_STEPS) / (self.suffix_score + PRIOR_STEPS)

    def _choose(self, k: int) -> list[bool]:
        est, c = self.model_estimate(k), self.calibration()
        self.use_suffix = [d.score * c > e for d, e in zip(self.suffix.last, est)]
        self.ran = False
        return self.use_suffix

    def _observe(self, num_accepted: list[int]) -> None:
        """This step's acceptance: the model rows' per row and pooled, the suffix rows' against their scores."""
        for i, (s, a) in enumerate(zip(self.use_suffix, num_accepted)):
            if s:
                self.suffix_score += self.suffix.last[i].score
                self.suffix_accepted += a
            elif self.ran:
                self.rows[i].observe(self._model_n[i], a)
                self.pooled.observe(self._model_n[i], a)

    # ---- chains ------------------------------------------------------------------------------

    def propose(self, contexts, k: int, params, u) -> Proposal:
        K = self.deepest(k)
        sfx = self.suffix.propose(contexts, K, params, u)
        if not k:  # a regular step: neither drafts
            self.use_suffix, self.ran = [False] * len(contexts), False
            return sfx
        if all(self._choose(k)):
            return sfx
        self.ran = True
        m = self.model.propose(contexts, k, params, u[:, :k])
        B = len(contexts)
        self._model_n = [k] * B if m.widest == k else m.num_drafted.tolist()
        dev = m.tokens.device
        use = host_tensor(self.use_suffix, dev).bool()  # [B]
        model_tokens = torch.nn.functional.pad(m.tokens, (0, K - k), value=-1)  # [B, K] -1 past the model's k
        tokens = torch.where(use.unsqueeze(1), sfx.tokens.to(dev), model_tokens)  # [B, K]
        n = torch.where(use, sfx.num_drafted.to(dev), m.num_drafted)  # [B]
        probs = m.probs
        if probs is not None:  # a suffix row's q is the one-hot of its proposal (the point-mass rule)
            probs = torch.nn.functional.pad(probs, (0, 0, 0, K - k))  # [B, K, V] zeros past the model's k
            one_hot = torch.zeros_like(probs).scatter_(2, tokens.clamp(min=0).unsqueeze(2), 1.0)  # [B, K, V]
            probs = torch.where(use.view(B, 1, 1), one_hot, probs)
        counts = [c if s else mn for s, c, mn in zip(self.use_suffix, sfx.counts, self._model_n)]
        return Proposal(tokens, n, probs, widest=max(counts, default=0), counts=counts)

    def commit(self, num_accepted: list[int], emitted: list[list[int]], features=None) -> None:
        self.suffix.commit(num_accepted, emitted)
        self._observe(num_accepted)
        if self.ran:  # a suffix row keeps none of the model's fed tokens (they were not its proposals)
            num_accepted = [0 if s else a for s, a in zip(self.use_suffix, num_accepted)]
        self.model.commit(num_accepted, emitted)  # without a model step: the emitted tokens join the backlog
        self.ran = False

    # ---- token trees -------------------------------------------------------------------------

    def propose_tree(self, contexts, k: int, width: int, nodes: int, params) -> TokenTree:
        st = self.suffix.propose_tree(contexts, self.deepest(k), width, nodes, params)
        if not self.merge and all(self._choose(k)):
            return st
        self.use_suffix = self.use_suffix if not self.merge else [False] * len(contexts)
        self.ran = True
        mt = self.model.propose_tree(contexts, k, width, nodes, params)
        model_rows = _host_rows(mt)
        self._model_n = [max((d for d in _depths(r["parent"])), default=0) for r in model_rows]
        for r in model_rows:
            r["origin"] = ["model"] * len(r["token"])
        if self.merge:
            rows = [merge_rows(m, _suffix_row(d)) for m, d in zip(model_rows, self.suffix.last)]
        else:
            rows = [_suffix_row(d) if s else m for s, m, d in zip(self.use_suffix, model_rows, self.suffix.last)]
        return tree_of(rows, self.device)

    def commit_tree(self, paths: list[list[int]], emitted: list[list[int]], fed_slots: list[list[int]],
                    features=None) -> None:
        self.suffix.commit_tree(paths, emitted, fed_slots)
        self._observe([len(p) for p in paths])
        if self.ran:  # a suffix row's nodes have no fed slot: the model keeps none of its tree and queues it all
            self.model.commit_tree(paths, emitted, fed_slots)
        else:  # no model step: the emitted tokens join the draft's backlog
            self.model.commit([0] * len(emitted), emitted)
        self.ran = False


def _depths(parents: list[int]) -> list[int]:
    d: list[int] = []
    for p in parents:
        d.append(1 if p < 0 else d[p] + 1)
    return d
