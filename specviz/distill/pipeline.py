"""Distil a tiny draft for a target: generate data with the target, train, evaluate, save.

    python -m specviz distill --target default --out DIR [--samples N --steps N --vocab N ...]

1. data      the target answers diverse built-in prompts (specviz.prompts.gen) through the engine's
             regular decoding (half greedy, half sampled); every emitted token keeps the target's
             top-k logits at that position (free: the engine computed them), so training gets
             soft labels without another target pass. JSONL shards, resumable.
2. draft     a LlamaForCausalLM at the target's width: the first L target layers as the start,
             the target's *frozen input embedding* (shared at load time, never stored), and an
             output head over only the ``--vocab`` tokens the target emits most (the vocabulary
             map). Tokens outside the map get logit -inf: never proposed, so the acceptance rule
             simply rejects where the target wants one of them.
3. training  soft cross-entropy to the target's top-k distribution renormalised over the map
             (= forward KL up to a constant); the checkpoint with the best held-out top-1
             agreement (= greedy acceptance at k = 1, teacher-forced) is kept.
4. report    held-out greedy acceptance through the engine at k = 1..4, the cost ratio c from
             real forward timings at B = 1 and 8, the predicted speedup (specviz.analysis.analytic).

Saved layout (Hugging Face style; the target's embedding is *not* stored):
    DIR/config.json          LlamaConfig: vocab_size = the target's, tie_word_embeddings = false
    DIR/model.safetensors    the draft's own weights in bf16; lm_head.weight is [n_map, hidden]
    DIR/specviz_draft.json   {"format", "target", "embedding": "from_target", "vocab_map": [ids]...}
    DIR/tokenizer files, report.json, README.md
Load it with :func:`load_distilled_draft` (it needs the loaded target for the embedding).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from specviz.common import SpecvizError

from specviz.models.distilled import (DRAFT_FILE, DRAFT_FORMAT, DistilledDraft, MappedHead, build_draft,  # noqa: F401
                                      draft_config, embedding_fingerprint, is_distilled_draft, load_distilled_draft,
                                      save_draft)

SAMPLE_TEMPERATURE = 0.8  # temperature of the sampled half of the data


def init_from_target(draft, target_model, layer_ids: list[int]) -> None:
    """Start from target layers ``layer_ids``, its final norm, and its output rows for the map."""
    src = target_model.model
    with torch.no_grad():
        for dst, i in zip(draft.model.layers, layer_ids):
            dst.load_state_dict(src.layers[i].state_dict())
        draft.model.norm.load_state_dict(src.norm.state_dict())
        out = target_model.get_output_embeddings().weight  # [V, hidden] (tied: the embedding)
        draft.lm_head.weight.copy_(out[draft.lm_head.vocab_map].float())


# =============================================================================================
# Data: the target's own outputs with its top-k logits per output token (JSONL shards)


def _enc(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()


def _dec(s: str, dtype, k: int) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype=dtype).reshape(-1, k)


class _TopkRecorder:
    """An accept_fn that keeps the target's top-k logits of every step, then accepts as usual."""

    def __init__(self, k: int):
        self.k, self.last = k, None

    def __call__(self, logits, drafts, n, u, params, q):
        from specviz.engine.sampling import accept_reference

        vals, ids = logits[:, 0].float().topk(self.k, dim=-1)  # [B, K] (regular decoding: 1 slot)
        self.last = (ids.cpu().numpy().astype(np.uint16 if logits.shape[-1] <= 65536 else np.int32),
                     vals.cpu().numpy().astype(np.float16))
        return accept_reference(logits, drafts, n, u, params, q)


def _decode_batch(target, prompts, ids, temperature: float, max_new: int, topk: int, seed: int, features: bool = False):
    """Regular decoding of one batch: (rows, per-row [(top-k ids, top-k logits)] per output token,
    per-row features [P + n - 1, H] (the target's final-norm output at every fed position) or None)."""
    from specviz.engine.policies import Fixed
    from specviz.engine.decoder import SpecDecoder
    from specviz.engine.sampling import SamplingParams

    rec = _TopkRecorder(topk)
    dec = SpecDecoder(target, None, Fixed(0), prompts, ids, SamplingParams(temperature=temperature), max_new, seed,
                      accept_fn=rec, keep_hidden=features)
    labels = [[] for _ in prompts]
    feats = [[] for _ in prompts] if features else None
    for s, step in enumerate(dec.steps()):
        active = [r for r in step["rows"] if r["active"]]  # same order as the recorder's rows
        if features:
            if s == 0 and dec.prefill_hidden is not None:  # f_0 .. f_{P-2}: the prompt but its last token
                for i in range(len(prompts)):
                    feats[i].append(dec.prefill_hidden[i][dec.prefill_valid[i]].cpu())
            h = dec.verify_hidden[:, 0].cpu()  # [B_active, H]: the feature of the token each row fed
        for j, r in enumerate(active):
            if features:
                feats[r["index"]].append(h[j:j + 1])
            if r["emitted"]:
                labels[r["index"]].append((rec.last[0][j], rec.last[1][j]))
    if features:
        feats = [torch.cat(f) for f in feats]
        for f, r in zip(feats, dec.rows):  # the row fed its prompt and all outputs but the last
            assert f.shape[0] == len(r.prompt_ids) + len(r.output) - 1, (f.shape, len(r.prompt_ids), len(r.output))
    return dec.rows, labels, feats


def prompt_batches(n: int, batch_size: int) -> list[list[int]]:
    """Prompt indices per data-generation batch j (its seed and greedy/sampled choice follow j)."""
    return [list(range(j, min(n, j + batch_size))) for j in range(0, n, batch_size)]


def answer_batches(target, prompts: list[str], todo, max_new: int, topk: int, seed: int, greedy_every: int = 2,
                   deadline: float | None = None, worker: int = 0, workers: int = 1, desc: str = "data",
                   features: bool = False):
    """Decode each (j, indices) of ``todo``; yields (j, indices, temperature, rows, labels, feats).

    Batch j is greedy when j % greedy_every == 0, else sampled at SAMPLE_TEMPERATURE; its seed
    is seed*1000 + j, so a resumed run writes what an uninterrupted one would (same batch size).
    Stops before a batch that would end after ``deadline`` (time.time() seconds), judged by the
    previous batch's duration (including what the caller did with it).
    """
    from tqdm import tqdm

    from specviz.run import encode_prompts

    label = desc if workers == 1 else f"{desc} (1 of {workers} workers)"
    bar = tqdm(total=sum(len(idx) for _, idx in todo) * max_new, desc=label, unit="tok", file=sys.stderr,
               smoothing=0.1, mininterval=2, disable=worker > 0)  # one bar: worker 0's share
    last_s = 0.0
    for j, idx in todo:
        t = time.time()
        if deadline is not None and t + last_s > deadline:
            if worker == 0:
                _log(f"{desc}: generation budget reached")
            break
        batch = [prompts[i] for i in idx]
        temperature = 0.0 if j % greedy_every == 0 else SAMPLE_TEMPERATURE
        rows, labels, feats = _decode_batch(target, batch, encode_prompts(target.tokenizer, batch), temperature,
                                            max_new, topk, seed * 1000 + j, features)
        bar.update(len(idx) * max_new)
        yield j, idx, temperature, rows, labels, feats
        last_s = time.time() - t
    bar.close()


def generate_data(target, prompts: list[str], data: Path, name: str, max_new: int, batch_size: int, topk: int,
                  seed: int, worker: int = 0, workers: int = 1, **kwargs) -> None:
    """Answer ``prompts`` with the target into ``data/name-<worker>.jsonl``, skipping samples any
    ``name-*.jsonl`` shard already holds. Worker w of W takes batches j = w (mod W); the rest of
    ``kwargs`` (greedy_every, deadline, desc) go to :func:`answer_batches`.
    """
    done = {(s["sample"], s["prompt"]) for s in read_samples(sorted(data.glob(f"{name}-*.jsonl")))}
    todo = [(j, idx) for j, idx in enumerate(prompt_batches(len(prompts), batch_size))
            if j % workers == worker and any((i, prompts[i]) not in done for i in idx)]
    if not todo:
        return
    with open(data / f"{name}-{worker}.jsonl", "a") as f:
        for _, idx, temperature, rows, labels, _ in answer_batches(target, prompts, todo, max_new, topk, seed,
                                                                    worker=worker, workers=workers, **kwargs):
            for i, r, lab in zip(idx, rows, labels):
                if (i, prompts[i]) in done:
                    continue
                rec = {"sample": i, "prompt": r.prompt, "temperature": temperature, "prompt_ids": r.prompt_ids,
                       "output_ids": r.output, "finish_reason": r.finish_reason, "topk": topk,
                       "ids_dtype": str(lab[0][0].dtype), "topk_ids": _enc(np.stack([a for a, _ in lab])),
                       "topk_logits": _enc(np.stack([b for _, b in lab]))}
                f.write(json.dumps(rec) + "\n")
            f.flush()


def _gen_worker(job: dict, worker: int) -> None:
    """One data-generation process: its own target copy on one thread (steady on a busy CPU)."""
    import importlib

    import transformers

    from specviz.run import get_model

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    kwargs = {**job["kwargs"], "data": Path(job["kwargs"]["data"])}
    fn = getattr(importlib.import_module(job["module"]), job["function"])
    fn(get_model(job["spec"], job["device"], job["dtype"]), worker=worker, **kwargs)


_WORKER = "import json, sys; from specviz.distill.pipeline import _gen_worker; _gen_worker(json.load(sys.stdin), int(sys.argv[1]))"


def generate_parallel(target, workers: int, fn=None, **kwargs) -> None:
    """``fn`` (generate_data, or featdraft.generate_feature_data) in this process (workers = 1) or
    in ``workers`` single-thread subprocesses, worker w taking batches j = w (mod workers).

    Plain subprocesses, not multiprocessing: they work whatever the caller's __main__ is.
    """
    fn = fn or generate_data
    if workers <= 1:
        fn(target, **kwargs)
        return
    if fn is generate_data:
        done = {(s["sample"], s["prompt"]) for s in read_samples(sorted(kwargs["data"].glob(f"{kwargs['name']}-*.jsonl")))}
        if all((i, p) in done for i, p in enumerate(kwargs["prompts"])):
            return  # nothing to resume: do not start processes
    import subprocess

    job = json.dumps({"spec": target.spec, "device": str(target.device), "dtype": str(target.dtype).removeprefix("torch."),
                      "module": fn.__module__, "function": fn.__name__,
                      "kwargs": {**kwargs, "data": str(kwargs["data"]), "workers": workers}})
    root = str(Path(__file__).resolve().parents[1])  # so the children import this specviz
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    procs = []
    try:
        for w in range(workers):
            procs.append(subprocess.Popen([sys.executable, "-c", _WORKER, str(w)], stdin=subprocess.PIPE, env=env, text=True))
            procs[-1].stdin.write(job)
            procs[-1].stdin.close()
        codes = [p.wait() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
    if any(codes):
        raise SpecvizError(f"a data-generation worker failed (exit codes {codes}); rerun the same command to resume")


def read_samples(paths) -> list[dict]:
    """Samples from JSONL files; a torn last line (an interrupted write) is skipped."""
    out = []
    for p in paths:
        for line in Path(p).read_text().splitlines():
            try:
                s = json.loads(line)
            except json.JSONDecodeError:
                continue
            k = s["topk"]
            s["topk_ids"] = _dec(s["topk_ids"], np.dtype(s.get("ids_dtype", "uint16")), k).astype(np.int64)
            s["topk_logits"] = _dec(s["topk_logits"], np.float16, k).astype(np.float32)
            out.append(s)
    return out


def build_vocab_map(samples: list[dict], size: int, vocab_size: int, always=()) -> list[int]:
    """The ``size`` tokens the target emits most (outputs + its top-1 predictions), ``always``
    first (EOS...), ties and the remainder filled by ascending id (BPE ids roughly follow
    frequency). Sorted ascending."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for s in samples:
        np.add.at(counts, np.asarray(s["output_ids"], dtype=np.int64), 1)
        np.add.at(counts, s["topk_ids"][:, 0], 1)
    order = np.lexsort((np.arange(vocab_size), -counts))  # most frequent first, then lower id
    chosen = [int(t) for t in always if 0 <= t < vocab_size]
    seen = set(chosen)
    for t in order:
        if len(chosen) >= size:
            break
        if int(t) not in seen:
            chosen.append(int(t))
            seen.add(int(t))
    return sorted(chosen)


# =============================================================================================
# Training


def _tensors(samples, vocab_map: list[int], vocab_size: int) -> list[dict]:
    """Per sample: inputs (prompt + outputs but the last), label positions, soft labels on the map."""
    inv = inverse_map(vocab_map, vocab_size)
    out = []
    for s in samples:
        n = len(s["output_ids"])
        if n == 0:
            continue
        P = len(s["prompt_ids"])
        ids = torch.as_tensor(s["prompt_ids"] + s["output_ids"][:-1], dtype=torch.long)  # [P + n - 1]
        out.append({"ids": ids, "first": P - 1, **soft_labels(s["topk_ids"], s["topk_logits"], inv)})
    return out


def inverse_map(vocab_map: list[int], vocab_size: int) -> torch.Tensor:
    """[V] position of each token in the map, -1 outside it."""
    inv = torch.full((vocab_size,), -1, dtype=torch.long)
    inv[torch.as_tensor(vocab_map)] = torch.arange(len(vocab_map))
    return inv


def soft_labels(topk_ids, topk_logits, inv: torch.Tensor) -> dict:
    """The target's top-k distribution per output position, renormalised over the map:
    idx [n, K] map indices, p [n, K], w [n] (0 where no top-k token is in the map), top1 [n]
    (the target's greedy token's map index, -1 outside the map)."""
    top = inv[torch.as_tensor(topk_ids, dtype=torch.long)]  # [n, K] map index or -1
    p = torch.softmax(torch.as_tensor(topk_logits, dtype=torch.float32), dim=-1) * (top >= 0)  # in-map mass only
    mass = p.sum(-1, keepdim=True)
    return {"idx": top.clamp(min=0), "p": p / mass.clamp(min=1e-9), "w": (mass.squeeze(-1) > 0).float(), "top1": top[:, 0]}


def _collate(items: list[dict]):
    T = max(len(x["ids"]) for x in items)
    ids = torch.zeros(len(items), T, dtype=torch.long)
    mask = torch.zeros(len(items), T, dtype=torch.long)
    rows, cols = [], []
    for b, x in enumerate(items):
        L, n = len(x["ids"]), len(x["p"])
        ids[b, :L], mask[b, :L] = x["ids"], 1  # right padding: positions 0..L-1 stay right
        rows.append(torch.full((n,), b))
        cols.append(torch.arange(x["first"], x["first"] + n))
    cat = lambda key: torch.cat([x[key] for x in items])  # noqa: E731
    return ids, mask, torch.cat(rows), torch.cat(cols), cat("idx"), cat("p"), cat("w"), cat("top1")


def _loss(draft, batch, autocast: bool):
    device = draft.lm_head.weight.device
    ids, mask, rows, cols, idx, p, w, top1 = (x.to(device) for x in batch)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        h = draft.model(input_ids=ids, attention_mask=mask).last_hidden_state  # [B, T, hidden]
        z = draft.lm_head.reduced(h[rows, cols])  # [N, n_map] only labelled positions
    return soft_ce(z, idx, p, w, top1)


def soft_ce(z: torch.Tensor, idx, p, w, top1):
    """Soft cross-entropy of map logits z [N, n_map] against soft_labels (= KL(p || q) + H(p)),
    averaged over labelled positions; plus the count of greedy agreements and of positions."""
    logq = torch.log_softmax(z.float(), dim=-1)  # [N, n_map]
    ce = -(p * logq.gather(-1, idx)).sum(-1)  # [N]
    loss = (ce * w).sum() / w.sum().clamp(min=1)
    agree = (z.argmax(-1) == top1).float()  # [N] greedy agreement with the target's top-1
    return loss, agree.sum().item(), len(agree)


def _batches(data, batch_size: int, g: torch.Generator):
    """Endless length-bucketed batches: shuffle, sort chunks of 32 batches by length, shuffle batches."""
    while True:
        perm = torch.randperm(len(data), generator=g).tolist()
        chunk = 32 * batch_size
        batches = []
        for c in range(0, len(perm), chunk):
            part = sorted(perm[c:c + chunk], key=lambda i: len(data[i]["ids"]))
            batches += [part[i:i + batch_size] for i in range(0, len(part), batch_size)]
        for bi in torch.randperm(len(batches), generator=g).tolist():
            yield [data[i] for i in batches[bi]]


@torch.no_grad()
def evaluate_agreement(draft, data, batch_size: int = 16, autocast: bool = True, loss_fn=None, collate=None) -> dict:
    """Teacher-forced on held-out target outputs: top-1 agreement (= greedy alpha at k = 1) and loss."""
    loss_fn, collate = loss_fn or _loss, collate or _collate
    draft.eval()
    agree = n = 0
    loss_sum = 0.0
    for i in range(0, len(data), batch_size):
        loss, a, m = loss_fn(draft, collate(data[i:i + batch_size]), autocast)
        agree, n, loss_sum = agree + a, n + m, loss_sum + loss.item() * m
    draft.train()
    return {"agreement": agree / max(n, 1), "loss": loss_sum / max(n, 1), "positions": n}


def train(draft, train_data, val_data, steps: int, batch_size: int, lr: float, seed: int, budget_s: float | None = None,
          weight_decay: float = 0.05, warmup: int = 30, eval_every: int = 100, autocast: bool = True, log=None,
          loss_fn=None, collate=None) -> dict:
    """AdamW, linear warmup then cosine to 10% over ``steps``; keeps the best held-out checkpoint.

    Everything that shapes the weights (batch order, learning rate) follows the step count and
    the seed, never the clock, so the same data, seed and ``steps`` give the same weights on the
    same device and thread count. ``budget_s`` is only a safety stop: if it ends training first,
    the history says ``stopped_by="time budget"`` and those weights depend on the machine's
    speed (the schedule was cut short at whatever step the clock allowed). Returns the history.
    """
    from tqdm import tqdm

    loss_fn, collate = loss_fn or _loss, collate or _collate  # the token draft's; featdraft passes its own
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    g = torch.Generator().manual_seed(seed)
    it = _batches(train_data, batch_size, g)
    draft.train()
    best = {"agreement": -1.0}
    best_state = None
    hist = {"loss": [], "val": []}
    t0 = time.perf_counter()
    bar = tqdm(total=steps, desc="train", file=sys.stderr, mininterval=2)
    step = 0

    def checkpoint():
        nonlocal best, best_state
        v = evaluate_agreement(draft, val_data, autocast=autocast, loss_fn=loss_fn, collate=collate) if val_data else {"agreement": 0.0, "loss": 0.0}
        v.update(step=step, elapsed_s=time.perf_counter() - t0)
        hist["val"].append(v)
        if v["agreement"] > best["agreement"]:
            best, best_state = v, {k: t.detach().clone() for k, t in draft.state_dict().items()
                                   if not k.startswith("model.embed_tokens.")}
        if log:
            recent = f"{np.mean(hist['loss'][-eval_every:]):.3f}" if hist["loss"] else "-"
            log(f"step {step}: train loss {recent}  held-out agreement {v['agreement']:.3f}  loss {v['loss']:.3f}")

    checkpoint()  # the starting point (target layers) is a candidate too
    stopped_by = "steps"
    while step < steps:
        if budget_s is not None and time.perf_counter() - t0 >= budget_s:
            stopped_by = "time budget"
            if log:
                log(f"time budget reached at step {step} of {steps}: these weights depend on this machine's speed; "
                    f"for reproducible weights give the budget room for --steps to end training")
            break
        progress = step / steps
        scale = min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        for group in opt.param_groups:
            group["lr"] = lr * scale
        loss, _, _ = loss_fn(draft, collate(next(it)), autocast)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        hist["loss"].append(loss.item())
        step += 1
        bar.update(1)
        bar.set_postfix(loss=f"{np.mean(hist['loss'][-20:]):.3f}")
        if step % eval_every == 0:
            checkpoint()
    bar.close()
    if not hist["val"] or hist["val"][-1]["step"] != step:
        checkpoint()
    if best_state is not None and val_data:  # without held-out data the last weights are kept
        draft.load_state_dict(best_state, strict=False)
    if not val_data:
        best = hist["val"][-1]
    draft.eval()
    return {"steps": step, "stopped_by": stopped_by, "train_s": time.perf_counter() - t0, "best": best, **hist}


# =============================================================================================
# Evaluation: acceptance through the engine, cost ratio from real forwards, predicted speedup


def eval_acceptance(target, proposer, prompts: list[str], ks, max_new: int, batch_size: int) -> dict:
    """Greedy speculative decoding on ``prompts`` at each k; acceptance, fitted alpha, tokens/s."""
    from specviz.engine.policies import Fixed
    from specviz.engine.decoder import SpecDecoder
    from specviz.run import encode_prompts
    from specviz.engine.sampling import SamplingParams
    from specviz.analysis.tracestats import alpha_from_accepted

    ids = encode_prompts(target.tokenizer, prompts)
    out = {}
    for k in [0, *ks]:
        drafted = accepted = row_steps = tokens = 0
        wall = 0.0
        outputs = []
        for i in range(0, len(prompts), batch_size):
            dec = SpecDecoder(target, proposer if k else None, Fixed(k), prompts[i:i + batch_size], ids[i:i + batch_size],
                              SamplingParams(), max_new)
            t = time.perf_counter()
            for s in dec.steps():
                for r in s["rows"]:
                    if r["active"]:
                        drafted, accepted, row_steps = drafted + r["drafted"], accepted + r["accepted"], row_steps + 1
            wall += time.perf_counter() - t
            tokens += sum(len(r.output) for r in dec.rows)
            outputs += [r.output for r in dec.rows]
        cell = {"tokens": tokens, "tokens_per_s": tokens / wall, "outputs": outputs}
        if k:
            cell.update(acceptance_rate=accepted / max(drafted, 1), mean_accepted=accepted / max(row_steps, 1),
                        mean_acceptance_length=1 + accepted / max(row_steps, 1),
                        alpha=alpha_from_accepted(accepted / max(row_steps, 1), k),
                        measured_speedup=cell["tokens_per_s"] / out[0]["tokens_per_s"])
        out[k] = cell
    return out


def cost_ratio(target, draft, batch_sizes=(1, 8), prefix_len: int = 128, rounds: int = 3) -> dict:
    """c = T_draft(b, 1) / T_target(b, 1) from real forwards over a cached prefix (median of
    interleaved rounds, so drift hits both models alike)."""
    from specviz.measure.calibrate import time_forward

    out = {}
    for b in batch_sizes:
        td, tt = [], []
        for _ in range(rounds):
            tt.append(time_forward(target, b, 1, prefix_len, repeats=3))
            td.append(time_forward(draft, b, 1, prefix_len, repeats=3))
        out[b] = {"t_target_ms": 1e3 * float(np.median(tt)), "t_draft_ms": 1e3 * float(np.median(td)),
                  "c": float(np.median(td) / np.median(tt))}
    return out


def predicted_speedups(alpha: float, c: float, k_max: int = 8) -> dict:
    from specviz.analysis.analytic import optimal_k_batch1, speedup_batch1

    k_star = optimal_k_batch1(alpha, c, k_max=k_max)
    return {"alpha": alpha, "c": c, "k_star": k_star, "speedup_at_k_star": speedup_batch1(alpha, k_star, c),
            "speedup_by_k": {k: speedup_batch1(alpha, k, c) for k in range(1, k_max + 1)}}


# =============================================================================================
# The command: python -m specviz distill ...


def add_distill_parser(sub) -> None:
    p = sub.add_parser("distill", help="distil a tiny draft for a target (generate data, train, evaluate, save)")
    p.add_argument("--target", default="default", help="target model SPEC")
    p.add_argument("--out", required=True, metavar="DIR", help="where the draft, report.json and README.md go")
    p.add_argument("--data", metavar="DIR", help="data shards (default OUT/data); reruns resume and reuse them")
    p.add_argument("--samples", type=int, default=2000, help="training prompts the target answers")
    p.add_argument("--val-samples", type=int, default=64, help="held-out prompts answered greedily (checkpoint choice)")
    p.add_argument("--max-new-tokens", type=int, default=128, help="tokens per generated answer")
    p.add_argument("--gen-batch-size", type=int, default=32, help="rows per data-generation batch")
    p.add_argument("--gen-budget-min", type=float, default=None, help="stop generating after this many minutes")
    p.add_argument("--gen-workers", type=int, default=0,
                   help="data-generation processes, one thread each (0 = auto: up to 4 on CPU, 1 on CUDA); on a busy "
                        "2-core CPU, 2 workers x 1 thread ran 3x faster than 1 x 2 threads")
    p.add_argument("--topk", type=int, default=32, help="target logits kept per token (soft labels)")
    p.add_argument("--steps", type=int, default=3000,
                   help="training steps; the learning-rate schedule follows them, so they fix the weights")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per training step")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight-decay", type=float, default=0.05)
    p.add_argument("--vocab", type=int, default=8192, help="output vocabulary of the draft (most emitted tokens)")
    p.add_argument("--kind", default="token", choices=["token", "feature"],
                   help="token: a small LM on tokens alone; feature: one layer fed the target's hidden states (EAGLE, "
                        "specviz/featdraft.py)")
    p.add_argument("--layers", type=int, default=2, help="draft depth (layers at the target's width; a feature draft has 1)")
    p.add_argument("--init-layers", default="first",
                   help="'first' or comma-separated target layer ids to start from ('random' too for a feature draft)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-budget-min", type=float, default=None,
                   help="safety stop for training, in minutes (default: none); if it ends training before --steps, "
                        "the weights depend on the machine's speed and the report says so")
    p.add_argument("--eval-every", type=int, default=100, help="steps between held-out checkpoints")
    p.add_argument("--eval-prompts", type=int, default=16, help="held-out prompts for the engine evaluation")
    p.add_argument("--eval-max-new-tokens", type=int, default=64)
    p.add_argument("--eval-ks", default="1,2,3,4", help="draft lengths to evaluate")
    p.add_argument("--no-freeform", action="store_true", help="skip the hand-written (free-form) held-out set")
    p.add_argument("--cost-rounds", type=int, default=3, help="interleaved timing rounds for the cost ratio")
    p.add_argument("--cost-prefix-len", type=int, default=128, help="cached prefix per row when timing c")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads for training and evaluation (0 = torch's default); on a shared 2-core CPU 1 is "
                        "steady while 2 stalled up to 10x under load, but 2 is ~2x faster on an idle machine")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="target dtype for data generation and evaluation")
    p.set_defaults(func=cmd_distill)


def _log(msg: str) -> None:
    print(f"[distill] {msg}", file=sys.stderr, flush=True)


def _check_data_meta(data: Path, meta: dict) -> None:
    path = data / "meta.json"
    if path.is_file():
        old = json.loads(path.read_text())
        diff = {k: (old.get(k), v) for k, v in meta.items() if old.get(k) != v}
        if diff:
            raise SpecvizError(f"data in {data} was made with other settings {diff}: pass another --data directory")
    data.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(meta))


def _layer_ids(spec: str, layers: int, n_target: int) -> list[int]:
    if spec == "first":
        ids = list(range(layers))
    else:
        try:
            ids = [int(x) for x in spec.split(",")]
        except ValueError:
            raise SpecvizError(f"--init-layers wants 'first' or comma-separated ids (got {spec!r})") from None
    if len(ids) != layers or not all(0 <= i < n_target for i in ids):
        raise SpecvizError(f"--init-layers needs {layers} ids in 0..{n_target - 1} (got {spec!r})")
    return ids


def _outside_rate(outputs: list[list[int]], vocab_map: list[int]) -> float:
    m = set(vocab_map)
    toks = [t for o in outputs for t in o]
    return sum(t not in m for t in toks) / max(len(toks), 1)


def _validate(a) -> list[int]:
    if a.gen_workers < 0:
        raise SpecvizError(f"--gen-workers must be 0 (auto) or more (got {a.gen_workers})")
    for name in ("samples", "max_new_tokens", "gen_batch_size", "topk", "batch_size", "vocab", "layers", "eval_prompts",
                 "eval_max_new_tokens"):
        if getattr(a, name) < 1:
            raise SpecvizError(f"--{name.replace('_', '-')} must be at least 1 (got {getattr(a, name)})")
    if a.steps < 0 or a.val_samples < 0 or (a.time_budget_min is not None and a.time_budget_min <= 0):
        raise SpecvizError("--steps and --val-samples must be >= 0 and --time-budget-min > 0")
    try:
        ks = [int(x) for x in a.eval_ks.split(",") if x.strip()]
    except ValueError:
        ks = []
    if not ks or min(ks) < 1:
        raise SpecvizError(f"--eval-ks wants comma-separated draft lengths >= 1 (got {a.eval_ks!r})")
    return ks


def cmd_distill(a) -> int:
    from specviz.distill import feature as featdraft
    from specviz.engine.proposers import FeatureDraft, ModelDraft
    from specviz.engine.decoder import eos_token_ids
    from specviz.prompts.gen import freeform_prompts, heldout_prompts, training_prompts
    from specviz.run import get_model

    ks = _validate(a)
    if a.threads:
        torch.set_num_threads(a.threads)
    t_start = time.perf_counter()
    out = Path(a.out).expanduser()
    data = Path(a.data).expanduser() if a.data else out / "data"
    target = get_model(a.target, a.device, a.dtype)
    V = target.model.config.vocab_size
    if a.vocab > V:
        raise SpecvizError(f"--vocab {a.vocab} exceeds the target's vocabulary ({V})")
    dtype_name = str(target.dtype).removeprefix("torch.")
    feature = a.kind == "feature"
    if feature:
        a.layers = 1
    _check_data_meta(data, {"target": a.target, "dtype": dtype_name, "max_new_tokens": a.max_new_tokens, "topk": a.topk,
                            "seed": a.seed, "gen_batch_size": a.gen_batch_size, **({"kind": "feature"} if feature else {})})
    gen_fn = featdraft.generate_feature_data if feature else generate_data

    # ---- 1. data
    t0 = time.perf_counter()
    train_prompts = training_prompts(a.samples, a.seed)
    val_prompts = heldout_prompts(a.val_samples, seed=1) if a.val_samples else []
    eval_prompts = [p for p in heldout_prompts(a.eval_prompts + len(val_prompts), seed=2) if p not in set(val_prompts)]
    eval_prompts = eval_prompts[: a.eval_prompts]
    if not a.gen_workers:
        a.gen_workers = 1 if target.device.type == "cuda" else max(1, min(4, os.cpu_count() or 1))
    common = dict(data=data, max_new=a.max_new_tokens, batch_size=a.gen_batch_size, topk=a.topk)
    if val_prompts:
        generate_parallel(target, a.gen_workers, gen_fn, prompts=val_prompts, name="val", seed=a.seed + 1, greedy_every=1,
                          desc="held-out data", **common)
    deadline = time.time() + 60 * a.gen_budget_min if a.gen_budget_min else None
    generate_parallel(target, a.gen_workers, gen_fn, prompts=train_prompts, name="train", seed=a.seed, deadline=deadline,
                      desc="training data", **common)
    gen_s = time.perf_counter() - t0
    read = ((lambda name: featdraft.read_feature_samples(data, name)) if feature
            else (lambda name: read_samples(sorted(data.glob(f"{name}-*.jsonl")))))
    train_samples = [s for s in read("train") if s["sample"] < a.samples and s["prompt"] == train_prompts[s["sample"]]]
    train_samples = list({s["sample"]: s for s in reversed(train_samples)}.values())  # one per sample
    train_samples.sort(key=lambda s: s["sample"])  # worker interleaving must not change training
    val_samples = sorted(read("val"), key=lambda s: s["sample"]) if val_prompts else []
    if not train_samples:
        raise SpecvizError("no training data was generated (raise --gen-budget-min or --samples)")
    n_tokens = sum(len(s["output_ids"]) for s in train_samples)
    _log(f"data: {len(train_samples)} samples, {n_tokens} target tokens ({gen_s:.0f} s)")

    # ---- 2. draft
    torch.manual_seed(a.seed)
    eos = sorted(eos_token_ids(target))
    vocab_map = build_vocab_map(train_samples, a.vocab, V, always=eos)
    if feature:
        layer_ids = [] if a.init_layers == "random" else _layer_ids(a.init_layers, 1, target.model.config.num_hidden_layers)
        draft = featdraft.build_feature_draft(target.model, vocab_map, layer_ids[0] if layer_ids else None)
        draft.to(target.device)  # fp32 master weights; the forward runs under bf16 autocast
    else:
        config = draft_config(target.model.config, a.layers)
        layer_ids = _layer_ids(a.init_layers, a.layers, target.model.config.num_hidden_layers)
        emb_w = target.model.get_input_embeddings().weight.detach().float()  # frozen, as the target's dtype rounds it
        draft = build_draft(config, nn.Embedding.from_pretrained(emb_w.clone(), freeze=True), vocab_map)
        draft.float().to(target.device)  # fp32 master weights; the forward runs under bf16 autocast
        init_from_target(draft, target.model, layer_ids)
    own = sum(p.numel() for n, p in draft.named_parameters() if not n.startswith("model.embed_tokens."))
    _log(f"{a.kind} draft: {a.layers} layers (from target layers {layer_ids or 'none: random'}), vocab {len(vocab_map)}, "
         f"{own / 1e6:.1f}M own params")

    # ---- 3. training
    tensors = featdraft.feature_tensors if feature else _tensors
    train_data = tensors(train_samples, vocab_map, V)
    val_data = tensors(val_samples, vocab_map, V)
    fns = dict(loss_fn=featdraft.feature_loss, collate=featdraft.collate_features) if feature else {}
    hist = train(draft, train_data, val_data, a.steps, a.batch_size, a.lr, a.seed, 60 * a.time_budget_min if a.time_budget_min else None,
                 weight_decay=a.weight_decay, eval_every=a.eval_every, log=_log, **fns)
    _log(f"trained {hist['steps']} steps in {hist['train_s']:.0f} s; best held-out agreement "
         f"{hist['best']['agreement']:.3f} (step {hist['best']['step']})")

    # ---- 4. save, reload as a draft SPEC would, evaluate
    save_draft(draft, out, target, vocab_map, extra={"layers": a.layers, "init_layers": layer_ids,
                                                      **({"kind": "feature"} if feature else {})})
    t_eval = time.perf_counter()
    loaded = load_distilled_draft(out, target)
    proposer = (FeatureDraft if feature else ModelDraft)(loaded, vocab_size=V)
    _log(f"evaluating on {len(eval_prompts)} held-out prompts at k = {ks}")
    held = eval_acceptance(target, proposer, eval_prompts, ks, a.eval_max_new_tokens, 8)
    free = None if a.no_freeform else eval_acceptance(target, proposer, freeform_prompts(a.eval_prompts), ks,
                                                          a.eval_max_new_tokens, 8)
    costs = cost_ratio(target, loaded, (1, 8), prefix_len=a.cost_prefix_len, rounds=a.cost_rounds)
    eval_s = time.perf_counter() - t_eval

    report = _report(a, target, loaded, own, layer_ids, vocab_map, train_samples, val_samples, n_tokens, gen_s, hist,
                     held, free, costs, ks, eval_s, time.perf_counter() - t_start)
    (out / "report.json").write_text(json.dumps(report, indent=1))
    text = format_report(report)
    (out / "README.md").write_text(_readme(report, text))
    print(text)
    _log(f"draft written to {out} (use it as --draft {out})")
    return 0


def _acc_table(res: dict | None, ks, c: float) -> list[dict] | None:
    from specviz.analysis.analytic import speedup_batch1

    if res is None:
        return None
    return [{"k": k, **{key: res[k][key] for key in ("acceptance_rate", "alpha", "mean_acceptance_length",
                                                      "measured_speedup", "tokens")},
             "predicted_speedup_batch1": speedup_batch1(res[k]["alpha"], k, c)} for k in ks]


def _command(a) -> str:
    """The full command with every option spelled out, so a rerun reproduces this one."""
    import shlex

    parts = ["python", "-m", "specviz", "distill"]
    for key, v in vars(a).items():
        if key in ("func", "cmd") or v is None or v is False:
            continue
        flag = "--" + key.replace("_", "-")
        parts += [flag] if v is True else [flag, str(v)]
    return " ".join(shlex.quote(x) for x in parts)


def _report(a, target, loaded, own, layer_ids, vocab_map, train_samples, val_samples, n_tokens, gen_s, hist, held,
            free, costs, ks, eval_s, total_s) -> dict:
    c1 = costs[1]["c"]
    alpha = held[ks[0]]["alpha"] if 1 not in ks else held[1]["acceptance_rate"]
    val_out = [s["output_ids"] for s in val_samples]
    return {
        "command": _command(a),
        "args": {k: v for k, v in vars(a).items() if k != "func"},
        "target": {"spec": target.spec, "name": target.name, "dtype": str(target.dtype).removeprefix("torch."),
                   "device": str(target.device)},
        "draft": {"kind": a.kind, "layers": a.layers, "init_layers": layer_ids, "vocab": len(vocab_map), "own_params": own,
                  "own_bytes_bf16": 2 * own},
        "data": {"train_samples": len(train_samples), "requested_samples": a.samples, "train_tokens": n_tokens, "val_samples": len(val_samples),
                 "val_tokens": sum(map(len, val_out)), "generation_s": gen_s, "threads": torch.get_num_threads(),
                 "outside_map_rate_heldout": _outside_rate(val_out, vocab_map) if val_out else None,
                 "outside_map_rate_freeform": _outside_rate(free[0]["outputs"], vocab_map) if free else None},
        "training": {"steps": hist["steps"], "stopped_by": hist["stopped_by"], "reproducible": hist["stopped_by"] == "steps",
                     "train_s": hist["train_s"], "best": hist["best"],
                     "loss_first": float(np.mean(hist["loss"][:10])) if hist["loss"] else None,
                     "loss_last": float(np.mean(hist["loss"][-10:])) if hist["loss"] else None,
                     "loss_curve": hist["loss"][:: max(1, len(hist["loss"]) // 200)], "val_curve": hist["val"]},
        "cost_ratio": {str(b): v for b, v in costs.items()},
        "heldout": _acc_table(held, ks, c1),
        "freeform": _acc_table(free, ks, c1),
        "predicted": predicted_speedups(alpha, c1),
        "eval_s": eval_s,
        "total_s": total_s,
        "notes": "greedy, target dtype as above; held-out prompts use topic/task lists disjoint from training; "
                 "timings on a shared CPU are noisy; measured_speedup is at B=8 (eval batch) vs regular decoding.",
    }


def format_report(r: dict) -> str:
    d, t, c = r["draft"], r["training"], r["cost_ratio"]
    lines = [
        f"distilled draft for {r['target']['name']} ({r['target']['dtype']}, {r['target']['device']})",
        f"  draft      {d['layers']} layers (init from target layers {d['init_layers']}), output vocabulary "
        f"{d['vocab']}, {d['own_params'] / 1e6:.1f}M own params ({d['own_bytes_bf16'] / 2**20:.1f} MiB bf16)",
        f"  data       {r['data']['train_samples']} samples, {r['data']['train_tokens']} target tokens "
        f"({r['data']['generation_s']:.0f} s); held-out {r['data']['val_samples']} samples",
        f"  outside    held-out tokens outside the map: {_pct(r['data']['outside_map_rate_heldout'])}, "
        f"free-form: {_pct(r['data']['outside_map_rate_freeform'])}",
        f"  training   {t['steps']} steps in {t['train_s']:.0f} s; loss {t['loss_first'] or 0:.3f} -> {t['loss_last'] or 0:.3f}; "
        f"best held-out top-1 agreement {t['best']['agreement']:.3f} at step {t['best']['step']}"
        + ("" if t.get("stopped_by", "steps") == "steps" else
           " (the time budget ended training: not reproducible bit for bit)"),
        f"  cost c     B=1: {c['1']['c']:.3f} ({c['1']['t_draft_ms']:.1f} / {c['1']['t_target_ms']:.1f} ms)   "
        f"B=8: {c['8']['c']:.3f} ({c['8']['t_draft_ms']:.1f} / {c['8']['t_target_ms']:.1f} ms)",
    ]
    for name, rows in (("held-out (templated, disjoint topics)", r["heldout"]), ("free-form (hand-written)", r["freeform"])):
        if not rows:
            continue
        lines.append(f"  {name}, greedy:")
        lines.append(f"    {'k':>2} {'accept':>7} {'alpha':>6} {'tok/step':>8} {'predicted x':>11} {'measured x (B=8)':>16}")
        for row in rows:
            lines.append(f"    {row['k']:>2} {row['acceptance_rate']:>7.3f} {row['alpha']:>6.3f} "
                         f"{row['mean_acceptance_length']:>8.2f} {row['predicted_speedup_batch1']:>11.2f} "
                         f"{row['measured_speedup']:>16.2f}")
    p = r["predicted"]
    lines.append(f"  predicted  batch-1 speedup {p['speedup_at_k_star']:.2f}x at k* = {p['k_star']} "
                 f"(alpha {p['alpha']:.3f}, c {p['c']:.3f}; specviz.analysis.analytic.speedup_batch1)")
    lines.append(f"  total      {r['total_s'] / 60:.1f} min")
    return "\n".join(lines)


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _readme(r: dict, text: str) -> str:
    return f"""# Distilled draft for {r['target']['name']}

Made by specviz (`specviz/distill.py`):

```
{r['command']}
```

Use it: `python -m specviz run --draft {r['args']['out']} ...`, or from Python
`specviz.distill.pipeline.load_distilled_draft(DIR, target)` with the loaded target: the draft shares the
target's input embedding, which is not stored here ("embedding": "from_target" in
`specviz_draft.json`, next to the vocabulary map: the target token ids the output head covers,
all others get logit -inf and are never proposed).

```
{text}
```

Files: `config.json` (LlamaConfig; vocab_size is the target's), `model.safetensors` (the draft's
own weights, bf16; `lm_head.weight` is [n_map, hidden]), `specviz_draft.json`, tokenizer files,
`report.json` (all numbers, loss and held-out curves). The seed, the data and `--steps` fix the
weights (same device and thread count); a run the time budget ended says so in `report.json`
("stopped_by"). Timings on a shared CPU are noisy.
"""
