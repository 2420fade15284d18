"""Soft labels per second: teacher-forced text labelling vs the target's own generation.

Interleaved rounds in one process on one thread: each round generates one batch of answers with
the target (``specviz.distill.data.decode_batch``, greedy, the data generator's path) and labels
one batch of text chunks (``specviz.distill.text.label_batch``); both keep the top-k logits of
every position. Prints tokens labelled per second of each and their ratio (median over rounds).

    python bench/text_labels.py --text /usr/share/doc/python3.11/html/tutorial [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--text", action="append", required=True, help="files or folders of text (bench/text_sources.sh)")
    ap.add_argument("--target", default="default")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gen-batch-size", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--text-batch-size", type=int, default=8)
    ap.add_argument("--chunk-tokens", type=int, default=256)
    ap.add_argument("--topk", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()

    import torch

    from specviz.distill.data import decode_batch
    from specviz.distill.text import chunk_documents, documents, label_batch
    from specviz.models.loading import encode_prompts, get_model
    from specviz.prompts.gen import training_prompts

    torch.set_num_threads(a.threads)
    target = get_model(a.target, "cpu", a.dtype)
    need = a.rounds * a.text_batch_size
    chunks = chunk_documents(documents(a.text), target.tokenizer, a.chunk_tokens)[:need]
    prompts = training_prompts(a.rounds * a.gen_batch_size, seed=7)
    gen, lab = [], []
    for r in range(a.rounds):
        batch = prompts[r * a.gen_batch_size:(r + 1) * a.gen_batch_size]
        t = time.perf_counter()
        rows, labels, _ = decode_batch(target, batch, encode_prompts(target.tokenizer, batch), 0.0, a.max_new_tokens,
                                       a.topk, r)
        gen.append(sum(len(x) for x in labels) / (time.perf_counter() - t))
        part = chunks[r * a.text_batch_size:(r + 1) * a.text_batch_size]
        t = time.perf_counter()
        out = label_batch(target, part, a.topk)
        lab.append(sum(len(x[0]) for x in out) / (time.perf_counter() - t))
        print(f"round {r}: generation {gen[-1]:.0f} tok/s, text labels {lab[-1]:.0f} tok/s", flush=True)
    g, t = statistics.median(gen), statistics.median(lab)
    print(f"median over {a.rounds} rounds ({a.threads} thread(s), {a.dtype}, load average {os.getloadavg()[0]:.2f}): "
          f"generation {g:.0f} tok/s (B = {a.gen_batch_size}, {a.max_new_tokens} new), text labels {t:.0f} tok/s "
          f"(B = {a.text_batch_size} x {a.chunk_tokens}), {t / g:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
