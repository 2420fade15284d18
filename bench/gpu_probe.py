"""Size data generation for `specviz distill` on a GPU before the real weights are there.

    python bench/gpu_probe.py --batch-sizes 64,256,1024 --new-tokens 32

A randomly initialised model with SmolLM2-135M's shape (the cost of a forward does not depend on
the weights' values) decodes through the engine exactly as distill's data generation does
(regular decoding with the top-k recorder); prints tokens/s per batch size. Timings only: the
random model's text means nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from specviz.distill.pipeline import _decode_batch  # noqa: E402
from specviz.models.loading import LoadedModel  # noqa: E402


class _Tok:
    eos_token_id = 2


def smollm2_shaped(device: str, dtype: torch.dtype, layers: int = 30) -> LoadedModel:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=layers,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                      rope_theta=100000.0, tie_word_embeddings=True, eos_token_id=2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(device=device, dtype=dtype).eval()
    return LoadedModel(spec="probe", name="smollm2-shaped (random)", model=model, tokenizer=_Tok(),
                       device=torch.device(device), dtype=dtype)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-sizes", default="64,256,1024")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--prompt-len", type=int, default=40)
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--train-batch", type=int, default=64, help="sequences per distill training step")
    p.add_argument("--train-len", type=int, default=200, help="tokens per training sequence")
    p.add_argument("--json", help="write the timings here")
    a = p.parse_args()
    res = {"gen_ms_per_step": {}, "device": a.device}
    dtype = torch.bfloat16
    target = smollm2_shaped(a.device, dtype, a.layers)
    g = torch.Generator().manual_seed(0)
    for b in [int(x) for x in a.batch_sizes.split(",")]:
        ids = torch.randint(3, 49152, (b, a.prompt_len), generator=g).tolist()
        ids = [row[: a.prompt_len - (i % 8)] for i, row in enumerate(ids)]  # ragged, as real prompts
        for rep in range(2):  # the first run warms up kernels and the allocator
            if a.device == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            rows, labels, _ = _decode_batch(target, [""] * b, ids, 0.8, a.new_tokens, 32, seed=rep)
            if a.device == "cuda":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t
        n = sum(len(r.output) for r in rows)
        mem = torch.cuda.max_memory_allocated() / 2**30 if a.device == "cuda" else float("nan")
        res["gen_ms_per_step"][b] = 1e3 * dt / a.new_tokens
        print(f"B={b:5d}  {n} tokens in {dt:.2f} s  = {n / dt:8.0f} tok/s  ({1e3 * dt / a.new_tokens:.1f} ms/step)  "
              f"peak mem {mem:.1f} GiB", flush=True)
    res["train_step_s"] = time_train_step(target, a.train_batch, a.train_len)
    print(f"distill training step (2 layers, vocab 8192, {a.train_batch} x {a.train_len} tokens): "
          f"{1e3 * res['train_step_s']:.1f} ms", flush=True)
    if a.json:
        import json

        with open(a.json, "w") as f:
            json.dump(res, f)
    return 0


def time_train_step(target, batch: int, length: int, steps: int = 10) -> float:
    """One distill training step (forward, backward, AdamW) on synthetic soft labels."""
    import numpy as np
    from torch import nn

    from specviz.distill.pipeline import _collate, _loss, _tensors, build_draft, draft_config

    vmap = list(range(8192))
    emb = nn.Embedding.from_pretrained(target.model.get_input_embeddings().weight.detach().float().clone(), freeze=True)
    draft = build_draft(draft_config(target.model.config, 2), emb, vmap).float().to(target.device)
    rng = np.random.default_rng(0)
    n_out = length * 4 // 5
    samples = [{"prompt_ids": rng.integers(0, 8192, length - n_out).tolist(), "output_ids": rng.integers(0, 8192, n_out).tolist(),
                "topk_ids": rng.integers(0, 8192, (n_out, 32)), "topk_logits": rng.normal(size=(n_out, 32)).astype(np.float32)}
               for _ in range(batch)]
    data = _tensors(samples, vmap, target.model.config.vocab_size)
    opt = torch.optim.AdamW([p for p in draft.parameters() if p.requires_grad], lr=1e-3)
    ts = []
    for i in range(steps + 3):
        if target.device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        loss, _, _ = _loss(draft, _collate(data), autocast=True)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()
        if i >= 3:
            ts.append(time.perf_counter() - t)
    return float(np.median(ts))


if __name__ == "__main__":
    raise SystemExit(main())
