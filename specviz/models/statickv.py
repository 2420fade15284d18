"""A static KV cache for the lean forward: preallocated buffers, so one CUDA graph serves every length.

transformers' ``DynamicCache`` grows by concatenation: every forward allocates new [B, Hkv, L, d]
tensors per layer, so no two steps see the same addresses or shapes and a CUDA graph cannot be
captured over it. This cache holds, per layer, K and V buffers [R, Hkv, C, d] (R rows, C slots of
capacity) and two pointers: ``rows`` (B, the live rows) and ``length`` (L, the live slots).

  - a forward writes its T new slots to columns [L, L + T) of every row (RaggedCache appends the
    same T slots to every row), in place, at columns given as a device tensor (``update``);
  - attention runs over the whole capacity with the validity mask padded to C (invalid past
    L + T): the same function as over L slots, to float rounding (fastllama.visible);
  - a crop is a pointer move (L decreases); compaction, row selection, dropping leading slots and
    appending joined rows gather inside the buffers, outside any graph;
  - growing past the capacity (rows or slots) reallocates, doubling, and drops every captured
    graph (they read the old buffers' addresses). Buffers start at zero: attention multiplies
    slots past L by a zero probability, so they must hold finite numbers, and they always do.

Forwards of fewer than ``fastllama.MANY_QUERIES`` slots per row (decode, verify, draft steps) go
through a ``GraphRunner`` (specviz.models.graphs): static input buffers per (batch bucket, T,
capacity), replayed as a CUDA graph on CUDA when the run's ForwardOptions ask for graphs, run eagerly through
the same buffers otherwise. Longer ones (prefills) run eagerly over the exact batch.

Off by default: the run's ForwardOptions (specviz.models.forwardoptions) turn it on
(``static_cache``: any device, graphs never captured; ``cuda_graphs``: graphs captured on CUDA).
Exactness against the DynamicCache path: tests/models/test_statickv.py.
"""

from __future__ import annotations

import torch

from specviz.models import fastllama
from specviz.models.graphs import GraphRunner, bucket

MIN_SLOTS = 128  # the smallest slot capacity allocated (a power of two)


def capturable(model: torch.nn.Module) -> bool:
    """The lean forward has no host sync for this model: dynamic and longrope RoPE read
    max(position) on the host every forward (transformers' dynamic_rope_update), so they run eagerly."""
    rope = getattr(getattr(model.model, "rotary_emb", None), "rope_type", "default")
    return isinstance(rope, str) and "dynamic" not in rope and rope != "longrope"


class StaticKV:
    """Per-layer K/V buffers [R, Hkv, C, d] with a row and a length pointer (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, graphs: bool = False, max_graphs: int = 8, compiler=None):
        cfg = model.config
        p = next(model.parameters())
        self.num_layers = cfg.num_hidden_layers
        self.heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.dtype, self.device = p.dtype, p.device
        self.keys: list[torch.Tensor] = []  # per layer [R, Hkv, C, d]
        self.values: list[torch.Tensor] = []
        self.rows = 0  # B: live rows, the buffers' first B
        self.length = 0  # L: live slots, the buffers' first L columns
        self.reallocations = 0
        capture = graphs and self.device.type == "cuda" and capturable(model)
        self.runner = GraphRunner(capture=capture, max_graphs=max_graphs)
        self._cols: torch.Tensor | None = None  # [T] the columns the running forward writes
        # a specviz.models.compiled.LayerCompiler: the runner's forwards run compiled layers (None: eager)
        self.compiler = None if capture else compiler

    # ---- sizes -----------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0

    @property
    def row_capacity(self) -> int:
        return self.keys[0].shape[0] if self.keys else 0

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)

    @torch.inference_mode()
    def reserve(self, rows: int, slots: int) -> None:
        """Room for ``rows`` rows (rounded up to their batch bucket) and ``slots`` slots; a growth
        reallocates (slots at least double), copies the live part and drops the captured graphs."""
        R, C = self.row_capacity, self.capacity
        if rows <= R and slots <= C:
            return
        new_R = max(R, bucket(max(rows, 1)))
        new_C = C if slots <= C and C else max(2 * C, bucket(max(slots, MIN_SLOTS)))
        shape = (new_R, self.heads, new_C, self.head_dim)
        B, L = self.rows, self.length
        grown_k, grown_v = [], []
        for i in range(self.num_layers):
            k = torch.zeros(shape, dtype=self.dtype, device=self.device)  # [R', Hkv, C', d]
            v = torch.zeros(shape, dtype=self.dtype, device=self.device)
            if self.keys and B and L:
                k[:B, :, :L] = self.keys[i][:B, :, :L]
                v[:B, :, :L] = self.values[i][:B, :, :L]
            grown_k.append(k)
            grown_v.append(v)
        self.reallocations += bool(self.keys)
        self.keys, self.values = grown_k, grown_v
        self.runner.clear()  # captured graphs read the old buffers

    # ---- the forward -----------------------------------------------------------------------
    def update(self, k: torch.Tensor, v: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k/v [b, Hkv, T, d] at the bound columns; the layer's whole buffers [b, Hkv, C, d]."""
        b = k.shape[0]
        keys, values = self.keys[layer][:b], self.values[layer][:b]  # views: fixed addresses
        keys.index_copy_(2, self._cols, k)
        values.index_copy_(2, self._cols, v)
        return keys, values

    def layer_views(self, b: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer (keys, values) [b, Hkv, C, d]: the first b rows' buffers (what ``update`` writes)."""
        return [(k[:b], v[:b]) for k, v in zip(self.keys, self.values)]

    def forward(self, model, input_ids: torch.Tensor | None, valid: torch.Tensor, positions: torch.Tensor,
                last_only: bool = False, inputs_embeds: torch.Tensor | None = None, return_hidden: bool = False,
                tail_mask: torch.Tensor | None = None, reuse_logits: bool = False):
        """fastllama.forward's result for T new slots per row; valid: [B, L + T] (RaggedCache's mask).

        reuse_logits: the logits may be the runner's static output (the caller is done with the
        previous call's logits before the next call); otherwise they are a copy."""
        B, T = positions.shape
        L = valid.shape[1] - T
        if L != self.length or (L and B != self.rows):
            raise RuntimeError(f"static KV cache holds {self.rows} rows x {self.length} slots; the mask says {B} x {L}")
        self.reserve(B, L + T)
        if T < fastllama.MANY_QUERIES:
            out = self.runner.run(self, model, input_ids, inputs_embeds, valid, positions, tail_mask,
                                  last_only, return_hidden, reuse_logits)
        else:  # prefill-sized: eager over the exact batch
            C = self.capacity
            full = torch.zeros(B, C, dtype=torch.bool, device=self.device)  # [B, C] invalid past L + T
            full[:, : L + T] = valid
            self._cols = torch.arange(L, L + T, device=self.device)  # [T]
            out = fastllama.forward(model, input_ids, full, positions, self, last_only, inputs_embeds=inputs_embeds,
                                    return_hidden=return_hidden, tail_mask=tail_mask, query_slots=self._cols)
        self.rows, self.length = B, L + T
        return out

    # ---- memory: outside any graph ---------------------------------------------------------
    def crop(self, max_length: int) -> None:
        """DynamicCache.crop's meaning (negative: remove that many slots), as a pointer move."""
        self.length = max_length if max_length >= 0 else max(self.length + max_length, 0)

    def _buffers(self):
        return self.keys + self.values

    @torch.inference_mode()
    def gather_slots(self, order: torch.Tensor) -> None:
        """Row b's slot j becomes its slot order[b, j]; order: [B, n]; the length becomes n."""
        B, n = order.shape
        if self.keys:
            idx = order[:, None, :, None].expand(B, self.heads, n, self.head_dim)  # [B, Hkv, n, d]
            for buf in self._buffers():
                buf[:B, :, :n] = buf[:B, :, : self.length].gather(2, idx)
        self.length = n

    @torch.inference_mode()
    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep these rows (in this order) as rows 0..n-1."""
        n, L = rows.numel(), self.length
        if self.keys and L:
            r = rows.to(self.device)  # [n]
            for buf in self._buffers():
                buf[:n, :, :L] = buf[r, :, :L]  # the index copies first
        self.rows = n

    @torch.inference_mode()
    def drop_leading(self, first: int) -> None:
        """Remove the first ``first`` slots of every row."""
        B, L = self.rows, self.length
        if self.keys and first < L:
            for buf in self._buffers():
                buf[:B, :, : L - first] = buf[:B, :, first:L].clone()  # overlapping ranges: copy first
        self.length = max(L - first, 0)

    @torch.inference_mode()
    def extend(self, other: "StaticKV", rows: int, other_rows: int) -> None:
        """Append ``other``'s rows; the shorter side is left-padded with (zero) hole slots.

        rows / other_rows: each cache's row count as its RaggedCache knows it (a cache that never
        ran a forward holds rows without slots). A cache with no rows takes other's length whole."""
        B, Bo = rows, other_rows
        mine_len = self.length if B else 0
        theirs_len = other.length if other.keys else 0
        L = max(mine_len, theirs_len)
        self.reserve(B + Bo, L)
        theirs = other._buffers() if other.keys else [None] * (2 * self.num_layers)
        for mine, src in zip(self._buffers(), theirs):
            if B and mine_len < L:  # shift my rows right: holes in front
                mine[:B, :, L - mine_len:L] = mine[:B, :, :mine_len].clone()
                mine[:B, :, : L - mine_len] = 0
            mine[B:B + Bo, :, : L - theirs_len] = 0
            if src is not None and theirs_len:
                mine[B:B + Bo, :, L - theirs_len:L] = src[:Bo, :, :theirs_len].to(self.device)
        self.rows, self.length = B + Bo, L
