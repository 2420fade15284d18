"""The compiled forward on the CPU: one decode step, eager vs compiled, against the memory-bandwidth floor.

    .venv/bin/python bench/compiled_cpu.py [--dtypes float32,bfloat16] [--rounds 5] [--steps 16] [--threads N]
                                           [--json OUT]

In one process, interleaved (the order rotates every round), per dtype: a regular decode step at B = 1
of the packaged target (the default eager lean forward, ForwardOptions(); the same over the static KV
cache; the static-cache forward with its layers compiled, ForwardOptions(compile=True)) and the same for
the shipped distilled draft, whose
step time over the target's is the cost ratio c. The floor: the weight bytes a step reads over the read
bandwidth this machine measures now (a torch sum over 1 GiB, best of 5), MBU = floor / step time
(nanoGPT's estimate_mfu, for bytes: Pope et al. 2022, memory-bound decoding). Also the first step of
each compiled arm (compile, or a load from inductor's disk cache when a previous run left one).
Results: BENCHMARKS.md, "CPU compiled forward".
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from specviz.engine.ragged import RaggedCache
from specviz.models import compiled
from specviz.models.distilled import get_distilled_draft
from specviz.models.forwardoptions import ForwardOptions
from specviz.models.loading import get_model
from specviz.run import DEFAULT_DRAFT_DIR

PROMPT = 64  # prefill tokens before the timed steps
# the default eager forward (DynamicCache), the same over the static cache (what compiling needs), compiled
ARMS = {"eager": ForwardOptions(), "static": ForwardOptions(static_cache=True), "compiled": ForwardOptions(compile=True)}


def read_bandwidth_gbs(gib: float = 1.0, repeats: int = 5) -> float:
    """Bytes per second a sum over a large float32 tensor reads (best of ``repeats``), GB/s."""
    x = torch.ones(int(gib * (1 << 30)) // 4)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        x.sum().item()
        best = min(best, time.perf_counter() - t)
    return x.numel() * 4 / best / 1e9


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's distinct weights one decode step reads: all of them (a tied head read once),
    but the input embedding only when it is also the output layer (a step reads one row of it: a
    distilled draft borrows the target's table and has its own 8,192-row head)."""
    embed = model.get_input_embeddings().weight
    seen, n = set(), 0
    if embed.data_ptr() != model.get_output_embeddings().weight.data_ptr():
        seen.add(embed.data_ptr())
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            n += p.numel() * p.element_size()
    return n


@torch.inference_mode()
def decode_steps(model, options: ForwardOptions, steps: int, vocab: int) -> list[float]:
    """Seconds per regular decode step at B = 1 after a PROMPT-token prefill (a fresh cache each call)."""
    kv = RaggedCache(model, options=options)
    ids = torch.randint(0, vocab, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    logits = kv.forward(ids, torch.ones(1, PROMPT, dtype=torch.bool), last_only=True)
    one = torch.ones(1, 1, dtype=torch.bool)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        logits = kv.forward(logits[:, -1].argmax(-1, keepdim=True), one, last_only=True)
        times.append(time.perf_counter() - t)
    return times


def measure(dtype: str, rounds: int, steps: int) -> dict:
    target = get_model("default", "cpu", dtype)
    draft = get_distilled_draft(str(DEFAULT_DRAFT_DIR), target)
    models = {"target": target.model, "draft": draft.model}
    vocab = target.model.config.vocab_size
    arms = [(m, a) for m in models for a in ARMS]
    first = {}
    for m, a in arms:  # the first step of each arm: compiles (or loads from the disk cache) the shape
        t = time.perf_counter()
        decode_steps(models[m], ARMS[a], 1, vocab)
        first[f"{m}/{a}"] = time.perf_counter() - t
    per_round = {f"{m}/{a}": [] for m, a in arms}
    for r in range(rounds):
        for m, a in arms[r % len(arms):] + arms[: r % len(arms)]:
            per_round[f"{m}/{a}"].append(statistics.median(decode_steps(models[m], ARMS[a], steps, vocab)))
    return {"dtype": dtype, "first_call_s": first, "step_s": per_round,
            "weight_bytes": {m: weight_bytes(models[m]) for m in models},
            "compile_failed": compiled.compiler().failed}


def report(res: dict, bw: float) -> None:
    s = res["step_s"]
    print(f"\n== {res['dtype']} (read bandwidth {bw:.1f} GB/s) ==")
    for name, xs in s.items():
        m = statistics.median(xs)
        wb = res["weight_bytes"][name.split("/")[0]]
        floor = wb / (bw * 1e9)
        print(f"{name:16s} step {m * 1e3:7.2f} ms (range {min(xs) * 1e3:.2f}-{max(xs) * 1e3:.2f}) "
              f"{1 / m:6.1f} tok/s  floor {floor * 1e3:.2f} ms  MBU {floor / m:5.1%}  "
              f"first call {res['first_call_s'][name]:.1f} s")
    for m in ("target", "draft"):
        ratios = [e / c for e, c in zip(s[f"{m}/eager"], s[f"{m}/compiled"])]
        print(f"{m}: compiled speed-up per round {[round(x, 2) for x in ratios]} median {statistics.median(ratios):.2f}")
    for a in ARMS:
        cs = [d / t for d, t in zip(s[f"draft/{a}"], s[f"target/{a}"])]
        print(f"cost ratio c ({a}): median {statistics.median(cs):.3f} range {min(cs):.3f}-{max(cs):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads (0: torch's default); 1 keeps a shared machine's contention from "
                         "stalling the two threads on each other")
    ap.add_argument("--json", metavar="OUT")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    bw = read_bandwidth_gbs()
    results = []
    for dtype in a.dtypes.split(","):
        results.append(measure(dtype, a.rounds, a.steps))
        report(results[-1], bw)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"read_bandwidth_gbs": bw, "threads": torch.get_num_threads(), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
