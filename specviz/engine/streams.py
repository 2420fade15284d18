"""Per-row random streams from a counter-based hash, computed where the logits are.

Every uniform the engine draws is a pure function of (seed, request index, the row's step
number, draw index): ``u = hash(key(seed, index), step, j)``. So a row's draws depend on its own
request and its own progress only, never on which other rows share the batch, when it joined,
or which device runs it; and the whole [B, n] block is built with a few integer tensor ops on
the device, instead of one CPU ``torch.Generator`` per row copied over every step.

The hash is a 32-bit integer mixer (xor-shift-multiply, the structure of Wellons' "lowbias32",
with multipliers below 2**31 so every product of a 32-bit value fits a signed 64-bit integer:
no overflow on any device). Inputs are folded in one at a time (key, then step, then j), with a
mix after each. For a fixed (key, step) the mixer is a bijection of j, so one step's draws never
repeat. A uniform is the hash's top 24 bits / 2**24: a float32 in [0, 1 - 2**-24], never 1.
"""

from __future__ import annotations

import torch

from specviz.engine.transfer import to_device

MASK32 = 0xFFFFFFFF
_M1, _M2 = 0x21F0AAAD, 0x735A2D97  # both < 2**31: x * M < 2**63 for x < 2**32
_GOLDEN = 0x9E3779B9  # separates the fields folded into a key


def _mix_int(x: int) -> int:
    """The mixer on a Python int (keys are made once per request, on the host)."""
    x &= MASK32
    x ^= x >> 16
    x = (x * _M1) & MASK32
    x ^= x >> 15
    x = (x * _M2) & MASK32
    return x ^ (x >> 15)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """The same mixer elementwise on an int64 tensor of values in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = (x * _M1) & MASK32
    x = x ^ (x >> 15)
    x = (x * _M2) & MASK32
    return x ^ (x >> 15)


def row_key(seed: int, index: int) -> int:
    """Request ``index``'s stream key under ``seed`` (any Python ints; folded to 32 bits)."""
    h = _mix_int((seed & MASK32) ^ _GOLDEN)
    h = _mix_int(h ^ ((seed >> 32) & MASK32))
    return _mix_int(h ^ (index & MASK32) ^ (((index >> 32) * _GOLDEN) & MASK32))


def uniforms(keys: torch.Tensor, steps: torch.Tensor, n: int) -> torch.Tensor:
    """[B, n] float32 uniforms: draw j of row b at its step ``steps[b]`` under its key ``keys[b]``.

    keys, steps: [B] int64 (keys from ``row_key``; steps >= 0) on the device the draws are used on.
    """
    h = _mix(keys ^ (steps & MASK32))  # [B] this row's step
    j = torch.arange(n, dtype=torch.int64, device=keys.device)  # [n]
    h = _mix(h.unsqueeze(1) ^ ((j * _GOLDEN) & MASK32))  # [B, n]
    return (h >> 8).to(torch.float32) * (1.0 / (1 << 24))


def row_uniforms(rows, n: int, device) -> torch.Tensor:
    """[B, n] uniforms for the engine's rows (RowState: ``key``, ``steps`` = steps taken so far):
    draws 0..n-1 of each row's stream at its current step. One small host-to-device copy."""
    ks = to_device(torch.tensor([[r.key, r.steps] for r in rows], dtype=torch.long).view(-1, 2), device)  # [B, 2]
    return uniforms(ks[:, 0], ks[:, 1], n)
