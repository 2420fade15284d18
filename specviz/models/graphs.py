"""CUDA graphs for the lean forward over a static KV cache: static buffers per shape, replayed.

A step's forward at these sizes is hundreds of small kernels whose launches cost more than their
work on a GPU (issue 18: 45 ms per target forward of a 135M model on an H200). A CUDA graph
records the launches once and replays them with one call, but it replays fixed addresses and
shapes. So the runner keeps, per key (batch bucket b, T slots, cache capacity C, output kind),
one ``_Entry`` of static tensors: the inputs the caller copies into (ids or embeddings [b, T],
positions [b, T], the validity mask padded to the capacity [b, C], the T columns being written,
a tree's tail mask) and the outputs it reads back (logits, hidden states). The forward reads only
those and the static KV cache's buffers (specviz.models.statickv), so one graph serves every
cache length L and every batch of up to b rows (rows past the batch are padding: no valid slot,
each query sees only itself, results unused).

The same protocol runs everywhere: copy in, run, copy out. ``capture=False`` (the CPU, or
``SPECVIZ_CUDA_GRAPHS`` unset) runs the forward eagerly over the static buffers, which is what
the CPU tests exercise. ``capture=True`` (CUDA): a key's first use runs eagerly (a prefill cache
used once never pays a capture), its second warms up on a side stream, captures with
``torch.cuda.graph`` and replays; later uses replay. Entries are bounded (least recently used
dropped first), and the static cache drops them all when it reallocates.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from specviz.models import fastllama

WARMUP = 3  # eager runs on a side stream before a capture (PyTorch's CUDA-graph recipe)


def bucket(n: int) -> int:
    """The batch bucket of n rows: the next power of two."""
    return 1 << max(n - 1, 0).bit_length()


class _Entry:
    """The static tensors of one key (see the module docstring)."""

    def __init__(self, b: int, T: int, C: int, S: int | None, last_only: bool, embeds: bool,
                 return_hidden: bool, hidden_size: int, dtype, device):
        z = lambda *shape, dt=dtype: torch.zeros(shape, dtype=dt, device=device)  # noqa: E731
        self.ids = None if embeds else z(b, T, dt=torch.long)  # [b, T]
        self.embeds = z(b, T, hidden_size) if embeds else None  # [b, T, hidden]
        self.positions = z(b, T, dt=torch.long)  # [b, T]
        self.valid = z(b, C, dt=torch.bool)  # [b, C] the cache's mask padded to its capacity
        self.cols = z(T, dt=torch.long)  # [T] the columns L..L+T-1 this forward writes
        self.tail = None if S is None else torch.ones(b, T, S, dtype=torch.bool, device=device)  # [b, T, S]
        # [b, T or 1, V]: the first (eager) run's own output, kept (V is the head's output width,
        # which a distilled draft's vocabulary-mapped head widens past its weight's rows)
        self.logits: torch.Tensor | None = None
        self.hidden = z(b, T, hidden_size) if return_hidden else None  # [b, T, hidden]
        self.uses = 0
        self.graph = None


class GraphRunner:
    def __init__(self, capture: bool, max_graphs: int = 8, eager_uses: int = 1):
        self.capture = capture
        self.max_graphs = max_graphs
        self.eager_uses = max(eager_uses, 1)  # uses of a key run eagerly before it is captured (>= 1: see _Entry)
        self._entries: OrderedDict[tuple, _Entry] = OrderedDict()  # least recently used first
        self.captures = self.replays = self.evictions = 0
        self._arange: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[tuple]:
        return list(self._entries)

    def clear(self) -> None:
        """Drop every entry (and its graph): the static cache's buffers moved."""
        self._entries.clear()

    def _entry(self, key: tuple, make) -> _Entry:
        e = self._entries.pop(key, None)
        if e is None:
            if len(self._entries) >= self.max_graphs:
                self._entries.popitem(last=False)
                self.evictions += 1
            e = make()
        self._entries[key] = e  # now the most recently used
        return e

    @torch.inference_mode()
    def run(self, kv, model, input_ids, inputs_embeds, valid, positions, tail_mask, last_only: bool,
            return_hidden: bool, reuse_logits: bool):
        """Logits [B, T or 1, V] (and hidden [B, T, hidden] with return_hidden) of one forward over kv.

        valid: [B, L + T] the cache's mask including the new slots; kv (a StaticKV) has room for
        bucket(B) rows and L + T slots. The logits are the static output itself with reuse_logits
        (valid until the next call), else a copy; hidden states are always a copy."""
        B, T = positions.shape
        b, C, L = bucket(B), kv.capacity, valid.shape[1] - T
        S = None if tail_mask is None else tail_mask.shape[-1]
        embeds = inputs_embeds is not None
        key = (b, T, C, S, last_only, embeds, return_hidden)
        e = self._entry(key, lambda: _Entry(b, T, C, S, last_only, embeds, return_hidden, model.config.hidden_size,
                                            kv.dtype, kv.device))
        # copy in: real rows first; padding rows see nothing valid (their own slot only)
        if embeds:
            e.embeds[:B].copy_(inputs_embeds)
        else:
            e.ids[:B].copy_(input_ids)
        e.positions[:B].copy_(positions)
        e.valid.fill_(False)
        e.valid[:B, : L + T].copy_(valid)
        torch.add(self._columns(T, kv.device), L, out=e.cols)  # no host-to-device copy
        if S is not None:
            e.tail[B:].fill_(True)
            e.tail[:B].copy_(tail_mask)
        e.uses += 1
        if e.graph is not None:
            e.graph.replay()
            self.replays += 1
        elif self.capture and e.uses > self.eager_uses:
            self._capture(e, lambda: self._body(e, kv, model, last_only, return_hidden))
        else:
            self._body(e, kv, model, last_only, return_hidden)
        # copy out
        logits = e.logits[:B] if reuse_logits else e.logits[:B].clone()
        return (logits, e.hidden[:B].clone()) if return_hidden else logits

    def _columns(self, T: int, device) -> torch.Tensor:
        if T not in self._arange:
            self._arange[T] = torch.arange(T, device=device)  # [T]
        return self._arange[T]

    @staticmethod
    def _body(e: _Entry, kv, model, last_only: bool, return_hidden: bool) -> None:
        """The forward over the entry's static tensors, results into its static outputs."""
        kv._cols = e.cols
        out = fastllama.forward(model, e.ids, e.valid, e.positions, kv, last_only, inputs_embeds=e.embeds,
                                return_hidden=return_hidden, tail_mask=e.tail,
                                logits_out=None if return_hidden else e.logits, query_slots=e.cols,
                                compiler=kv.compiler)
        if return_hidden:
            out, hidden = out
            e.hidden.copy_(hidden)
        if e.logits is None:
            e.logits = out  # a fresh tensor: from now on the static output
        elif out.data_ptr() != e.logits.data_ptr():
            e.logits.copy_(out)

    def _capture(self, e: _Entry, body) -> None:
        """Warm up on a side stream, capture, replay once (a capture runs nothing). The body is
        idempotent: it rewrites the same KV columns from the same static inputs."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP):
                body()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            body()
        graph.replay()
        e.graph = graph
        self.captures += 1
