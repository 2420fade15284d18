"""The token-tree acceptance walk in Triton: one program per row over the flat ragged layout.

The spec is the torch reference ``specviz.engine.tree.accept_tree``: same arguments, same
``TreeVerdict``, same use of the uniforms (``uniforms[b, i]`` decides row b's node i, at most
once; ``uniforms[b, N_b]`` draws the recovered/bonus token by inverse CDF). The layout is read as
it is, with no padding: row b's nodes are ``tokens[cu_nodes[b]:cu_nodes[b + 1]]`` and
``parents`` holds row-local parent indices (-1 = the row's last token, verify slot 0).

  _walk_rows_kernel  grid (B,): walks the row's nodes in index order (parents before children,
                     siblings in draft order), testing each child of the current node:
                       greedy    accept iff the token is the argmax at the current slot; the
                                 argmax is taken in the kernel, once per slot on the path
                       sampling  the residual r starts as p at the slot; accept c_j iff
                                 u * sum(r) < r(c_j) (no renormalisation: u < r(c_j)); a rejected
                                 child's r(c_j) is zeroed; an accepted child restarts r from p
                     then the final token: the argmax (greedy) or r's inverse CDF (sampling; r
                     with no mass left falls back to p at the current slot, as the reference).

p for sampling (temperature, top-p) is ``specviz.engine.sampling.process_logits`` in torch, the
reference's own [B, 1 + N, V] float32 probabilities (the chain kernel does the same for top-p);
the residual lives in a [B, V] float32 scratch row per program. Greedy reads the logits only.

Exactness: greedy and the accept/reject decisions use the same values as the reference; only
sum(r) and the CDF are summed in another order, so a sampled decision or final token can differ
from the reference only where u * sum(r) lands within float rounding of a threshold
(tests/engine/test_tree_kernel.py compares both on many random trees).

Memory: every residual access (copy, sums, zeroing) goes through the same [BLOCK] tile loop, so
each element of the scratch row is always read and written by the same thread; the scalar
token reads (r(x)) are taken from those tiles too, never by a lone scalar load.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specviz.engine.kernels.interpret import interpreting
from specviz.engine.sampling import SamplingParams, process_logits
from specviz.engine.tree import TokenTree, TreeVerdict

BLOCK_V = 1024  # one tile of the vocabulary


# ---------------------------------------------------------------------------------------------
# vocabulary passes over one [V] vector


@triton.jit
def _argmax(x_ptr, V, BLOCK: tl.constexpr):
    """argmax of x_ptr[0:V]; ties -> the lowest id, as torch.argmax."""
    lanes = tl.arange(0, BLOCK)
    best = tl.full([], float("-inf"), tl.float32)
    arg = tl.full([], 0, tl.int32)
    for t in range(tl.cdiv(V, BLOCK)):
        offs = t * BLOCK + lanes
        x = tl.load(x_ptr + offs, mask=offs < V, other=float("-inf")).to(tl.float32)  # [BLOCK]
        tile_max, tile_arg = tl.max(x, axis=0, return_indices=True, return_indices_tie_break_left=True)
        arg = tl.where(tile_max > best, t * BLOCK + tile_arg, arg)  # strict: the first maximum wins
        best = tl.maximum(best, tile_max)
    return arg


@triton.jit
def _copy(src_ptr, dst_ptr, V, BLOCK: tl.constexpr):
    """dst[0:V] = src[0:V] (p at a slot -> the residual row)."""
    lanes = tl.arange(0, BLOCK)
    for t in range(tl.cdiv(V, BLOCK)):
        offs = t * BLOCK + lanes
        tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < V, other=0.0), mask=offs < V)


@triton.jit
def _mass_and_at(r_ptr, x, V, BLOCK: tl.constexpr):
    """(sum(r), r[x]) in one pass."""
    lanes = tl.arange(0, BLOCK)
    mass = tl.full([], 0.0, tl.float32)
    r_x = tl.full([], 0.0, tl.float32)
    for t in range(tl.cdiv(V, BLOCK)):
        offs = t * BLOCK + lanes
        r = tl.load(r_ptr + offs, mask=offs < V, other=0.0)  # [BLOCK]
        mass += tl.sum(r, axis=0)
        r_x += tl.sum(tl.where(offs == x, r, 0.0), axis=0)
    return mass, r_x


@triton.jit
def _zero_at(r_ptr, x, V, BLOCK: tl.constexpr):
    """r[x] = 0, through the tile holding x."""
    offs = (x // BLOCK) * BLOCK + tl.arange(0, BLOCK)
    r = tl.load(r_ptr + offs, mask=offs < V, other=0.0)  # [BLOCK]
    tl.store(r_ptr + offs, tl.where(offs == x, 0.0, r), mask=offs < V)


@triton.jit
def _draw(r_ptr, u, V, BLOCK: tl.constexpr):
    """``sample_inverse_cdf``: the first id whose running mass exceeds u * total, capped at the
    last id with mass (u * total can round up to total); no mass at all -> 0."""
    lanes = tl.arange(0, BLOCK)
    total = tl.full([], 0.0, tl.float32)
    for t in range(tl.cdiv(V, BLOCK)):
        offs = t * BLOCK + lanes
        total += tl.sum(tl.load(r_ptr + offs, mask=offs < V, other=0.0), axis=0)
    target = u * total
    running = tl.full([], 0.0, tl.float32)
    hit = tl.full([], 2147483647, tl.int32)
    last = tl.full([], 0, tl.int32)
    for t in range(tl.cdiv(V, BLOCK)):
        offs = t * BLOCK + lanes
        r = tl.load(r_ptr + offs, mask=offs < V, other=0.0)  # [BLOCK]
        cdf = running + tl.cumsum(r, axis=0)  # [BLOCK]
        hit = tl.minimum(hit, tl.min(tl.where(cdf > target, offs, 2147483647), axis=0))
        last = tl.maximum(last, tl.max(tl.where(r > 0, offs, 0), axis=0))
        running += tl.sum(r, axis=0)
    return tl.minimum(hit, last)


@triton.jit
def _total(r_ptr, V, BLOCK: tl.constexpr):
    mass, _ = _mass_and_at(r_ptr, -1, V, BLOCK)
    return mass


# ---------------------------------------------------------------------------------------------
# the walk


@triton.jit
def _walk_rows_kernel(
    vals_ptr,  # [B, T, V] logits (greedy) or processed probabilities p (sampling); T = 1 + N
    tokens_ptr,  # [num_nodes] int64 draft ids
    parents_ptr,  # [num_nodes] int64 row-local parent, -1 = the row's last token (slot 0)
    cu_ptr,  # [B + 1] int64 row b's nodes are [cu[b], cu[b + 1])
    uniforms_ptr,  # [B, T] f32: node i's test at [b, i], the final draw at [b, N_b]
    resid_ptr,  # [B, V] f32 scratch: the residual r (sampling)
    num_accepted_ptr,  # [B] int64 out
    emitted_ptr,  # [B, T] int64 out, pre-filled with -1: accepted tokens, then the final token
    keep_ptr,  # [B, T] int8 out, pre-filled with 0: the root and the accepted path's slots
    V,
    T,
    GREEDY: tl.constexpr,
    RENORMALISE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    start = tl.load(cu_ptr + row)
    n = (tl.load(cu_ptr + row + 1) - start).to(tl.int32)
    base = row.to(tl.int64) * T  # the row's slot 0 in [B, T]
    r_ptr = resid_ptr + row.to(tl.int64) * V

    cur = tl.full([], 0, tl.int32)  # the current verify slot (0 = root, node i = slot i + 1)
    num_acc = tl.full([], 0, tl.int32)
    if GREEDY:
        best = _argmax(vals_ptr + base * V, V, BLOCK)
    else:
        _copy(vals_ptr + base * V, r_ptr, V, BLOCK)
        tl.debug_barrier()
    for i in range(n):  # one pass: parents before children, siblings in draft order
        parent = tl.load(parents_ptr + start + i).to(tl.int32)
        if parent + 1 == cur:  # node i is a child of the current node
            x = tl.load(tokens_ptr + start + i)
            if GREEDY:
                ok = x == best
            else:
                mass, r_x = _mass_and_at(r_ptr, x, V, BLOCK)
                if not RENORMALISE:  # the deliberately wrong rule of the distribution test
                    mass = 1.0
                u = tl.load(uniforms_ptr + base + i)
                ok = u * mass < r_x  # u < r(x) / sum(r)
            if ok:
                tl.store(emitted_ptr + base + num_acc, x)
                num_acc += 1
                cur = i + 1
                tl.store(keep_ptr + base + cur, 1)
                if GREEDY:
                    best = _argmax(vals_ptr + (base + cur) * V, V, BLOCK)
                else:
                    _copy(vals_ptr + (base + cur) * V, r_ptr, V, BLOCK)  # an accepted child: r = p at it
                    tl.debug_barrier()
            else:
                if not GREEDY:
                    _zero_at(r_ptr, x, V, BLOCK)  # zero r(c_j), try the next child
                    tl.debug_barrier()

    if GREEDY:
        final = best  # recovered at the first miss, bonus after a full path
    else:
        if _total(r_ptr, V, BLOCK) <= 0:  # rounding left no residual mass: fall back to p
            _copy(vals_ptr + (base + cur) * V, r_ptr, V, BLOCK)
            tl.debug_barrier()
        final = _draw(r_ptr, tl.load(uniforms_ptr + base + n), V, BLOCK)
    tl.store(emitted_ptr + base + num_acc, final.to(tl.int64))
    tl.store(num_accepted_ptr + row, num_acc.to(tl.int64))
    tl.store(keep_ptr + base, 1)


# ---------------------------------------------------------------------------------------------
# wrapper


def accept_tree_triton(
    target_logits: torch.Tensor,  # [B, 1 + N, V] target logits at every verify slot (slot 0 = root)
    tree: TokenTree,
    uniforms: torch.Tensor,  # [B, N + 1] in [0, 1): node i's test at [b, i], the final draw at [b, N_b]
    params: SamplingParams,
    *,
    renormalise: bool = True,  # False only for the distribution test's deliberately wrong rule
) -> TreeVerdict:
    """``accept_tree`` as one Triton program per row; same arguments, same TreeVerdict."""
    return _accept_tree_triton(target_logits, tree, uniforms, params, renormalise=renormalise)


def _accept_tree_triton(target_logits, tree, uniforms, params, *, renormalise=True, block_v=None) -> TreeVerdict:
    """accept_tree_triton with the tile size exposed (tests force tiny tiles: multi-tile, partial tiles)."""
    B, T, V = target_logits.shape
    dev = target_logits.device
    N = max(tree.sizes(), default=0)
    assert T == N + 1, f"logits have {T} slots for trees of up to {N} nodes"
    assert uniforms.shape == (B, T), f"uniforms {tuple(uniforms.shape)}, want {(B, T)}"
    if dev.type != "cuda" and not interpreting():
        raise RuntimeError("accept_tree_triton needs CUDA tensors (or TRITON_INTERPRET=1 for the CPU interpreter)")

    vals = (target_logits if params.greedy else process_logits(target_logits, params)).contiguous()  # [B, T, V]
    resid = torch.empty((B, V) if not params.greedy else (1,), dtype=torch.float32, device=dev)
    num_accepted = torch.zeros(B, dtype=torch.long, device=dev)
    emitted = torch.full((B, T), -1, dtype=torch.long, device=dev)
    keep = torch.zeros(B, T, dtype=torch.int8, device=dev)
    if B:
        _walk_rows_kernel[(B,)](
            vals, tree.tokens.to(dev, torch.long).contiguous(), tree.parents.to(dev, torch.long).contiguous(),
            tree.cu_nodes.to(dev, torch.long).contiguous(), uniforms.to(dev, torch.float32).contiguous(),
            resid, num_accepted, emitted, keep, V, T,
            GREEDY=params.greedy, RENORMALISE=renormalise,
            BLOCK=block_v or min(BLOCK_V, triton.next_power_of_2(V)), num_warps=4,
        )
    return TreeVerdict(num_accepted, emitted, keep.bool())  # emitted at its full width T: no read of D
