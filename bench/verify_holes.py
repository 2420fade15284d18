"""A verify that skips its holes (fastllama's ``slots``) against the full-width verify, interleaved in
one process, on the packaged target.

An n-gram verify's rows propose different numbers of tokens: through 8 slots and a 32-request queue
(bench/prompts.txt's first 4 prompts, k = 4), 479 of 760 row-steps proposed none and 233 proposed 4,
so half of the B x (k + 1) verify slots were holes. This times one verify forward of the target at
(B, k + 1) with a proposal pattern drawn from those counts, each arm on its own copy of the same
ragged cache (every prompt prefilled, the verify's slots rejected after each forward, so both caches
stay the same length), the arms alternating ``--rounds`` times; reported: median ms per forward and
the median per-round ratio.

    python bench/verify_holes.py [--batch-sizes 8,32] [--draft-length 4] [--rounds 30] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.engine.ragged import RaggedCache, left_pad  # noqa: E402
from specviz.models.loading import encode_prompts, get_model  # noqa: E402
from specviz.prompts.sets import CHAT  # noqa: E402

COUNTS = {0: 479, 1: 16, 2: 24, 3: 8, 4: 233}  # proposals per row-step, the 8:32 n-gram queue (k = 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-sizes", default="8,32")
    ap.add_argument("--draft-length", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    target = get_model("default", "cpu", a.dtype)
    k, T = a.draft_length, a.draft_length + 1
    rng = random.Random(0)
    values, weights = zip(*((min(n, k), w) for n, w in COUNTS.items()))
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, {target.name} {a.dtype}, k = {k}, "
          f"{a.rounds} alternations")
    print(f"{'B':>3} {'valid/slots':>12} | {'full ms':>8} {'skip ms':>8} | skip/full (median of rounds)")
    for B in [int(x) for x in a.batch_sizes.split(",")]:
        prompts = encode_prompts(target.tokenizer, [CHAT[i % len(CHAT)] for i in range(B)])
        caches = {}
        for arm in ("full", "skip"):
            kv = RaggedCache(target.model)
            ids, valid = left_pad([p[:-1] for p in prompts], 0, target.device)
            kv.forward(ids, valid, last_only=True, counts=[len(p) - 1 for p in prompts])
            caches[arm] = kv
        times, fill = {"full": [], "skip": []}, []
        with torch.inference_mode():
            for r in range(a.rounds + 2):  # two warm-up rounds
                n = rng.choices(values, weights, k=B)
                ids = torch.randint(1, 1000, (B, T))
                valid = torch.arange(T)[None, :] < torch.tensor(n)[:, None] + 1  # [B, T]
                flat = [b * T + t for b, c in enumerate(n) for t in range(c + 1)]
                for arm in (("full", "skip") if r % 2 == 0 else ("skip", "full")):
                    kv = caches[arm]
                    t0 = time.perf_counter()
                    kv.forward(ids, valid, reuse_logits=True, slots=flat if arm == "skip" else None)
                    dt = time.perf_counter() - t0
                    kv.reject_tail(torch.zeros(B, T, dtype=torch.bool))  # the same length every round
                    if r >= 2:
                        times[arm].append(dt)
                if r >= 2:
                    fill.append(len(flat) / (B * T))
        ratio = statistics.median(s / f for s, f in zip(times["skip"], times["full"]))
        print(f"{B:>3} {statistics.mean(fill):>12.2f} | {1e3 * statistics.median(times['full']):>8.1f} "
              f"{1e3 * statistics.median(times['skip']):>8.1f} | {ratio:.3f}", flush=True)


if __name__ == "__main__":
    main()
