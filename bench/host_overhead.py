"""The engine's host floor: per-step time that is not model compute, with a model so small that its
forward costs a fraction of a millisecond (a random llama-style target of 2 layers, width 64, with
the packaged tokenizer's 49,152-token vocabulary). On a GPU every step of every model pays this
floor; on the CPU it hides under 20-35 ms forwards of the real model.

    python bench/host_overhead.py [--batch-sizes 1,8,64] [--draft-lengths 0,2,4] [--max-new-tokens 32] [--device cuda]
    python bench/host_overhead.py --pair default --batch-sizes 1,8 --draft-lengths 0,1,2

``--pair default``: the packaged pair instead (the SmolLM2 target and its distilled draft, bf16, torch's
default threads), so a step's split shows where a speculative step's cost goes on this machine: the
target's wider verify, the draft's forwards, and the host work around them. ``--drafts SPEC[,SPEC]``: other
model drafts there (any ``--draft`` spec, e.g. a feature draft's folder).

For each draft (prompt-lookup n-grams, and a 1-layer width-64 model draft) and each (B, k) it runs
the engine through specviz.run.decoder_for_ids (fp32, greedy, EOS off so every row runs to
max new tokens) and prints the median per step of:

    wall        the whole step (draft + verify + accept + bookkeeping, as the trace records it)
    forward     time inside the lean llama forward (specviz.models.fastllama.forward), target and draft,
                then each: target (the verify forward), d-fwd (the draft's forwards)
    host        wall - forward: everything else the engine does per step, split into
      draft     the draft phase outside the draft's forwards (n-gram lookup, per-row loops, sampling)
      verify    the verify phase outside the target forward (ids, slot masks)
      accept    the acceptance rule (specviz.engine.sampling / kernels)
      bookkeep  rollback, crop, compaction, per-row outputs and step records

On CUDA (``--device cuda``) the forward timer synchronizes the device before and after each forward,
so "forward" is the forward's device time as well as its launches, and "host" is the rest of the
step: what a GPU leaves idle between forwards. Those two syncs per forward are the timer's own,
a few microseconds each; the engine itself reads the device once per steady step.

``--compare-accept --rounds N`` measures each (draft, B, k) N times with two greedy rules interleaved: "host"
as the engine runs it (on the CPU the verdict worked out in Python lists, bf16 logits' argmax in C++) and
"tensor" (torch ops throughout, as on a GPU): the accept column's difference is what the CPU forms save.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
import types
from collections import defaultdict

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.engine import ragged, sampling  # noqa: E402
from specviz.engine.proposers import ModelDraft, NgramDraft  # noqa: E402
from specviz.models.loading import LoadedModel, encode_prompts, get_model  # noqa: E402
from specviz.prompts.sets import CHAT  # noqa: E402
from specviz.run import decoder_for_ids, make_proposer  # noqa: E402

_forward_s: dict = defaultdict(float)  # id(model) -> seconds inside fastllama.forward


def _timed_forward(inner, sync):
    def forward(model, *args, **kwargs):
        sync()
        t = time.perf_counter()
        try:
            return inner(model, *args, **kwargs)
        finally:
            sync()
            _forward_s[id(model)] += time.perf_counter() - t
    return forward


def tiny_llama(vocab: int, layers: int, width: int, tokenizer, seed: int, device: str = "cpu") -> LoadedModel:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=width, intermediate_size=2 * width, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg).eval().to(device)
    return LoadedModel(spec=f"random-llama-{layers}x{width}", name=f"random-llama-{layers}x{width} (synthetic)",
                       model=model, tokenizer=tokenizer, device=torch.device(device), dtype=torch.float32)


def measure(target, proposer, prompt_ids, k: int, max_new: int) -> dict:
    dec = decoder_for_ids(target, proposer, prompt_ids, k, max_new)
    dec.eos = set()  # random weights: every row runs to max_new_tokens, so steps are comparable
    draft_model = getattr(getattr(proposer, "loaded", None), "model", None)
    rows = []
    before = (0.0, 0.0)
    for rec in dec.steps():
        t_fwd, d_fwd = _forward_s[id(target.model)], _forward_s[id(draft_model)] if draft_model is not None else 0.0
        if rec.step == 0:  # the first step also paid the prefill's forwards: measure from here on
            before = (t_fwd, d_fwd)
            continue
        tv, dv = t_fwd - before[0], d_fwd - before[1]
        before = (t_fwd, d_fwd)
        wall = rec.t_draft + rec.t_verify + rec.t_accept + rec.t_bookkeeping
        rows.append({"wall": wall, "forward": tv + dv, "target": tv, "d-fwd": dv, "host": wall - tv - dv,
                     "draft": rec.t_draft - dv, "verify": rec.t_verify - tv, "accept": rec.t_accept,
                     "bookkeep": rec.t_bookkeeping})
    return {key: statistics.median(r[key] for r in rows) for key in rows[0]} if rows else {}


@contextlib.contextmanager
def tensor_rule():
    """The greedy rule as torch ops throughout (sampling's host verdict and the C++ argmax switched off):
    the baseline ``--compare-accept`` interleaves with."""
    saved = sampling.HOST_SLOTS, sampling.bf16linear
    sampling.HOST_SLOTS, sampling.bf16linear = 0, types.SimpleNamespace(available=lambda: False)
    try:
        yield
    finally:
        sampling.HOST_SLOTS, sampling.bf16linear = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch-sizes", default="1,8,64")
    ap.add_argument("--draft-lengths", default="0,2,4")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: the floor is single-threaded host work, and spinning OpenMP "
                         "threads make a tiny model's forward 30x slower when another process is busy; 0: torch's default)")
    ap.add_argument("--rounds", type=int, default=1, help="measurements of each (draft, B, k)")
    ap.add_argument("--compare-accept", action="store_true",
                    help="each measurement twice, interleaved: the greedy rule as it runs (host verdict, C++ argmax "
                         "of bf16 logits on the CPU) and as torch ops throughout")
    ap.add_argument("--pair", choices=("tiny", "default"), default="tiny",
                    help="tiny: random 2-layer models (the floor); default: the packaged pair in bf16")
    ap.add_argument("--drafts", default="default",
                    help="with --pair default: the model drafts beside n-grams, comma-separated --draft specs")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                    help="where the tiny models run (cuda: the forward timer synchronizes around each forward)")
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: CUDA is not available on this machine")
    if a.threads and a.pair == "tiny":
        torch.set_num_threads(a.threads)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    ragged.fastllama.forward = _timed_forward(ragged.fastllama.forward, sync)
    if a.pair == "default":
        target = get_model("default", a.device, "bfloat16")
        tok, V = target.tokenizer, target.model.config.vocab_size
        drafts = {"ngram": lambda: NgramDraft(max_ngram=3, device=target.device)}
        for spec in a.drafts.split(","):
            label = spec.rstrip("/").rpartition("/")[2]
            drafts[label] = (lambda p: lambda: p)(make_proposer(spec, target))
    else:
        tok = get_model("default", "cpu", "float32").tokenizer  # only the tokenizer: the model is synthetic
        V = len(tok)
        target = tiny_llama(V, 2, 64, tok, seed=0, device=a.device)
        draft_model = tiny_llama(V, 1, 64, tok, seed=1, device=a.device)
        drafts = {"ngram": lambda: NgramDraft(max_ngram=3, device=target.device),
                  "model 1x64": lambda: ModelDraft(draft_model, vocab_size=V)}
    prompts = encode_prompts(tok, CHAT)
    where = torch.cuda.get_device_name() if a.device == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(f"# torch {torch.__version__}, {where}, target {target.name}, "
          f"{sum(p.numel() for p in target.model.parameters()) / 1e6:.1f}M params, "
          f"{str(target.dtype).removeprefix('torch.')}, {a.max_new_tokens} new tokens")
    cols = ("wall", "forward", "target", "d-fwd", "host", "draft", "verify", "accept", "bookkeep")
    print(f"{'draft':>10} {'B':>3} {'k':>2} {'rule':>6} | " + " ".join(f"{c:>8}" for c in cols)
          + "   (ms per step, median; host = wall - forward = draft + verify + accept + bookkeep)")
    rules = {"host": contextlib.nullcontext, "tensor": tensor_rule} if a.compare_accept else {"": contextlib.nullcontext}
    for B in [int(x) for x in a.batch_sizes.split(",")]:
        ids = [prompts[i % len(prompts)] for i in range(B)]
        for k in [int(x) for x in a.draft_lengths.split(",")]:
            for name, make in (drafts.items() if k else [("regular", lambda: None)]):
                measure(target, make(), ids[:1], k, 4)  # warm this shape family up
                for _ in range(a.rounds):  # the rules interleaved, round by round
                    for rule, context in rules.items():
                        with context():
                            m = measure(target, make(), ids, k, a.max_new_tokens)
                        print(f"{name:>10} {B:>3} {k:>2} {rule:>6} | " + " ".join(f"{1e3 * m[c]:8.2f}" for c in cols),
                              flush=True)


if __name__ == "__main__":
    main()
