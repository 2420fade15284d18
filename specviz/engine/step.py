"""A decoder step's parts, for the decoder's one step body (specviz.engine.decoder).

Every step runs the same body: draft -> verify -> accept (with the step's one host read) ->
reject -> compact -> commit -> retire, over one kind of draft: every row's token tree
(specviz.engine.tree.TokenTree). A chain is the width-1 tree (``TokenTree.line``: node i's parent is
node i - 1); regular decoding is a chain step with k = 0. ``StepParts``: the four parts:

  draft(dec, k)                   each row's tree (a line from ``propose``, a tree from ``propose_tree``)
                                  and the draws the accept rule will use
  verify(dec, drafted)            ONE target forward over every row's [last token, nodes]: a node sees
                                  its row's prefix and its ancestors, at position prefix length + depth
  accept(dec, drafted, logits)    the tree walk's verdict (specviz.engine.tree.accept_tree), read to the
                                  host once: a StepVerdict
  commit(dec, drafted, verdict)   the proposer keeps what was accepted

Lines have a fast form of verify and accept, used unless the decoder is told to ``walk_lines``:
the mask-free forward (a line's ancestors are the slots before it, so the causal mask is the
ancestor mask) and the vectorised rule (sampling.accept_reference; the fused Triton kernel on CUDA),
which gives the walk's verdict draw for draw (tests/engine/test_step.py). The walk also takes the
draft's q for a line that was sampled from it, so the one rule covers chains and trees. On a CPU the
two forms cost the same (bench/line_forms.py); they stay for CUDA, where the line's accept is one
fused kernel that takes q (the tree kernel does not) and its verify is what the graphs capture. The
fast forms read the lines as drafted, so a line step makes its width-1 trees only when the walk reads them.

Per step, for trees: the root and the accepted path's slots stay, every other node becomes a hole
(the cache's hole/compaction scheme bounds memory); the proposer's ``commit_tree`` does the same in
the draft's cache. The kept path's slots are in slot order by depth (parents come before children),
so counting valid slots gives each the position it was verified at.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from specviz.engine import streams
from specviz.engine.kernels import get_accept_tree_fn
from specviz.engine.proposers import reach
from specviz.engine.sampling import accept_synthetic
from specviz.engine.transfer import host_tensor
from specviz.engine.tree import TokenTree, accept_tree, ancestor_mask
from specviz.records import TreeNodes


@dataclasses.dataclass(frozen=True)
class TreeShape:
    width: int  # W: children expanded per frontier node, frontier nodes kept per depth
    nodes: int  # N: draft nodes kept per row (ancestors always kept)


@dataclasses.dataclass
class StepVerdict:
    """What the decoder's body needs after accept, on the host (one read of the device per step)."""

    num_accepted: list[int]  # [B] accepted proposals per row
    emitted: list[list[int]]  # [B] the row's new tokens: its accepted proposals + a recovered or bonus token
    proposed: list[list[int]]  # [B] what the row drafted this step
    keep_slots: torch.Tensor  # [B, T] the verify slots that stay in the cache (the rest become holes)
    kept: list[int]  # [B] slots up to and including the last kept one
    trees: dict[int, TreeNodes] | None = None  # each row's token tree by request index (tree steps that drafted)


@dataclasses.dataclass
class Drafts:
    """What a step drafted: every row's token tree (``tree()``). A line step keeps its lines as drafted
    (``tokens``, ``num_drafted``), which the fast forms read; its width-1 trees are made only when read."""

    u: torch.Tensor  # [B, max N_b + 1] the accept rule's draws: node i's test at [b, i], the final at [b, N_b]
    shape: tuple  # the (W, N) drafted with: (1, 0) a tree step that drafted nothing, (None, None) a line step
    trees: TokenTree | None = None  # a tree step's trees (None: a line step)
    tokens: torch.Tensor | None = None  # [B, w] a line step's proposals (past a row's n_b: anything)
    num_drafted: torch.Tensor | None = None  # [B] a line step's n_b
    sizes: list[int] | None = None  # [B] a line step's n_b on the host, when known (no device read for its trees)
    probs: torch.Tensor | None = None  # [B, w, V] the q a line was sampled from, None for a chosen draft
    counts: list[int] | None = None  # [B] n_b on the host when ragged and known (the line's verify skips holes)
    width: int = 0  # verify slots per row (1 + max N_b), known after verify
    paths: list[list[int]] | None = None  # [B] the accepted nodes, known after accept
    fed_slots: list[list[int]] | None = None  # [B] each node's slot in the draft cache's fed tail (-1: none)

    @property
    def line(self) -> bool:
        """Every row drafted a line (``propose``): the fast forms apply, ``commit`` follows."""
        return self.tokens is not None

    def tree(self) -> TokenTree:
        """Every row's draft tree (a line step's: width-1 trees, made on first use)."""
        if self.trees is None:
            self.trees = TokenTree.line(self.tokens, self.num_drafted, self.sizes)
        return self.trees


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


def verify_line(kv, last: list[int], d: Drafts) -> torch.Tensor:
    """The mask-free form for lines: positions counted from the validity mask, the causal mask as the
    ancestor mask; with every n_b known on the host the forward skips the holes' work -> [B, w + 1, V]."""
    ids = torch.cat([host_tensor(last, kv.device).unsqueeze(1), d.tokens.clamp(min=0)], dim=1)  # [B, w + 1]
    T = ids.shape[1]
    slots = torch.arange(T, device=kv.device).unsqueeze(0)  # [1, w + 1]
    valid = slots < (d.num_drafted + 1).unsqueeze(1)  # [B, w + 1] proposals past n_b are holes
    flat = None if d.counts is None else [b * T + t for b, c in enumerate(d.counts) for t in range(c + 1)]
    return kv.forward(ids, valid, reuse_logits=True, slots=flat)  # [B, w + 1, V], dead by the next verify


def read_step(tree: TokenTree, verdict) -> list[dict]:
    """The tree walk's ONE copy to the host: per row the accepted count, the output, the accepted path,
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


class StepParts:
    """The step's parts for one run: every row drafts a tree of ``shape`` (None: a line of up to k).
    With ``synthetic`` (an alpha in [0, 1]; lines only) accept is the synthetic rule
    (sampling.accept_synthetic: each drafted position accepted with probability alpha from the row's
    own draws) instead of the exact rule: the same step, not the target's text. ``walk_lines`` sends
    lines through the tree's verify and walk instead of their fast forms."""

    def __init__(self, shape: TreeShape | None = None, synthetic: float | None = None, walk_lines: bool = False):
        if synthetic is not None and shape is not None:
            raise ValueError("synthetic acceptance draws one decision per position of a chain: token trees have none")
        self.shape, self.synthetic, self.walk_lines = shape, synthetic, walk_lines

    # ---- draft -------------------------------------------------------------------------------
    def draft(self, dec, k: int) -> Drafts:
        if self.shape is not None and dec.proposer is not None:
            return self._draft_tree(dec, k)
        return self._draft_line(dec, k)

    def _draft_line(self, dec, k: int) -> Drafts:
        W = reach(dec.proposer, k)  # a draft may propose past k (the hybrid's suffix side)
        u = streams.row_uniforms(dec.active, k + W + 1, dec.device)  # [B, k + W + 1] per-row streams
        u_draft, u_verify = u[:, :k], u[:, k:]  # [B, k] the draft's, [B, W + 1] the verify's
        B = len(dec.active)
        if k == 0:
            empty = torch.empty(B, 0, dtype=torch.long, device=dec.device)  # [B, 0]
            none = torch.zeros(B, dtype=torch.long, device=dec.device)  # [B]
            return Drafts(u_verify, (None, None), tokens=empty, num_drafted=none, sizes=[0] * B)
        prop = dec.proposer.propose([r.context for r in dec.active], k, dec.params, u_draft)
        drafts, n, q = prop.tokens, prop.num_drafted, prop.probs
        w = int(n.max()) if prop.widest is None else prop.widest  # slots past the widest proposal: holes in every row
        if w < W:
            drafts, q, u_verify = drafts[:, :w], (q[:, :w] if q is not None else None), u_verify[:, : w + 1]
        # a proposer names every n_b on the host (counts), or says every row drafted its widest (widest)
        sizes = prop.counts if prop.counts is not None else ([w] * B if prop.widest is not None else None)
        return Drafts(u_verify, (None, None), tokens=drafts, num_drafted=n, sizes=sizes, probs=q, counts=prop.counts)

    def _draft_tree(self, dec, k: int) -> Drafts:
        contexts = [r.context for r in dec.active]
        if k:
            width, nodes = getattr(dec.policy, "shape", (self.shape.width, self.shape.nodes))  # a shape policy's pick
            tree = dec.proposer.propose_tree(contexts, k, width, nodes, dec.params)
        else:  # a regular step (k = 0, e.g. the shape policy's pick) drafts no tree
            width, nodes, tree = 1, 0, TokenTree.empty(len(contexts), dec.device)
        u = streams.row_uniforms(dec.active, max(tree.sizes(), default=0) + 1, dec.device)  # [B, max N_b + 1]
        return Drafts(u, (width, nodes), trees=tree)

    # ---- verify ------------------------------------------------------------------------------
    def verify(self, dec, d: Drafts) -> torch.Tensor:
        last = [r.last for r in dec.active]
        if d.line and not self.walk_lines:
            logits = verify_line(dec.kv, last, d)  # [B, w + 1, V]
        else:
            logits = verify_tree(dec.kv, last, d.tree())  # [B, 1 + N, V]
        d.width = logits.shape[1]
        return logits

    # ---- accept ------------------------------------------------------------------------------
    def accept(self, dec, d: Drafts, logits: torch.Tensor) -> StepVerdict:
        if d.line and (self.synthetic is not None or not self.walk_lines):
            return self._accept_line(dec, d, logits)
        if d.line:  # the walk over width-1 trees, with the q the line was sampled from
            verdict = accept_tree(logits, d.tree(), d.u, dec.params, d.probs)
        else:
            verdict = dec.accept_tree_fn(logits, d.tree(), d.u, dec.params)
        host = read_step(d.tree(), verdict)
        d.paths, d.fed_slots = [h["path"] for h in host], [h["fed_slot"] for h in host]
        trees = {r.index: TreeNodes.from_json({**h["nodes"], "path": h["path"]}) for h, r in zip(host, dec.active)}
        drafted = not d.line and d.shape != (1, 0)
        if drafted and hasattr(dec.policy, "observe_trees"):  # treepolicy.TreeShapes: acceptance by depth x rank
            dec.policy.observe_trees(list(trees.values()))
        # the root, the accepted path's slots (parents before children) stay; every other node is a hole
        return StepVerdict([h["num_accepted"] for h in host], [h["emitted"] for h in host],
                           [list(t.token) for t in trees.values()], verdict.keep_slots,
                           [2 + p[-1] if p else 1 for p in d.paths], trees if drafted else None)

    def _accept_line(self, dec, d: Drafts, logits: torch.Tensor) -> StepVerdict:
        """The vectorised rule over lines (the walk's verdict on width-1 trees, in one pass)."""
        rule = dec.accept_fn if self.synthetic is None else functools.partial(accept_synthetic, self.synthetic)
        verdict = rule(logits, d.tokens, d.num_drafted, d.u, dec.params, d.probs)
        w = d.width - 1
        # the step's one copy to the host: per row [accepted, drafted, output (w + 1), proposals (w)]
        host = torch.cat([verdict.num_accepted.long().unsqueeze(1), d.num_drafted.long().unsqueeze(1),
                          verdict.emitted.long(), d.tokens.long()], dim=1).tolist()  # [B, 2w + 3]
        num_accepted = [h[0] for h in host]
        # slot 0 (the last token) + accepted drafts stay: a prefix of 1 + a per row
        keep = torch.arange(d.width, device=dec.device).unsqueeze(0) <= verdict.num_accepted.unsqueeze(1)  # [B, w + 1]
        return StepVerdict(num_accepted, [h[2:3 + h[0]] for h in host], [h[3 + w:3 + w + h[1]] for h in host], keep,
                           [1 + a for a in num_accepted])

    # ---- commit ------------------------------------------------------------------------------
    def commit(self, dec, d: Drafts, v: StepVerdict) -> None:
        if dec.proposer is None:
            return
        features = dec.draft_features(dec.verify_hidden)  # a feature draft's true features
        if v.trees is not None:
            dec.proposer.commit_tree(d.paths, v.emitted, d.fed_slots, features=features)
        else:
            dec.proposer.commit(v.num_accepted, v.emitted, features=features)
