"""The lean forward's decoder layer compiled by torch.compile (inductor: C++ on the CPU), one layer at a time.

A decode or verify step of a small model is hundreds of small ops, each a Python call and a dispatch:
on this 2-core CPU that overhead, not the weight bytes, sets the step time (BENCHMARKS.md, "CPU compiled
forward"). Inductor fuses a layer's norm, rotary, attention softmax and MLP activation into a few C++
loops around the matmuls and calls them from one wrapper.

Regional compilation (PyTorch's recipe for repeated blocks): every layer of a model has the same shapes,
so ONE compiled layer body serves all of them (its weights are inputs, not constants) and the compile
takes seconds, not the minutes the whole 30-layer graph took here (88-109 s per shape, cold). The body
runs over the static KV cache (specviz.models.statickv): fixed shapes per (batch bucket, T, capacity),
so each runner key compiles once; inductor's FX graph cache keeps the result on disk
(``use_cache_dir``), so a second process loads it instead of compiling.

The body writes its K/V columns itself (no cache object inside the graph) and uses plain ``F.linear``
(the oneDNN-packed bf16 weights of specviz.models.packed are for the eager path), or, for bf16 on an AVX2
CPU, specviz.models.bf16linear's kernel as an opaque op between the fused loops. When compiling fails
(no C++ compiler, an unsupported platform, an inductor error) the runner says so in one line and runs
eagerly (``LayerCompiler.failed``).
"""

from __future__ import annotations

import os
import shutil
import sys
import time

import torch
import torch.nn.functional as F

from specviz.common import cache_dir
from specviz.models import bf16linear, fastllama, packed

# What the process says (once) when its first compile starts: a new shape's first call compiles the layer
# (the default target on this 2-core CPU, cold: 15 s per shape; from the disk cache a few seconds)
NOTICE = "compiling the forward (first time: ~15 s per step shape, cached on disk after)"
RECOMPILE_LIMIT = 64  # shapes one compiled body may hold (batch buckets x widths x capacities x models)


def layer_body(layer, h, cos, sin, blocked, keys, values, cols, heads, kernel=False):
    """One decoder layer over a static cache: h [B, T, hidden] -> [B, T, hidden].

    cos/sin [B, T, 1, d]; blocked [B, 1, groups*T, C] (fastllama._grouped_blocked); keys/values
    [B, Hkv, C, d] the layer's buffers (written at columns cols [T], in place); heads: fastllama._heads.
    kernel: the linears through specviz.models.bf16linear's kernel (bf16 on an AVX2 CPU), else F.linear."""
    H, Hkv, d, groups, scale = heads
    B, T, _ = h.shape
    linear = bf16linear.linear if kernel else F.linear
    x = fastllama._rms_norm(h, layer.input_layernorm)
    qkv = linear(x, layer._specviz_qkv).view(B, T, H + 2 * Hkv, d)
    qk = fastllama._rotate(qkv[:, :, : H + Hkv], cos, sin)  # q and k heads rotated together
    q = qk[:, :, :H].transpose(1, 2)  # [B, H, T, d]
    keys.index_copy_(2, cols, qk[:, :, H:].transpose(1, 2))  # [B, Hkv, T, d] into [B, Hkv, C, d]
    values.index_copy_(2, cols, qkv[:, :, H + Hkv:].transpose(1, 2))
    attn = fastllama._attention(q, keys, values, None, scale, groups, blocked)  # [B, T, H * d]
    h = h + linear(attn, layer.self_attn.o_proj.weight)
    x = fastllama._rms_norm(h, layer.post_attention_layernorm)
    gate, up = linear(x, layer._specviz_gate_up).chunk(2, dim=-1)
    return h + linear(F.silu(gate) * up, layer.mlp.down_proj.weight)


def unavailable() -> str | None:
    """Why torch.compile cannot run here (None: it can): inductor's CPU code needs a C++ compiler."""
    if sys.platform == "win32":
        return "torch.compile's CPU back end is not supported on Windows here"
    cxx = os.environ.get("CXX") or "c++"
    if not any(shutil.which(c) for c in (cxx, "g++", "clang++")):
        return "no C++ compiler (g++ or clang++) on the PATH"
    return None


def use_cache_dir() -> str:
    """Inductor's caches (FX graphs, C++ builds) under specviz's cache folder, so a second process reuses
    the compiled layers: the one place specviz sets TORCHINDUCTOR_CACHE_DIR (inductor reads only the
    environment), before the process's first compile. A value the user set is kept; inductor's own default
    (which it writes into the environment itself the first time any module asks for its cache folder,
    e.g. while transformers imports) is replaced."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    held = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if held is None or os.path.abspath(held) == os.path.abspath(default_cache_dir()):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir() / "inductor")
    return os.environ["TORCHINDUCTOR_CACHE_DIR"]


class LayerCompiler:
    """The compiled layer body of one run, or the reason it could not be made (then eager)."""

    def __init__(self, say=None):
        self.failed: str | None = unavailable()
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.compile_s = 0.0  # seconds spent in first calls of new shapes (compiles or cache loads)
        self._seen: set[tuple] = set()
        self._fn = None
        if self.failed:
            self.say(f"compiled forward off: {self.failed}; running eagerly")

    def _compiled(self):
        if self._fn is None:
            use_cache_dir()
            import torch._dynamo

            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
            self._fn = torch.compile(layer_body, fullgraph=True, dynamic=False)
        return self._fn

    def run(self, layers, h, cos, sin, blocked, buffers, cols, heads) -> torch.Tensor | None:
        """h through every layer compiled; None when compiling failed (the caller runs eagerly)."""
        if self.failed:
            return None
        key = (tuple(h.shape), h.dtype, tuple(blocked.shape), id(layers))
        new = key not in self._seen
        if new and not self._seen:
            self.say(NOTICE)
        started = time.perf_counter()
        try:
            fn = self._compiled()
            kernel = packed.enabled(layers[0]._specviz_qkv) and not packed.cpu_packs_bf16()  # bf16, AVX2 only
            out = h
            for layer, (keys, values) in zip(layers, buffers):
                out = fn(layer, out, cos, sin, blocked, keys, values, cols, heads, kernel)
        except Exception as e:  # noqa: BLE001 (any compiler failure: the eager path computes the same)
            self.failed = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
            self.say(f"compiled forward failed ({self.failed}); running eagerly")
            return None
        if new:
            self._seen.add(key)
            self.compile_s += time.perf_counter() - started
        return out


_COMPILER: LayerCompiler | None = None


def compiler() -> LayerCompiler:
    """The process's one LayerCompiler: a failure is said once and every later cache runs eagerly."""
    global _COMPILER
    if _COMPILER is None:
        _COMPILER = LayerCompiler()
    return _COMPILER
