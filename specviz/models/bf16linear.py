"""bf16 linears on an AVX2 CPU without a native bf16 product: our own kernel (``bf16_linear.cpp``).

On such a CPU (an AMD EPYC with AVX2 only, most laptops before 2023) oneDNN cannot pack bf16 weights
(``packed.cpu_packs_bf16`` is false) and ``F.linear`` on bf16 runs at about 15 GFLOP/s at any row
count: one token of SmolLM2-135M costs ~15 ms of matmul whether it is a decode step's only token or
one of a verify's many, so every verified token cost about a third of a regular step (the calibrated
t_token, 14.8 ms against 37.7 ms fixed). The kernel widens each bf16 weight to fp32 in registers and runs
fp32 FMAs: the weights cross the bus at 2 bytes and a wide verify runs at fp32's arithmetic rate
(``bench/bf16_kernel.py``; BENCHMARKS.md, "bf16 on an AVX2 CPU").

The same extension holds the lean forward's other steps for such bf16 rows, each one op instead of five to
a dozen small ones (``rms_norm``, ``silu_mul``, ``rope``, and ``attention`` for a few query slots per row over
the cache): fastllama uses them wherever it uses the kernel, and for forwards of a few slots per row (decode,
verify, draft steps) runs every decoder layer in one call (``decoder``, bf16_layers.cpp); the engine's greedy
pick over bf16 logits is one pass per row (``argmax_rows``, bf16_argmax.cpp). The layer steps round to bf16
where the eager ops round, so their outputs are the eager ops' bits or one bf16 step from them (their fp32
sums and exp differ in order).

Its sums are fp32 in a fixed order per output, the same whatever the row count (batch invariant),
but not ``F.linear``'s order: bf16 outputs differ from the plain path's by float rounding (tests
bound it). fp32 runs never use it, so the fp32 exactness checks are unchanged.

Built once per machine with torch's C++ extension builder (g++ and ninja; about a minute) into torch's
extension folder (``TORCH_EXTENSIONS_DIR``, else ``~/.cache/torch_extensions``); where it cannot be built
(no compiler, not x86 with AVX2/FMA) the plain ``F.linear`` runs, with one line saying why.
``SPECVIZ_BF16_KERNEL=0`` turns it off. Where it is built, ``--dtype auto`` picks bf16 on such a CPU
(``packed.kernel_is_faster``); setup.sh builds it (``packed.prepare_kernel``).
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import torch

SOURCES = [Path(__file__).with_name(f)  # (and bf16_ops.h, which they include)
           for f in ("bf16_linear.cpp", "bf16_layers.cpp", "bf16_argmax.cpp")]
FLAGS = ["-O3", "-mavx2", "-mfma", "-mf16c", "-fopenmp"]


@functools.cache
def cpu_has_avx2() -> bool:
    """AVX2 and FMA on this CPU (torch's own dispatch check), and x86."""
    return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


def wanted() -> bool:
    """The kernel is the bf16 path here: switched on, an AVX2 CPU (the caller has already ruled out
    oneDNN's packing, which is faster where it runs)."""
    return os.environ.get("SPECVIZ_BF16_KERNEL", "1") != "0" and cpu_has_avx2()


@functools.cache
def module():
    """The built extension, or None (with one line on stderr) where it cannot be built."""
    from torch.utils import cpp_extension  # imported on first use: it pulls in setuptools

    if not _built():
        print("specviz: building the bf16 kernel for this CPU (once per machine; about a minute)", file=sys.stderr)
    try:  # into torch's extension folder (TORCH_EXTENSIONS_DIR, else ~/.cache/torch_extensions), rebuilt when
        # the source or torch changes; not under SPECVIZ_CACHE, so a process with a fresh cache folder reuses it
        return cpp_extension.load("specviz_bf16_linear", [str(f) for f in SOURCES], extra_cflags=FLAGS,
                                     verbose=False)
    except Exception as e:  # noqa: BLE001 - any build failure means: the plain path
        print(f"specviz: bf16 kernel not built ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
              "bf16 linears run through F.linear", file=sys.stderr)
        return None


def _built() -> bool:
    """A build of the kernel is in torch's extension folder (it may still be rebuilt if the source changed)."""
    from torch.utils import cpp_extension

    try:  # a private helper of torch's builder: where it fails, the build message shows anyway
        folder = Path(cpp_extension._get_build_directory("specviz_bf16_linear", False))
    except Exception:  # noqa: BLE001
        return False
    return (folder / "specviz_bf16_linear.so").is_file()


def available() -> bool:
    """Wanted here and built (building it on the first call)."""
    return wanted() and module() is not None


def fits(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Shapes and dtypes the kernel takes: a bf16 weight whose row length is a multiple of 8."""
    return (weight.dtype == torch.bfloat16 and weight.dim() == 2 and weight.shape[1] % 8 == 0
            and x.device.type == "cpu" and x.dtype in (torch.bfloat16, torch.float32))


@torch.library.custom_op("specviz::bf16_linear", mutates_args=())
def _op(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The kernel as a torch op, so a compiled graph calls it (an opaque call between inductor's fused
    loops) instead of breaking at it; eager calls skip the dispatcher."""
    return module().linear(x, weight)


@_op.register_fake
def _(x, weight):
    return x.new_empty(x.shape[0], weight.shape[0])


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """bf16 x [..., hidden] -> LlamaRMSNorm(x) in one pass (norm in fp32, cast, then scale by the bf16 weight)."""
    return module().rms_norm(x, weight, eps)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """bf16 [..., 2n] (gate | up) -> [..., n] silu(gate) * up, each rounded to bf16 as the eager ops round."""
    return module().silu_mul(gate_up)


def rope(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n: int) -> torch.Tensor:
    """bf16 qkv [R, heads, d], cos/sin [R, d] -> the first n heads rotated, [R, n, d] (x cos + rotate_half(x) sin,
    rounded as the eager ops round: the same bits)."""
    return module().rope(qkv, cos, sin, n)


def argmax_rows(x: torch.Tensor) -> torch.Tensor:
    """bf16 x [N, V] -> [N] int64: torch.argmax(x, -1)'s indices (the first maximum; a NaN counts as the maximum)."""
    return module().argmax_rows(x)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, scale: float) -> torch.Tensor:
    """bf16 q [B, H, T, d], k/v [B, Hkv, L, d], allowed [B, T, L] bool -> [B, T, H * d]: softmax(q k^T scale) v
    over the allowed slots in fp32, rounded once; query head h reads kv head h // (H // Hkv)."""
    return module().attention(q, k, v, allowed, scale)


def linear(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,
           residual: torch.Tensor | None = None) -> torch.Tensor:
    """x [..., in] @ weight[out, in].T -> [..., out] in x's dtype, through the kernel; into ``out`` (a
    contiguous tensor of that shape and dtype, a caller's reused buffer) when given; ``residual + y`` (each
    rounded as ``residual + linear(x, weight)`` rounds) when a residual of that shape and dtype is given."""
    lead = x.shape[:-1]
    rows = x.reshape(-1, x.shape[-1]).contiguous()  # [rows, in]
    if torch.compiler.is_compiling():
        y = _op(rows, weight)  # [rows, out]
        return y.view(*lead, weight.shape[0]) if residual is None else residual + y.view(*lead, weight.shape[0])
    w, is_packed = _weight(weight, rows.shape[0])
    y = module().linear(rows, w, None if out is None else out.view(rows.shape[0], -1),
                        None if residual is None else residual.reshape(rows.shape[0], -1), is_packed)
    return y.view(*lead, weight.shape[0])


def _weight(weight: torch.Tensor, rows: int, repack: bool | None = None) -> tuple[torch.Tensor, bool]:
    """The copy of ``weight`` a call of ``rows`` rows reads, and whether it is the packed one. One row (B = 1
    decoding, a draft's step): the packed copy gave B = 1 regular decoding 1.19x; several rows reuse each weight
    from registers and ran 0.96x over it at B = 8 (BENCHMARKS.md), so they keep the plain one. ``repack``: the
    switch below, when the caller has read it already."""
    if repack is None:
        repack = os.environ.get("SPECVIZ_BF16_REPACK", "1") != "0"
    if rows == 1 and repack and weight.shape[0] % 8 == 0:
        return pack_of(weight), True
    return weight.contiguous(), False


def decoder_fits(layer, hidden: torch.Tensor) -> bool:
    """A lean-forward layer (fused projections) that ``decoder`` takes: bf16 hidden states, norms and weights,
    every weight's rows a multiple of 8 long."""
    weights = (layer._specviz_qkv, layer.self_attn.o_proj.weight, layer._specviz_gate_up, layer.mlp.down_proj.weight)
    norms = (layer.input_layernorm.weight, layer.post_attention_layernorm.weight)
    return (hidden.dtype == torch.bfloat16 and all(n.dtype == torch.bfloat16 for n in norms)
            and all(fits(hidden, w) for w in weights))


def decoder(layers, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, allowed: torch.Tensor,
            keys: list[torch.Tensor], values: list[torch.Tensor], cols: torch.Tensor | None, heads: int,
            kv_heads: int, scale: float) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """Every decoder layer over bf16 h [B, T, hidden] in one call (bf16_layers.cpp: the fused path's ops in its
    order, the same bits). cos/sin [B * T, d]; allowed [B, T, S]; keys/values per layer: with ``cols`` [T] a
    static cache's buffers [B, Hkv, C, d], written in place at those columns; without, the cache so far (an
    empty tensor for none), grown by the new slots. -> (h, keys, values)."""
    rows, repack = h.numel() // h.shape[-1], os.environ.get("SPECVIZ_BF16_REPACK", "1") != "0"
    weights, flags, eps = _decoder_weights(layers, rows, repack)
    return module().decoder(h, weights, flags, eps, cos, sin, allowed, keys, values, cols, heads, kv_heads, scale)


def _decoder_weights(layers, rows: int, repack: bool) -> tuple[list[torch.Tensor], list[bool], list[float]]:
    """``decoder``'s weights (6 per layer), their packed flags and the norms' epsilons, kept on ``layers``
    between forwards (gathering them walks ~300 module attributes, ~0.5 ms a forward here) and made again when
    a weight changed in place or the rows' layout changes; fastllama drops them when it fuses the layers
    anew (new weight tensors)."""
    plain = layers.__dict__.get("_specviz_decoder_plain")
    if plain is None:
        plain = [(c.input_layernorm.weight, c._specviz_qkv, c.self_attn.o_proj.weight, c.post_attention_layernorm.weight,
                  c._specviz_gate_up, c.mlp.down_proj.weight) for c in layers]
        layers._specviz_decoder_plain = plain
        layers._specviz_decoder_eps = [e for c in layers for e in (c.input_layernorm.variance_epsilon,
                                                                   c.post_attention_layernorm.variance_epsilon)]
    key = (rows == 1 and repack, tuple(w._version for ws in plain for w in ws))  # _weight's choice, the weights
    held = layers.__dict__.get("_specviz_decoder_picked")
    if held is None or held[0] != key:
        weights, flags = [], []
        for n1, qkv, o, n2, gate_up, down in plain:
            picked = [_weight(w, rows, repack) for w in (qkv, o, gate_up, down)]
            weights += [n1, picked[0][0], picked[1][0], n2, picked[2][0], picked[3][0]]
            flags += [False, picked[0][1], picked[1][1], False, picked[2][1], picked[3][1]]
        held = (key, weights, flags)
        layers._specviz_decoder_picked = held
    return held[1], held[2], layers._specviz_decoder_eps


def forget_decoder_weights(layers) -> None:
    """Drop what ``_decoder_weights`` keeps on ``layers`` (their weights were replaced)."""
    for name in ("_specviz_decoder_plain", "_specviz_decoder_eps", "_specviz_decoder_picked"):
        layers.__dict__.pop(name, None)


def pack_of(weight: torch.Tensor) -> torch.Tensor:
    """The kernel's packed copy of a [out, in] bf16 weight ([out / 8, in / 8, 8, 8]: each 8 rows' columns side by
    side, one contiguous stream per thread; bf16_linear.cpp), made on the first one-row call and remade after an
    in-place change. The same bits as the plain layout's product; it costs a second copy of the weights while the
    model is loaded. ``SPECVIZ_BF16_REPACK=0``: the plain layout only."""
    held = getattr(weight, "_specviz_kernel_pack", None)
    if held is None or held[0] != weight._version:
        held = (weight._version, module().pack(weight.detach().contiguous()))
        weight._specviz_kernel_pack = held
    return held[1]
