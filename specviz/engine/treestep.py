"""One decoder step with token trees (issue 16): draft a tree per row -> ONE verify -> tree walk -> advance.

The decoder (specviz.engine.decoder) calls ``tree_phases`` instead of its chain phases when it has
a ``TreeShape``. Per step, for the B active rows:
  draft   the proposer's ``propose_tree`` gives each row up to N nodes, depth <= k (specviz.engine.tree)
  verify  ONE batched target forward over [last token, node 0 .. node N_b - 1] per row, padded to
          T = 1 + max N_b slots: a node sees its row's valid prefix and its own ancestors
          (tree.ancestor_mask as the cache's tail mask), at position prefix length + depth
  accept  tree.accept_tree: the accepted path, then the recovered or bonus token (on CUDA the
          Triton walk kernels/tree_verify.py, same verdict: ``dec.accept_tree_fn``)
  advance the root and the accepted path's slots stay, every other node becomes a hole (the
          cache's hole/compaction scheme bounds memory); the proposer's ``commit_tree`` does the
          same in the draft's cache. The kept path's slots are in slot order by depth (parents
          come before children), so counting valid slots gives each the position it was verified at.
"""

from __future__ import annotations

import dataclasses

import torch

from specviz.engine import streams
from specviz.engine.kernels import get_accept_tree_fn
from specviz.engine.transfer import host_tensor
from specviz.engine.tree import TokenTree, ancestor_mask
from specviz.records import TreeNodes


@dataclasses.dataclass(frozen=True)
class TreeShape:
    width: int  # W: children expanded per frontier node, frontier nodes kept per depth
    nodes: int  # N: draft nodes kept per row (ancestors always kept)


def default_accept_tree_fn(device: torch.device):
    """The Triton tree walk on CUDA, the torch reference elsewhere (SPECVIZ_ACCEPT_IMPL overrides)."""
    return get_accept_tree_fn(None if device.type == "cuda" else "torch")


def verify_tree(kv, last: list[int], tree: TokenTree) -> torch.Tensor:
    """ONE target forward over every row's [last token, nodes] -> logits [B, 1 + N, V]."""
    dev = kv.device
    tokens, parents, depth, real = tree.padded()  # [B, N] each
    B = len(last)
    root = host_tensor(last, dev).unsqueeze(1)  # [B, 1]
    ids = torch.cat([root, tokens.to(dev)], dim=1)  # [B, 1 + N]
    valid = torch.cat([torch.ones(B, 1, dtype=torch.bool, device=dev), real.to(dev)], dim=1)  # [B, 1 + N]
    depth = torch.cat([torch.zeros(B, 1, dtype=torch.long, device=dev), depth.to(dev)], dim=1)  # [B, 1 + N]
    positions = kv.lengths.unsqueeze(1) + depth  # [B, 1 + N] prefix length + depth
    return kv.forward(ids, valid, positions=positions, tail_mask=ancestor_mask(parents.to(dev), real.to(dev)),
                      counts=[1 + n for n in tree.sizes()])


def read_step(tree: TokenTree, verdict) -> list[dict]:
    """The step's ONE copy to the host: per row the accepted count, the output, the accepted path,
    the tree's nodes for the trace (tree.row's fields) and, for the draft's commit, each node's
    fed slot (-1 when the tree has none). Everything goes as one float64 vector (exact for ids and
    counts below 2^53)."""
    B, sizes = tree.batch_size, tree.sizes()
    if B == 0:
        return []
    per_row = torch.cat([x.to(torch.float64) for x in (verdict.num_accepted.view(B, 1), verdict.emitted,
                                                        verdict.keep_slots)], dim=1)  # [B, 1 + E + (1 + N)]
    fields = tree.fields() + ([("fed_slot", tree.fed_slot)] if tree.fed_slot is not None else [])
    vec = torch.cat([per_row.flatten()] + [x.to(per_row.device, torch.float64) for _, x in fields]).tolist()
    E, T = verdict.emitted.shape[1], verdict.keep_slots.shape[1]
    head, nodes = vec[: B * (1 + E + T)], vec[B * (1 + E + T):]
    M = sum(sizes)
    cols = {name: nodes[j * M:(j + 1) * M] for j, (name, _) in enumerate(fields)}
    out, start = [], 0
    for b in range(B):
        r = head[b * (1 + E + T): (b + 1) * (1 + E + T)]
        a = int(r[0])
        row = {name: TokenTree.node_values(name, col[start:start + sizes[b]]) for name, col in cols.items()}
        keep = r[1 + E:]
        out.append({"num_accepted": a, "emitted": [int(v) for v in r[1:2 + a]],
                    "path": [i for i in range(T - 1) if keep[1 + i]],
                    "fed_slot": row.pop("fed_slot", [-1] * sizes[b]), "nodes": row})
        start += sizes[b]
    return out


def row_uniforms(rows, sizes: list[int], device) -> torch.Tensor:
    """[B, max N_b + 1]: row b's draws from its own stream at its step (node tests, then the final draw;
    draws past N_b + 1 are unused)."""
    return streams.row_uniforms(rows, max(sizes, default=0) + 1, device)


def tree_phases(dec, step: int, k: int, lap) -> tuple[int, list[dict], bool, list, tuple[int, int]]:
    """The decoder's four phases for a tree step, lap() after each; (verify width, rows, compacted, left,
    the (W, N) drafted with: 1, 0 for a regular step)."""
    active = list(dec.active)
    contexts = [r.context for r in active]
    if k:
        width, nodes = getattr(dec.controller, "shape", (dec.tree.width, dec.tree.nodes))  # a shape policy's pick
        tree = dec.proposer.propose_tree(contexts, k, width, nodes, dec.params)
    else:
        width, nodes, tree = 1, 0, TokenTree.empty(len(active), dec.device)
    sizes = tree.sizes()
    u = row_uniforms(active, sizes, dec.device)
    lap()
    before = dec.kv.host_lengths  # each row's cached tokens before the verify, when known on the host
    logits = verify_tree(dec.kv, [c[-1] for c in contexts], tree)
    dec.verify_hidden = dec.kv.hidden
    lap()
    verdict = dec.accept_tree_fn(logits, tree, u, dec.params)
    host = read_step(tree, verdict)
    num_accepted = [h["num_accepted"] for h in host]
    emitted = [h["emitted"] for h in host]
    paths = [h["path"] for h in host]
    lap()
    after = None if before is None else [x + 1 + a for x, a in zip(before, num_accepted)]
    dec.kv.reject_tail(verdict.keep_slots, [2 + p[-1] if p else 1 for p in paths], after)  # root, path, holes
    compacted = dec.kv.maybe_compact()
    feats = {"features": dec.verify_hidden} if dec.wants_features else {}  # a feature draft's true features
    if k:
        dec.proposer.commit_tree(paths, emitted, [h["fed_slot"] for h in host], **feats)
    else:
        dec.proposer.commit(num_accepted, emitted, **feats)
    trees = {r.index: TreeNodes.from_json({**h["nodes"], "path": h["path"]}) for h, r in zip(host, active)}
    if k and hasattr(dec.controller, "observe_trees"):  # treepolicy.TreeShapes: acceptance by depth x rank
        dec.controller.observe_trees(list(trees.values()))
    proposed = [list(t.token) for t in trees.values()]
    # a regular step (k = 0, e.g. the shape policy's pick) drafts no tree
    rows, left = dec._retire(step, num_accepted, emitted, proposed, trees if k else None)
    lap()
    return logits.shape[1], rows, compacted, left, (width, nodes)
