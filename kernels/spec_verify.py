"""Fused speculative verification in Triton: the acceptance rule without softmax tensors.

The spec is the torch reference ``specviz.engine.sampling.accept_reference``: same arguments, same
``Verdict``, same use of the uniforms (``uniforms[:, i]`` decides draft position i,
``uniforms[:, n_b]`` draws the recovered/bonus token by inverse CDF). Greedy output and
``num_accepted`` match it exactly; a sampled recovered/bonus token matches it except where
u * total lands within float rounding of a CDF step, because the sums are taken in another
order (tests/engine/test_kernels.py checks both, plus the output distribution).

Memory traffic. The reference reads the [B, k+1, V] logits and writes/reads float32 copies of
that size several times (cast, / T, softmax), then about ten [B, V] passes at the final position
(gather, residual, sums, cumsums, searchsorted). Here, with one-hot proposals, each needed
position's logits are read once, nothing of size V is written, and the final token costs one
or two vocabulary chunks (<= 8 * BLOCK_V logits each):

  _chunk_stats_kernel  grid (B * (k+1), C): one online max/sum pass over one vocabulary chunk
                       of one (row, position); greedy keeps (max, first argmax) instead.
  _accept_rows_kernel  grid (B,): merges the chunk partials per position, runs the acceptance
                       test left to right, then draws the final token: chunk masses -> pick
                       the chunk by inverse CDF -> scan that chunk only (its scans over the
                       vocabulary: kernels/vocab_scan.py).

Why (row, position, chunk) programs and not one per row: at B = 1, k = 1 a per-row grid is
one program streaming 2 x V logits on a 132-SM GPU; splitting positions and vocabulary gives
B * (k+1) * C programs (~4 per SM) at every batch size. The acceptance test is sequential in
the position, so it runs in a second, per-row kernel that reads only the C partials per
position. The price: positions after a row's first rejection are read too (the reference
reads them as well).

Extra passes (all in the per-row kernel, at the final position only):
  - draft_probs given and the row rejected: max(0, p - q) needs the global softmax sum, so
    one more pass over logits and q computes the residual chunk masses.
  - top_p < 1: top-p needs a sort, which these kernels do not do. The wrapper computes the
    processed probabilities with ``specviz.engine.sampling.process_logits`` in torch (materialising
    [B, k+1, V] float32 plus a sort: no fusion benefit) and the kernel reads them as p.
  - approx_sigmoid=True: APPROXIMATE, see ``accept_triton``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specviz.engine.kernels.interpret import interpreting
from specviz.engine.kernels.vocab_scan import (GREEDY, PROBS, SIGMOID, SOFTMAX, _chunk_sums, _greedy_pick,
                                               _merge_chunks, _p_of, _scan_chunk)
from specviz.engine.sampling import SamplingParams, Verdict, process_logits

BLOCK_V = 1024  # one tile: 1024 bf16 logits = 2 KiB, 8 per thread at 4 warps (16-byte loads)
MAX_TILES_PER_CHUNK = 8  # bounds the final-token scan to 8 tiles


# ---------------------------------------------------------------------------------------------
# kernel 1: chunk partials


@triton.jit
def _chunk_stats_kernel(
    logits_ptr,  # [B, k+1, V] target logits, any float dtype
    num_drafted_ptr,  # [B]
    part_a_ptr,  # [B, k+1, C] f32: chunk max of logits / T (greedy: of logits)
    part_b_ptr,  # [B, k+1, C] f32 sum exp(logits / T - chunk max); greedy: i32 first argmax
    V,
    K1,  # k + 1
    C,  # vocabulary chunks
    tiles_per_chunk,
    temperature,
    IS_GREEDY: tl.constexpr,
    BLOCK: tl.constexpr,
):
    rp = tl.program_id(0)  # row * (k+1) + position
    c = tl.program_id(1)
    row = rp // K1
    pos = rp % K1
    n = tl.load(num_drafted_ptr + row).to(tl.int32)
    # positions past n_b decide nothing: their logits are never read
    n_tiles = tl.where(pos <= n, tiles_per_chunk, 0)
    row_ptr = logits_ptr + rp.to(tl.int64) * V
    start = c * tiles_per_chunk * BLOCK
    lanes = tl.arange(0, BLOCK)

    m = tl.full([], float("-inf"), tl.float32)
    s = tl.full([], 0.0, tl.float32)
    arg = start
    for t in range(n_tiles):
        offs = start + t * BLOCK + lanes
        x = tl.load(row_ptr + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
        if IS_GREEDY:
            tile_max, tile_arg = tl.max(x, axis=0, return_indices=True, return_indices_tie_break_left=True)
            arg = tl.where(tile_max > m, start + t * BLOCK + tile_arg, arg)  # strict: first max wins
            m = tl.maximum(m, tile_max)
        else:
            x = x / temperature  # divide (not multiply by 1/T) as the reference does
            m_new = tl.maximum(m, tl.max(x, axis=0))
            base = tl.where(m_new == float("-inf"), 0.0, m_new)  # all -inf so far: keep exp finite
            s = s * tl.exp(m - base) + tl.sum(tl.exp(x - base), axis=0)
            m = m_new

    out = rp * C + c
    tl.store(part_a_ptr + out, m)
    if IS_GREEDY:
        tl.store(part_b_ptr + out, arg)
    else:
        tl.store(part_b_ptr + out, s)


# ---------------------------------------------------------------------------------------------
# kernel 2: per-row verdict


@triton.jit
def _accept_rows_kernel(
    vals_ptr,  # [B, k+1, V] logits, or processed probabilities (PROBS)
    draft_ptr,  # [B, k] int64
    num_drafted_ptr,  # [B]
    uniforms_ptr,  # [B, k+1] f32
    q_ptr,  # [B, k, V] draft probs (HAS_Q)
    part_a_ptr,  # [B, k+1, C] chunk partials (GREEDY, SOFTMAX)
    part_b_ptr,
    num_accepted_ptr,  # [B] int64, out
    emitted_ptr,  # [B, k+1] int64, out: every element written
    V,
    K,
    C,
    tiles_per_chunk,
    temperature,
    MODE: tl.constexpr,
    HAS_Q: tl.constexpr,
    BLOCK: tl.constexpr,
    C_P2: tl.constexpr,  # >= C
    K1_P2: tl.constexpr,  # >= k+1
):
    row = tl.program_id(0)
    rp0 = row * (K + 1)
    n = tl.load(num_drafted_ptr + row).to(tl.int32)
    cs = tl.arange(0, C_P2)

    # accept: position i passes iff u_i * q_i(x_i) < p_i(x_i) (greedy: x_i == argmax p_i)
    num_acc = tl.full([], 0, tl.int32)
    alive = n > 0
    for i in range(n):
        x = tl.maximum(tl.load(draft_ptr + row * K + i), 0)
        if MODE == GREEDY:
            ok = x == _greedy_pick(part_a_ptr, part_b_ptr, rp0 + i, C, C_P2)
        else:
            if MODE == SOFTMAX:
                top, sums = _merge_chunks(part_a_ptr, part_b_ptr, rp0 + i, C, C_P2)
                denom = tl.sum(sums, axis=0)
            else:
                top = 0.0
                denom = 1.0
            v = tl.load(vals_ptr + (rp0 + i).to(tl.int64) * V + x, mask=x < V, other=0.0).to(tl.float32)
            p_x = tl.where(x < V, _p_of(v, top, denom, temperature, MODE), 0.0)  # ids >= V: rejected
            if HAS_Q:
                q_x = tl.load(q_ptr + (row * K + i).to(tl.int64) * V + x, mask=x < V, other=1.0).to(tl.float32)
            else:
                q_x = 1.0
            u = tl.load(uniforms_ptr + rp0 + i)
            ok = u * q_x < p_x  # no division: q_x > 0 since x was drawn from q
        alive = alive & ok
        num_acc += alive.to(tl.int32)

    # final token at position j = num_acc: recovered if rejected there, else bonus
    j = num_acc
    rj = rp0 + j
    rejected = j < n
    rq = row * K + tl.maximum(j, 0)
    x_j = tl.maximum(tl.load(draft_ptr + rq, mask=rejected, other=0), 0)
    if MODE == GREEDY:
        final = _greedy_pick(part_a_ptr, part_b_ptr, rj, C, C_P2).to(tl.int64)
    else:
        if MODE == SOFTMAX:
            top, plain = _merge_chunks(part_a_ptr, part_b_ptr, rj, C, C_P2)
            denom = tl.sum(plain, axis=0)
            plain = plain / denom  # chunk masses of p, from the partials: no logits read
            resid = plain
            if HAS_Q:
                n_pass = tl.where(rejected, C, 0)  # max(0, p - q) needs a pass over logits and q
            else:
                # residual = p without x: only x's chunk changes; recompute it rather than
                # subtract p(x) (cancellation when p(x) ~ 1)
                cx = x_j // (tiles_per_chunk * BLOCK)
                _, rx = _chunk_sums(vals_ptr, q_ptr, rj, rq, cx, tl.where(rejected, tiles_per_chunk, 0),
                                    tiles_per_chunk, V, x_j, top, denom, temperature, rejected,
                                    MODE, HAS_Q, BLOCK)
                resid = tl.where(cs == cx, rx, plain)
                n_pass = 0
        else:
            top = 0.0
            denom = 1.0
            plain = tl.zeros([C_P2], tl.float32)
            resid = plain
            n_pass = C  # no partials: one pass for the chunk masses
        for c in range(n_pass):
            sp, sr = _chunk_sums(vals_ptr, q_ptr, rj, rq, c, tiles_per_chunk, tiles_per_chunk, V, x_j,
                                 top, denom, temperature, rejected, MODE, HAS_Q, BLOCK)
            if MODE != SOFTMAX:
                plain = tl.where(cs == c, sp, plain)
            resid = tl.where(cs == c, sr, resid)
        # p == q leaves no residual mass: the rejection came from rounding; draw from p (reference)
        use_resid = rejected & (tl.sum(resid, axis=0) > 0)
        mass = tl.where(use_resid, resid, plain)  # [C_P2]
        target = tl.load(uniforms_ptr + rp0 + n) * tl.sum(mass, axis=0)
        cdf = tl.cumsum(mass, axis=0)
        c_hit = tl.min(tl.where((cdf > target) & (mass > 0), cs, C_P2), axis=0)
        c_last = tl.max(tl.where(mass > 0, cs, 0), axis=0)
        c_star = tl.where(c_hit < C_P2, c_hit, c_last)
        before = tl.sum(tl.where(cs < c_star, mass, 0.0), axis=0)
        final = _scan_chunk(vals_ptr, q_ptr, rj, rq, c_star, tiles_per_chunk, V, x_j, top, denom,
                            temperature, use_resid, target - before, MODE, HAS_Q, BLOCK).to(tl.int64)

    ks = tl.arange(0, K1_P2)
    drafts = tl.maximum(tl.load(draft_ptr + row * K + ks, mask=ks < j, other=0), 0)
    out = tl.where(ks < j, drafts, tl.where(ks == j, final, -1))
    tl.store(emitted_ptr + rp0 + ks, out, mask=ks < K + 1)
    tl.store(num_accepted_ptr + row, j.to(tl.int64))


# ---------------------------------------------------------------------------------------------
# wrapper


def accept_triton(
    target_logits: torch.Tensor,  # [B, k+1, V] target logits at each verified position
    draft_tokens: torch.Tensor,  # [B, k] proposed ids (values past num_drafted are ignored)
    num_drafted: torch.Tensor,  # [B] n_b <= k proposals per row
    uniforms: torch.Tensor,  # [B, k+1] in [0, 1)
    params: SamplingParams,
    draft_probs: torch.Tensor | None = None,  # [B, k, V] processed q; None = one-hot proposals
    approx_sigmoid: bool = False,
) -> Verdict:
    """The acceptance rule of ``accept_reference`` as two Triton kernels; same arguments, same Verdict.

    approx_sigmoid=True is APPROXIMATE (Wagner et al. 2024, arXiv 2406.11016): p is replaced
    by sigmoid(logits / T) elementwise, with no max/sum reductions; it does not sum to 1 and
    the output no longer follows the target distribution. The acceptance test then needs
    only p(x) (a gather), so no chunk-partials pass runs: one pass over the vocabulary at the
    final position per row. The paper additionally rescales logits by fixed constants before
    the sigmoid (and also approximates q); here q is taken as given and only the temperature
    scales the logits. Not allowed with top_p < 1; ignored in greedy mode (sigmoid is
    monotone, argmax is unchanged).
    Measured on SmolLM2-135M logits (228 sampled positions, V = 49152): its logits are mostly
    large and positive, so sigmoid(l / T) ~ 1 for nearly every token (mass ~47.6k): acceptance
    rises from 0.59-0.85 (exact) to 1.00, and the recovered/bonus token becomes ~uniform over the
    vocabulary. Treat it as a speed experiment, not a sampling mode.

    top_p < 1 falls back to torch for p (``process_logits``: softmax + sort over
    [B, k+1, V]); only the rule itself runs in the kernel.
    """
    return _accept_triton(target_logits, draft_tokens, num_drafted, uniforms, params, draft_probs, approx_sigmoid)


def _accept_triton(target_logits, draft_tokens, num_drafted, uniforms, params, draft_probs=None,
                   approx_sigmoid=False, *, block_v=None, tiles_per_chunk=None, poison=False) -> Verdict:
    """accept_triton with the tiling exposed (tests force tiny tiles and many chunks) and, with
    poison=True, outputs pre-filled with -7 and partials with NaN so unwritten elements show."""
    B, K1, V = target_logits.shape
    k = K1 - 1
    dev = target_logits.device
    _check(target_logits, draft_tokens, num_drafted, uniforms, draft_probs)

    if params.greedy:
        mode, vals = GREEDY, target_logits
    elif params.top_p < 1.0:
        if approx_sigmoid:
            raise ValueError("approx_sigmoid is not defined with top_p < 1")
        mode, vals = PROBS, process_logits(target_logits, params)  # torch fallback, see module doc
    else:
        mode, vals = (SIGMOID if approx_sigmoid else SOFTMAX), target_logits
    vals = vals.contiguous()
    draft_tokens = draft_tokens.to(torch.long).contiguous()
    num_drafted = num_drafted.contiguous()
    uniforms = uniforms.to(torch.float32).contiguous()
    has_q = draft_probs is not None and mode != GREEDY
    q = draft_probs.contiguous() if has_q else vals  # dummy pointer when unused

    block = block_v or min(BLOCK_V, triton.next_power_of_2(V))
    tpc, C = _chunking(B * K1, V, block, dev, tiles_per_chunk)

    fill = (lambda shape, dtype, v: torch.full(shape, v, dtype=dtype, device=dev)) if poison else \
        (lambda shape, dtype, v: torch.empty(shape, dtype=dtype, device=dev))
    num_accepted = fill((B,), torch.long, -7)
    emitted = fill((B, K1), torch.long, -7)
    if B == 0:
        return Verdict(num_accepted=num_accepted, emitted=emitted)
    needs_partials = mode in (GREEDY, SOFTMAX)
    part_a = fill((B * K1 * C,) if needs_partials else (1,), torch.float32, float("nan"))
    part_b = fill((B * K1 * C,) if needs_partials else (1,), torch.int32 if mode == GREEDY else torch.float32,
                  -7 if mode == GREEDY else float("nan"))
    temperature = 1.0 if params.greedy else float(params.temperature)

    if needs_partials:
        _chunk_stats_kernel[(B * K1, C)](
            vals, num_drafted, part_a, part_b, V, K1, C, tpc, temperature,
            IS_GREEDY=mode == GREEDY, BLOCK=block, num_warps=4,
        )
    _accept_rows_kernel[(B,)](
        vals, draft_tokens, num_drafted, uniforms, q, part_a, part_b, num_accepted, emitted,
        V, k, C, tpc, temperature,
        MODE=mode, HAS_Q=has_q, BLOCK=block, C_P2=triton.next_power_of_2(C),
        K1_P2=triton.next_power_of_2(K1), num_warps=4,
    )
    return Verdict(num_accepted=num_accepted, emitted=emitted)


def _chunking(rows: int, V: int, block: int, dev: torch.device, tiles_per_chunk: int | None) -> tuple[int, int]:
    """(tiles per chunk, chunks): about 4 programs per SM in kernel 1, chunks of <= 8 tiles."""
    num_tiles = triton.cdiv(V, block)
    if tiles_per_chunk is None:
        sms = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 8
        tiles_per_chunk = min(MAX_TILES_PER_CHUNK, max(1, triton.cdiv(rows * num_tiles, 4 * sms)))
    tiles_per_chunk = min(tiles_per_chunk, num_tiles)
    return tiles_per_chunk, triton.cdiv(num_tiles, tiles_per_chunk)


def _check(target_logits, draft_tokens, num_drafted, uniforms, draft_probs) -> None:
    B, K1, V = target_logits.shape
    assert draft_tokens.shape == (B, K1 - 1), f"draft_tokens {tuple(draft_tokens.shape)}, want {(B, K1 - 1)}"
    assert num_drafted.shape == (B,) and uniforms.shape == (B, K1)
    assert draft_probs is None or draft_probs.shape == (B, K1 - 1, V)
    if target_logits.device.type != "cuda" and not interpreting():
        raise RuntimeError("accept_triton needs CUDA tensors (or TRITON_INTERPRET=1 for the CPU interpreter)")
