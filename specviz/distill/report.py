"""The distillation report: report.json's dict, its text summary, and the draft's README.md."""

from __future__ import annotations

import numpy as np
import torch

from specviz.distill.evaluate import predicted_speedups


def outside_rate(outputs: list[list[int]], vocab_map: list[int]) -> float:
    """The share of the target's output tokens the draft's map cannot propose."""
    m = set(vocab_map)
    toks = [t for o in outputs for t in o]
    return sum(t not in m for t in toks) / max(len(toks), 1)


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
        if isinstance(v, (list, tuple)):  # a repeatable option (--text, --extra-data): the flag once per value
            parts += [x for item in v for x in (flag, str(item))]
        else:
            parts += [flag] if v is True else [flag, str(v)]
    return " ".join(shlex.quote(x) for x in parts)


def build_report(a, target, own, layer_ids, vocab_map, train_samples, val_samples, n_tokens, gen_s, hist, held, free,
                 costs, ks, eval_s, total_s) -> dict:
    """Everything report.json records: the command and its args, the draft, the data, the
    training history, the cost ratio, the acceptance tables and the predicted speedup."""
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
                 "outside_map_rate_heldout": outside_rate(val_out, vocab_map) if val_out else None,
                 "outside_map_rate_freeform": outside_rate(free[0]["outputs"], vocab_map) if free else None},
        "training": {"steps": hist["steps"], "stopped_by": hist["stopped_by"], "reproducible": hist["stopped_by"] == "steps",
                     "train_s": hist["train_s"], "best": hist["best"],
                     "precision": "bf16 autocast" if hist["autocast"] else "float32",
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
        f"  training   {t['steps']} steps ({t['precision']}) in {t['train_s']:.0f} s; loss {t['loss_first'] or 0:.3f} -> {t['loss_last'] or 0:.3f}; "
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
        lines.append(f"    {'k':>2} {'acceptance rate':>15} {'alpha':>6} {'mean acceptance length':>22} {'predicted x':>11} "
                     f"{'measured x (B=8)':>16}")
        for row in rows:
            lines.append(f"    {row['k']:>2} {row['acceptance_rate']:>15.3f} {row['alpha']:>6.3f} "
                         f"{row['mean_acceptance_length']:>22.2f} {row['predicted_speedup_batch1']:>11.2f} "
                         f"{row['measured_speedup']:>16.2f}")
    p = r["predicted"]
    lines.append(f"  predicted  batch-1 speedup {p['speedup_at_k_star']:.2f}x at k* = {p['k_star']} "
                 f"(alpha {p['alpha']:.3f}, c {p['c']:.3f}; specviz.analysis.analytic.speedup_batch1)")
    lines.append(f"  total      {r['total_s'] / 60:.1f} min")
    return "\n".join(lines)


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def readme(r: dict, text: str) -> str:
    return f"""# Distilled draft for {r['target']['name']}

Made by specviz (`specviz/distill/`):

```
{r['command']}
```

Use it: `python -m specviz run --draft {r['args']['out']} ...`, or from Python
`specviz.models.distilled.load_distilled_draft(DIR, target)` with the loaded target: the draft shares the
target's input embedding, which is not stored here ("embedding": "from_target" in
`specviz_draft.json`, next to the vocabulary map: the target token ids the output head covers,
all others get logit -inf and are never proposed).

```
{text}
```

Files: `config.json` (LlamaConfig; vocab_size is the target's), `model.safetensors` (the draft's
own weights, bf16; `lm_head.weight` is [n_map, hidden], or absent when `specviz_draft.json` says
`"head": "from_target"`: a feature draft's frozen head, rebuilt from the target's rows at load),
`specviz_draft.json`, tokenizer files,
`report.json` (all numbers, loss and held-out curves). The seed, the data and `--steps` fix the
weights (same device and thread count); a run the time budget ended says so in `report.json`
("stopped_by"). Timings on a shared CPU are noisy.
"""
