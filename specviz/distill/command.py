"""``python -m specviz distill``: its arguments, their checks, and the pipeline over a table of draft kinds.

    python -m specviz distill --target default --out DIR [--samples N --steps N --vocab N --kind K ...]

data (specviz.distill.data) -> draft and training (specviz.distill.train, with the kind's module:
specviz.distill.token or specviz.distill.feature) -> save (specviz.models.distilled) -> evaluation
(specviz.distill.evaluate) -> report.json and README.md (specviz.distill.report). What differs
between kinds is one :class:`Kind` row of :data:`KINDS`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Callable

import torch

from specviz.common import SpecvizError, write_atomic
from specviz.distill import feature, token
from specviz.distill.data import build_vocab_map, generate_data, generate_parallel, log, read_shards
from specviz.distill.evaluate import cost_ratio, eval_acceptance
from specviz.distill.report import build_report, format_report, readme
from specviz.distill.text import label_text, read_text_samples
from specviz.distill.train import init_from_draft, train
from specviz.engine.proposers import FeatureDraft, ModelDraft
from specviz.models.distilled import draft_depth, load_distilled_draft, save_draft


@dataclasses.dataclass(frozen=True)
class Kind:
    """What one draft kind brings to the pipeline."""

    generate: Callable  # (target, prompts, data, name, max_new, batch_size, topk, seed, ...): writes its shards
    read: Callable  # (data dir, name) -> samples
    tensors: Callable  # (samples, vocab_map, vocab_size) -> training items
    build: Callable  # (target, vocab_map, layers, layer_ids) -> the fp32 draft on the target's device
    collate: Callable  # training items -> a batch
    loss: Callable  # (draft, batch, autocast) -> (loss, agreements, positions)
    proposer: type  # what a run drafts with (specviz.engine.proposers)
    label_text: Callable  # (target, chunks, data, name, batch_size, topk, ...): --text's teacher-forced shards
    read_text: Callable  # (data dir, chunks) -> the labelled chunks, in chunk order
    random_init: bool = False  # whether --init-layers random is allowed
    meta: tuple = ()  # (key, value) pairs recorded in the data's meta.json and the draft's specviz_draft.json


KINDS = {
    "token": Kind(generate_data, read_shards, token.token_tensors, token.build_token_draft, token.collate_tokens,
                  token.token_loss, ModelDraft, label_text, read_text_samples),
    "feature": Kind(feature.generate_feature_data, feature.read_feature_samples, feature.feature_tensors,
                    feature.build_feature, feature.collate_features, feature.feature_loss, FeatureDraft,
                    feature.label_text_features, feature.read_text_features, random_init=True,
                    meta=(("kind", "feature"),)),
}


def _check_data_meta(data: Path, meta: dict) -> None:
    path = data / "meta.json"
    if path.is_file():
        old = json.loads(path.read_text())
        diff = {k: (old.get(k), v) for k, v in meta.items() if old.get(k) != v}
        if diff:
            raise SpecvizError(f"data in {data} was made with other settings {diff}: pass another --data directory")
    data.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(meta))


def _base_map(path: str, size: int, vocab_size: int, always=()) -> list[int]:
    from specviz.models.distilled import DRAFT_FILE

    f = Path(path).expanduser() / DRAFT_FILE
    if not f.is_file():
        raise SpecvizError(f"--vocab-from {path!r} is not a distilled draft (no {DRAFT_FILE})")
    base = json.loads(f.read_text()).get("vocab_map") or []
    if len(set(base) | set(always)) > size or not all(0 <= t < vocab_size for t in base):
        raise SpecvizError(f"--vocab-from {path!r}: its map ({len(base)} tokens) and EOS must fit in --vocab {size} "
                           f"and the target")
    return base


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


def _validate(a) -> list[int]:
    if a.gen_workers < 0:
        raise SpecvizError(f"--gen-workers must be 0 (auto) or more (got {a.gen_workers})")
    for name in ("samples", "max_new_tokens", "gen_batch_size", "topk", "batch_size", "vocab", "layers", "eval_prompts",
                 "eval_max_new_tokens", "text_tokens", "text_chunk_tokens", "text_batch_size"):
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




def _samples(a, target, kind: Kind, data: Path):
    """Generate (or resume) the data and read it: (train samples, held-out samples, engine
    evaluation prompts, generation seconds)."""
    from specviz.prompts.gen import heldout_prompts, training_prompts
    from specviz.prompts.natural import natural_prompts
    from specviz.prompts.varied import mixed_prompts

    if a.prompts == "mixed":
        training_prompts = lambda n, seed=0: mixed_prompts(n, seed)  # noqa: E731
        heldout_prompts = lambda n, seed=0: mixed_prompts(n, seed, heldout=True)  # noqa: E731
    elif a.prompts in ("natural", "natural2"):  # either set trains; both check on the first set's held-out prompts
        second = a.prompts == "natural2"
        training_prompts = lambda n, seed=0: natural_prompts(n, seed, second=second)  # noqa: E731
        heldout_prompts = lambda n, seed=0: natural_prompts(n, seed, heldout=True)  # noqa: E731
    t0 = time.perf_counter()
    train_prompts = training_prompts(a.samples, a.seed)
    val_prompts = heldout_prompts(a.val_samples, seed=1) if a.val_samples else []
    eval_prompts = [p for p in heldout_prompts(a.eval_prompts + len(val_prompts), seed=2) if p not in set(val_prompts)]
    eval_prompts = eval_prompts[: a.eval_prompts]
    if not a.gen_workers:
        a.gen_workers = 1 if target.device.type == "cuda" else max(1, min(4, os.cpu_count() or 1))
    common = dict(data=data, max_new=a.max_new_tokens, batch_size=a.gen_batch_size, topk=a.topk)
    if val_prompts:
        generate_parallel(target, a.gen_workers, kind.generate, prompts=val_prompts, name="val", seed=a.seed + 1,
                          greedy_every=1, desc="held-out data", **common)
    deadline = time.time() + 60 * a.gen_budget_min if a.gen_budget_min else None
    generate_parallel(target, a.gen_workers, kind.generate, prompts=train_prompts, name="train", seed=a.seed,
                      deadline=deadline, desc="training data", **common)
    gen_s = time.perf_counter() - t0
    train_samples = [s for s in kind.read(data, "train") if s["sample"] < a.samples and s["prompt"] == train_prompts[s["sample"]]]
    train_samples = list({s["sample"]: s for s in reversed(train_samples)}.values())  # one per sample
    train_samples.sort(key=lambda s: s["sample"])  # worker interleaving must not change training
    val_samples = sorted(kind.read(data, "val"), key=lambda s: s["sample"]) if val_prompts else []
    if not train_samples:
        raise SpecvizError("no training data was generated (raise --gen-budget-min or --samples)")
    return train_samples, val_samples, eval_prompts, gen_s


def _text_samples(a, target, kind: Kind, data: Path):
    """Label --text teacher-forced (or resume): (samples, the sources with checksums, seconds)."""
    from specviz.distill.text import chunk_documents, documents, manifest_sha256, source_manifest

    if not a.text:
        return [], None, 0.0
    t0 = time.perf_counter()
    docs = documents(a.text)
    chunks = chunk_documents(docs, target.tokenizer, a.text_chunk_tokens, a.text_tokens)
    manifest = source_manifest(docs, chunks)
    write_atomic(data / "text-sources.json", json.dumps({"sha256": manifest_sha256(manifest), "files": manifest}, indent=1))
    generate_parallel(target, a.gen_workers, kind.label_text, chunks=chunks, data=data, name="text",
                      batch_size=a.text_batch_size, topk=a.topk, desc="text labels")
    samples = kind.read_text(data, chunks)
    label_s = time.perf_counter() - t0
    log(f"text: {len(samples)} of {len(chunks)} chunks labelled from {len(manifest)} files, "
        f"{sum(len(s['output_ids']) for s in samples)} tokens ({label_s:.0f} s)")
    return samples, {"paths": a.text, "sha256": manifest_sha256(manifest), "files": manifest}, label_s


def _extra_samples(a, kind: Kind, dtype_name: str, data: Path):
    """--extra-data: every answer and text chunk of other runs' data folders, made by the same target,
    dtype, kind and --topk (read, never written): (samples, one record per folder with its checksum)."""
    samples, record = [], []
    for d in (Path(p).expanduser() for p in a.extra_data or ()):
        if d.resolve() == data.resolve():
            raise SpecvizError(f"--extra-data {d} is this run's own --data folder: its samples are used already")
        if not (d / "meta.json").is_file():
            raise SpecvizError(f"--extra-data {d} is not a distill data folder (no meta.json)")
        meta = json.loads((d / "meta.json").read_text())
        want = {"target": a.target, "dtype": dtype_name, "topk": a.topk, "kind": dict(kind.meta).get("kind")}
        diff = {k: (meta.get(k), v) for k, v in want.items() if meta.get(k) != v}
        if diff:
            raise SpecvizError(f"--extra-data {d} was made with other settings {diff}: it cannot train this draft")
        found = [*kind.read(d, "train"), *kind.read(d, "text")]
        if not found:
            raise SpecvizError(f"--extra-data {d} holds no answers or text chunks")
        shards = sorted(p for p in d.iterdir() if p.name.startswith(("train-", "text-")))
        digest = hashlib.sha256()
        for p in shards:
            digest.update(p.name.encode() + b"\0" + p.read_bytes())
        record.append({"path": str(d), "meta": meta, "samples": len(found), "shards": len(shards),
                       "tokens": sum(len(s["output_ids"]) for s in found), "sha256": digest.hexdigest()})
        log(f"extra data: {len(found)} samples, {record[-1]['tokens']} tokens from {d} (sha256 {digest.hexdigest()[:12]})")
        samples += found
    return samples, record


def cmd_distill(a) -> int:
    from specviz.engine.decoder import eos_token_ids
    from specviz.prompts.gen import freeform_prompts
    from specviz.run import get_model

    a.layers = draft_depth(a.kind, a.layers)
    ks = _validate(a)
    kind = KINDS[a.kind]
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
    _check_data_meta(data, {"target": a.target, "dtype": dtype_name, "max_new_tokens": a.max_new_tokens, "topk": a.topk,
                            "seed": a.seed, "gen_batch_size": a.gen_batch_size, **dict(kind.meta),
                            **({"prompts": a.prompts} if a.prompts != "templated" else {})})

    always = sorted(eos_token_ids(target))
    base = _base_map(a.vocab_from, a.vocab, V, always) if a.vocab_from else []  # checked before the data is made

    # ---- 1. data
    train_samples, val_samples, eval_prompts, gen_s = _samples(a, target, kind, data)
    n_tokens = sum(len(s["output_ids"]) for s in train_samples)
    log(f"data: {len(train_samples)} samples, {n_tokens} target tokens ({gen_s:.0f} s)")
    text_samples, sources, label_s = _text_samples(a, target, kind, data)
    extra_samples, extra = _extra_samples(a, kind, dtype_name, data)
    gen_samples, train_samples = train_samples, train_samples + text_samples + extra_samples

    # ---- 2. draft
    torch.manual_seed(a.seed)
    vocab_map = build_vocab_map(train_samples, a.vocab, V, always=[*always, *base])
    n_target = target.model.config.num_hidden_layers
    layer_ids = [] if kind.random_init and a.init_layers == "random" else _layer_ids(a.init_layers, a.layers, n_target)
    draft = kind.build(target, vocab_map, a.layers, layer_ids)
    start = init_from_draft(draft, a.init_from) if a.init_from else None
    if start:
        log(f"continuing from {start['path']}: {start['head_rows_kept']} head rows kept, {start['head_rows_new']} new")
    own = sum(p.numel() for n, p in draft.named_parameters() if not n.startswith("model.embed_tokens."))
    log(f"{a.kind} draft: {a.layers} layers (from target layers {layer_ids or 'none: random'}), vocab {len(vocab_map)}, "
        f"{own / 1e6:.1f}M own params")

    # ---- 3. training (resumable: out/train-state.pt holds the last checkpoint until the draft is saved)
    out.mkdir(parents=True, exist_ok=True)
    hist = train(draft, kind.tensors(train_samples, vocab_map, V), kind.tensors(val_samples, vocab_map, V), a.steps,
                 a.batch_size, a.lr, a.seed, kind.loss, kind.collate, 60 * a.time_budget_min if a.time_budget_min else None,
                 weight_decay=a.weight_decay, eval_every=a.eval_every, log=log, state_path=out / "train-state.pt",
                 autocast={"auto": None, "bf16": True, "float32": False}[a.train_precision])
    log(f"trained {hist['steps']} steps in {hist['train_s']:.0f} s; best held-out agreement "
        f"{hist['best']['agreement']:.3f} (step {hist['best']['step']})")

    # ---- 4. save, reload as a draft SPEC would, evaluate
    save_draft(draft, out, target, vocab_map, extra={"layers": a.layers, "init_layers": layer_ids, **dict(kind.meta)})
    (out / "train-state.pt").unlink(missing_ok=True)
    t_eval = time.perf_counter()
    loaded = load_distilled_draft(out, target)
    proposer = kind.proposer(loaded, vocab_size=V)
    log(f"evaluating on {len(eval_prompts)} held-out prompts at k = {ks}")
    held = eval_acceptance(target, proposer, eval_prompts, ks, a.eval_max_new_tokens, 8)
    free = None if a.no_freeform else eval_acceptance(target, proposer, freeform_prompts(a.eval_prompts), ks,
                                                      a.eval_max_new_tokens, 8)
    costs = cost_ratio(target, loaded, (1, 8), prefix_len=a.cost_prefix_len, rounds=a.cost_rounds)
    eval_s = time.perf_counter() - t_eval

    report = build_report(a, target, own, layer_ids, vocab_map, gen_samples, val_samples, n_tokens, gen_s, hist, held,
                          free, costs, ks, eval_s, time.perf_counter() - t_start)
    report["draft"]["init_from"] = start
    report["data"]["text"] = None if sources is None else {**sources, "samples": len(text_samples), "label_s": label_s,
                                                           "tokens": sum(len(s["output_ids"]) for s in text_samples)}
    report["data"]["extra"] = extra or None
    write_atomic(out / "report.json", json.dumps(report, indent=1))
    text = format_report(report)
    write_atomic(out / "README.md", readme(report, text))
    print(text)
    log(f"draft written to {out} (use it as --draft {out})")
    return 0
