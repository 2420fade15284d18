"""Hardware use as arithmetic: MBU, MFU, forward FLOPs, KV bytes (SPECDEC.md, "Measuring
hardware use"), and the same ratios for the verify forwards of a trace. No torch, no probes:
the sampler and the peak measurements live in specviz.telemetry."""

from __future__ import annotations

import math


def _ratio(numerator: float, seconds: float, peak: float) -> float:
    if seconds <= 0 or peak <= 0:
        return math.nan
    return numerator / seconds / peak


def mbu(weight_bytes: float, kv_bytes: float, seconds: float, peak_bytes_per_s: float) -> float:
    """Model bandwidth utilization (fraction, 0..1): ((weight + KV bytes read) / seconds) / peak B/s.

    Count weights once per *forward* (not per emitted token, else MBU can exceed 1); ``seconds``
    is that forward's time. NaN when seconds or peak is not positive.
    """
    return _ratio(weight_bytes + kv_bytes, seconds, peak_bytes_per_s)


def mfu(flops: float, seconds: float, peak_flops: float) -> float:
    """Model FLOP/s utilization (fraction, 0..1): (flops / seconds) / peak FLOP/s. NaN if undefined."""
    return _ratio(flops, seconds, peak_flops)


def forward_flops(num_params: int, tokens: int, n_layers: int = 0, context: int = 0, d_attn: int = 0) -> float:
    """FLOPs of one forward over ``tokens`` tokens: tokens (2 N + 2 n_layers context d_attn).

    Kaplan et al. 2020 (arXiv 2001.08361), Table 1: forward FLOPs per token ~ 2N + 2 n_layer
    n_ctx d_attn, N = parameters doing matmuls (a tied embedding counts once: it is the LM
    head), ``context`` = tokens attended to (the cache length). Omit the attention terms for
    the 2N-per-token estimate.
    """
    return float(tokens) * (2.0 * num_params + 2.0 * n_layers * context * d_attn)


def kv_cache_bytes(n_layers: int, n_kv_heads: int, head_dim: int, tokens: int, bytes_per_element: int) -> int:
    """Bytes of K and V for ``tokens`` cached positions of one row: 2 n_layers n_kv_heads head_dim tokens B."""
    return 2 * n_layers * n_kv_heads * head_dim * tokens * bytes_per_element


def verify_use(steps: list[dict], weight_bytes: float, num_params: int, peaks: dict) -> dict | None:
    """MBU and MFU of the mean verify forward of a trace's steps: weights + mean KV bytes read in
    the mean verify time, and 2 x params FLOPs per token verified (b (k+1) tokens a step).
    None when no step timed a verify."""
    steps = [s for s in steps if s.get("t_verify")]
    if not steps:
        return None
    t_verify = sum(s["t_verify"] for s in steps) / len(steps)  # seconds per verify forward
    kv = sum(s.get("kv_bytes", 0) for s in steps) / len(steps)  # bytes of cache read per forward
    tokens = sum(s.get("batch_size", 1) * (s["k"] + 1) for s in steps) / len(steps)  # tokens per forward
    return {"t_verify_s": t_verify, "tokens": tokens,
            "mbu": mbu(weight_bytes, kv, t_verify, peaks["peak_bytes_per_s"]),
            "mfu": mfu(forward_flops(num_params, int(round(tokens))), t_verify, peaks["peak_flops"])}
