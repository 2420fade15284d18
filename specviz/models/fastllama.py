"""A lean forward for llama-style models over the ragged cache (our own model code, same weights).

transformers' forward is general: per layer it walks a dozen modules, three separate q/k/v
projections and two MLP input projections, builds masks through a generic helper and calls
attention through a dispatch layer. At these sizes (SmolLM2-135M on a 2-core CPU, one token per
row) that Python and per-op work is a third of a decode step: `bench/profile_step.py` measured
matrix multiplies at 74% of the CPU time of a step and ~5 ms of Python between ops.

This forward computes the same function with fewer, larger ops:
  - q, k and v come from ONE matmul, gate and up from one: the modules' weights are re-pointed at
    row slices of one fused tensor (``fuse_projections``), so transformers' own forward, which
    still runs where this one does not apply, reads the same memory;
  - RMSNorm is ``torch.nn.functional.rms_norm`` in float32 (as transformers' LlamaRMSNorm: norm
    in float32, cast, then scale);
  - rotary embedding is applied to q and k together, with cos/sin from the model's own rotary
    module (so every rope type transformers supports works);
  - attention with a few queries per row is two batched matmuls over grouped heads (no
    repeat_kv) with the boolean ragged mask built once per forward: slot j is visible from
    query t when it is valid and not after it (the same mask transformers builds from our 2D
    validity mask, causal by slot order);
  - the KV cache is the same transformers ``DynamicCache`` (``cache.update``), so RaggedCache's
    rollback, compaction and row selection are unchanged; or, switched on, a static cache
    (specviz.models.statickv: the same ``update``, attention over its whole capacity);
  - given ``slots`` (the valid new slots, when the caller knows them), every per-token op (the
    matmuls, norms, rotary, MLP and output layer) runs on those tokens only, packed as [N, hidden];
    only attention sees the rectangular [B, T] layout, holes as zeros. A verify whose rows propose
    different numbers of tokens (n-grams: a row without a match proposes none) pays for the
    tokens, not for B x (k + 1) slots.

It applies to ``LlamaForCausalLM`` without projection biases, silu MLP and single-rank weights
(``supports``), on one device; anything else (a model spread by --device-map auto too) runs through
transformers. ``ForwardOptions(lean=False)`` (or ``SPECVIZ_LEAN_FORWARD=0``) turns it off.
Outputs match transformers' forward to float rounding (tests/models/test_fastllama.py).
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from specviz.models import bf16linear, packed

MANY_QUERIES = 16  # from this many query slots per row, SDPA's fused kernel is used instead


def supports(model: torch.nn.Module) -> bool:
    """True for the llama-style models this forward computes exactly."""
    cfg = getattr(model, "config", None)
    if cfg is None or type(model).__name__ != "LlamaForCausalLM" or not hasattr(F, "rms_norm"):
        return False
    if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
        return False
    if getattr(cfg, "hidden_act", "silu") != "silu" or getattr(cfg, "pretraining_tp", 1) != 1:
        return False
    if len({str(d) for d in (getattr(model, "hf_device_map", None) or {}).values()}) > 1:
        return False  # spread by accelerate (--device-map auto): its hooks move weights and activations
    inner = getattr(model, "model", None)
    return inner is not None and hasattr(inner, "rotary_emb") and hasattr(inner, "layers")


def _fuse(modules: list[torch.nn.Linear]) -> torch.Tensor:
    """One [sum(out), in] weight; each module's weight becomes a row slice (a view) of it."""
    fused = torch.cat([m.weight.detach() for m in modules], dim=0)
    start = 0
    for m in modules:
        n = m.weight.shape[0]
        m.weight = torch.nn.Parameter(fused[start:start + n], requires_grad=m.weight.requires_grad)
        start += n
    return fused


def fuse_projections(model: torch.nn.Module) -> None:
    """Give each layer one q|k|v and one gate|up weight (once per model; idempotent).

    Runs outside inference mode even when called inside it: the weights stay ordinary tensors,
    so the model can still be trained or run with autograd afterwards.
    """
    with torch.inference_mode(False), torch.no_grad():
        _fuse_layers(model)


def _is_fused(layer) -> bool:
    """Still fused: a .to(device / dtype) since would have made new, separate weights."""
    fused = getattr(layer, "_specviz_qkv", None)
    return fused is not None and fused.data_ptr() == layer.self_attn.q_proj.weight.data_ptr()


def _fuse_layers(model: torch.nn.Module) -> None:
    fused_any = False
    for layer in model.model.layers:
        if _is_fused(layer):
            continue
        attn, mlp = layer.self_attn, layer.mlp
        layer._specviz_qkv = _fuse([attn.q_proj, attn.k_proj, attn.v_proj])
        layer._specviz_gate_up = _fuse([mlp.gate_proj, mlp.up_proj])
        fused_any = True
    if fused_any:
        bf16linear.forget_decoder_weights(model.model.layers)  # it held the old weights


def _fused(pk: bool, d: int) -> bool:
    """bf16 through our AVX2 kernel (oneDNN cannot pack here): the other steps run fused too (bf16linear's
    rms_norm, silu_mul, rope and attention: one op each instead of five to a dozen small ones), unless
    SPECVIZ_BF16_FUSED=0."""
    return pk and packed.kernel_is_faster() and d % 16 == 0 and os.environ.get("SPECVIZ_BF16_FUSED", "1") != "0"


def _rms_norm(x: torch.Tensor, norm, fused: bool = False) -> torch.Tensor:
    if fused and norm.weight.dtype == x.dtype:
        return bf16linear.rms_norm(x, norm.weight, norm.variance_epsilon)
    h = F.rms_norm(x.float(), (x.shape[-1],), eps=norm.variance_epsilon)
    return norm.weight * h.to(x.dtype)


def _rotate_qk(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n: int, fused: bool) -> torch.Tensor:
    """qkv [..., heads, d], cos/sin [..., 1, d] -> the first n heads (q and k) rotated, [..., n, d]."""
    if not fused:
        return _rotate(qkv[..., :n, :], cos, sin)
    lead, (heads, d) = qkv.shape[:-2], qkv.shape[-2:]
    return bf16linear.rope(qkv.reshape(-1, heads, d), cos.reshape(-1, d), sin.reshape(-1, d), n).view(*lead, n, d)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _heads(model) -> tuple[int, int, int, int, float]:
    """(query heads, kv heads, head dim, query heads per kv head, attention scale), the projections
    fused first if they are not yet (the whole model moves at once: one layer tells)."""
    cfg = model.config
    if not _is_fused(model.model.layers[0]):
        fuse_projections(model)
    H, Hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // H
    return H, Hkv, d, H // Hkv, d ** -0.5


def _mlp_block(h: torch.Tensor, layer, pk: bool, fused: bool = False) -> torch.Tensor:
    """h + the layer's MLP of its post-attention norm: [..., hidden] -> [..., hidden]."""
    x = _rms_norm(h, layer.post_attention_layernorm, fused)
    gate_up = packed.linear(x, layer._specviz_gate_up, pk)  # [..., 2 * intermediate]
    if fused:
        act = bf16linear.silu_mul(gate_up)
    else:
        gate, up = gate_up.chunk(2, dim=-1)
        act = F.silu(gate) * up
    return _add_linear(h, act, layer.mlp.down_proj.weight, pk, fused)


def _add_linear(h: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, pk: bool, fused: bool) -> torch.Tensor:
    """h + x @ weight.T: the residual added inside the kernel's store when fused (one op, no sum tensor)."""
    if fused and bf16linear.fits(x, weight):
        return bf16linear.linear(x, weight, residual=h)
    return h + packed.linear(x, weight, pk)


def _grouped_blocked(allowed: torch.Tensor, groups: int) -> torch.Tensor:
    """[B, 1, T, L] allowed -> [B, 1, groups * T, L] masked-out slots of the grouped-matmul path."""
    B, _, T, L = allowed.shape
    return ~allowed.expand(B, groups, T, L).reshape(B, 1, groups * T, L)


def _attention(q, k, v, allowed, scale, groups, blocked=None, fused=False):
    """q [B, H, T, d], k/v [B, Hkv, L, d], allowed [B, 1, T, L] bool -> [B, T, H * d].

    blocked: ``_grouped_blocked(allowed, groups)`` when the caller built it once for every layer.
    fused: bf16 through our kernel (``_fused``): a few query slots per row run as one op."""
    B, H, T, d = q.shape
    if fused and T < MANY_QUERIES:
        return bf16linear.attention(q, k, v, allowed[:, 0], scale)
    if T >= MANY_QUERIES:  # prefill-sized: the fused kernel (kv heads repeated: works on any torch 2.x)
        if groups > 1:
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
        return out.transpose(1, 2).reshape(B, T, H * d)
    Hkv = k.shape[1]
    qg = q.reshape(B, Hkv, groups * T, d).float()  # the query heads sharing one kv head, stacked
    scores = torch.matmul(qg, k.float().transpose(2, 3)) * scale  # [B, Hkv, groups*T, L], float32
    if blocked is None:
        blocked = _grouped_blocked(allowed, groups)
    probs = torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)
    out = torch.matmul(probs, v.float()).to(q.dtype)  # [B, Hkv, groups*T, d]
    return out.reshape(B, H, T, d).transpose(1, 2).reshape(B, T, H * d)


def visible(valid: torch.Tensor, T: int, tail_mask: torch.Tensor | None = None,
            query_slots: torch.Tensor | None = None) -> torch.Tensor:
    """[B, T, L] bool: which cache slots each of the T new query slots attends to.

    valid: [B, L] the cache's validity mask including the new slots. Slot j is visible from query
    t when it is valid and not after it (causal by slot order). ``tail_mask`` [B, T, S] (token
    trees, specviz.engine.tree) further restricts the last S slots: a tree node sees only its own
    ancestors among them; it must let every query see itself. ``query_slots`` [T] (a device
    tensor): the new slots' columns when they are not the last T (a static cache: ``valid`` is
    padded to its capacity, invalid past them, so one CUDA graph serves every cache length).
    """
    L_all = valid.shape[1]
    slot = torch.arange(L_all, device=valid.device)
    if query_slots is None:
        query_slot = (L_all - T) + torch.arange(T, device=valid.device)  # [T]
    else:
        query_slot = query_slots
    causal = slot[None, :] <= query_slot[:, None]  # [T, L]
    # A hole's query may have no valid slot to see (left padding): let it see itself, so its
    # softmax stays finite. Its output is never used, and no valid slot ever attends to a hole.
    allowed = (valid[:, None, :] & causal) | (slot[None, :] == query_slot[:, None])  # [B, T, L]
    if tail_mask is not None:
        S = tail_mask.shape[-1]
        if query_slots is None:
            allowed[:, :, L_all - S:] &= tail_mask
        else:  # the S slots ending at the last query slot, found on the device (no host sync)
            tail_cols = query_slot[-1] + 1 - S + torch.arange(S, device=valid.device)  # [S]
            allowed &= torch.ones_like(allowed).index_copy_(2, tail_cols, tail_mask)  # [B, T, L]
    return allowed


@torch.inference_mode()
def forward(model, input_ids: torch.Tensor, valid: torch.Tensor, position_ids: torch.Tensor, cache,
            last_only: bool = False, inputs_embeds: torch.Tensor | None = None, return_hidden: bool = False,
            tail_mask: torch.Tensor | None = None, logits_out: torch.Tensor | None = None,
            query_slots: torch.Tensor | None = None, slots: torch.Tensor | None = None, logits: bool = True,
            compiler=None):
    """Logits [B, T, V] (or [B, 1, V]) for T new slots per row.

    valid: [B, L + T] bool, the whole cache's validity mask including the new slots (the
    RaggedCache's mask after appending); position_ids: [B, T]. ``inputs_embeds`` [B, T, hidden]
    replaces the token embedding (a feature draft's fused input). With ``return_hidden`` the
    result is (logits, hidden [B, T, hidden]): the final-norm output at every slot, what the
    output layer reads (a feature draft's input). ``tail_mask`` [B, T, S]: see ``visible``.
    ``logits_out``: a [B, T, V] tensor the logits are written into (returned) when it fits.
    ``query_slots`` [T]: the new slots' columns in a static cache (specviz.models.statickv), whose
    ``update`` writes them in place and returns the whole capacity; see ``visible``.
    ``slots`` [N]: the flat indices (b * T + t) of the valid new slots, in order: per-token work on
    those only (module docstring); the logits (and hidden) at holes are zeros, or the buffer's old
    values with ``logits_out``.
    ``logits=False``: no output layer (a prefill only fills the cache): None, or (None, hidden).
    ``compiler``: a specviz.models.compiled.LayerCompiler runs the layers compiled over a static cache
    (``query_slots`` given, fewer than MANY_QUERIES slots per row); eager when it cannot.
    """
    if slots is not None:
        return _forward_slots(model, input_ids, valid, position_ids, cache, slots, inputs_embeds, return_hidden,
                              tail_mask, logits_out)
    inner = model.model
    H, Hkv, d, groups, scale = _heads(model)
    B, T = position_ids.shape

    h = inner.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds  # [B, T, hidden]
    cos, sin = inner.rotary_emb(h, position_ids)  # [B, T, d]
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)  # [B, T, 1, d]: broadcast over heads
    allowed = visible(valid, T, tail_mask, query_slots).unsqueeze(1)  # [B, 1, T, L]
    pk = packed.enabled(inner.layers[0]._specviz_qkv)  # bf16 on the CPU: oneDNN-packed weights (packed.py)
    fused = _fused(pk, d) and h.dtype == torch.bfloat16
    # once per forward, not per layer (the fused attention reads ``allowed``; the compiled layers need it)
    blocked = _grouped_blocked(allowed, groups) if T < MANY_QUERIES and not (fused and compiler is None) else None

    done = None
    if compiler is not None and blocked is not None and query_slots is not None:
        done = compiler.run(inner.layers, h, cos, sin, blocked, cache.layer_views(B), query_slots,
                            (H, Hkv, d, groups, scale))
    if done is None and fused and T < MANY_QUERIES and bf16linear.decoder_fits(inner.layers[0], h):
        done = _bf16_decoder(inner.layers, h, cos, sin, allowed[:, 0], cache, query_slots, (H, Hkv, scale))
    for i, layer in enumerate(inner.layers if done is None else []):
        attn = layer.self_attn
        x = _rms_norm(h, layer.input_layernorm, fused)
        qkv = packed.linear(x, layer._specviz_qkv, pk).view(B, T, H + 2 * Hkv, d)
        qk = _rotate_qk(qkv, cos, sin, H + Hkv, fused)  # q and k heads rotated together
        q = qk[:, :, :H].transpose(1, 2)  # [B, H, T, d]
        k = qk[:, :, H:].transpose(1, 2)  # [B, Hkv, T, d]
        v = qkv[:, :, H + Hkv:].transpose(1, 2)
        k, v = cache.update(k.contiguous(), v.contiguous(), i)  # [B, Hkv, L_all, d]
        h = _add_linear(h, _attention(q, k, v, allowed, scale, groups, blocked, fused), attn.o_proj.weight, pk, fused)
        h = _mlp_block(h, layer, pk, fused)
    h = h if done is None else done

    if return_hidden:
        h = _rms_norm(h, inner.norm, fused)
        return (_head(model, h[:, -1:].contiguous() if last_only else h, logits_out, pk) if logits else None), h
    if not logits:
        return None
    if last_only:
        h = h[:, -1:]
    h = _rms_norm(h.contiguous(), inner.norm, fused)
    return _head(model, h, logits_out, pk)


def _bf16_decoder(layers, h: torch.Tensor, cos, sin, allowed: torch.Tensor, cache, query_slots, heads):
    """The decoder layers for a few query slots per row in bf16 through our kernel, all in one C++ call
    (bf16linear.decoder: the fused path's ops in its order, the same bits), over a static cache (``query_slots``
    given: its buffers written in place) or a plain DynamicCache (grown, its layers' tensors replaced); None for
    any other cache."""
    H, Hkv, scale = heads
    B, d = h.shape[0], cos.shape[-1]
    cos, sin = cos.reshape(-1, d), sin.reshape(-1, d)  # [B*T, d]
    if query_slots is not None:
        views = cache.layer_views(B)  # per layer [B, Hkv, C, d]
        h, _, _ = bf16linear.decoder(layers, h, cos, sin, allowed, [k for k, _ in views], [v for _, v in views],
                                     query_slots, H, Hkv, scale)
        return h
    grown = _dynamic_layers(cache, len(layers))
    if grown is None:
        return None
    empty = h.new_empty(0)
    h, keys, values = bf16linear.decoder(layers, h, cos, sin, allowed,
                                         [c.keys if c.is_initialized else empty for c in grown],
                                         [c.values if c.is_initialized else empty for c in grown], None, H, Hkv, scale)
    for c, k, v in zip(grown, keys, values):  # what DynamicLayer.update leaves: its tensors, grown
        if not c.is_initialized:
            c.lazy_initialization(k, v)
        c.keys, c.values = k, v
    return h


def _dynamic_layers(cache, n: int) -> list | None:
    """A DynamicCache's n layers when each is a plain DynamicLayer (its tensors grow by concatenation: what
    ``update`` does) and nothing else happens on an update (no offloading); else None."""
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:  # a transformers without per-layer cache objects: the op-by-op path
        return None
    layers = getattr(cache, "layers", None)
    if getattr(cache, "offloading", False) or layers is None or len(layers) != n:
        return None
    used = ("keys", "values", "is_initialized", "lazy_initialization")  # what _bf16_decoder reads and calls
    if not all(hasattr(layers[0], a) for a in used):
        return None
    return layers if all(type(c) is DynamicLayer for c in layers) else None


def _head(model, h: torch.Tensor, out: torch.Tensor | None, pk: bool = False) -> torch.Tensor:
    """The output layer, into ``out`` when it fits: a caller's reused buffer saves allocating (and, past
    glibc's 32 MB mmap threshold, page-faulting) B x T x V fresh floats per forward. With ``pk`` (bf16 on
    the CPU) a plain linear head runs on its packed weight instead, into a fresh tensor, while that
    tensor stays under ``packed.FRESH_BYTES``; or, where oneDNN cannot pack, through our bf16 kernel
    (into ``out`` when it fits)."""
    head = model.lm_head
    fresh_bytes = h[..., :1].numel() * head.weight.shape[0] * h.element_size()
    fits = (out is not None and out.is_contiguous() and getattr(head, "bias", None) is None and out.dtype == h.dtype
            and tuple(out.shape) == (*h.shape[:-1], head.weight.shape[0]))
    if pk and type(head) is torch.nn.Linear and head.bias is None and packed.enabled(head.weight):
        if not packed.cpu_packs_bf16():
            return packed.linear(h, head.weight, True, out if fits else None)
        if out is None or fresh_bytes < packed.FRESH_BYTES:
            return packed.linear(h, head.weight, True)
    if not fits:
        return head(h)
    return torch.matmul(h, head.weight.t(), out=out)  # what F.linear computes without a bias


def _forward_slots(model, input_ids, valid, position_ids, cache, slots, inputs_embeds, return_hidden, tail_mask,
                   logits_out):
    """``forward`` computing per-token work on the N valid new slots only (``slots``: flat b * T + t)."""
    inner = model.model
    H, Hkv, d, groups, scale = _heads(model)
    B, T, N = *position_ids.shape, slots.shape[0]

    if inputs_embeds is None:
        h = inner.embed_tokens(input_ids.reshape(B * T)[slots])  # [N, hidden]
    else:
        h = inputs_embeds.reshape(B * T, -1)[slots]  # [N, hidden]
    cos, sin = inner.rotary_emb(h, position_ids.reshape(1, B * T)[:, slots])  # [1, N, d]
    cos, sin = cos[0].unsqueeze(1), sin[0].unsqueeze(1)  # [N, 1, d]: broadcast over heads
    allowed = visible(valid, T, tail_mask).unsqueeze(1)  # [B, 1, T, L]
    pk = packed.enabled(inner.layers[0]._specviz_qkv)
    fused = _fused(pk, d) and h.dtype == torch.bfloat16
    blocked = _grouped_blocked(allowed, groups) if T < MANY_QUERIES and not fused else None
    grid = h.new_zeros(B * T, H + 2 * Hkv, d)  # [B*T, heads, d]: q|k|v at every slot, holes stay zero

    for i, layer in enumerate(inner.layers):
        attn = layer.self_attn
        x = _rms_norm(h, layer.input_layernorm, fused)
        qkv = packed.linear(x, layer._specviz_qkv, pk).view(N, H + 2 * Hkv, d)
        grid[slots, : H + Hkv] = _rotate_qk(qkv, cos, sin, H + Hkv, fused)  # q and k heads rotated together
        grid[slots, H + Hkv:] = qkv[:, H + Hkv:]
        q = grid[:, :H].view(B, T, H, d).transpose(1, 2)  # [B, H, T, d]
        k = grid[:, H:H + Hkv].view(B, T, Hkv, d).transpose(1, 2)  # [B, Hkv, T, d]
        v = grid[:, H + Hkv:].view(B, T, Hkv, d).transpose(1, 2)
        k, v = cache.update(k.contiguous(), v.contiguous(), i)  # [B, Hkv, L_all, d]
        out = _attention(q, k, v, allowed, scale, groups, blocked, fused).reshape(B * T, H * d)[slots]  # [N, H*d]
        h = _add_linear(h, out, attn.o_proj.weight, pk, fused)
        h = _mlp_block(h, layer, pk, fused)

    h = _rms_norm(h, inner.norm, fused)  # [N, hidden]
    logits = _head(model, h, None, pk)  # [N, V]
    V = logits.shape[-1]
    fits = logits_out is not None and tuple(logits_out.shape) == (B, T, V) and logits_out.dtype == logits.dtype
    full = logits_out.view(B * T, V) if fits else logits.new_zeros(B * T, V)
    full.index_copy_(0, slots, logits)
    full = full.view(B, T, V)
    if return_hidden:
        return full, h.new_zeros(B * T, h.shape[-1]).index_copy_(0, slots, h).view(B, T, -1)
    return full
