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

A feature draft (FeatureDraft, EAGLE) grows the same trees: each frontier node is fed with its
parent's *predicted* feature (the root's for depth 1's children), which is the draft's
``_tree_feed``. Its ``commit_tree`` drops every fed tree slot, as its chain commit drops every slot
fed a predicted feature, and queues the emitted tokens with the verify's true features at the root
and the accepted path.
"""

from __future__ import annotations

import torch

from specviz.engine.transfer import to_device
from specviz.engine.tree import TokenTree



def _top(draft, logits: torch.Tensor, W: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., V_draft] logits -> (log-probabilities [..., W], tokens [..., W]) of the draft's top W
    (draft._q maps them to the target's V; logits already mapped, a chain step's, pass unchanged)."""
    shape = logits.shape[:-1]
    lp = torch.log_softmax(draft._q(logits.reshape(-1, logits.shape[-1])).float(), dim=-1)  # [M, V]
    vals, toks = lp.topk(W, dim=-1)
    return vals.reshape(*shape, W), toks.reshape(*shape, W)


def _best(score: torch.Tensor, n: int) -> torch.Tensor:
    """[B, M] scores -> [B, n] column ids of the n best per row, in column (creation) order.
    A stable sort: among equal scores the earlier candidate wins, so a child (score <= its parent's,
    made later) never displaces its parent."""
    return score.sort(dim=1, descending=True, stable=True).indices[:, :n].sort(dim=1).values


@torch.inference_mode()
def propose_tree(draft, k: int, W: int, N: int) -> TokenTree:
    """Grow every row's tree (see the module docstring) on a ModelDraft's cache.

    Every row makes the same candidates (W at depth 1, W * W per later depth), so the growth is
    rectangular: candidate tensors [B, C] in creation order, no per-row Python. Per candidate:
    token, parent candidate (-1 = the root), cumulative log-probability (score); depth and sibling
    rank are the same in every row."""
    dev = draft.device
    root = draft._tree_root()  # [B, V] the next-token logits after the pending tokens, or None
    if root is None:  # a row has nothing to draft from (FeatureDraft): no tree this step
        draft._tree_fed = 0
        return TokenTree.empty(len(draft.pending), dev)
    B = root.shape[0]
    vals, toks = _top(draft, root, W)  # [B, W]
    root_pos = draft.kv.lengths - 1  # [B]
    C, S = W + (k - 1) * W * W, W * (k - 1)  # candidates per row; fed tail slots per row
    tok = torch.zeros(B, C, dtype=torch.long, device=dev)  # [B, C]
    parent = torch.full((B, C), -1, dtype=torch.long, device=dev)  # [B, C] candidate id, -1 = the root
    score = torch.zeros(B, C, device=dev)  # [B, C] cumulative draft log-probability
    depth = torch.ones(C, dtype=torch.long, device=dev)  # [C]
    rank = torch.arange(W, device=dev).repeat(1 + (k - 1) * W)  # [C] a candidate's rank among its siblings
    tok[:, :W], score[:, :W] = toks, vals
    frontier = torch.arange(W, device=dev).expand(B, W)  # [B, W] candidate ids fed next, creation order
    sees = torch.zeros(B, W, S, dtype=torch.bool, device=dev)  # [B, W, S] a frontier node's ancestors' slots
    fed = torch.zeros(B, S, dtype=torch.long, device=dev)  # [B, S] the candidate in each fed slot
    own = torch.eye(W, dtype=torch.bool, device=dev)  # [W, W]
    first = W  # the first candidate id of the depth being made
    came_from = None  # [B, W] each frontier node's parent among the previous frontier (None: the root)
    for d in range(2, k + 1):
        s0 = (d - 2) * W  # the frontier's slots: [s0, s0 + W)
        fed[:, s0:s0 + W] = frontier
        sees[:, :, s0:s0 + W] |= own  # a node sees itself, and (inherited) its ancestors
        positions = (root_pos + d - 1).unsqueeze(1).expand(B, W)  # [B, W] root + the frontier's depth
        logits = draft._tree_feed(tok.gather(1, frontier), positions, sees[:, :, :s0 + W], came_from)  # [B, W, V]
        vals, toks = _top(draft, logits, W)  # [B, W (frontier), W (children)]
        child = (score.gather(1, frontier).unsqueeze(2) + vals).reshape(B, W * W)  # [B, W * W] j-major
        made = slice(first, first + W * W)
        tok[:, made], score[:, made] = toks.reshape(B, W * W), child
        parent[:, made] = frontier.repeat_interleave(W, dim=1)
        depth[made] = d
        if d < k:
            best = _best(child, W)  # [B, W] the next frontier, as indices into this depth's children
            sees = sees.gather(1, (best // W).unsqueeze(2).expand(B, W, S))  # children see what the parent saw
            frontier, came_from = first + best, best // W
        first += W * W
    return _keep(draft, tok, parent, score, depth, rank, fed, N)


def _keep(draft, tok, parent, score, depth, rank, fed, N: int) -> TokenTree:
    """The N best candidates per row (ancestors included, see _best) as a TokenTree."""
    B, C = tok.shape
    dev = tok.device
    kept = _best(score, min(N, C))  # [B, n] creation order: parents before children, siblings by rank
    n = kept.shape[1]
    local = torch.full((B, C), -1, dtype=torch.long, device=dev).scatter_(
        1, kept, torch.arange(n, device=dev).expand(B, n))  # [B, C] candidate -> kept node index
    kpar = parent.gather(1, kept)  # [B, n]
    has = kpar >= 0
    node_par = torch.where(has, local.gather(1, kpar.clamp(min=0)), -1)  # [B, n] row-local parent
    par_score = torch.where(has, score.gather(1, kpar.clamp(min=0)), 0.0)  # [B, n]
    probs = (score.gather(1, kept) - par_score).exp()  # [B, n] the node's probability given its parent
    match = fed.unsqueeze(1) == kept.unsqueeze(2)  # [B, n, S] kept node i was fed into tail slot s
    fed_slot = torch.where(match.any(2), match.long().argmax(2), -1) if fed.shape[1] else torch.full_like(kept, -1)
    draft._tree_fed = fed.shape[1]  # what commit_tree needs: the fed tail slots per row (each node's is fed_slot)
    return TokenTree(tok.gather(1, kept).flatten(), node_par.flatten(), depth[kept].flatten(),
                     torch.arange(B + 1, device=dev) * n, probs.flatten(), rank[kept].flatten(), fed_slot.flatten(),
                     host_sizes=[n] * B, origin=["model"] * (B * n))


def commit_tree(draft, paths: list[list[int]], emitted: list[list[int]], fed_slots: list[list[int]]) -> None:
    """Keep the accepted path's fed slots in the draft cache, holes elsewhere; queue what was not fed.
    fed_slots: per row, each node's tail slot (the tree's ``fed_slot``, -1 = never fed), on the host,
    so nothing here reads the device."""
    B, S = len(paths), draft._tree_fed
    kept_slots = [[fed_slots[b][i] for i in p if fed_slots[b][i] >= 0] for b, p in enumerate(paths)]
    if S:
        keep = torch.zeros(B, S, dtype=torch.bool)  # [B, W (k - 1)] fed slots on the accepted path, built on the host
        for b, slots in enumerate(kept_slots):
            keep[b, slots] = True
        h = draft.kv.host_lengths
        draft.kv.reject_tail(to_device(keep, draft.device), [max(s, default=-1) + 1 for s in kept_slots],
                             None if h is None else [x - S + len(s) for x, s in zip(h, kept_slots)])
    draft.kv.maybe_compact()
    # the fed nodes of a path are its first ones (a frontier node's parent was fed too): queue the rest
    draft.pending = [e[len(s):] for e, s in zip(emitted, kept_slots)]  # then the final token
    draft._tree_fed = None


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
    tree = TokenTree.from_rows(rows, device, rank=ranks)
    tree.origin = ["ngram"] * sum(len(r) for r in rows)
    return tree


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
