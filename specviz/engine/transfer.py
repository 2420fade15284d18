"""Small host-to-device copies that do not make the host wait for the GPU.

A copy from ordinary (pageable) host memory to CUDA waits for the stream to drain: a sync in
the middle of a step, each time the engine hands the device a few token ids, uniforms' counters
or row indices. From pinned memory and non-blocking it is queued behind the step's kernels
instead. Off CUDA these are plain copies.
"""

from __future__ import annotations

import torch


def to_device(host: torch.Tensor, device) -> torch.Tensor:
    """A host tensor on ``device`` without a sync: on CUDA through pinned memory, non-blocking (a
    plain copy from pageable memory waits for the stream); elsewhere as it is."""
    device = torch.device(device)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def host_tensor(data, device, dtype=torch.long) -> torch.Tensor:
    """torch.tensor(data) on ``device`` without a sync (to_device)."""
    return to_device(torch.tensor(data, dtype=dtype), device)
