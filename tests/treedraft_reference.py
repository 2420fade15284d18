"""The per-row Python tree growth that specviz.engine.treedraft replaced with batched tensor ops: the
reference the vectorised growth is checked against (tests/engine/test_treedraft.py). Same rule: top-W
children of the W best frontier nodes per depth by cumulative draft log-probability, then the N best
of all candidates, ties to the earlier candidate."""

import torch

from specviz.engine.tree import TokenTree
from specviz.engine.treedraft import _top


@torch.inference_mode()
def reference_tree(draft, k: int, W: int, N: int) -> TokenTree:
    """Grow every row's tree with per-row lists; the draft cache advances as in propose_tree."""
    B = len(draft.pending)
    dev = draft.device
    ids, valid = draft._first_input()
    vals, toks = _top(draft, draft.kv.forward(ids, valid, last_only=True)[:, -1], W)  # [B, W]
    root_pos = draft.kv.lengths - 1  # [B]
    # candidates per row, in creation order: (token, parent candidate (-1 = root), score, depth, rank)
    cands = [[(int(toks[b, j]), -1, float(vals[b, j]), 1, j) for j in range(W)] for b in range(B)]
    frontier = [list(range(W)) for _ in range(B)]
    fed: list[list[int]] = [[] for _ in range(B)]
    for d in range(2, k + 1):
        inp = torch.tensor([[cands[b][c][0] for c in frontier[b]] for b in range(B)], device=dev)  # [B, W]
        fed = [f + fr for f, fr in zip(fed, frontier)]
        tail = torch.zeros(B, W, len(fed[0]), dtype=torch.bool, device=dev)  # [B, W, S]
        for b in range(B):
            slot_of = {c: s for s, c in enumerate(fed[b])}
            for j, c in enumerate(frontier[b]):
                while c >= 0:
                    tail[b, j, slot_of[c]] = True
                    c = cands[b][c][1]
        positions = (root_pos + d - 1).unsqueeze(1).expand(B, W)  # [B, W]
        logits = draft.kv.forward(inp, torch.ones(B, W, dtype=torch.bool, device=dev), positions=positions,
                                  tail_mask=tail)  # [B, W, V]
        vals, toks = _top(draft, logits, W)  # [B, W, W]
        for b in range(B):
            first = len(cands[b])
            for j, c in enumerate(frontier[b]):
                cands[b] += [(int(toks[b, j, r]), c, cands[b][c][2] + float(vals[b, j, r]), d, r) for r in range(W)]
            made = range(first, len(cands[b]))
            frontier[b] = sorted(sorted(made, key=lambda c: -cands[b][c][2])[:W])
    rows, probs, ranks = [], [], []
    for row in cands:
        kept = sorted(sorted(range(len(row)), key=lambda c: -row[c][2])[:N])
        local = {c: i for i, c in enumerate(kept)}
        rows.append([(row[c][0], local[row[c][1]] if row[c][1] >= 0 else -1) for c in kept])
        probs.append([float(torch.tensor(row[c][2] - (row[row[c][1]][2] if row[c][1] >= 0 else 0.0)).exp())
                      for c in kept])
        ranks.append([row[c][4] for c in kept])
    return TokenTree.from_rows(rows, dev, probs=probs, rank=ranks)
