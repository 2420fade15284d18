"""Draft proposers: the one interface every draft implements (:class:`Proposer`), a draft model, a
feature draft, and prompt-lookup n-grams (the suffix draft and the hybrid live in their own modules).

A proposer keeps whatever per-row state it needs and follows the engine's rows:
  start(contexts, features)            the prompts (token ids) of the batch
  propose(contexts, k, params, u)      -> Proposal for every active row (a chain step)
  propose_tree(contexts, k, width, nodes, params) -> TokenTree for every active row (a tree step)
  commit(num_accepted, emitted, features)          roll back what was rejected, remember what was emitted
  commit_tree(paths, emitted, fed_slots, features) the same after a tree step
  select_rows(rows)                    rows that finished leave the batch
  add_rows(contexts, features)         requests that join a running batch (their prompts), appended
                                       after the current rows (between steps, after commit)
``contexts[i]`` is row i's full token list (prompt + generated so far). ``features`` are the target's
hidden states for a draft that reads them (``wants_features``), None for every other draft.
"""

from __future__ import annotations

import array
import dataclasses
from typing import ClassVar, Protocol, runtime_checkable

import torch

from specviz.models.distilled import fused_input
from specviz.models.forwardoptions import ForwardOptions
from specviz.engine import treedraft
from specviz.engine.ragged import RaggedCache, left_pad
from specviz.engine.sampling import SamplingParams, sample_tokens
from specviz.engine.transfer import host_tensor, to_device


@dataclasses.dataclass
class Proposal:
    tokens: torch.Tensor  # [B, k] draft ids, -1 past num_drafted
    num_drafted: torch.Tensor  # [B] n_b <= k
    probs: torch.Tensor | None  # [B, k, V] processed q, or None for one-hot proposals / greedy
    widest: int | None = None  # max n_b when known on the host (saves the engine a device read), else None;
    # with counts None, a widest means every row drafted widest
    counts: list[int] | None = None  # every n_b when known on the host and ragged (the verify skips holes), else None


def reach(proposer, k: int) -> int:
    """The deepest proposal ``proposer`` may make at draft length k: its ``deepest(k)`` where it has one
    (the hybrid), else k (also for no draft). The verify's width and the context's room follow it."""
    deepest = getattr(proposer, "deepest", None)
    return deepest(k) if deepest is not None and k else k


@runtime_checkable
class Proposer(Protocol):
    """What the engine calls on a draft (specviz.engine.step and decoder), the same for every
    kind: the engine passes ``features`` to every draft, None unless the draft ``wants_features``.
    A proposal is at most :func:`reach` deep: k, or the draft's own ``deepest(k)`` (the hybrid's)."""

    kind: ClassVar[str]  # "model", "feature", "ngram", "suffix", "hybrid"
    name: str  # what traces and pages call it
    wants_features: ClassVar[bool]  # the target's hidden states at start, add_rows and commit

    def start(self, contexts: list[list[int]], features=None) -> None: ...

    def add_rows(self, contexts: list[list[int]], features=None) -> None: ...

    def propose(self, contexts: list[list[int]], k: int, params: SamplingParams, u: torch.Tensor) -> Proposal: ...

    def propose_tree(self, contexts: list[list[int]], k: int, width: int, nodes: int, params: SamplingParams): ...

    def commit(self, num_accepted: list[int], emitted: list[list[int]], features=None) -> None: ...

    def commit_tree(self, paths: list[list[int]], emitted: list[list[int]], fed_slots: list[list[int]],
                    features=None) -> None: ...

    def select_rows(self, rows: torch.Tensor) -> None: ...


class ModelDraft:
    """A separate (smaller) causal LM sharing the target's tokenizer.

    Cache invariant: the draft cache holds every context token except ``pending[i]``, the
    tokens emitted since the draft last ran (1 normally; 2 when the row accepted all k drafts,
    because the draft never fed its own k-th token).
    """

    kind = "model"
    wants_features = False

    def __init__(self, loaded, vocab_size: int | None = None, compact_threshold: float = 0.25,
                 stop_below: float = 0.0, options: ForwardOptions | None = None):
        self.loaded = loaded
        self.options = options  # how the draft's cache runs its forwards (None: the environment's defaults)
        # A row stops drafting after a token the draft gave probability < stop_below (that token is
        # still proposed), as transformers' assistant_confidence_threshold does; the draft loop
        # ends once every row has stopped. 0 = always draft k.
        self.stop_below = stop_below
        self.model = loaded.model
        self.device = loaded.device
        self.vocab_size = vocab_size  # the target's V: q is padded/cut to it
        self.compact_threshold = compact_threshold
        self.name = loaded.name

    def start(self, contexts: list[list[int]], features=None) -> None:
        self.kv = self._prefilled(contexts)
        self.pending = [[c[-1]] for c in contexts]
        self._fed = 0
        self._proposed = 0

    def _prefilled(self, contexts: list[list[int]]) -> RaggedCache:
        kv = RaggedCache(self.model, self.compact_threshold, options=self.options)
        ids, valid = left_pad([c[:-1] for c in contexts], 0, self.device)
        if ids.shape[1]:
            kv.forward(ids, valid, last_only=True, counts=[len(c) - 1 for c in contexts], logits=False)
        else:
            kv.empty_rows(len(contexts))
        return kv

    def add_rows(self, contexts: list[list[int]], features=None) -> None:
        """Joining requests: their prompts prefilled on their own, appended to the draft cache."""
        self.kv.extend(self._prefilled(contexts))
        self.pending = self.pending + [[c[-1]] for c in contexts]

    def _q(self, logits: torch.Tensor) -> torch.Tensor:
        """[B, V_draft] -> [B, V_target] logits; tokens the draft lacks get -inf (never proposed)."""
        V = self.vocab_size
        if V is None or logits.shape[-1] == V:
            return logits
        if logits.shape[-1] > V:
            return logits[:, :V]
        pad = torch.full((logits.shape[0], V - logits.shape[-1]), float("-inf"), device=logits.device, dtype=logits.dtype)
        return torch.cat([logits, pad], dim=-1)

    # ---- one draft forward: overridden by FeatureDraft ----------------------------------------
    def _first_input(self):
        """What the first forward of a step feeds: the pending tokens, left-padded."""
        self._counts = [len(p) for p in self.pending]  # valid slots per row, for the cache's host lengths
        return left_pad(self.pending, 0, self.device)

    def _forward(self, inp) -> torch.Tensor:
        ids, valid = inp
        return self._q(self.kv.forward(ids, valid, last_only=True, counts=self._counts)[:, -1])  # [B, V]

    def _next_input(self, tok: torch.Tensor):
        self._counts = [1] * tok.shape[0]
        return tok.unsqueeze(1), torch.ones(tok.shape[0], 1, dtype=torch.bool, device=self.device)

    def _cannot_draft(self) -> torch.Tensor | None:
        """[B] rows with nothing to draft from this step (proposing 0), or None."""
        return None

    @torch.inference_mode()
    def propose(self, contexts, k: int, params: SamplingParams, u: torch.Tensor) -> Proposal:
        B = len(self.pending)
        tokens = torch.full((B, k), -1, dtype=torch.long, device=self.device)
        n = torch.full((B,), k, dtype=torch.long, device=self.device)  # proposals per row
        blocked = self._cannot_draft()
        if blocked is not None:
            n = torch.where(blocked, 0, n)
            if not bool(n.any()):  # no row has anything to draft from: no forward at all
                self._fed = self._proposed = 0
                return Proposal(tokens, n, None, widest=0)
        ragged = blocked is not None or self.stop_below > 0  # else every row drafts k: n stays k, no read needed
        probs = [] if not params.greedy else None
        inp = self._first_input()
        m = k  # draft forwards run this step
        for j in range(k):
            logits = self._forward(inp)  # [B, V]
            tok, q = sample_tokens(logits, params, u[:, j])
            tokens[:, j] = torch.where(n > j, tok, -1)
            if probs is not None:
                probs.append(q)
            if self.stop_below > 0:
                conf = torch.softmax(logits.float(), dim=-1).amax(dim=-1)  # [B] the draft's top probability
                n = torch.where((n == k) & (conf < self.stop_below), j + 1, n)
            if ragged and j + 1 < k and bool((n <= j + 1).all()):
                m = j + 1
                break
            if j + 1 < k:  # the k-th draft token is never fed here (see the class docstring)
                inp = self._next_input(tok)
        self._fed = max(m - 1, 0)
        self._proposed = m
        return Proposal(tokens, n, torch.stack(probs, dim=1) if probs else None, widest=None if ragged else k)

    def commit(self, num_accepted: list[int], emitted: list[list[int]], features=None) -> None:
        fed = self._fed
        if fed:  # the last ``fed`` slots, valid in every row: a prefix of min(accepted, fed) stays
            acc = host_tensor(num_accepted, self.device)  # [B]
            keep = torch.arange(fed, device=self.device).unsqueeze(0) < acc.unsqueeze(1)  # [B, fed]
            kept, h = [min(a, fed) for a in num_accepted], self.kv.host_lengths
            self.kv.reject_tail(keep, kept, None if h is None else [x - fed + c for x, c in zip(h, kept)])
        self.kv.maybe_compact()
        if self._proposed == 0:  # nothing was fed this step (k = 0): the backlog grows
            self.pending = [p + e for p, e in zip(self.pending, emitted)]
        else:  # draft tokens accepted but never fed (only the k-th), then the final token; a caller that
            # kept none of the fed tokens (a = 0: the hybrid's suffix rows) queues everything emitted
            self.pending = [e[min(a, fed):] for a, e in zip(num_accepted, emitted)]
        self._fed = self._proposed = 0

    def select_rows(self, rows: torch.Tensor) -> None:
        host_rows = rows.tolist()  # (rows leave: not every step)
        self.kv.select_rows(rows, host_rows)
        self.pending = [self.pending[i] for i in host_rows]

    # ---- token trees (specviz.engine.treedraft) ------------------------------------------------
    def _tree_root(self) -> torch.Tensor | None:
        """A tree's first forward, a chain step's: the pending tokens -> the root's next-token logits [B, V]."""
        return self._forward(self._first_input())

    def _tree_feed(self, tok: torch.Tensor, positions: torch.Tensor, tail_mask: torch.Tensor,
                   came_from: torch.Tensor | None) -> torch.Tensor:
        """Feed a tree's frontier tok [B, W] (each sees its ancestors: tail_mask) -> logits [B, W, V_draft]."""
        B, W = tok.shape
        return self.kv.forward(tok, torch.ones(B, W, dtype=torch.bool, device=self.device), positions=positions,
                               tail_mask=tail_mask, counts=[W] * B)

    def propose_tree(self, contexts, k: int, width: int, nodes: int, params: SamplingParams):
        """Every row's EAGLE-2 tree: depth <= k, top-``width`` children, ``nodes`` kept (a TokenTree)."""
        return treedraft.propose_tree(self, k, width, nodes)

    def commit_tree(self, paths: list[list[int]], emitted: list[list[int]], fed_slots: list[list[int]],
                    features=None) -> None:
        treedraft.commit_tree(self, paths, emitted, fed_slots)


class FeatureDraft(ModelDraft):
    """A feature draft (specviz.distill.feature, EAGLE): its input at position p is token x_p with the
    target's feature f_{p-1}, which the engine passes in (``wants_features``) from the prefill
    (``start``) and from every verify (``commit``).

    Cache invariant: the draft cache holds slots fed with *true* target features only; ``pending``
    holds the tokens since then with their true previous features. While proposing, the draft feeds
    its own tokens with its own predicted features g; ``commit`` drops all of those slots (their
    inputs were guesses even where the tokens were accepted) and queues the emitted tokens with the
    verify's true features instead.
    """

    kind = "feature"
    wants_features = True

    def start(self, contexts: list[list[int]], features=None) -> None:
        B = len(contexts)
        self.kv = RaggedCache(self.model, self.compact_threshold, keep_hidden=True, options=self.options)
        self.kv.empty_rows(B)
        H = self.model.config.hidden_size
        hidden, valid = features if features is not None and features[0] is not None else (None, None)
        # prefill fed x_0 .. x_{P-2}, so it gave f_0 .. f_{P-2}: positions 1 .. P-1 can be fed
        self.pending = [c[1:] for c in contexts]
        self.pending_f = [hidden[i][valid[i]] if hidden is not None else torch.zeros(0, H, device=self.device)
                          for i in range(B)]
        self._fed = self._proposed = 0
        self._g = self._tree_g = None

    def _nothing_pending(self) -> list[bool]:
        """Per row: no token with a true feature to feed yet (a one-token prompt's first step)."""
        return [len(p) == 0 for p in self.pending]

    def _cannot_draft(self) -> torch.Tensor:
        return torch.tensor(self._nothing_pending(), device=self.device)

    def _first_input(self):
        ids, valid = left_pad(self.pending, 0, self.device)
        B, T = ids.shape
        feats = torch.zeros(B, T, self.model.config.hidden_size, device=self.device, dtype=self.model.dtype)
        for i, f in enumerate(self.pending_f):
            if len(f):
                feats[i, T - len(f):] = f
        return ids, valid, feats

    def _forward(self, inp) -> torch.Tensor:
        ids, valid, feats = inp
        logits = self.kv.forward(None, valid, last_only=True, inputs_embeds=fused_input(self.model, ids, feats))
        self._g = self.kv.hidden[:, -1:]  # [B, 1, H] the predicted feature at the last slot
        return self._q(logits[:, -1])

    def _next_input(self, tok: torch.Tensor):
        return tok.unsqueeze(1), torch.ones(tok.shape[0], 1, dtype=torch.bool, device=self.device), self._g

    def commit(self, num_accepted: list[int], emitted: list[list[int]], features=None) -> None:
        if features is None:
            raise ValueError("FeatureDraft.commit needs the verify's features (the engine passes them)")
        fed = self._fed
        if fed:  # every slot fed with a predicted feature goes
            self.kv.reject_tail(torch.zeros(len(num_accepted), fed, dtype=torch.bool, device=self.device))
        self.kv.maybe_compact()
        # the verify fed [x_{n-1}, d_1 .. d_k]; slots 0 .. a are the true features of the emitted tokens' predecessors
        new_f = [features[i, : a + 1] for i, a in enumerate(num_accepted)]
        self._queue(emitted, new_f, drafted=self._proposed > 0)
        self._fed = self._proposed = 0

    def _queue(self, emitted: list[list[int]], new_f: list[torch.Tensor], drafted: bool) -> None:
        """The emitted tokens with their true previous features [n, H] become pending: in place of the
        pending ones the step's draft fed, or after them when it drafted nothing (the backlog grows)."""
        if drafted:
            self.pending, self.pending_f = [list(e) for e in emitted], new_f
        else:
            self.pending = [p + e for p, e in zip(self.pending, emitted)]
            self.pending_f = [torch.cat([pf, f]) for pf, f in zip(self.pending_f, new_f)]

    def _tree_root(self) -> torch.Tensor | None:
        """The pending tokens with their true features; None when a row has none (a 1-token prompt)."""
        if any(self._nothing_pending()):
            return None
        logits = self._forward(self._first_input())
        self._tree_g = self._g  # [B, 1, H] the root's predicted feature
        return logits

    def _tree_feed(self, tok, positions, tail_mask, came_from):
        """The frontier tok [B, W], each with its parent's predicted feature (the root's at depth 2)."""
        B, W = tok.shape
        g = self._tree_g  # [B, 1 or W, H] the previous frontier's predicted features
        H = g.shape[-1]
        feats = g.expand(B, W, H) if came_from is None else g.gather(1, came_from.unsqueeze(2).expand(B, W, H))  # [B, W, H]
        logits = self.kv.forward(None, torch.ones(B, W, dtype=torch.bool, device=self.device), positions=positions,
                                 tail_mask=tail_mask, inputs_embeds=fused_input(self.model, tok, feats))  # [B, W, V]
        self._tree_g = self.kv.hidden  # [B, W, H] each frontier node's predicted feature
        return logits

    def commit_tree(self, paths, emitted, fed_slots, features=None) -> None:
        """Every fed tree slot goes (its input was a predicted feature); the emitted tokens are queued
        with the verify's true features: at the root (slot 0) and the accepted path (slot 1 + node)."""
        if features is None:
            raise ValueError("FeatureDraft.commit_tree needs the verify's features (the engine passes them)")
        S = self._tree_fed
        if S:
            self.kv.reject_tail(torch.zeros(len(paths), S, dtype=torch.bool, device=self.device))
        self.kv.maybe_compact()
        new_f = [features[b, [0] + [1 + i for i in p]] for b, p in enumerate(paths)]  # [1 + a, H] per row
        self._queue(emitted, new_f, drafted=self._tree_g is not None)  # None: _tree_root drafted no tree
        self._tree_fed = self._tree_g = None

    def select_rows(self, rows: torch.Tensor) -> None:
        super().select_rows(rows)
        self.pending_f = [self.pending_f[i] for i in rows.tolist()]

    def add_rows(self, contexts: list[list[int]], features=None) -> None:
        """Joining requests: no draft slots yet, their prompts pending with the target's prefill
        features of the joining rows (features = (hidden, valid) of that prefill)."""
        joined = FeatureDraft.__new__(FeatureDraft)
        joined.__dict__.update(self.__dict__)
        joined.start(contexts, features)
        self.kv.extend(joined.kv)
        self.pending = self.pending + joined.pending
        self.pending_f = self.pending_f + joined.pending_f


class NgramDraft:
    """Prompt lookup (Saxena 2023; transformers' prompt_lookup_num_tokens): find the latest
    earlier occurrence of the row's last n tokens (n = max_ngram..1) in its own context and
    propose what followed it. No model cost; proposals are deterministic (q = one-hot)."""

    kind = "ngram"
    name = "ngram"
    wants_features = False

    def __init__(self, max_ngram: int = 3, device="cpu"):
        self.max_ngram = max_ngram
        self.device = torch.device(device)

    def start(self, contexts, features=None) -> None:
        pass

    def _lookup(self, ctx: list[int], k: int) -> list[int]:
        """What followed the latest earlier occurrence of the last n tokens (longest n first), or [].

        The scan runs in C: the context as 4-byte words, ``bytes.rfind`` for the tail's bytes, and a
        match that does not start on a word boundary skipped (retried further left)."""
        L = len(ctx)
        if L < 2:
            return []
        buf = array.array("I", ctx).tobytes()  # 4 bytes per token id (ids are < 2**32)
        for n in range(min(self.max_ngram, L - 1), 0, -1):
            tail = buf[4 * (L - n):]
            end = 4 * (L - 1)  # a match starting at s <= L - n - 1 lies within buf[:4 (L - 1)]
            while (pos := buf.rfind(tail, 0, end)) >= 0:
                if pos % 4 == 0:  # on a token boundary: the latest match
                    s = pos // 4
                    return ctx[s + n:s + n + k]
                end = pos + len(tail) - 1  # matches starting before pos only
        return []

    def propose(self, contexts, k: int, params: SamplingParams, u: torch.Tensor) -> Proposal:
        conts = [self._lookup(ctx, k) if k else [] for ctx in contexts]
        n = [len(c) for c in conts]
        tokens = torch.tensor([c + [-1] * (k - len(c)) for c in conts], dtype=torch.long).view(len(conts), k)  # [B, k]
        return Proposal(to_device(tokens, self.device), host_tensor(n, self.device), None, widest=max(n, default=0),
                        counts=n)

    def commit(self, num_accepted, emitted, features=None) -> None:
        pass

    def select_rows(self, rows) -> None:
        pass

    def add_rows(self, contexts, features=None) -> None:
        pass

    def propose_tree(self, contexts, k: int, width: int, nodes: int, params: SamplingParams):
        """Several matches merged into a tree (treedraft.ngram_tree)."""
        return treedraft.ngram_tree(contexts, k, width, nodes, self.max_ngram, self.device)

    def commit_tree(self, paths, emitted, fed_slots, features=None) -> None:
        pass
