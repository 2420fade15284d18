"""bf16 weights prepacked for oneDNN on the CPU: the same products, without a weight reorder per call.

``F.linear`` on bf16 CPU tensors runs a oneDNN matmul over the weight in its plain [out, in]
layout, which oneDNN first reorders into the blocked layout its AVX-512/AMX kernels read, on every
call. Reordering once (``torch.ops.mkldnn._reorder_linear_weight``, what inductor's CPU weight
prepacking uses) and calling ``torch.ops.mkldnn._linear_pointwise`` on the packed copy computes the
same products from fewer bytes moved: one target forward of SmolLM2-135M on this 2-core CPU is
1.15-1.26x faster at B = 1 and 8, one or five slots per row (BENCHMARKS.md,
``bench/packed_weights.py --forwards``). Packed for ``HINT`` rows, the results are bitwise equal to
``F.linear``'s up to ``MAX_ROWS`` rows for SmolLM2's five shapes (tests/models/test_packed.py). Without a
bound, B = 8 greedy runs diverged from plain ones (BENCHMARKS.md): the B = 8 prefill's 440-row calls
round differently in the o and down projections. So calls of more rows (long prefills:
compute-bound, where one reorder is cheap next to the product) keep ``F.linear``.

Only bf16 weights on the CPU are packed (fp32 keeps MKL's sgemm, so the fp32 exactness checks see
exactly the products they always did). A packed copy is remade when its weight changes in place
(the tensor's version counter moves: training) and costs a second copy of the weights' memory.
``SPECVIZ_PACKED_WEIGHTS=0`` turns it off.

Where oneDNN cannot pack bf16 (an AVX2-only CPU) the bf16 linears run through our own kernel instead
(specviz.models.bf16linear: the weights widened in registers), at any row count; ``enabled`` and
``linear`` pick between the two, so the lean forward asks one question.
"""

from __future__ import annotations

import functools
import os
import sys

import torch
import torch.nn.functional as F

from specviz.models import bf16linear

HINT = 40  # the row count oneDNN is told to pack for (see the module docstring)
MAX_ROWS = 256  # more rows than this: F.linear (see the module docstring)
FRESH_BYTES = 16 << 20  # a packed output layer writes fresh logits up to this size; past it, the reused buffer


def enabled_here() -> bool:
    """This module's path is not switched off (SPECVIZ_PACKED_WEIGHTS=0 sends bf16 CPU linears to F.linear)."""
    return os.environ.get("SPECVIZ_PACKED_WEIGHTS", "1") != "0"


def kernel_is_faster() -> bool:
    """bf16 through our kernel beats fp32 on this CPU: oneDNN cannot pack bf16 here (an AVX2 CPU) and the
    kernel is on and built (building it on the first call). On a 2-core AVX2 EPYC regular decoding in bf16
    ran 2.27x fp32's tokens/s at B = 1 and 1.67x at B = 8 (BENCHMARKS.md, "--dtype auto on an AVX2 CPU")."""
    return enabled_here() and not cpu_packs_bf16() and bf16linear.available()


def prepare_kernel() -> None:
    """setup.sh's step: build the kernel now where it would be the bf16 path, so a first run does not wait.
    A failed build is not an error: bf16 then runs through F.linear, and --dtype auto picks float32."""
    if not bf16linear.wanted() or cpu_packs_bf16():
        return
    ok = bf16linear.module() is not None
    print("specviz: bf16 kernel " + ("ready" if ok else "not built; bf16 on this CPU runs through F.linear "
                                      "and --dtype auto picks float32"), file=sys.stderr)


def enabled(weight: torch.Tensor) -> bool:
    """Run this weight's linears here: bf16 on the CPU, not switched off, and oneDNN able to pack bf16
    or our AVX2 kernel built (checked once per forward)."""
    return (weight.device.type == "cpu" and weight.dtype == torch.bfloat16 and enabled_here()
            and (cpu_packs_bf16() or bf16linear.available()))


@functools.cache
def cpu_packs_bf16() -> bool:
    """oneDNN's bf16 packing runs on this CPU. It needs AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT; on an
    AVX2-only CPU the reorder raises, so one tiny reorder is tried once rather than the flags guessed."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")):
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(16, 16, dtype=torch.bfloat16), HINT)
    except RuntimeError:
        return False
    return True


def pack_of(weight: torch.Tensor) -> torch.Tensor:
    """The packed copy of a [out, in] weight, made once and remade after an in-place change."""
    held = getattr(weight, "_specviz_packed", None)
    if held is None or held[0] != weight._version:
        held = (weight._version, torch.ops.mkldnn._reorder_linear_weight(weight.detach(), HINT))
        weight._specviz_packed = held
    return held[1]


def linear(x: torch.Tensor, weight: torch.Tensor, packed: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """x [..., in] @ weight[out, in].T -> [..., out], when ``packed`` through the packed copy (x of at most
    ``MAX_ROWS`` rows) or, where oneDNN cannot pack, our bf16 kernel (which writes into ``out`` when given:
    a contiguous tensor of the result's shape and dtype)."""
    if packed and not cpu_packs_bf16():
        if bf16linear.fits(x, weight):
            return bf16linear.linear(x, weight, out)
        return F.linear(x, weight) if out is None else torch.matmul(x, weight.t(), out=out)
    if not packed or x.numel() > MAX_ROWS * x.shape[-1]:
        return F.linear(x, weight)
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), pack_of(weight), None, "none", [], "")
