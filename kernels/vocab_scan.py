"""The per-row kernel's scans over the vocabulary (kernels/spec_verify.py's second kernel): merge one
position's chunk partials, pick the greedy token, turn a tile of logits into p (or the residual
max(0, p - q)), sum a chunk's mass and find the token where a running sum crosses a target.

A vocabulary of V logits is split into C chunks of at most MAX_TILES_PER_CHUNK tiles of BLOCK
logits; the first kernel leaves one (max, sum) partial per chunk (greedy: (max, first argmax)).
"""

from __future__ import annotations

import triton
import triton.language as tl

# How p is obtained from the values the kernels read.
GREEDY = tl.constexpr(0)  # argmax of logits
SOFTMAX = tl.constexpr(1)  # exact: softmax(logits / T), from chunk partials
PROBS = tl.constexpr(2)  # top-p fallback: processed probabilities computed in torch
SIGMOID = tl.constexpr(3)  # APPROXIMATE: sigmoid(logits / T), elementwise, not normalised


@triton.jit
def _merge_chunks(part_a_ptr, part_b_ptr, rp, C, C_P2: tl.constexpr):
    """One position's chunk partials -> (global max, [C_P2] chunk sums rebased to it).

    The chunk sums add up to the softmax denominator."""
    cs = tl.arange(0, C_P2)
    m = tl.load(part_a_ptr + rp * C + cs, mask=cs < C, other=float("-inf"))
    s = tl.load(part_b_ptr + rp * C + cs, mask=cs < C, other=0.0)
    top = tl.max(m, axis=0)
    top = tl.where(top == float("-inf"), 0.0, top)
    return top, s * tl.exp(m - top)


@triton.jit
def _greedy_pick(part_a_ptr, part_b_ptr, rp, C, C_P2: tl.constexpr):
    """argmax over the vocabulary from chunk (max, argmax); ties -> lowest id, as torch.argmax."""
    cs = tl.arange(0, C_P2)
    m = tl.load(part_a_ptr + rp * C + cs, mask=cs < C, other=float("-inf"))
    idx = tl.load(part_b_ptr + rp * C + cs, mask=cs < C, other=0)
    first = tl.min(tl.where(m == tl.max(m, axis=0), cs, C_P2), axis=0)
    return tl.sum(tl.where(cs == first, idx, 0), axis=0)


@triton.jit
def _p_of(v, top, denom, temperature, MODE: tl.constexpr):
    """p from the values read: logits (SOFTMAX, SIGMOID) or probabilities (PROBS)."""
    if MODE == SOFTMAX:
        return tl.exp(v / temperature - top) / denom
    elif MODE == SIGMOID:
        return tl.sigmoid(v / temperature)
    else:
        return v


@triton.jit
def _tile_weights(vals_ptr, q_ptr, rp, rq, offs, V, x, top, denom, temperature, residual,
                  MODE: tl.constexpr, HAS_Q: tl.constexpr):
    """On one tile: (p, residual max(0, p - q)); q = one-hot(x) when there are no draft probs."""
    inside = offs < V
    v = tl.load(vals_ptr + rp.to(tl.int64) * V + offs, mask=inside, other=0.0).to(tl.float32)
    p = tl.where(inside, _p_of(v, top, denom, temperature, MODE), 0.0)
    if HAS_Q:
        # q is read only for rejected rows (the flag folds into the bound: the interpreter
        # mis-types a vector mask & a scalar flag)
        q = tl.load(q_ptr + rq.to(tl.int64) * V + offs, mask=offs < tl.where(residual, V, 0), other=0.0)
        q = q.to(tl.float32)
        r = tl.maximum(p - q, 0.0)
    else:
        r = tl.where(offs == tl.where(residual, x, -1), 0.0, p)  # max(0, p(x) - 1) = 0: p(x) <= 1
    return p, r


@triton.jit
def _chunk_sums(vals_ptr, q_ptr, rp, rq, c, n_tiles, tiles_per_chunk, V, x, top, denom, temperature,
                residual, MODE: tl.constexpr, HAS_Q: tl.constexpr, BLOCK: tl.constexpr):
    """Masses of p and of the residual over chunk c (n_tiles = 0 reads nothing)."""
    lanes = tl.arange(0, BLOCK)
    sp = tl.full([], 0.0, tl.float32)
    sr = tl.full([], 0.0, tl.float32)
    for t in range(n_tiles):
        offs = (c * tiles_per_chunk + t) * BLOCK + lanes
        p, r = _tile_weights(vals_ptr, q_ptr, rp, rq, offs, V, x, top, denom, temperature, residual, MODE, HAS_Q)
        sp += tl.sum(p, axis=0)
        sr += tl.sum(r, axis=0)
    return sp, sr


@triton.jit
def _scan_chunk(vals_ptr, q_ptr, rp, rq, c, tiles_per_chunk, V, x, top, denom, temperature,
                use_residual, target, MODE: tl.constexpr, HAS_Q: tl.constexpr, BLOCK: tl.constexpr):
    """Inverse CDF inside chunk c: the first token whose running mass exceeds target.

    A hit must carry mass (the running sum and the chunk sum round differently, and the
    reference never draws a zero-probability token); no hit -> the last token with mass."""
    lanes = tl.arange(0, BLOCK)
    running = tl.full([], 0.0, tl.float32)
    hit = tl.full([], 2147483647, tl.int32)
    last = tl.full([], -1, tl.int32)
    for t in range(tiles_per_chunk):
        offs = (c * tiles_per_chunk + t) * BLOCK + lanes
        p, r = _tile_weights(vals_ptr, q_ptr, rp, rq, offs, V, x, top, denom, temperature,
                             use_residual, MODE, HAS_Q)
        w = tl.where(use_residual, r, p)
        cdf = running + tl.cumsum(w, axis=0)
        hit = tl.minimum(hit, tl.min(tl.where((cdf > target) & (w > 0), offs, 2147483647), axis=0))
        last = tl.maximum(last, tl.max(tl.where(w > 0, offs, -1), axis=0))
        running += tl.sum(w, axis=0)
    return tl.where(hit < 2147483647, hit, tl.maximum(last, c * tiles_per_chunk * BLOCK))
