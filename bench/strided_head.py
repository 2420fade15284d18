"""The output layer on a strided [B, 1, H] view (what logits_to_keep=1 hands it) vs a contiguous one.

    python bench/strided_head.py

B = 8, H = 576, V = 49152, bf16: the default model's head. specviz.engine.ragged.contiguous_head_input
exists because of the first number.
"""

import time

import torch


def ms(h, w, n=3):
    torch.nn.functional.linear(h, w)
    t = time.perf_counter()
    for _ in range(n):
        torch.nn.functional.linear(h, w)
    return (time.perf_counter() - t) / n * 1e3


w = torch.randn(49152, 576, dtype=torch.bfloat16)
x = torch.randn(8, 60, 576, dtype=torch.bfloat16)
print(f"strided [8, 1, 576] view: {ms(x[:, -1:, :], w):.1f} ms; contiguous copy: {ms(x[:, -1:, :].contiguous(), w):.1f} ms")
