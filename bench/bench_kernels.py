"""Fused Triton acceptance rule vs the torch reference vs an unfused torch path, on CUDA.

    python bench/bench_kernels.py            # full grid: est. 2-4 min on one H100/H200 (not yet run)
    python bench/bench_kernels.py --quick    # V = 128256 only

Grid: V in {32000, 50257, 128256, 256000} x B in {1, 8, 64} x k in {1, 4, 8}; sampling (T = 1)
with one-hot proposals in bf16 and fp32 logits, greedy in bf16, and draft probabilities
(fp32 q) at V = 128256. Every row drafts k tokens, so the bytes that must be read are all
target logits, B (k+1) V x element size (+ B k V x 4 for q). GB/s is against that: the
reference materialises several float32 copies, so its GB/s is an "effective" number.
Times are triton.testing.do_bench medians (L2 flushed before each call), launch overhead
included: the engine pays it too. Logits are N(0, 1) with one token per position set to 14,
drafted 90% of the time, which gives real-model-like acceptance (column acc = accepted / k).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from specviz.analysis.acceptance import acceptance_rate  # noqa: E402
from specviz.engine.sampling import SamplingParams, Verdict, accept_reference, draft_q_at, final_distribution, sample_inverse_cdf  # noqa: E402

VOCABS = (32000, 50257, 128256, 256000)
BATCHES = (1, 8, 64)
DRAFT_LENGTHS = (1, 4, 8)


def accept_unfused(target_logits, draft_tokens, num_drafted, uniforms, params, draft_probs=None) -> Verdict:
    """The rule as a straightforward loop: one softmax kernel per position (each writes a
    [B, V] float32 tensor), then gather / compare / residual / cumsum as separate kernels."""
    B, K1, V = target_logits.shape
    k = K1 - 1
    rows = torch.arange(B, device=target_logits.device)
    x = draft_tokens.clamp(min=0)
    if params.greedy:
        dists = [target_logits[:, i].argmax(-1) for i in range(K1)]  # [B] each
    else:
        dists = [torch.softmax(target_logits[:, i].float() / params.temperature, -1) for i in range(K1)]  # [B, V] each
    alive = torch.ones(B, dtype=torch.bool, device=rows.device)
    num_accepted = torch.zeros(B, dtype=torch.long, device=rows.device)
    for i in range(k):
        if params.greedy:
            ok = x[:, i] == dists[i]
        else:
            p_x = dists[i][rows, x[:, i]]
            q_x = 1.0 if draft_probs is None else draft_probs[rows, i, x[:, i]].float()
            ok = uniforms[:, i] * q_x < p_x
        alive &= ok & (i < num_drafted)
        num_accepted += alive
    if params.greedy:
        final = torch.stack(dists, 1)[rows, num_accepted]
    else:
        p_final = torch.stack(dists, 1)[rows, num_accepted]  # [B, V]
        rejected = num_accepted < num_drafted
        p_final = final_distribution(p_final, draft_q_at(x, draft_probs, num_accepted, p_final), rejected)
        final = sample_inverse_cdf(p_final, uniforms[rows, num_drafted])
    emitted = torch.full((B, K1), -1, dtype=torch.long, device=rows.device)
    pos = torch.arange(k, device=rows.device)
    emitted[:, :k] = torch.where(pos < num_accepted.unsqueeze(1), x, -1)
    emitted[rows, num_accepted] = final
    return Verdict(num_accepted=num_accepted, emitted=emitted)


def make_inputs(V, B, k, dtype, with_q, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    logits = torch.randn(B, k + 1, V, device="cuda", generator=g)
    planted = torch.randint(0, V, (B, k + 1), device="cuda", generator=g)
    logits.scatter_(-1, planted.unsqueeze(-1), 14.0)
    drafts = torch.where(torch.rand(B, k, device="cuda", generator=g) < 0.9, planted[:, :k],
                         torch.randint(0, V, (B, k), device="cuda", generator=g))
    n = torch.full((B,), k, device="cuda")
    u = torch.rand(B, k + 1, device="cuda", generator=g)
    q = None
    if with_q:  # a draft distribution that puts ~half its mass on the proposed token
        q = torch.softmax(torch.randn(B, k, V, device="cuda", generator=g), -1) * 0.5
        q.scatter_add_(-1, drafts.unsqueeze(-1), torch.full((B, k, 1), 0.5, device="cuda"))
    return logits.to(dtype), drafts, n, u, q


def bench_one(V, B, k, dtype, mode, do_bench):
    params = SamplingParams(0.0) if mode == "greedy" else SamplingParams(1.0)
    logits, drafts, n, u, q = make_inputs(V, B, k, dtype, with_q=(mode == "sample+q"))
    args = (logits, drafts, n, u, params, q)
    from specviz.engine.kernels.spec_verify import accept_triton

    fns = {
        "ref": lambda: accept_reference(*args),
        "unfused": lambda: accept_unfused(*args),
        "triton": lambda: accept_triton(*args),
    }
    if mode != "greedy":
        fns["sigmoid"] = lambda: accept_triton(*args, approx_sigmoid=True)
    ref, got = accept_reference(*args), accept_triton(*args)  # also warms up / compiles
    agree = (ref.num_accepted == got.num_accepted).float().mean().item()
    acc = acceptance_rate(ref.num_accepted.float().mean().item(), k)
    acc_sig = acceptance_rate(accept_triton(*args, approx_sigmoid=True).num_accepted.float().mean().item(), k) \
        if "sigmoid" in fns else None
    us = {name: 1e3 * do_bench(fn, warmup=10, rep=40, return_mode="median") for name, fn in fns.items()}
    nbytes = logits.numel() * logits.element_size() + (q.numel() * q.element_size() if q is not None else 0)
    del logits, q, args
    return dict(V=V, B=B, k=k, dtype=str(dtype).removeprefix("torch."), mode=mode, acc=acc, acc_sig=acc_sig,
                agree=agree, us=us, gbps=nbytes / (us["triton"] * 1e-6) / 1e9)


def print_table(rows):
    head = f"{'mode':<9}{'dtype':<9}{'V':>7}{'B':>4}{'k':>3} {'acc':>5}{'acc~':>6} {'ref us':>8}{'unfused':>9}" \
           f"{'triton':>8}{'sigm~':>8} {'GB/s':>6} {'x ref':>6}{'x unf':>6}"
    print(head)
    print("-" * len(head))
    for r in rows:
        us = r["us"]
        sig = f"{us['sigmoid']:8.1f}" if "sigmoid" in us else f"{'-':>8}"
        acc_sig = f"{r['acc_sig']:6.2f}" if r["acc_sig"] is not None else f"{'-':>6}"
        flag = "" if r["agree"] == 1.0 else f"  num_accepted agree {r['agree']:.3f}"
        print(f"{r['mode']:<9}{r['dtype']:<9}{r['V']:>7}{r['B']:>4}{r['k']:>3} {r['acc']:5.2f}{acc_sig} "
              f"{us['ref']:8.1f}{us['unfused']:9.1f}{us['triton']:8.1f}{sig} {r['gbps']:6.0f} "
              f"{us['ref'] / us['triton']:6.1f}{us['unfused'] / us['triton']:6.1f}{flag}")
    print("acc = accepted/k (exact rule), acc~ = same with the APPROXIMATE sigmoid rule; "
          "GB/s = must-read bytes / triton time; x ref, x unf = speedup of triton")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="V = 128256 only")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_kernels: no CUDA device found; this benchmark needs a GPU "
                 "(the CPU-side check of the kernels is tests/engine/test_kernels.py under TRITON_INTERPRET=1)")
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        sys.exit("bench_kernels: unset TRITON_INTERPRET to benchmark compiled kernels")
    from triton.testing import do_bench

    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    vocabs = (128256,) if args.quick else VOCABS
    configs = [(V, B, k, dt, mode) for V in vocabs for B in BATCHES for k in DRAFT_LENGTHS
               for dt, mode in [(torch.bfloat16, "sample"), (torch.float32, "sample"), (torch.bfloat16, "greedy")]]
    configs += [(128256, B, k, torch.bfloat16, "sample+q") for B in BATCHES for k in DRAFT_LENGTHS]
    rows = []
    for i, cfg in enumerate(configs):
        rows.append(bench_one(*cfg, do_bench=do_bench))
        r = rows[-1]
        print(f"[{i + 1}/{len(configs)}] {r['mode']} {r['dtype']} V={r['V']} B={r['B']} k={r['k']}: "
              + ", ".join(f"{n} {t:.1f} us" for n, t in r["us"].items()), flush=True)
        torch.cuda.empty_cache()
    print()
    print_table(rows)


if __name__ == "__main__":
    main()
