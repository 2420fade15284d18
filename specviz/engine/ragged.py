"""A rectangular KV cache over ragged rows: per-row validity mask, explicit positions, holes.

Scheme (DESIGN.md, "one sound scheme"): every forward appends the same number of slots T to
every row, so the transformers cache stays a plain [B, heads, L, head_dim] tensor per layer.
A per-row validity mask marks which slots hold real tokens (1) and which are padding or
rejected draft tokens, "holes" (0). The mask goes in as the 2D attention mask and positions are
explicit per row (= number of valid tokens before the slot), so holes cost memory and attention
work but never change results.

Memory stays bounded: after each rollback, trailing slots that are holes in every row are
cropped, and when a compaction would free more than ``compact_threshold`` of the cache (the
slots past the longest row's valid count) every row's valid slots are gathered to the right end
(RoPE is already baked into the keys, so moving slots is exact).

Requests that join a running batch (``extend``) are placed right-aligned: their prompt fills the
last slots of their row, holes in front. Those leading holes are not reclaimable (a compaction
keeps the longest row's length), so they do not count towards the threshold: with the total hole
count as the trigger, a queue of newcomers made the cache compact nearly every step for nothing
(57 compactions in one 32-request run, bench/results/continuous-2026-12-01).

Reads from the device (a host-device sync on a GPU) are what a step's bookkeeping must avoid.
``host_lengths`` mirrors ``lengths`` on the host whenever every change to it came with host
numbers (``forward(counts=...)``, ``reject_tail(kept=..., lengths=...)``, joins and row
selections of known rows). While it is known, the crop, the compaction test, the compaction and
the hole count read nothing from the device; when it is not (None), the next of them reads the
lengths once and the mirror is known again.
"""

from __future__ import annotations

import torch

from specviz.engine.transfer import host_tensor, to_device
from specviz.models import compiled, fastllama, statickv
from specviz.models.forwardoptions import ForwardOptions


def contiguous_head_input(model: torch.nn.Module) -> None:
    """Make the output layer's input contiguous (a forward pre-hook, installed once per model).

    With ``logits_to_keep=1`` transformers feeds the head ``hidden[:, -1:, :]``, a strided
    [B, 1, H] view. For such an input torch's matmul cannot fold the batch into one GEMM and
    falls back to a bmm against the weight expanded per row: a B x H x V copy. At B = 8 and
    V = 49152 on this CPU that was 441 ms per prefill, against 5.5 ms for the contiguous input.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None or getattr(head, "_specviz_contiguous_input", False):
        return
    head.register_forward_pre_hook(lambda module, args: (args[0].contiguous(), *args[1:]))
    head._specviz_contiguous_input = True


class RaggedCache:
    def __init__(self, model: torch.nn.Module, compact_threshold: float = 0.25, keep_hidden: bool = False,
                 options: ForwardOptions | None = None):
        from transformers import DynamicCache

        contiguous_head_input(model)
        self.model = model
        options = options or ForwardOptions.from_env()  # the run's choice (specviz.run.forward_options)
        self.lean = options.lean and fastllama.supports(model)  # our forward; else transformers'
        if self.lean:
            fastllama.fuse_projections(model)
        # static: preallocated buffers (crop = pointer move, CUDA graphs possible), the lean forward only
        self.static = self.lean and options.static_cache
        compiler = compiled.compiler() if self.static and options.compile else None  # the process's one
        self.cache = (statickv.StaticKV(model, options.cuda_graphs, compiler=compiler) if self.static
                      else DynamicCache(config=model.config))
        self.device = next(model.parameters()).device
        self.valid = torch.zeros(0, 0, dtype=torch.bool, device=self.device)  # [B, L]
        self.lengths = torch.zeros(0, dtype=torch.long, device=self.device)  # [B] valid tokens per row
        self.host_lengths: list[int] | None = []  # lengths on the host when known, else None (module docstring)
        self.compact_threshold = compact_threshold
        self.compactions = 0
        self._logits_store: torch.Tensor | None = None  # the reused verify-logits storage (_logits_buffer)
        # keep_hidden: after each forward, ``hidden`` is the final-norm output at every new slot
        # [B, T, hidden] (what the output layer reads): the features a feature draft consumes.
        self.keep_hidden = keep_hidden
        self.hidden: torch.Tensor | None = None

    # ---- sizes -----------------------------------------------------------------------------
    @property
    def slots(self) -> int:
        return self.valid.shape[1]

    @property
    def holes(self) -> int:
        return self.valid.numel() - sum(self._lengths_on_host())

    def _lengths_on_host(self) -> list[int]:
        """The mirror, read from the device (one sync) only when it is not known."""
        if self.host_lengths is None:
            self.host_lengths = self.lengths.tolist()
        return self.host_lengths

    def empty_rows(self, B: int) -> None:
        """B rows and no slots yet (a prefill of nothing: every prompt is one token)."""
        self.valid = torch.zeros(B, 0, dtype=torch.bool, device=self.device)
        self.lengths = torch.zeros(B, dtype=torch.long, device=self.device)
        self.host_lengths = [0] * B

    # ---- forward ---------------------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor | None, input_valid: torch.Tensor, last_only: bool = False,
                inputs_embeds: torch.Tensor | None = None, positions: torch.Tensor | None = None,
                tail_mask: torch.Tensor | None = None, reuse_logits: bool = False,
                counts: list[int] | None = None, slots: list[int] | None = None,
                logits: bool = True) -> torch.Tensor | None:
        """Append T slots per row and run the model over them.

        input_ids:   [B, T] token ids (anything at invalid slots), or None with inputs_embeds
        input_valid: [B, T] bool, False = a hole (padding within this step)
        inputs_embeds: [B, T, hidden] model inputs instead of token ids
        positions:   [B, T] explicit position ids (token trees: prefix length + depth), else counted
        tail_mask:   [B, T, S] which of the last S slots each new slot may see (a tree node: its
                     ancestors and itself; fastllama.visible)
        reuse_logits: the logits go into a buffer this cache reuses (lean forward only): the caller
                     is done with the previous call's logits (the decoder's verify)
        counts:      valid slots per row in input_valid, when the caller knows them on the host
                     (keeps host_lengths known); None: host_lengths becomes unknown
        slots:       the flat indices (b * T + t) of input_valid's valid slots, on the host: the lean
                     forward then runs its per-token work on those tokens only (fastllama); the
                     logits at holes are stale or zero
        logits:      False: the lean forward skips the output layer and returns None (a prefill that
                     only fills the cache; elsewhere the logits are computed as before)
        returns logits [B, T, V] (or [B, 1, V] for the last slot when last_only)
        """
        B, T = input_valid.shape
        if self.valid.shape[0] == 0 and self.slots == 0:
            self.empty_rows(B)
        known = counts is not None and self.host_lengths is not None
        self.host_lengths = [h + c for h, c in zip(self.host_lengths, counts)] if known else None
        # position of a valid slot = valid tokens before it in its row; holes reuse a neighbour's
        if positions is None:
            positions = self.lengths.unsqueeze(1) + input_valid.long().cumsum(dim=1) - 1  # [B, T]
            positions = positions.clamp(min=0)
        self.valid = torch.cat([self.valid, input_valid], dim=1)  # [B, L+T]
        self.lengths = self.lengths + input_valid.sum(dim=1)
        if self.static:
            out = self.cache.forward(self.model, input_ids, self.valid, positions, last_only, inputs_embeds,
                                     self.keep_hidden, tail_mask, reuse_logits)
            if self.keep_hidden:
                out, self.hidden = out
            return out
        if self.lean:
            buf = self._logits_buffer(B, T) if reuse_logits and not last_only and not self.keep_hidden else None
            packed_slots = (host_tensor(slots, self.device) if slots is not None and len(slots) < B * T
                            and not last_only else None)  # [N] only when there are holes to skip
            out = fastllama.forward(self.model, input_ids, self.valid, positions, self.cache, last_only,
                                    inputs_embeds=inputs_embeds, return_hidden=self.keep_hidden, tail_mask=tail_mask,
                                    logits_out=buf, slots=packed_slots, logits=logits)
            if self.keep_hidden:
                out, self.hidden = out
            return out
        captured = []
        hook = (self.model.model.norm.register_forward_hook(lambda m, args, out: captured.append(out))
                if self.keep_hidden else None)
        try:
            out = self.model(
                input_ids=input_ids if inputs_embeds is None else None,
                inputs_embeds=inputs_embeds,
                attention_mask=self.valid.long() if tail_mask is None else self._mask_4d(T, tail_mask),
                position_ids=positions,
                cache=self.cache,
                use_cache=True,
                logits_to_keep=1 if last_only else 0,
            )
        finally:
            if hook is not None:
                hook.remove()
        if self.keep_hidden:
            self.hidden = captured[-1]
        return out.logits

    def _logits_buffer(self, B: int, T: int) -> torch.Tensor:
        """[B, T, V] view of one storage that grows to the largest verify so far."""
        W = self.model.lm_head.weight  # [V, hidden]
        n = B * T * W.shape[0]
        if self._logits_store is None or self._logits_store.numel() < n:
            self._logits_store = torch.zeros(n, dtype=W.dtype, device=W.device)  # finite at holes never written
        return self._logits_store[:n].view(B, T, W.shape[0])

    def _mask_4d(self, T: int, tail_mask: torch.Tensor) -> torch.Tensor:
        """transformers' custom-mask form of fastllama.visible: [B, 1, T, L] additive (0 or the dtype's min)."""
        dtype = next(self.model.parameters()).dtype
        allowed = fastllama.visible(self.valid, T, tail_mask).unsqueeze(1)  # [B, 1, T, L]
        return torch.zeros(allowed.shape, dtype=dtype, device=self.device).masked_fill(~allowed, torch.finfo(dtype).min)

    # ---- rollback and memory ---------------------------------------------------------------
    def reject_tail(self, keep: torch.Tensor, kept: list[int] | None = None,
                    lengths: list[int] | None = None) -> None:
        """Mark the last T slots per row kept or rejected; keep: [B, T] bool.

        kept: per row, one past its last kept tail slot, on the host (a chain's kept count; a tree's
        last path slot + 1): the crop then reads nothing from the device. lengths: the rows' valid
        counts after, on the host."""
        T = keep.shape[1]
        tail = self.valid[:, -T:]
        dropped = (tail & ~keep).sum(dim=1)
        self.valid = torch.cat([self.valid[:, : self.slots - T], tail & keep], dim=1)
        self.lengths = self.lengths - dropped
        self.host_lengths = lengths
        if kept is None:
            self._crop_trailing()
            return
        remove = T - max(kept, default=T)  # tail slots no row kept (slots before the tail are left as they are)
        if remove > 0:
            self.cache.crop(-remove)
            self.valid = self.valid[:, : self.slots - remove]

    def _crop_trailing(self) -> None:
        any_valid = self.valid.any(dim=0)  # [L]
        if bool(any_valid.all()) or self.slots == 0:
            return
        nz = any_valid.nonzero()
        last = int(nz[-1]) + 1 if len(nz) else 0
        remove = self.slots - last
        if remove > 0:
            self.cache.crop(-remove)
            self.valid = self.valid[:, :last]

    @property
    def reclaimable(self) -> int:
        """Slots per row a compaction would free: the cache's length past its longest row."""
        if self.slots == 0 or self.valid.shape[0] == 0:
            return 0
        return self.slots - max(self._lengths_on_host())

    def maybe_compact(self) -> bool:
        """Compact when that frees more than ``compact_threshold`` of the slots (holes a
        compaction cannot remove, such as a short row's, never trigger it)."""
        if self.reclaimable <= self.compact_threshold * self.slots:
            return False
        self.compact()
        return True

    def compact(self) -> None:
        """Gather each row's valid slots to the right end; new length = longest row."""
        B, L = self.valid.shape
        new_len = max(self._lengths_on_host()) if B else 0
        # sort key: holes first (in slot order), then valid slots in slot order
        ar = torch.arange(L, device=self.device)
        key = self.valid.long() * L + ar  # [B, L]
        order = key.argsort(dim=1)[:, L - new_len:]  # [B, new_len]
        new_valid = self.valid.gather(1, order)
        if self.static:
            self.cache.gather_slots(order)
        else:
            for layer in self.cache.layers:  # a target split over GPUs (--device-map auto) has layers on each
                idx = order.to(layer.keys.device)[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3])
                layer.keys = layer.keys.gather(2, idx)
                layer.values = layer.values.gather(2, idx)
        self.valid = new_valid
        self.compactions += 1

    def select_rows(self, rows: torch.Tensor, host_rows: list[int] | None = None) -> None:
        """Keep only these rows (finished rows leave the batch); host_rows: the same indices as a list."""
        if host_rows is not None and self.host_lengths is not None:
            self.host_lengths = [self.host_lengths[i] for i in host_rows]
        else:
            self.host_lengths = None
        if self.static:
            self.cache.select_rows(rows)
        else:
            for layer in self.cache.layers:  # each layer indexed on its own device (a split target)
                if layer.is_initialized:
                    r = rows.to(layer.keys.device)  # [B_kept]
                    layer.keys, layer.values = layer.keys[r], layer.values[r]
        self.valid = self.valid[rows]
        self.lengths = self.lengths[rows]
        self._crop_leading()

    def _crop_leading(self) -> None:
        # Rows that left may have been the only ones using the oldest slots.
        if self.slots == 0 or self.valid.shape[0] == 0:
            return
        any_valid = self.valid.any(dim=0)
        first = int(any_valid.int().argmax())
        if first > 0 and bool(any_valid.any()):
            if self.static:
                self.cache.drop_leading(first)
            else:
                for layer in self.cache.layers:
                    layer.keys = layer.keys[:, :, first:]
                    layer.values = layer.values[:, :, first:]
            self.valid = self.valid[:, first:]

    def extend(self, other: "RaggedCache") -> None:
        """Append ``other``'s rows (requests that join a running batch, prefilled on their own).

        The shorter cache is left-padded with holes so both have the same slot count; each row
        keeps its own positions (they count its valid slots), so a joining row's keys, RoPE'd
        from position 0, are exact next to older rows. A cache with no rows left takes
        ``other``'s state whole (the slots of rows that left are gone with them).
        """
        L = max(self.slots, other.slots)
        if self.static:  # into this cache's own buffers (its captured graphs stay valid)
            self.cache.extend(other.cache, self.valid.shape[0], other.valid.shape[0])
            if self.valid.shape[0] == 0:
                self.valid, self.lengths = other.valid.to(self.device), other.lengths.to(self.device)
                self.host_lengths = other.host_lengths
                return
        elif self.valid.shape[0] == 0:
            self.cache, self.valid, self.lengths = other.cache, other.valid, other.lengths
            self.host_lengths = other.host_lengths
            return
        else:
            self._extend_layers(other, L)
        pad = lambda v: torch.cat([torch.zeros(v.shape[0], L - v.shape[1], dtype=torch.bool, device=v.device), v], 1)  # noqa: E731
        self.valid = torch.cat([pad(self.valid), pad(other.valid.to(self.device))], dim=0)  # [B + B_new, L]
        self.lengths = torch.cat([self.lengths, other.lengths.to(self.device)])
        both = self.host_lengths is not None and other.host_lengths is not None
        self.host_lengths = self.host_lengths + other.host_lengths if both else None

    def _extend_layers(self, other: "RaggedCache", L: int) -> None:
        """extend's DynamicCache part: both sides' layers left-padded to L slots, rows concatenated."""
        mine = [l for l in self.cache.layers if l.is_initialized and l.keys.numel()]
        theirs = [l for l in other.cache.layers if l.is_initialized and l.keys.numel()]
        if not (theirs or mine):
            return
        if not mine:  # this cache holds no slots yet: adopt other's layers with its row count
            self.cache = _hole_cache(other.cache, self.valid.shape[0], 0)
        for i, layer in enumerate(self.cache.layers):
            src = other.cache.layers[i] if theirs else None
            a_k, a_v = _left_pad_kv(layer.keys, layer.values, L)
            if src is None:
                b_k = a_k.new_zeros((other.valid.shape[0],) + a_k.shape[1:])
                b_v = a_v.new_zeros((other.valid.shape[0],) + a_v.shape[1:])
            else:
                b_k, b_v = _left_pad_kv(src.keys, src.values, L)
            layer.keys = torch.cat([a_k, b_k], dim=0)  # [B + B_new, heads, L, head_dim]
            layer.values = torch.cat([a_v, b_v], dim=0)

    def kv_bytes(self) -> int:
        if self.static:
            return self.cache.nbytes()  # what the buffers hold, live or not
        return sum(l.keys.numel() * l.keys.element_size() * 2 for l in self.cache.layers if l.is_initialized)


def _left_pad_kv(keys: torch.Tensor, values: torch.Tensor, L: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, heads, l, d] -> [B, heads, L, d] with L - l zero (hole) slots in front."""
    extra = L - keys.shape[2]
    if extra <= 0:
        return keys, values
    z = keys.new_zeros(keys.shape[0], keys.shape[1], extra, keys.shape[3])
    return torch.cat([z, keys], dim=2), torch.cat([z.to(values.dtype), values], dim=2)


def _hole_cache(like, B: int, L: int):
    """A cache shaped like ``like`` (same layers, heads, dtype) with B rows of L hole slots."""
    import copy

    cache = copy.copy(like)
    cache.layers = [copy.copy(l) for l in like.layers]
    for layer in cache.layers:
        shape = (B, layer.keys.shape[1], L, layer.keys.shape[3])
        layer.keys, layer.values = layer.keys.new_zeros(shape), layer.values.new_zeros(shape)
    return cache


def left_pad(rows: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged token lists -> (ids [B, T], valid [B, T]) left-padded with holes."""
    T = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)
    valid = torch.zeros((len(rows), T), dtype=torch.bool)
    for i, r in enumerate(rows):
        if r:
            ids[i, T - len(r):] = torch.tensor(r, dtype=torch.long)
            valid[i, T - len(r):] = True
    return to_device(ids, device), to_device(valid, device)
