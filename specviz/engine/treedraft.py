"""Tree drafting for model drafts, EAGLE-2 style (Li et al. 2024, arXiv 2406.16858; issue 16).

Per step and row, with depth k, width W and N nodes kept:
  forward 1   the draft feeds its pending tokens (as a chain step does); the root's top-W tokens are
              the depth-1 candidates, each scored by its cumulative draft log-probability
  forward d   (d = 2..k) the draft feeds the W best candidates of depth d - 1 (the frontier) in one
              forward, each seeing only its own ancestors among this step's tree slots (the cache's
              tail mask) at position root + depth; each frontier node's top-W children become
              depth-d candidates, and the W best of those by cumulative score are the next frontier
  keep        the N best candidates of all depths by score (ties: the earlier candidate). A child's
              score is its parent's plus a log-probability <= 0 and it was made after its parent,
              so the kept set always holds every kept node's ancestors.
So drafting costs k forwards of <= W tokens per row, not N. Siblings are the draft's top-W in rank
order, deterministic given the context, which is what the tree rule's exactness asks for
(specviz.engine.tree), under greedy and sampling alike.

Draft cache: the tree's fed slots are the cache's last W (k - 1) slots; ``commit_tree`` keeps
those on the accepted path and makes the rest holes, and queues the emitted tokens the draft has
not fed (the ModelDraft invariant: the cache holds the context except ``pending``).
"""

from __future__ import annotations

import dataclasses

import torch

from specviz.engine.tree import TokenTree


@dataclasses.dataclass
class Grown:
    """What commit_tree needs from propose_tree."""

    node_cand: list[list[int]]  # per row, each kept node's candidate id
    fed_cand: list[list[int]]  # per row, the candidate id in each fed tail slot, in slot order


def _top(draft, logits: torch.Tensor, W: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., V_draft] logits -> (log-probabilities [..., W], tokens [..., W]) of the draft's top W."""
    shape = logits.shape[:-1]
    lp = torch.log_softmax(draft._q(logits.reshape(-1, logits.shape[-1])).float(), dim=-1)  # [M, V]
    vals, toks = lp.topk(W, dim=-1)
    return vals.reshape(*shape, W), toks.reshape(*shape, W)


@torch.inference_mode()
def propose_tree(draft, k: int, W: int, N: int) -> TokenTree:
    """Grow every row's tree (see the module docstring) on a ModelDraft's cache."""
    if getattr(draft, "wants_features", False):
        raise ValueError("token trees need a token model draft (or n-grams); a feature draft drafts chains")
    B = len(draft.pending)
    dev = draft.device
    ids, valid = draft._first_input()
    vals, toks = _top(draft, draft.kv.forward(ids, valid, last_only=True)[:, -1], W)  # [B, W]
    root_pos = draft.kv.lengths - 1  # [B]
    # candidates per row, in creation order: token, parent candidate (-1 = root), score, depth, rank, prob
    cands = [[(int(toks[b, j]), -1, float(vals[b, j]), 1, j) for j in range(W)] for b in range(B)]
    frontier = [list(range(W)) for _ in range(B)]  # candidate ids fed next
    fed: list[list[int]] = [[] for _ in range(B)]
    for d in range(2, k + 1):
        inp = torch.tensor([[cands[b][c][0] for c in frontier[b]] for b in range(B)], device=dev)  # [B, W]
        fed_now = [f + fr for f, fr in zip(fed, frontier)]
        S = len(fed_now[0])
        tail = torch.zeros(B, W, S, dtype=torch.bool, device=dev)  # [B, W, S] a frontier node's ancestors
        for b in range(B):
            slot_of = {c: s for s, c in enumerate(fed_now[b])}
            for j, c in enumerate(frontier[b]):
                while c >= 0:  # itself, then its ancestors (all fed at earlier depths)
                    tail[b, j, slot_of[c]] = True
                    c = cands[b][c][1]
        positions = (root_pos + d - 1).unsqueeze(1).expand(B, W)  # [B, W] root + the frontier's depth
        logits = draft.kv.forward(inp, torch.ones(B, W, dtype=torch.bool, device=dev), positions=positions,
                                  tail_mask=tail)  # [B, W, V]
        vals, toks = _top(draft, logits, W)  # [B, W (frontier), W (children)]
        vals, toks = vals.tolist(), toks.tolist()
        fed = fed_now
        for b in range(B):
            first = len(cands[b])
            for j, c in enumerate(frontier[b]):
                base = cands[b][c][2]
                cands[b] += [(toks[b][j][r], c, base + vals[b][j][r], d, r) for r in range(W)]
            made = range(first, len(cands[b]))
            frontier[b] = sorted(sorted(made, key=lambda c: -cands[b][c][2])[:W])  # stable: ties keep creation order
    return _keep(draft, cands, fed, N, dev)


def _keep(draft, cands, fed, N: int, dev) -> TokenTree:
    rows, probs, ranks, node_cand = [], [], [], []
    for row in cands:
        best = sorted(range(len(row)), key=lambda c: -row[c][2])[:N]  # stable sort: ties keep creation order
        kept = sorted(best)  # creation order: parents before children, siblings in rank order
        local = {c: i for i, c in enumerate(kept)}
        rows.append([(row[c][0], local[row[c][1]] if row[c][1] >= 0 else -1) for c in kept])
        probs.append([float(torch.tensor(row[c][2] - (row[row[c][1]][2] if row[c][1] >= 0 else 0.0)).exp())
                      for c in kept])  # the node's probability given its parent
        ranks.append([row[c][4] for c in kept])
        node_cand.append(kept)
    draft._grown = Grown(node_cand, fed)
    return TokenTree.from_rows(rows, dev, probs=probs, rank=ranks)


def commit_tree(draft, paths: list[list[int]], emitted: list[list[int]]) -> None:
    """Keep the accepted path's fed slots in the draft cache, holes elsewhere; queue what was not fed."""
    grown: Grown = draft._grown
    pending = []
    if grown.fed_cand and grown.fed_cand[0]:
        keep = torch.zeros(len(paths), len(grown.fed_cand[0]), dtype=torch.bool)  # [B, W (k - 1)]
        for b, path in enumerate(paths):
            on_path = {grown.node_cand[b][i] for i in path}
            for s, c in enumerate(grown.fed_cand[b]):
                keep[b, s] = c in on_path
        draft.kv.reject_tail(keep.to(draft.device))
        n_fed = keep.sum(1).tolist()
    else:
        n_fed = [0] * len(paths)
    draft.kv.maybe_compact()
    for e, f in zip(emitted, n_fed):
        pending.append(e[f:])  # the accepted nodes the draft never fed, then the final token
    draft.pending = pending
    draft._grown = None


# ---- n-gram trees ------------------------------------------------------------------------------

def ngram_tree(contexts: list[list[int]], k: int, W: int, N: int, max_ngram: int, device="cpu",
               max_matches: int = 16) -> TokenTree:
    """Prompt lookup from several matches: the continuations after earlier occurrences of the row's
    last n tokens (n = max_ngram..1, latest match first, up to ``max_matches``) merged into a trie of
    depth <= k, at most W children per node and N nodes. Siblings are in match order (longer n
    first), deterministic given the context, as the tree rule asks."""
    rows, ranks = [], []
    for ctx in contexts:
        nodes: list[tuple[int, int]] = []
        rank: list[int] = []
        child: dict[tuple[int, int], int] = {}  # (parent, token) -> node
        n_kids: dict[int, int] = {}
        for cont in _continuations(ctx, k, max_ngram, max_matches):
            parent = -1
            for t in cont:
                if (parent, t) in child:
                    parent = child[(parent, t)]
                    continue
                if len(nodes) >= N or n_kids.get(parent, 0) >= W:
                    break
                child[(parent, t)] = len(nodes)
                rank.append(n_kids.get(parent, 0))
                n_kids[parent] = n_kids.get(parent, 0) + 1
                nodes.append((t, parent))
                parent = len(nodes) - 1
            if len(nodes) >= N:
                break
        rows.append(nodes)
        ranks.append(rank)
    return TokenTree.from_rows(rows, device, rank=ranks)


def _continuations(ctx: list[int], k: int, max_ngram: int, max_matches: int):
    L, found = len(ctx), 0
    for n in range(min(max_ngram, L - 1), 0, -1):
        tail = ctx[L - n:]
        for s in range(L - n - 1, -1, -1):  # latest match first, excluding the tail itself
            if ctx[s:s + n] == tail and s + n < L:
                yield ctx[s + n:s + n + k]
                found += 1
                if found >= max_matches:
                    return
