"""A chain step's parts, for the decoder's one step body (specviz.engine.decoder).

Every step runs the same body: draft -> verify -> accept (with the step's one host read) ->
reject -> compact -> commit -> retire. What differs between a row drafting a line of tokens and a
row drafting a token tree is four parts, each kind a class with the same methods:

  draft(dec, k)                   the proposals and the draws the accept rule will use
  verify(dec, drafted)            ONE target forward over every row's [last token, proposals]
  accept(dec, drafted, logits)    the rule's verdict, read to the host once: a StepVerdict
  commit(dec, drafted, verdict)   the proposer keeps what was accepted

``ChainStep`` (here) drafts up to k tokens per row in a line and verifies them with the
mask-free forward (positions counted from the validity mask); ``treestep.TreeStep`` drafts a tree
per row and verifies it with the ancestor mask. Regular decoding is a chain step with k = 0.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from specviz.engine import streams
from specviz.engine.sampling import accept_synthetic
from specviz.engine.transfer import host_tensor
from specviz.records import TreeNodes


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
class ChainDrafts:
    tokens: torch.Tensor  # [B, w] proposals (past a row's n_b: anything)
    num_drafted: torch.Tensor  # [B] n_b
    probs: torch.Tensor | None  # [B, w, V] the draft's q, None for a deterministic draft
    u_verify: torch.Tensor  # [B, w + 1] the accept rule's draws
    counts: list[int] | None  # [B] n_b on the host, when the proposer knows them there
    width: int  # w + 1: verify slots per row
    shape: tuple = (None, None)  # a chain step has no tree shape


class ChainStep:
    """Rows draft a line of up to k tokens each. With ``synthetic`` (an alpha in [0, 1]) accept is the
    synthetic rule (sampling.accept_synthetic: each drafted position accepted with probability alpha
    from the row's own draws) instead of the decoder's exact rule: the same step, not the target's text."""

    def __init__(self, synthetic: float | None = None):
        self.synthetic = synthetic

    def draft(self, dec, k: int) -> ChainDrafts:
        u = streams.row_uniforms(dec.active, 2 * k + 1, dec.device)  # [B, 2k + 1] per-row streams
        u_draft, u_verify = u[:, :k], u[:, k:]
        B = len(dec.active)
        if k == 0:
            drafts = torch.empty(B, 0, dtype=torch.long, device=dec.device)  # [B, 0]
            return ChainDrafts(drafts, torch.zeros(B, dtype=torch.long, device=dec.device), None, u_verify, None, 1)
        prop = dec.proposer.propose([r.context for r in dec.active], k, dec.params, u_draft)
        drafts, n, q = prop.tokens, prop.num_drafted, prop.probs
        w = int(n.max()) if prop.widest is None else prop.widest  # slots past the widest proposal: holes in every row
        if w < k:
            drafts, q, u_verify = drafts[:, :w], (q[:, :w] if q is not None else None), u_verify[:, : w + 1]
        return ChainDrafts(drafts, n, q, u_verify, prop.counts, w + 1)

    def verify(self, dec, d: ChainDrafts) -> torch.Tensor:
        """ONE batched target forward over [last token, d_1..d_w] per row -> logits [B, w + 1, V].
        With every n_b known on the host the forward skips the holes' work."""
        last = host_tensor([r.last for r in dec.active], dec.device).unsqueeze(1)  # [B, 1]
        ids = torch.cat([last, d.tokens.clamp(min=0)], dim=1)  # [B, w + 1]
        T = ids.shape[1]
        slots = torch.arange(T, device=dec.device).unsqueeze(0)  # [1, w + 1]
        valid = slots < (d.num_drafted + 1).unsqueeze(1)  # [B, w + 1] proposals past n_b are holes
        flat = None if d.counts is None else [b * T + t for b, c in enumerate(d.counts) for t in range(c + 1)]
        return dec.kv.forward(ids, valid, reuse_logits=True, slots=flat)  # [B, w + 1, V], dead by the next verify

    def accept(self, dec, d: ChainDrafts, logits: torch.Tensor) -> StepVerdict:
        rule = dec.accept_fn if self.synthetic is None else functools.partial(accept_synthetic, self.synthetic)
        verdict = rule(logits, d.tokens, d.num_drafted, d.u_verify, dec.params, d.probs)
        w = d.width - 1
        # the step's one copy to the host: per row [accepted, drafted, output (w + 1), proposals (w)]
        host = torch.cat([verdict.num_accepted.long().unsqueeze(1), d.num_drafted.long().unsqueeze(1),
                          verdict.emitted.long(), d.tokens.long()], dim=1).tolist()  # [B, 2w + 3]
        num_accepted = [h[0] for h in host]
        # slot 0 (the last token) + accepted drafts stay: a prefix of 1 + a per row
        keep = torch.arange(d.width, device=dec.device).unsqueeze(0) <= verdict.num_accepted.unsqueeze(1)  # [B, w + 1]
        return StepVerdict(num_accepted, [h[2:3 + h[0]] for h in host], [h[3 + w:3 + w + h[1]] for h in host], keep,
                           [1 + a for a in num_accepted])

    def commit(self, dec, d: ChainDrafts, v: StepVerdict) -> None:
        if dec.proposer is not None:
            dec.proposer.commit(v.num_accepted, v.emitted, features=dec.draft_features(dec.verify_hidden))
