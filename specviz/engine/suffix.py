"""Suffix decoding: a model-free draft that proposes what followed the row's context before, in its own
prompt and output and in the outputs of earlier requests (SuffixDecoding, Oliaro et al. 2024,
arXiv 2411.04975; Snowflake's Arctic Inference, which vLLM and SGLang run).

Per row and step (specviz.engine.suffixindex holds the structures):
  match   the longest suffix of the row's context (prompt + output so far, at most ``max_match`` tokens)
          that occurred before with a token after it, in the row's own structure and, apart, in the
          global one over earlier requests' outputs; L = its length
  trie    the tokens after every occurrence (up to ``max_found``, latest first) merged into a trie whose
          nodes count occurrences: a node's probability is its count over its parent's (the root's count
          is the number of occurrences), its path probability the product down from the root
  tree    best-first by path probability: a node is drafted while the tree has fewer than N nodes, its
          parent fewer than W children, its depth is within the bound below and its path probability is
          at least ``min_prob``. Of the two structures, the one whose tree scores higher drafts (on a
          tie, the one with the longer match); the score is the sum of the path probabilities, the
          expected accepted length if the counts were the target's probabilities (Arctic Inference picks between its per-request and global trees so).
  chain   tree width 1: the same walk, so the most frequent child at each depth.

The depth rule: a match of L tokens drafts to depth min(k, floor(factor x L)), and only nodes whose path
probability is >= min_prob. SuffixDecoding bounds the speculation by MAX_SPEC = alpha x p for a pattern
match of length p, alpha a tuned factor; Arctic Inference's speculate() uses max_spec_factor x match_len +
max_spec_offset and drops tokens below min_token_prob, with defaults 1.0, 0 and 0.1. min_prob is theirs;
the factor here is 4 (FACTOR), measured: on the predictable sets at k = 12, B = 1 and 8, factor 4 was
faster than 1 on rewrite-text (3.33x vs 2.72x regular at B = 1, 1.98x vs 1.74x at B = 8) and edit-code at
B = 1 (2.33x vs 2.18x), level at B = 8 (bench/results/suffix-hybrid-2026-12-05/factor-probe.txt). A verify of k + 1 tokens
costs about one regular step at small B, so drafting deeper after a short match (one that just picked up
the copied text again after an edit) costs little and often pays. The hybrid keeps factor 1
(specviz.engine.hybrid: there a short match must score low against the model draft).

The batch's size (with ``costs``, the target's calibrated forward cost, which a cost-aware ``--policy`` gives
it): after every row has drafted to its bound, the step keeps the n nodes of the whole batch with the highest
estimated acceptance, n chosen for the most expected tokens per second, (B + sum of the kept estimates) /
T_target(B + n tokens): SmartSpec's goodput (arXiv 2406.14066) over nodes instead of one k for all rows, so
one row's long match does not buy the whole batch a wide verify, and a row's unlikely tail is dropped where
a verified token costs time (a CPU past its knee). A node's estimate is its path probability times the run's
calibration (accepted / expected over the recent steps, shrunk toward 1 by CAL_PRIOR tokens, at most 1),
since counts from one or two occurrences overstate the chance. Both sums fade by CAL_DECAY every step, drafted
or not: a run whose drafts stopped paying drafts nothing for a while, then tries again (without the fading,
one bad stretch would stop drafting for good, nothing left to learn from). A row's path probabilities fall along its
draft order (best-first), so the kept nodes of a row are a prefix of its draft: still a tree.

No match, or no node above min_prob: the row drafts nothing (a zero-length proposal). No model runs in
any case; when no row drafts, the verify is a regular decoding step.

Exactness: the proposals are a deterministic function of the contexts and the structures, so q is a
point mass and the acceptance rule is its one-hot case (SPECDEC.md), exact under greedy and sampling.

Learning: a row's own structure grows by every emitted token (commit). When a row leaves the batch
(the decoder's select_rows, called as finished rows retire) its output, after the last PROMPT_TAIL prompt
tokens (so a repeat of the request matches from its first step), joins the global structure: later
requests of the run, later runs with this proposer, and runs that load a saved corpus match it. (The
draft sees a step's emitted tokens before the decoder cuts them at EOS or max_new_tokens, so a stored
output can run up to k tokens past its cut: tokens the target emitted all the same.)
"""

from __future__ import annotations

import dataclasses
import heapq

import torch

from specviz.engine.proposers import Proposal
from specviz.engine.suffixindex import Corpus, Occurrences
from specviz.engine.transfer import host_tensor, to_device
from specviz.engine.tree import TokenTree

FACTOR = 4.0  # the depth rule's factor (module docstring)
CAL_PRIOR = 8.0  # expected tokens of prior (ratio 1) in the calibration of path probabilities (module docstring)
CAL_DECAY = 0.95  # weight the calibration's sums keep each step (memory ~20 steps; module docstring)
PROMPT_TAIL = 16  # prompt tokens stored before a finished request's output in the global structure


@dataclasses.dataclass
class Draft:
    """One row's proposal for one step: nodes in draft order (parents first, siblings by rank)."""
    tokens: list[int]
    parents: list[int]  # row-local parent node, -1 = the row's last token
    probs: list[float]  # the node's count over its parent's
    ranks: list[int]  # sibling rank, 0 = the most frequent
    score: float = 0.0  # sum of path probabilities: the expected accepted length by the counts
    match: int = 0  # L, the matched suffix's length
    source: str = ""  # "request" (the row's own structure), "global", or "" (nothing drafted)

    def path_probs(self) -> list[float]:
        """Each node's path probability (the product of probs from the root), in draft order."""
        out: list[float] = []
        for p, parent in zip(self.probs, self.parents):
            out.append(p * (out[parent] if parent >= 0 else 1.0))
        return out

    def first(self, n: int) -> "Draft":
        """The first n nodes (a prefix of the best-first order: parents before children)."""
        if n >= len(self.tokens):
            return self
        return dataclasses.replace(self, tokens=self.tokens[:n], parents=self.parents[:n], probs=self.probs[:n],
                                   ranks=self.ranks[:n], score=sum(self.path_probs()[:n]))


def grow(conts: list[list[int]], depth: int, width: int, nodes: int, min_prob: float) -> Draft:
    """The draft tree from the continuations of the matched occurrences (see the module docstring)."""
    kids: list[dict[int, int]] = [{}]  # trie node -> {token: child}; node 0 is the match itself
    count, token = [len(conts)], [-1]  # per trie node
    for c in conts:
        node = 0
        for t in c[:depth]:
            child = kids[node].get(t)
            if child is None:
                child = kids[node][t] = len(count)
                kids.append({})
                count.append(0)
                token.append(t)
            count[child] += 1
            node = child
    out = Draft([], [], [], [])
    n_kids: dict[int, int] = {}  # draft node -> children drafted so far (-1: the row's last token)
    heap = [(-count[c] / count[0], c, 0, -1, 1) for c in kids[0].values()]  # (-path prob, trie node, parent, ...)
    heapq.heapify(heap)
    while heap and len(out.tokens) < nodes:
        neg, node, trie_parent, parent, d = heapq.heappop(heap)
        if -neg < min_prob:  # the best left is below the bound: so is everything under it
            break
        if n_kids.get(parent, 0) >= width:
            continue
        i = len(out.tokens)
        out.tokens.append(token[node])
        out.parents.append(parent)
        out.probs.append(count[node] / count[trie_parent])
        out.ranks.append(n_kids.get(parent, 0))
        n_kids[parent] = n_kids.get(parent, 0) + 1
        out.score -= neg
        if d < depth:
            for c in kids[node].values():
                heapq.heappush(heap, (neg * count[c] / count[node], c, node, i, d + 1))
    return out


class SuffixDraft:
    """The suffix draft; one instance keeps the global structure across the runs it serves."""

    kind = "suffix"
    name = "suffix"
    wants_features = False

    def __init__(self, device="cpu", corpus: Corpus | None = None, factor: float = FACTOR, min_prob: float = 0.1,
                 max_match: int = 32, max_found: int = 64, costs=None):
        self.device = torch.device(device)
        self.costs = costs  # the target's forward CostModel: the batch's size by goodput (module docstring); None: off
        self.expected, self.accepted = 0.0, 0.0  # calibration sums over the run's drafted steps
        self.corpus = corpus if corpus is not None else Corpus()
        self.factor, self.min_prob = factor, min_prob  # the depth rule (module docstring)
        self.max_match, self.max_found = max_match, max_found
        self.rows: list[Occurrences] = []  # per row: its own structure over prompt + output (sequence 0)
        self.prompt_lens: list[int] = []
        self.last: list[Draft] = []  # the last step's draft per row (its source, match length and score)

    # ---- rows --------------------------------------------------------------------------------

    def start(self, contexts: list[list[int]], features=None) -> None:
        self.rows, self.prompt_lens = [], []
        self.expected, self.accepted = 0.0, 0.0  # a new run calibrates afresh
        self.add_rows(contexts)

    def add_rows(self, contexts: list[list[int]], features=None) -> None:
        for ctx in contexts:
            occ = Occurrences()
            occ.extend(0, ctx)
            self.rows.append(occ)
            self.prompt_lens.append(len(ctx))

    def _grow_rows(self, emitted: list[list[int]]) -> None:
        for occ, e in zip(self.rows, emitted):
            occ.extend(0, e)

    def commit(self, num_accepted, emitted: list[list[int]], features=None) -> None:
        self._observe(num_accepted)
        self._grow_rows(emitted)

    def commit_tree(self, paths, emitted: list[list[int]], fed_slots, features=None) -> None:
        self._observe([len(p) for p in paths])
        self._grow_rows(emitted)

    def _observe(self, accepted) -> None:
        """The calibration's sums: the last step's expected accepted tokens by the counts, and the accepted."""
        for d, a in zip(self.last, accepted):
            if d.tokens:
                self.expected += d.score
                self.accepted += a

    @property
    def calibration(self) -> float:
        """Accepted over expected so far, shrunk toward 1 by CAL_PRIOR tokens."""
        return (self.accepted + CAL_PRIOR) / (self.expected + CAL_PRIOR)

    def sized(self, drafts: list[Draft]) -> list[Draft]:
        """The batch's drafts cut to the goodput-best node count (module docstring); unchanged without costs."""
        if self.costs is None:
            return drafts
        self.expected, self.accepted = self.expected * CAL_DECAY, self.accepted * CAL_DECAY
        if not any(d.tokens for d in drafts):
            return drafts
        cal = self.calibration
        nodes = sorted(((-min(1.0, cal * p), r, i) for r, d in enumerate(drafts) for i, p in enumerate(d.path_probs())))
        B, gain, best, best_n = len(drafts), 0.0, len(drafts) / self.costs(1, len(drafts)), 0
        for n, (neg, _, _) in enumerate(nodes, start=1):
            gain -= neg
            g = (B + gain) / self.costs(1, B + n)  # expected tokens per second with the n best nodes
            if g > best:
                best, best_n = g, n
        keep = [0] * B
        for _, r, _ in nodes[:best_n]:
            keep[r] += 1
        return [d.first(n) for d, n in zip(drafts, keep)]

    def select_rows(self, rows: torch.Tensor) -> None:
        """The rows that stay; every other row finished, and its output joins the global structure."""
        keep = rows.tolist()
        kept = set(keep)
        for i, (occ, n) in enumerate(zip(self.rows, self.prompt_lens)):
            if i not in kept:
                self.corpus.add(occ.seqs[0][max(n - PROMPT_TAIL, 0):])
        self.rows = [self.rows[i] for i in keep]
        self.prompt_lens = [self.prompt_lens[i] for i in keep]

    # ---- drafting ----------------------------------------------------------------------------

    def _sync(self, contexts: list[list[int]]) -> None:
        """Tokens a row has that its structure lacks (none when every step committed): added."""
        for occ, ctx in zip(self.rows, contexts):
            have = len(occ.seqs[0])
            if len(ctx) > have:
                occ.extend(0, ctx[have:])

    def draft(self, ctx: list[int], own: Occurrences, k: int, width: int, nodes: int) -> Draft:
        """The row's draft: from its own structure or the global one, whichever tree scores higher."""
        best = Draft([], [], [], [])
        for source, occ in (("request", own), ("global", self.corpus.occ)):
            if not occ.tokens:
                continue
            L, ends = occ.match(ctx, self.max_match, self.max_found)
            depth = min(k, int(self.factor * L))
            if depth < 1:
                continue
            d = grow([occ.following(e, depth) for e in ends], depth, width, nodes, self.min_prob)
            if (d.score, L) > (best.score, best.match):  # a tie goes to the longer match
                best = dataclasses.replace(d, match=L, source=source)
        return best

    def propose(self, contexts, k: int, params, u) -> Proposal:
        """Chains: every row's most frequent path, up to k tokens (none without a match)."""
        self._sync(contexts)
        self.last = self.sized([self.draft(c, own, k, 1, k) if k else Draft([], [], [], [])
                                for c, own in zip(contexts, self.rows)])
        n = [len(d.tokens) for d in self.last]
        tokens = torch.tensor([d.tokens + [-1] * (k - len(d.tokens)) for d in self.last],
                              dtype=torch.long).view(len(n), k)  # [B, k]
        return Proposal(to_device(tokens, self.device), host_tensor(n, self.device), None, widest=max(n, default=0),
                        counts=n)

    def propose_tree(self, contexts, k: int, width: int, nodes: int, params) -> TokenTree:
        """Every row's tree: depth <= the rule's bound (<= k), <= width children per node, <= nodes nodes."""
        self._sync(contexts)
        self.last = self.sized([self.draft(c, own, k, width, nodes) for c, own in zip(contexts, self.rows)])
        tree = TokenTree.from_rows([list(zip(d.tokens, d.parents)) for d in self.last], self.device,
                                   probs=[d.probs for d in self.last], rank=[d.ranks for d in self.last])
        tree.origin = ["suffix"] * sum(len(d.tokens) for d in self.last)
        return tree

    # ---- the global structure's file (--suffix-corpus) ---------------------------------------------

    def load_corpus(self, path, tokenizer: str, vocab_size: int) -> None:
        self.corpus.load(path, tokenizer, vocab_size)

    def save_corpus(self, path, tokenizer: str):
        return self.corpus.save(path, tokenizer)
