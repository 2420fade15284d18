"""Distillation data: the target's own outputs with its top-k logits per output token.

The target answers prompts through the engine's regular decoding (:func:`answer_batches`: one
batch loop for every draft kind); the token kind stores them as JSONL shards
(:func:`generate_data`, :func:`read_samples`), the feature kind as torch shards with the target's
features (``specviz.distill.feature``). Also the label plumbing both kinds train on: the vocabulary
map, the soft labels over it and the soft cross-entropy.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from specviz.common import SpecvizError, exit_with_parent

SAMPLE_TEMPERATURE = 0.8  # temperature of the sampled half of the data


def log(msg: str) -> None:
    print(f"[distill] {msg}", file=sys.stderr, flush=True)


def _enc(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()


def _dec(s: str, dtype, k: int) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype=dtype).reshape(-1, k)


class TopkRecorder:
    """An accept_fn that keeps the target's top-k logits of every step, then accepts as usual."""

    def __init__(self, k: int):
        self.k, self.last = k, None

    def __call__(self, logits, drafts, n, u, params, q):
        from specviz.engine.sampling import accept_reference

        vals, ids = logits[:, 0].float().topk(self.k, dim=-1)  # [B, K] (regular decoding: 1 slot)
        self.last = (ids.cpu().numpy().astype(np.uint16 if logits.shape[-1] <= 65536 else np.int32),
                     vals.cpu().numpy().astype(np.float16))
        return accept_reference(logits, drafts, n, u, params, q)


def decode_batch(target, prompts, ids, temperature: float, max_new: int, topk: int, seed: int, features: bool = False):
    """Regular decoding of one batch: (rows, per-row [(top-k ids, top-k logits)] per output token,
    per-row features [P + n - 1, H] (the target's final-norm output at every fed position) or None)."""
    from specviz.engine.sampling import SamplingParams
    from specviz.run import decoder_for_ids

    rec = TopkRecorder(topk)
    dec = decoder_for_ids(target, None, ids, 0, max_new, SamplingParams(temperature=temperature), seed, prompts=prompts,
                          accept_fn=rec, keep_hidden=features)
    labels = [[] for _ in prompts]
    feats = [[] for _ in prompts] if features else None
    for s, step in enumerate(dec.steps()):
        active = [r for r in step.rows if r.active]  # same order as the recorder's rows
        if features:
            if s == 0 and dec.prefill_hidden is not None:  # f_0 .. f_{P-2}: the prompt but its last token
                for i in range(len(prompts)):
                    feats[i].append(dec.prefill_hidden[i][dec.prefill_valid[i]].cpu())
            h = dec.verify_hidden[:, 0].cpu()  # [B_active, H]: the feature of the token each row fed
        for j, r in enumerate(active):
            if features:
                feats[r.index].append(h[j:j + 1])
            if r.emitted:
                labels[r.index].append((rec.last[0][j], rec.last[1][j]))
    if features:
        feats = [torch.cat(f) for f in feats]
        for f, r in zip(feats, dec.rows):  # the row fed its prompt and all outputs but the last
            assert f.shape[0] == len(r.prompt_ids) + len(r.output) - 1, (f.shape, len(r.prompt_ids), len(r.output))
    return dec.rows, labels, feats


def encode_chat(tokenizer, prompts: list[str]) -> list[list[int]]:
    """Token ids of each prompt as the target sees it: a one-message prompt exactly as a run
    encodes it (``encode_prompts``), a multi-turn one (``specviz.prompts.varied``) through the
    chat template with all its messages."""
    from specviz.models.loading import encode_prompts
    from specviz.prompts.varied import messages

    out = []
    for p in prompts:
        msgs = messages(p)
        if len(msgs) == 1 or not getattr(tokenizer, "chat_template", None):
            out += encode_prompts(tokenizer, [p])
        else:
            text = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
            out.append(tokenizer.encode(text, add_special_tokens=False))
    return out


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

    label = desc if workers == 1 else f"{desc} (1 of {workers} workers)"
    bar = tqdm(total=sum(len(idx) for _, idx in todo) * max_new, desc=label, unit="tok", file=sys.stderr,
               smoothing=0.1, mininterval=2, disable=worker > 0)  # one bar: worker 0's share
    last_s = 0.0
    for j, idx in todo:
        t = time.time()
        if deadline is not None and t + last_s > deadline:
            if worker == 0:
                log(f"{desc}: generation budget reached")
            break
        batch = [prompts[i] for i in idx]
        temperature = 0.0 if j % greedy_every == 0 else SAMPLE_TEMPERATURE
        rows, labels, feats = decode_batch(target, batch, encode_chat(target.tokenizer, batch), temperature,
                                           max_new, topk, seed * 1000 + j, features)
        bar.update(len(idx) * max_new)
        yield j, idx, temperature, rows, labels, feats
        last_s = time.time() - t
    bar.close()


def sample_record(i: int, row, temperature: float) -> dict:
    """The fields every shard keeps of one answered prompt (the kinds add their labels)."""
    return {"sample": i, "prompt": row.prompt, "temperature": temperature, "prompt_ids": row.prompt_ids,
            "output_ids": row.output, "finish_reason": row.finish_reason}


def read_shards(data: Path, name: str) -> list[dict]:
    """The samples of every ``data/name-*.jsonl`` shard (:func:`generate_data`'s)."""
    return read_samples(sorted(data.glob(f"{name}-*.jsonl")))


@contextlib.contextmanager
def open_shard(path: Path):
    """Append to one shard, alone. A second writer (another distill on the same --data, or a worker
    of a killed one) is refused with a clear error instead of interleaving its lines."""
    with open(path, "a") as f:
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock
            fcntl = None
        if fcntl is not None:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise SpecvizError(f"{path} is being written by another process (another distill with this --data, "
                                   f"or a worker of a stopped one): let it finish or stop it, then rerun to resume") from None
        trim_torn_tail(path)  # under the lock: no writer can be adding to it now
        yield f


def trim_torn_tail(path: Path) -> int:
    """Cut a shard's last line off when a crash tore it (no newline, or not JSON), so the next record
    starts on a line of its own instead of being glued to the fragment and lost with it. Returns the
    bytes cut."""
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size:
            f.seek(size - 1)
        whole = size > 0 and f.read(1) == b"\n"
        end = size - 1 if whole else size  # the last line is [start, end)
        start, window = 0, 1 << 16
        while True:  # back from the end to the newline before the last line
            lo = max(0, end - window)
            f.seek(lo)
            at = f.read(end - lo).rfind(b"\n")
            if at >= 0 or lo == 0:
                start = lo + at + 1
                break
            window *= 4
        if end == start:
            return 0  # empty file, or it ends with an empty line
        if whole:
            f.seek(start)
            if _parse_record(f.read(end - start).decode("utf-8", "replace")) is not None:
                return 0
        f.truncate(start)
        return size - start


def generate_data(target, prompts: list[str], data: Path, name: str, max_new: int, batch_size: int, topk: int,
                  seed: int, worker: int = 0, workers: int = 1, **kwargs) -> None:
    """Answer ``prompts`` with the target into ``data/name-<worker>.jsonl``, skipping samples any
    ``name-*.jsonl`` shard already holds. Worker w of W takes batches j = w (mod W); the rest of
    ``kwargs`` (greedy_every, deadline, desc) go to :func:`answer_batches`.
    """
    done = {(s["sample"], s["prompt"]) for s in read_shards(data, name)}
    todo = [(j, idx) for j, idx in enumerate(prompt_batches(len(prompts), batch_size))
            if j % workers == worker and any((i, prompts[i]) not in done for i in idx)]
    if not todo:
        return
    with open_shard(data / f"{name}-{worker}.jsonl") as f:
        for _, idx, temperature, rows, labels, _ in answer_batches(target, prompts, todo, max_new, topk, seed,
                                                                    worker=worker, workers=workers, **kwargs):
            for i, r, lab in zip(idx, rows, labels):
                if (i, prompts[i]) in done:
                    continue
                rec = {**sample_record(i, r, temperature), "topk": topk, "ids_dtype": str(lab[0][0].dtype),
                       "topk_ids": _enc(np.stack([a for a, _ in lab])), "topk_logits": _enc(np.stack([b for _, b in lab]))}
                f.write(json.dumps(rec) + "\n")
            f.flush()


def gen_worker(job: dict, worker: int) -> None:
    """One data-generation process: its own target copy on one thread (steady on a busy CPU)."""
    import importlib

    import transformers

    from specviz.run import get_model

    exit_with_parent(job["parent"])
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    kwargs = {**job["kwargs"], "data": Path(job["kwargs"]["data"])}
    fn = getattr(importlib.import_module(job["module"]), job["function"])
    try:
        fn(get_model(job["spec"], job["device"], job["dtype"]), worker=worker, **kwargs)
    except SpecvizError as e:
        print(f"specviz distill worker {worker}: {e}", file=sys.stderr)
        sys.exit(2)


_WORKER = "import json, sys; from specviz.distill.data import gen_worker; gen_worker(json.load(sys.stdin), int(sys.argv[1]))"


def generate_parallel(target, workers: int, fn=None, **kwargs) -> None:
    """``fn`` (generate_data, or feature.generate_feature_data) in this process (workers = 1) or
    in ``workers`` single-thread subprocesses, worker w taking batches j = w (mod workers).

    Plain subprocesses, not multiprocessing: they work whatever the caller's __main__ is.
    """
    fn = fn or generate_data
    if workers <= 1:
        fn(target, **kwargs)
        return
    if fn is generate_data:
        done = {(s["sample"], s["prompt"]) for s in read_shards(kwargs["data"], kwargs["name"])}
        if all((i, p) in done for i, p in enumerate(kwargs["prompts"])):
            return  # nothing to resume: do not start processes
    import subprocess

    from specviz.childproc import SAFE_ENV, python_argv

    job = json.dumps({"spec": target.spec, "device": str(target.device), "dtype": str(target.dtype).removeprefix("torch."),
                      "module": fn.__module__, "function": fn.__name__,
                      "parent": os.getpid(), "kwargs": {**kwargs, "data": str(kwargs["data"]), "workers": workers}})
    root = str(Path(__file__).resolve().parents[2])  # so the children import this specviz
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    procs = []
    try:
        for w in range(workers):
            procs.append(subprocess.Popen(python_argv("-c", _WORKER, str(w)), stdin=subprocess.PIPE,
                                          env={**env, **SAFE_ENV}, text=True))
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
    """Samples from JSONL files (read only: an --extra-data folder is not ours to change). A torn line
    (an interrupted write) is skipped; a record glued to a torn line's fragment (a shard appended to
    before :func:`trim_torn_tail` existed) is read from where it starts."""
    out = []
    for p in paths:
        for line in Path(p).read_text().splitlines():
            s = _parse_record(line)
            if s is None:
                continue
            k = s["topk"]
            s["topk_ids"] = _dec(s["topk_ids"], np.dtype(s.get("ids_dtype", "uint16")), k).astype(np.int64)
            s["topk_logits"] = _dec(s["topk_logits"], np.float16, k).astype(np.float32)
            out.append(s)
    return out


def _parse_record(line: str) -> dict | None:
    """One shard line's record, or None when it is not one."""
    for at in (0, line.rfind('{"sample": ', 1)):
        # every record begins with its sample index (sample_record, chunk_record); inside a record that
        # text could only sit in a JSON string, where its quotes are escaped
        if at < 0:
            break
        try:
            s = json.loads(line[at:])
        except json.JSONDecodeError:
            continue
        return s if isinstance(s, dict) else None
    return None


# =============================================================================================
# Labels: the vocabulary map, the target's top-k distribution over it, the soft cross-entropy


def build_vocab_map(samples: list[dict], size: int, vocab_size: int, always=()) -> list[int]:
    """The ``size`` tokens the target emits most (outputs + its top-1 predictions; of
    teacher-forced text only the top-1, the text's own tokens are not the target's), ``always``
    first (EOS...), ties and the remainder filled by ascending id (BPE ids roughly follow
    frequency). Sorted ascending."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for s in samples:
        if not s.get("teacher_forced"):
            np.add.at(counts, np.asarray(s["output_ids"], dtype=np.int64), 1)
        np.add.at(counts, s["topk_ids"][:, 0], 1)
    order = np.lexsort((np.arange(vocab_size), -counts))  # most frequent first, then lower id
    chosen = list(dict.fromkeys(int(t) for t in always if 0 <= t < vocab_size))
    seen = set(chosen)
    for t in order:
        if len(chosen) >= size:
            break
        if int(t) not in seen:
            chosen.append(int(t))
            seen.add(int(t))
    return sorted(chosen)


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


def soft_ce(z: torch.Tensor, idx, p, w, top1):
    """Soft cross-entropy of map logits z [N, n_map] against soft_labels (= KL(p || q) + H(p)),
    averaged over labelled positions; plus the count of greedy agreements and of positions."""
    logq = torch.log_softmax(z.float(), dim=-1)  # [N, n_map]
    ce = -(p * logq.gather(-1, idx)).sum(-1)  # [N]
    loss = (ce * w).sum() / w.sum().clamp(min=1)
    agree = (z.argmax(-1) == top1).float()  # [N] greedy agreement with the target's top-1
    return loss, agree.sum().item(), len(agree)
