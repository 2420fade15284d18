"""Distillation training: the loop every draft kind trains in, and the draft's start from the target.

The kind supplies its batches' collate and its loss (``specviz.distill.token``,
``specviz.distill.feature``); the loop owns the optimiser, the schedule, the batch order and the
held-out checkpoint choice (top-1 agreement = greedy acceptance at k = 1, teacher-forced).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch


def init_from_target(draft, target_model, layer_ids: list[int]) -> None:
    """Start from target layers ``layer_ids``, its final norm, and its output rows for the map."""
    from specviz.models.distilled import target_head_rows

    src = target_model.model
    with torch.no_grad():
        for dst, i in zip(draft.model.layers, layer_ids):
            dst.load_state_dict(src.layers[i].state_dict())
        draft.model.norm.load_state_dict(src.norm.state_dict())
        draft.lm_head.weight.copy_(target_head_rows(target_model, draft.lm_head.vocab_map.tolist()).float())


def init_from_draft(draft, path) -> dict:
    """Continue from a distilled draft's weights (``distill --init-from``): every layer and norm
    as saved; its head rows for the tokens both maps hold, the target's rows (init_from_target)
    for the rest (all of them when its head is the target's, ``"head": "from_target"``). The saved draft must have this draft's kind and at most its depth: a deeper
    draft's extra layers go on top as identities (their attention and MLP outputs zero, so the
    residual passes through), and at step 0 it computes what the saved draft computes. Returns
    what was copied."""
    from safetensors.torch import load_file

    from specviz.common import SpecvizError
    from specviz.models.distilled import DRAFT_FILE

    p = Path(path).expanduser()
    if not (p / DRAFT_FILE).is_file() or not (p / "model.safetensors").is_file():
        raise SpecvizError(f"--init-from {path!r} is not a distilled draft (no {DRAFT_FILE} and model.safetensors)")
    meta = json.loads((p / DRAFT_FILE).read_text())
    old_map = meta.get("vocab_map") or []
    saved = load_file(str(p / "model.safetensors"))
    head_from_target = meta.get("head") == "from_target"  # no rows saved: they are the target's, as built here
    n_saved = len({k.split(".")[2] for k in saved if k.startswith("model.layers.")})
    added = [f"model.layers.{i}." for i in range(n_saved, len(draft.model.layers))]
    mine = {k: v for k, v in draft.state_dict().items() if not k.startswith("model.embed_tokens.")}
    body = {k for k in mine if k != "lm_head.weight" and not k.startswith(tuple(added))}
    wrong = sorted(k for k in body if k not in saved or saved[k].shape != mine[k].shape)
    extra = sorted(k for k in saved if k not in mine)
    head_saved = "lm_head.weight" in saved and saved["lm_head.weight"].shape[0] == len(old_map)
    if wrong or extra or not (head_saved or head_from_target):
        raise SpecvizError(f"--init-from {path!r} does not fit this draft (--kind and the target must match, and "
                           f"--layers be at least its depth): {len(wrong)} weights missing or of another shape, "
                           f"{len(extra)} unknown" + (f" (e.g. {(wrong or extra)[0]})" if wrong or extra else ""))
    new_map = draft.lm_head.vocab_map.tolist()
    at = {t: i for i, t in enumerate(old_map)}
    both = [(i, at[t]) for i, t in enumerate(new_map) if t in at]
    with torch.no_grad():
        draft.load_state_dict({k: saved[k].float() for k in body}, strict=False)
        if both and head_saved:
            dst, src = (torch.as_tensor(x) for x in zip(*both))
            draft.lm_head.weight[dst] = saved["lm_head.weight"][src].float().to(draft.lm_head.weight.device)
        for layer in draft.model.layers[n_saved:]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return {"path": str(p), "weights": len(body) + 1, "head_rows_kept": len(both), "head_rows_new": len(new_map) - len(both),
            "layers_kept": n_saved, "layers_added": len(added)}


def label_positions(items: list[dict]):
    """(rows [N], cols [N]) of every labelled position of a right-padded batch: item b's labels
    sit at columns first .. first + n - 1."""
    rows, cols = [], []
    for b, x in enumerate(items):
        n = len(x["p"])
        rows.append(torch.full((n,), b))
        cols.append(torch.arange(x["first"], x["first"] + n))
    return torch.cat(rows), torch.cat(cols)


def cat_labels(items: list[dict]):
    """The batch's soft labels, concatenated in label_positions' order: idx, p, w, top1."""
    return tuple(torch.cat([x[key] for x in items]) for key in ("idx", "p", "w", "top1"))


def batches(data, batch_size: int, g: torch.Generator):
    """Endless length-bucketed batches: shuffle, sort chunks of 32 batches by length, shuffle batches."""
    while True:
        perm = torch.randperm(len(data), generator=g).tolist()
        chunk = 32 * batch_size
        out = []
        for c in range(0, len(perm), chunk):
            part = sorted(perm[c:c + chunk], key=lambda i: len(data[i]["ids"]))
            out += [part[i:i + batch_size] for i in range(0, len(part), batch_size)]
        for bi in torch.randperm(len(out), generator=g).tolist():
            yield [data[i] for i in out[bi]]


@torch.no_grad()
def evaluate_agreement(draft, data, loss_fn, collate, batch_size: int = 16, autocast: bool = True) -> dict:
    """Teacher-forced on held-out target outputs: top-1 agreement (= greedy alpha at k = 1) and loss."""
    draft.eval()
    agree = n = 0
    loss_sum = 0.0
    for i in range(0, len(data), batch_size):
        loss, a, m = loss_fn(draft, collate(data[i:i + batch_size]), autocast)
        agree, n, loss_sum = agree + a, n + m, loss_sum + loss.item() * m
    draft.train()
    return {"agreement": agree / max(n, 1), "loss": loss_sum / max(n, 1), "positions": n}


def fingerprint(train_data, val_data, steps: int, batch_size: int, lr: float, seed: int, weight_decay: float,
                warmup: int, eval_every: int, autocast: bool = True) -> str:
    """What a saved training state must match to be resumed: the settings and the data's shape."""
    import hashlib

    shape = [len(x["ids"]) for x in train_data] + [-len(x["ids"]) for x in val_data]
    ids = [int(x["ids"].sum()) for x in train_data[:64]]
    return hashlib.sha256(json.dumps([steps, batch_size, lr, seed, weight_decay, warmup, eval_every, shape, ids]
                                     + ([] if autocast else ["float32"])).encode()).hexdigest()


def autocast_pays(device: torch.device) -> bool:
    """Train under bf16 autocast where bf16 matmuls run natively: CUDA, or a CPU where oneDNN packs bf16
    (AVX-512 bf16, AMX). On an AVX2 CPU they take a slow path: 8 steps of batch 16 took 172-210 s under autocast
    against 5-7 s in float32 on a 2-core AMD EPYC, token and feature drafts (BENCHMARKS.md)."""
    from specviz.models.packed import cpu_packs_bf16

    return device.type == "cuda" or (device.type == "cpu" and cpu_packs_bf16())


def _own(draft) -> dict:
    return {k: t.detach().clone() for k, t in draft.state_dict().items() if not k.startswith("model.embed_tokens.")}


def train(draft, train_data, val_data, steps: int, batch_size: int, lr: float, seed: int, loss_fn, collate,
          budget_s: float | None = None, weight_decay: float = 0.05, warmup: int = 30, eval_every: int = 100,
          autocast: bool | None = None, log=None, state_path=None) -> dict:
    """AdamW, linear warmup then cosine to 10% over ``steps``; keeps the best held-out checkpoint.

    ``loss_fn(draft, collate(items), autocast) -> (loss, agreements, positions)`` is the kind's.
    Everything that shapes the weights (batch order, learning rate) follows the step count and
    the seed, never the clock, so the same data, seed and ``steps`` give the same weights on the
    same device and thread count. ``budget_s`` is only a safety stop: if it ends training first,
    the history says ``stopped_by="time budget"`` and those weights depend on the machine's
    speed (the schedule was cut short at whatever step the clock allowed). Returns the history.
    ``autocast``: bf16 autocast on or off; None: where it pays (:func:`autocast_pays`).

    ``state_path``: at every held-out checkpoint the whole state (weights, optimiser, step,
    history, best checkpoint) is written there; a later call with the same settings and data
    (:func:`fingerprint`) resumes from it and ends with the weights an uninterrupted run gives
    (the batch order is replayed from the seed). A state that does not match is ignored.
    """
    from tqdm import tqdm

    params = [p for p in draft.parameters() if p.requires_grad]
    if autocast is None:
        autocast = autocast_pays(params[0].device)
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    g = torch.Generator().manual_seed(seed)
    it = batches(train_data, batch_size, g)
    draft.train()
    best = {"agreement": -1.0}
    best_state = None
    hist = {"loss": [], "val": []}
    t0 = time.perf_counter()
    bar = tqdm(total=steps, desc="train", file=sys.stderr, mininterval=2)
    step = 0
    key = fingerprint(train_data, val_data, steps, batch_size, lr, seed, weight_decay, warmup, eval_every, autocast)
    if state_path is not None:
        from specviz.common import ATOMIC_TEMP, remove_dead_temps

        remove_dead_temps(Path(state_path).parent, ATOMIC_TEMP)  # a state a killed run was writing
    if state_path is not None and Path(state_path).is_file():
        from specviz.common import load_tensors

        # tensors and plain values only: a train-state.pt planted in --out must not run code when resumed
        state = load_tensors(state_path, "training state")
        if isinstance(state, dict) and state.get("fingerprint") == key:
            draft.load_state_dict(state["draft"], strict=False)
            opt.load_state_dict(state["opt"])
            step, hist, best, best_state = state["step"], state["hist"], state["best"], state["best_state"]
            for _ in range(step):  # replay the batch order up to where the run stopped
                next(it)
            bar.update(step)
            if log:
                log(f"resumed training at step {step} of {steps} from {state_path}")
        elif log:
            log(f"{state_path} is another run's training state (other settings or data): starting from step 0")

    def save_state():
        if state_path is not None:
            from specviz.common import atomic_open

            # plain values and tensors only, so a resume reads it with weights_only (load_tensors)
            with atomic_open(state_path) as f:
                torch.save({"fingerprint": key, "step": step, "draft": _own(draft), "opt": opt.state_dict(),
                            "hist": hist, "best": best, "best_state": best_state}, f)

    def checkpoint():
        nonlocal best, best_state
        v = evaluate_agreement(draft, val_data, loss_fn, collate, autocast=autocast) if val_data else {"agreement": 0.0, "loss": 0.0}
        v.update(step=step, elapsed_s=time.perf_counter() - t0)
        hist["val"].append(v)
        if v["agreement"] > best["agreement"]:
            best, best_state = v, _own(draft)
        if log:
            recent = f"{np.mean(hist['loss'][-eval_every:]):.3f}" if hist["loss"] else "-"
            log(f"step {step}: train loss {recent}  held-out agreement {v['agreement']:.3f}  loss {v['loss']:.3f}")

    if step == 0:
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
            save_state()
    bar.close()
    if not hist["val"] or hist["val"][-1]["step"] != step:
        checkpoint()
    if best_state is not None and val_data:  # without held-out data the last weights are kept
        draft.load_state_dict(best_state, strict=False)
    if not val_data:
        best = hist["val"][-1]
    draft.eval()
    return {"steps": step, "stopped_by": stopped_by, "train_s": time.perf_counter() - t0, "best": best,
            "autocast": autocast, **hist}
