"""One decoder step with token trees (issue 16): draft a tree per row -> ONE verify -> tree walk -> advance.

The decoder (specviz.engine.decoder) runs its one step body with a ``TreeStep`` instead of a
``chainstep.ChainStep`` when it has a ``TreeShape``. Per step, for the B active rows:
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
from specviz.engine.chainstep import StepVerdict
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
        if tree.origin is not None:  # who proposed each node, already on the host
            row["origin"] = tree.origin[start:start + sizes[b]]
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


@dataclasses.dataclass
class TreeDrafts:
    tree: TokenTree
    u: torch.Tensor  # [B, max N_b + 1] the accept rule's draws
    shape: tuple[int, int]  # the (W, N) drafted with: (1, 0) for a regular step
    contexts: list[list[int]]
    width: int = 0  # verify slots per row (1 + max N_b), known after verify
    paths: list[list[int]] | None = None  # [B] the accepted nodes, known after accept
    fed_slots: list[list[int]] | None = None  # [B] each node's slot in the draft cache's fed tail (-1: none)


class TreeStep:
    """Rows draft a token tree each (the decoder's step body calls these; see specviz.engine.chainstep)."""

    def __init__(self, shape: TreeShape):
        self.shape = shape

    def draft(self, dec, k: int) -> TreeDrafts:
        contexts = [r.context for r in dec.active]
        if k:
            width, nodes = getattr(dec.policy, "shape", (self.shape.width, self.shape.nodes))  # a shape policy's pick
            tree = dec.proposer.propose_tree(contexts, k, width, nodes, dec.params)
        else:  # a regular step (k = 0, e.g. the shape policy's pick) drafts no tree
            width, nodes, tree = 1, 0, TokenTree.empty(len(contexts), dec.device)
        return TreeDrafts(tree, row_uniforms(dec.active, tree.sizes(), dec.device), (width, nodes), contexts)

    def verify(self, dec, d: TreeDrafts) -> torch.Tensor:
        logits = verify_tree(dec.kv, [c[-1] for c in d.contexts], d.tree)  # [B, 1 + N, V]
        d.width = logits.shape[1]
        return logits

    def accept(self, dec, d: TreeDrafts, logits: torch.Tensor) -> StepVerdict:
        verdict = dec.accept_tree_fn(logits, d.tree, d.u, dec.params)
        host = read_step(d.tree, verdict)
        d.paths, d.fed_slots = [h["path"] for h in host], [h["fed_slot"] for h in host]
        trees = {r.index: TreeNodes.from_json({**h["nodes"], "path": h["path"]}) for h, r in zip(host, dec.active)}
        drafted = d.shape != (1, 0)
        if drafted and hasattr(dec.policy, "observe_trees"):  # treepolicy.TreeShapes: acceptance by depth x rank
            dec.policy.observe_trees(list(trees.values()))
        # the root, the accepted path's slots (parents before children) stay; every other node is a hole
        return StepVerdict([h["num_accepted"] for h in host], [h["emitted"] for h in host],
                           [list(t.token) for t in trees.values()], verdict.keep_slots,
                           [2 + p[-1] if p else 1 for p in d.paths], trees if drafted else None)

    def commit(self, dec, d: TreeDrafts, v: StepVerdict) -> None:
        features = dec.draft_features(dec.verify_hidden)  # a feature draft's true features
        if v.trees is not None:
            dec.proposer.commit_tree(d.paths, v.emitted, d.fed_slots, features=features)
        else:
            dec.proposer.commit(v.num_accepted, v.emitted, features=features)
