"""Token trees: the flattened ragged layout and the exact acceptance walk (torch reference).

Layout (vLLM-style flat + cumulative offsets): row b's draft nodes are
``tokens[cu_nodes[b]:cu_nodes[b+1]]``; ``parents`` holds each node's parent as a row-local node
index, -1 for a child of the row's last token (the "root", which is not a node). Within a row a
parent comes before its children and siblings are in draft order (the draft's best guess
first), so one pass over node indices visits every node after its parent and every sibling in
order. ``depth`` is 1 for the root's children.

Verify slots: the target sees row b as ``[last token, node 0, .., node N_b - 1]`` padded to
T = 1 + max N_b; slot 0 is the root and slot 1 + i is node i. A slot sees the row's valid prefix
and its own ancestors (``ancestor_mask``), at position prefix length + depth.

The exact rule (SpecInfer arXiv 2305.09781; deterministic siblings, as in SPECDEC.md). At the
current node with children c_1..c_m in draft order, starting from r = p (the target's processed
distribution at that node):
  accept c_j with probability r(c_j) / sum(r); otherwise set r(c_j) = 0 and try c_{j+1};
  if every child is rejected, the **recovered** token is sampled from r;
  an accepted child becomes the current node (r = p at it); a current node with no children
  (a full accepted path) gives the **bonus** token from p.
P(output = c_j) = p(c_j) for each child and the recovered token takes the rest, so the output is
distributed as p. A child *drawn* from the draft's q (``draft_probs``: a sampled chain, or siblings
drawn independently from one q) is accepted with probability min(1, r(c_j) / (sum(r) q(c_j))) and a
rejection leaves r = max(0, r / sum(r) - q); a chosen child is the point mass q = 1 at c_j, where
this is the rule above. A chain is the width-1 tree: node i's parent is node i - 1, and the walk
then gives what the chain rule (sampling.accept_reference) gives, draw for draw.
Greedy (temperature 0): follow the child equal to argmax p; the first miss emits the argmax as the
recovered token; a full path emits the argmax as the bonus.

Uniforms are per row: ``uniforms[b, i]`` decides node i (each node is tested at most once) and
``uniforms[b, N_b]`` samples the final token, so a row's draws do not depend on other rows.
"""

from __future__ import annotations

import dataclasses

import torch

from specviz.engine.sampling import SamplingParams, argmax_last, process_logits, sample_inverse_cdf
from specviz.engine.transfer import host_tensor, to_device


@dataclasses.dataclass
class TokenTree:
    """Every row's draft tree, flattened."""

    tokens: torch.Tensor  # [num_nodes] draft ids
    parents: torch.Tensor  # [num_nodes] row-local parent node index, -1 = the row's last token
    depth: torch.Tensor  # [num_nodes] 1 for children of the last token
    cu_nodes: torch.Tensor  # [B + 1] row b's nodes are [cu_nodes[b], cu_nodes[b + 1])
    probs: torch.Tensor | None = None  # [num_nodes] the draft's probability of the node given its parent
    rank: torch.Tensor | None = None  # [num_nodes] sibling rank in the draft's order (0 = its top guess)
    fed_slot: torch.Tensor | None = None  # [num_nodes] the node's slot among the draft cache's fed tail, -1 = not fed
    host_sizes: list[int] | None = None  # [B] nodes per row, when the drafter knows them on the host
    origin: list[str] | None = None  # [num_nodes] on the host: the draft that proposed the node ("model",
    # "suffix", "ngram"; "both" where a merged tree's model and suffix drafts proposed it), None when unknown
    _padded: tuple | None = dataclasses.field(default=None, repr=False, compare=False)

    @staticmethod
    def empty(B: int, device) -> "TokenTree":
        """B rows without nodes (a step that drafts no tree)."""
        z = torch.zeros(0, dtype=torch.long, device=device)
        return TokenTree(z, z, z, torch.zeros(B + 1, dtype=torch.long, device=device), host_sizes=[0] * B)

    @property
    def batch_size(self) -> int:
        return self.cu_nodes.numel() - 1

    def sizes(self) -> list[int]:
        """[B] nodes per row (read from the device only when the drafter did not say)."""
        if self.host_sizes is None:
            self.host_sizes = (self.cu_nodes[1:] - self.cu_nodes[:-1]).tolist()
        return list(self.host_sizes)

    def fields(self) -> list[tuple[str, torch.Tensor]]:
        """The per-node tensors of a row's record, in order: token, parent, depth (and prob, rank when known)."""
        known = [("prob", self.probs), ("rank", self.rank)]
        return [("token", self.tokens), ("parent", self.parents), ("depth", self.depth)] + [
            (name, x) for name, x in known if x is not None]

    @staticmethod
    def node_values(name: str, values: list) -> list:
        """A field's values on the host as a row's record keeps them: probabilities to 6 decimals, the rest ints."""
        return [round(float(v), 6) for v in values] if name == "prob" else [int(v) for v in values]

    def row(self, b: int) -> dict[str, list]:
        """Row b's nodes as lists, one per field (step.read_step makes every row's in one copy)."""
        s, e = int(self.cu_nodes[b]), int(self.cu_nodes[b + 1])
        return {name: self.node_values(name, x[s:e].tolist()) for name, x in self.fields()}

    @staticmethod
    def from_rows(rows: list[list[tuple[int, int]]], device="cpu", probs: list[list[float]] | None = None,
                  rank: list[list[int]] | None = None) -> "TokenTree":
        """Build from per-row lists of (token, parent) nodes, e.g. [[(5, -1), (7, 0), (9, -1)]]."""
        tokens, parents, depth, cu = [], [], [], [0]
        for nodes in rows:
            d: list[int] = []
            for i, (t, p) in enumerate(nodes):
                if not -1 <= p < i:
                    raise ValueError(f"node {i}: parent {p} must be -1 or an earlier node")
                tokens.append(int(t))
                parents.append(int(p))
                d.append(1 if p < 0 else d[p] + 1)
            depth += d
            cu.append(cu[-1] + len(nodes))
        as_long = lambda x: host_tensor(x, device)  # noqa: E731  (a non-blocking copy on CUDA)
        flat = lambda x: to_device(torch.tensor([v for r in x for v in r]), device) if x is not None else None  # noqa: E731
        return TokenTree(as_long(tokens), as_long(parents), as_long(depth), as_long(cu),
                         flat(probs), flat(rank).long() if rank is not None else None,
                         host_sizes=[len(nodes) for nodes in rows])

    @staticmethod
    def line(tokens: torch.Tensor, num_drafted: torch.Tensor, sizes: list[int] | None = None) -> "TokenTree":
        """Width-1 trees from a line of proposals per row (a chain): node i's parent is node i - 1.
        tokens [B, w] (past a row's n_b: anything), num_drafted [B] n_b; ``sizes`` every n_b on the host
        when known (then nothing is read from the device; else the flat layout is a masked select)."""
        B, w = tokens.shape
        dev = tokens.device
        col = torch.arange(w, device=dev).expand(B, w)  # [B, w]
        real = col < num_drafted.unsqueeze(1)  # [B, w]
        padded = (tokens.clamp(min=0).masked_fill(~real, 0), (col - 1).masked_fill(~real, -2),  # [B, w] each
                  (col + 1).masked_fill(~real, 0), real)
        if sizes is not None:
            at = host_tensor([b * w + i for b, n in enumerate(sizes) for i in range(n)], dev)  # [num_nodes]
            flat = [x.reshape(-1)[at] for x in padded[:3]]
        else:
            flat = [x[real] for x in padded[:3]]
        cu = torch.cat([torch.zeros(1, dtype=torch.long, device=dev), num_drafted.long().cumsum(0)])  # [B + 1]
        return TokenTree(*flat, cu, host_sizes=None if sizes is None else list(sizes), _padded=padded)

    def padded(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-row padded views over N = max N_b node columns (made once per tree):
        (tokens [B, N] (0 at padding), parents [B, N] (-2 at padding), depth [B, N], real [B, N] bool)."""
        if self._padded is None:
            self._padded = self._pad()
        return self._padded

    def _pad(self):
        B, sizes = self.batch_size, self.sizes()
        N = max(sizes, default=0)
        dev = self.tokens.device
        col = torch.arange(N, device=dev).unsqueeze(0)  # [1, N]
        n_b = host_tensor(sizes, dev)  # [B]
        real = col < n_b.unsqueeze(1)  # [B, N]
        row_of = torch.repeat_interleave(torch.arange(B, device=dev), n_b, output_size=sum(sizes))  # [num_nodes]
        col_of = torch.arange(self.tokens.numel(), device=dev) - self.cu_nodes[row_of]  # [num_nodes]
        tokens = torch.zeros(B, N, dtype=torch.long, device=dev)
        parents = torch.full((B, N), -2, dtype=torch.long, device=dev)
        depth = torch.zeros(B, N, dtype=torch.long, device=dev)
        tokens[row_of, col_of] = self.tokens
        parents[row_of, col_of] = self.parents
        depth[row_of, col_of] = self.depth
        return tokens, parents, depth, real


def ancestor_mask(parents: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """[B, N] padded parents -> [B, 1 + N, 1 + N] bool over verify slots: slot i sees slot j iff j is
    i itself or one of its ancestors (slot 0, the root, is everyone's). A padding slot sees itself only."""
    B, N = parents.shape
    dev = parents.device
    T = N + 1
    # parent slot of each slot: root -> itself, node i -> parent + 1, padding -> itself
    own = torch.arange(T, device=dev).expand(B, T)
    par = torch.cat([torch.zeros(B, 1, dtype=torch.long, device=dev), torch.where(real, parents + 1, own[:, 1:])], 1)
    seen = torch.eye(T, dtype=torch.bool, device=dev).expand(B, T, T).clone()  # [B, T, T]
    cur = par.clone()
    rows = torch.arange(B, device=dev).unsqueeze(1).expand(B, T)
    for _ in range(N):  # depth <= N: after N hops every chain has reached the root
        seen[rows, own, cur] = True
        cur = par.gather(1, cur)
    seen[:, 1:, 0] = real  # every real node sees the root; padding does not
    return seen


# ---- the acceptance walk --------------------------------------------------------------------

@dataclasses.dataclass
class TreeVerdict:
    num_accepted: torch.Tensor  # [B] accepted nodes per row (the accepted path's length)
    emitted: torch.Tensor  # [B, >= D + 1] accepted tokens then the recovered/bonus token, -1 after
    keep_slots: torch.Tensor  # [B, 1 + N] verify slots that stay: the root and the accepted path

    @property
    def path(self) -> list[list[int]]:
        """Per row, the accepted nodes' row-local indices, root to leaf."""
        return [row.nonzero().flatten().tolist() for row in self.keep_slots[:, 1:]]


def accept_tree(
    target_logits: torch.Tensor,  # [B, 1 + N, V] target logits at every verify slot (slot 0 = root)
    tree: TokenTree,
    uniforms: torch.Tensor,  # [B, N + 1] in [0, 1): node i's test at [b, i], the final draw at [b, N_b]
    params: SamplingParams,
    draft_probs: torch.Tensor | None = None,  # [B, N, V] the q node i was sampled from; None: chosen (point mass)
    *,
    renormalise: bool = True,  # False only for the distribution test's deliberately wrong rule
) -> TreeVerdict:
    B, T, V = target_logits.shape
    dev = target_logits.device
    tokens, parents, _, real = tree.padded()  # [B, N] each
    N = tokens.shape[1]
    assert T == N + 1, f"logits have {T} slots for trees of up to {N} nodes"
    rows = torch.arange(B, device=dev)
    cur = torch.zeros(B, dtype=torch.long, device=dev)  # current verify slot (0 = root)
    if params.greedy:
        best = argmax_last(target_logits)  # [B, 1 + N] (same indices as torch.argmax, faster on the CPU)
    else:
        p = process_logits(target_logits, params)  # [B, 1 + N, V]
        r = p[:, 0].clone()  # [B, V] the residual at the current node
    accepted = torch.zeros(B, N, dtype=torch.bool, device=dev)
    for i in range(N):  # one pass: parents before children, siblings in draft order
        cand = real[:, i] & (parents[:, i] + 1 == cur)  # [B] node i is a child of the current node
        if dev.type == "cpu" and not bool(cand.any()):  # a shortcut where a read costs no sync (CUDA: the kernel)
            continue
        x = tokens[:, i]  # [B]
        if params.greedy:
            ok = cand & (x == best[rows, cur])
        else:
            r_x = r.gather(1, x.unsqueeze(1)).squeeze(1)  # [B]
            mass = r.sum(-1) if renormalise else torch.ones_like(r_x)  # [B]
            if draft_probs is None:  # a chosen child: u < r(x) / sum(r); a rejection zeroes r(x)
                ok = cand & (uniforms[:, i] * mass < r_x)
                residual = r.scatter(1, x.unsqueeze(1), 0.0)  # [B, V]
            else:  # a child drawn from q: u < r(x) / (sum(r) q(x)); a rejection leaves max(0, r / sum(r) - q)
                q = draft_probs[:, i].float()  # [B, V]
                ok = cand & (uniforms[:, i] * mass * q.gather(1, x.unsqueeze(1)).squeeze(1) < r_x)
                residual = (r / mass.clamp(min=1e-30).unsqueeze(1) - q).clamp(min=0.0)  # [B, V]
            rejected = cand & ~ok
            r = torch.where(rejected.unsqueeze(1), residual, r)
            r = torch.where(ok.unsqueeze(1), p[:, i + 1], r)  # an accepted child: r = p at it
        accepted[:, i] = ok
        cur = torch.where(ok, i + 1, cur)
    if params.greedy:
        final = best[rows, cur]  # recovered at the first miss, bonus after a full path
    else:
        # rounding could leave no residual mass (children covering p's support): fall back to p
        empty = r.sum(-1, keepdim=True) <= 0
        r = torch.where(empty, p[rows, cur], r)
        n_b = real.sum(1)  # [B]
        final = sample_inverse_cdf(r, uniforms[rows, n_b])
    num_accepted = accepted.sum(1)  # [B]
    D = int(num_accepted.max()) if B else 0
    emitted = torch.full((B, D + 1), -1, dtype=torch.long, device=dev)
    # the accepted nodes are one root-to-node chain in index order: the j-th accepted is depth j + 1
    order = accepted.long().cumsum(1) - 1  # [B, N] rank of each accepted node on its path
    b_idx, n_idx = accepted.nonzero(as_tuple=True)
    emitted[b_idx, order[b_idx, n_idx]] = tokens[b_idx, n_idx]
    emitted[rows, num_accepted] = final
    keep = torch.cat([torch.ones(B, 1, dtype=torch.bool, device=dev), accepted], dim=1)  # [B, 1 + N]
    return TreeVerdict(num_accepted, emitted, keep)
