"""Command line: ``python -m specviz run|bench ...`` (DESIGN.md, "CLI (stable contract)").

User mistakes end as one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from specviz.common import SpecvizError


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="default", help="model SPEC: default, hub id[@rev], local dir, or .gguf")
    p.add_argument("--draft", default="default", help="draft SPEC: a model SPEC, default, ngram[:N], or none")
    p.add_argument("--prompts", metavar="FILE", help="one prompt per line, or JSONL with a \"prompt\" key")
    p.add_argument("--prompt", metavar="TEXT", nargs="+", action="extend", help="prompt text (repeatable)")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--draft-length", type=int, default=2)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--controller", default="fixed", help="draft-length policy")
    p.add_argument("--controller-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="extra policy argument (e.g. table=1:4,8:2)")
    p.add_argument("--mode", choices=["speculative", "regular"], default="speculative")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--raw-prompt", action="store_true", help="do not apply the chat template")
    p.add_argument("--draft-confidence", type=float, default=0.0, metavar="P",
                   help="model drafts: a row stops drafting after a token the draft gives probability < P "
                        "(transformers' assistant_confidence_threshold; 0 = always draft k)")


def _config(a):
    from specviz.run import RunConfig, read_prompts

    prompts = list(a.prompt or [])
    if a.prompts:
        prompts += read_prompts(a.prompts)
    cargs = {}
    for kv in a.controller_arg:
        key, sep, val = kv.partition("=")
        if not sep:
            raise SpecvizError(f"--controller-arg wants KEY=VALUE (got {kv!r})")
        cargs[key] = val
    return RunConfig(target=a.target, draft=a.draft, prompts=prompts, batch_size=a.batch_size,
                     draft_length=a.draft_length, max_new_tokens=a.max_new_tokens, temperature=a.temperature,
                     top_p=a.top_p, seed=a.seed, controller=a.controller, mode=a.mode, device=a.device,
                     dtype=a.dtype, raw_prompt=a.raw_prompt, controller_args=cargs,
                     draft_confidence=a.draft_confidence)


def _progress(total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="tok", file=sys.stderr, leave=False,
                disable=not sys.stderr.isatty() and not os.environ.get("SPECVIZ_PROGRESS"))


def _run_with_progress(cfg, target, proposer, desc: str, telemetry: bool = True):
    from specviz.run import run

    bar = _progress(cfg.batch_size * cfg.max_new_tokens, desc)

    def on_step(dec, rec):
        bar.update(sum(len(r["emitted"]) for r in rec["rows"]))

    try:
        return run(cfg, target, proposer, on_step=on_step, telemetry=telemetry)
    finally:
        bar.close()


def _fmt(v, spec=".3f"):
    return "-" if v is None else format(v, spec)


def print_summary(trace: dict, out=None) -> None:
    out = out or sys.stdout
    s, c = trace["summary"], trace["config"]
    rows = [
        ("target", c.get("target_name", c["target"])), ("draft", c.get("draft_name", "-") if c["mode"] == "speculative" else "-"),
        ("mode", c["mode"]), ("batch size", c["batch_size"]), ("draft length", c["draft_length"]),
        ("device / dtype", f"{c['device']} / {c['dtype']}"),
        ("tokens", s["tokens"]), ("wall s", _fmt(s["wall_s"])), ("tokens/s", _fmt(s["tokens_per_s"], ".1f")),
        ("acceptance rate", _fmt(s["acceptance_rate"])), ("mean acceptance length", _fmt(s["mean_acceptance_length"])),
        ("system efficiency", _fmt(s["system_efficiency"])), ("overhead fraction", _fmt(s["overhead_frac"])),
        ("steps", s["steps"]),
    ]
    w = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{w}}  {v}", file=out)


def cmd_run(a) -> int:
    from specviz.run import load_pair
    from specviz.analysis.trace import save_json

    cfg = _config(a)
    cfg.validate()
    target, proposer = load_pair(cfg)
    trace = _run_with_progress(cfg, target, proposer, f"{cfg.mode} B={cfg.batch_size}")
    print_summary(trace)
    for i, s in enumerate(trace["sequences"][: a.show]):
        print(f"\n[{s['index']}] ({s['finish_reason']}) {s['text']!r}")
    if a.out:
        save_json(trace, a.out)
        print(f"\ntrace written to {a.out}", file=sys.stderr)
    return 0


def _peer_generate(target, proposer, cfg) -> float | None:
    """transformers' generate(assistant_model=...) at batch 1 (or prompt lookup for ngram): tokens/s."""
    from specviz.run import encode_prompts

    import torch

    kwargs = {"max_new_tokens": cfg.max_new_tokens, "do_sample": False, "num_assistant_tokens": cfg.draft_length,
              "num_assistant_tokens_schedule": "constant", "temperature": None, "top_p": None, "top_k": None}
    if getattr(proposer, "kind", None) == "model":
        kwargs["assistant_model"] = proposer.model
    elif getattr(proposer, "kind", None) == "ngram":
        kwargs["prompt_lookup_num_tokens"] = cfg.draft_length
        kwargs.pop("num_assistant_tokens"), kwargs.pop("num_assistant_tokens_schedule")
    else:
        return None
    tokens, t = 0, 0.0
    for ids in encode_prompts(target.tokenizer, cfg.prompts, cfg.raw_prompt):
        x = torch.tensor([ids], device=target.device)
        t0 = time.perf_counter()
        out = target.model.generate(x, attention_mask=torch.ones_like(x), pad_token_id=target.tokenizer.eos_token_id, **kwargs)
        t += time.perf_counter() - t0
        tokens += out.shape[1] - x.shape[1]
    return tokens / t


def _bench_pass(cfg, target, proposer, desc: str) -> tuple[float, list[dict]]:
    """Every prompt once, in batches of B (RunConfig.every_prompt): tokens/s and the traces."""
    from specviz.analysis.trace import tokens_per_s

    traces = [_run_with_progress(c, target, proposer, desc, telemetry=False) for c in cfg.every_prompt()]
    return tokens_per_s(traces), traces


def cmd_bench(a) -> int:
    import dataclasses

    from specviz.run import load_pair

    cfg = _config(a)
    cfg.validate()
    target, proposer = load_pair(dataclasses.replace(cfg, mode="speculative"))
    reg_cfg = dataclasses.replace(cfg, mode="regular")
    # warm-up: first forwards allocate and pick kernels
    warm = dataclasses.replace(cfg, max_new_tokens=min(8, cfg.max_new_tokens))
    _run_with_progress(warm, target, proposer, "warm-up", telemetry=False)
    _run_with_progress(dataclasses.replace(warm, mode="regular"), target, None, "warm-up", telemetry=False)
    with_peer = cfg.batch_size == 1 and not a.no_peer and cfg.temperature == 0
    peer_proposer = proposer
    if with_peer and a.peer_draft:  # e.g. a feature draft here, a token draft for transformers
        from specviz.run import make_proposer

        peer_proposer = make_proposer(a.peer_draft, target, cfg.draft_confidence)
    if with_peer and getattr(peer_proposer, "kind", None) not in ("model", "ngram"):
        print(f"no transformers peer: generate(assistant_model=...) cannot run a {getattr(peer_proposer, 'kind', '?')} "
              "draft (give --peer-draft a token draft to compare against)", file=sys.stderr)
        with_peer = False
    if with_peer:
        _peer_generate(target, peer_proposer, dataclasses.replace(warm, prompts=warm.prompts[:1]))
    results = {"regular": [], "speculative": [], "peer": []}
    traces = {}
    for rep in range(a.repeats):  # interleaved (peer too) so drift hits every arm alike
        for mode, c, prop in (("regular", reg_cfg, None), ("speculative", cfg, proposer)):
            tok_s, traces[mode] = _bench_pass(c, target, prop, f"{mode} {rep + 1}/{a.repeats}")
            results[mode].append(tok_s)
        peer = _peer_generate(target, peer_proposer, cfg) if with_peer else None
        if peer is not None:
            results["peer"].append(peer)
    reg, spec = statistics.median(results["regular"]), statistics.median(results["speculative"])
    steps = [st for t in traces["speculative"] for st in t["steps"]]
    seqs = [sq for t in traces["speculative"] for sq in t["sequences"]]
    from specviz.analysis.trace import summarize

    s = summarize(steps, seqs, sum(t["summary"]["wall_s"] for t in traces["speculative"]),
                  sum(t["summary"]["prefill_s"] for t in traces["speculative"]))
    print(f"target {target.name} ({target.dtype}, {target.device}); draft {getattr(proposer, 'name', '-')}; "
          f"B={cfg.batch_size} k={cfg.draft_length} controller={cfg.controller} max_new_tokens={cfg.max_new_tokens} "
          f"prompts={len(cfg.prompts)} repeats={a.repeats}")
    print(f"{'run':<28}{'tokens/s':>10}{'ratio':>8}")
    print(f"{'regular (ours, k=0)':<28}{reg:>10.1f}{1.0:>8.2f}")
    print(f"{'speculative (ours)':<28}{spec:>10.1f}{spec / reg:>8.2f}")
    if results["peer"]:
        peer = statistics.median(results["peer"])
        ours_vs_peer = statistics.median(s_ / p_ for s_, p_ in zip(results["speculative"], results["peer"]))
        print(f"{'transformers generate peer':<28}{peer:>10.1f}{peer / reg:>8.2f}"
              + (f"  (its draft: {peer_proposer.name})" if peer_proposer is not proposer else ""))
        print(f"ours vs peer: {ours_vs_peer:.2f}x (median of per-repeat ratios; per repeat: "
              + ", ".join(f"{s_ / p_:.2f}" for s_, p_ in zip(results["speculative"], results["peer"])) + ")")
    print(f"acceptance rate {_fmt(s['acceptance_rate'])}, mean acceptance length {_fmt(s['mean_acceptance_length'])}, "
          f"overhead fraction {_fmt(s['overhead_frac'])}; per step: draft {1e3 * s['draft_s'] / s['steps']:.1f} ms, "
          f"verify {1e3 * s['verify_s'] / s['steps']:.1f} ms, accept {1e3 * s['accept_s'] / s['steps']:.1f} ms, "
          f"bookkeeping {1e3 * s['bookkeeping_s'] / s['steps']:.1f} ms")
    reg_seqs = [sq for t in traces["regular"] for sq in t["sequences"]]
    if cfg.temperature == 0:
        same = [x["output_token_ids"] == y["output_token_ids"] for x, y in zip(reg_seqs, seqs)]
        print(f"greedy outputs identical to regular decoding: {sum(same)}/{len(same)} rows"
              + ("" if all(same) or target.dtype == __import__("torch").float32 else
                 " (bf16: a (k+1)-token verify can break exact logit ties differently; see bench/exactness.py)"))
    return 0


def _ints(text: str, what: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecvizError(f"{what} must be comma-separated integers (got {text!r})") from None
    if not vals or min(vals) < 0:
        raise SpecvizError(f"{what} must be non-negative integers (got {text!r})")
    return vals


def cmd_calibrate(a) -> int:
    import dataclasses

    from specviz.measure.calibrate import calibrate, calibration_path
    from specviz.run import load_pair

    cfg = dataclasses.replace(_config(a), prompts=["calibration"])
    cfg.validate()
    target, proposer = load_pair(cfg)
    sizes = _ints(a.batch_sizes, "--batch-sizes")
    bar = _progress(len(sizes) * (a.k_max + 1 + (2 if proposer is not None and getattr(proposer, "loaded", None) else 0)),
                    "calibrate")
    cal = calibrate(target, proposer, sizes, a.k_max, a.prefix_len, progress=lambda: bar.update(1))
    bar.close()
    tc, dc = cal.target_cost, cal.draft_cost
    print(f"target {cal.target} ({cal.dtype}, {cal.device}): t = {tc.t_fixed*1e3:.2f} ms + max({tc.t_mem*1e3:.2f} ms, "
          f"{tc.t_token*1e6:.1f} us x b x tokens); knee at {tc.knee_tokens:.0f} tokens")
    print(f"draft  {cal.draft}: t = {dc.t_fixed*1e3:.2f} ms + max({dc.t_mem*1e3:.2f} ms, {dc.t_token*1e6:.1f} us x b x tokens)")
    for name, res in cal.residuals.items():
        if res:
            print(f"{name} fit residuals: median |rel| {statistics.median(abs(r) for r in res):.3f}, max {max(abs(r) for r in res):.3f}")
    print("engine overhead per step: " + ", ".join(f"B={b}: {v*1e3:.2f} ms" for b, v in cal.overhead.items()))
    print(f"written to {calibration_path(target.name, cal.draft, target.device, target.dtype)}")
    return 0


def cmd_sweep(a) -> int:
    import csv
    import json
    from pathlib import Path

    from specviz.measure.calibrate import calibrate, load_calibration
    from specviz.run import load_pair
    from specviz.measure.sweep import summarize_sweep, sweep

    cfg = _config(a)
    cfg.validate()
    sizes, ks = _ints(a.batch_sizes, "--batch-sizes"), _ints(a.draft_lengths, "--draft-lengths")
    target, proposer = load_pair(cfg)
    if proposer is None:
        raise SpecvizError("a sweep compares speculative with regular decoding: give a --draft other than none")
    cal = None if a.recalibrate else load_calibration(target, proposer)
    if cal is None:
        print("calibrating the cost model first (cached for next time)...", file=sys.stderr)
        cal = calibrate(target, proposer, sorted(set(sizes)), max(ks))
    else:
        print(f"using the cached calibration from {cal.created or 'an unknown date'} (--recalibrate to measure again)",
              file=sys.stderr)
    bar = _progress(len(sizes) * len(ks), "sweep")

    def on_cell(c):
        bar.update(1)
        print(f"B={c['batch_size']:<3} k={c['draft_length']:<2} alpha {c['alpha']:.3f}  measured {c['measured_speedup']:.2f}x"
              f"  predicted {c['predicted_speedup']:.2f}x (i.i.d. rows {c['predicted_speedup_iid']:.2f}x)", flush=True)

    rows = sweep(cfg, sizes, ks, target, proposer, cal, a.repeats, on_cell)
    bar.close()
    summary = summarize_sweep(rows, cal)
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "sweep.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (out / "sweep.json").write_text(json.dumps({"calibration": cal.to_json(), "summary": summary,
                                                "config": cfg.to_trace_config(target, proposer)}, indent=1))
    print(f"\nmedian |predicted - measured| / measured: {summary['median_abs_rel_error']:.3f}")
    print(f"{'B':>3} {'best k (measured)':>18} {'k* (predicted)':>15} {'k* (one alpha)':>15} {'speedup':>8}")
    for b, v in summary["per_batch_size"].items():
        print(f"{b:>3} {v['measured_best_k']:>18} {v['predicted_k_star']:>15} {v['predicted_k_star_one_alpha']:>15} "
              f"{v['measured_best_speedup']:>8.2f}")
    print(f"written to {out / 'sweep.csv'} and {out / 'sweep.json'}", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    import torch
    import transformers

    # our errors say what went wrong in one line; transformers' warnings and load bars only add noise
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    p = argparse.ArgumentParser(prog="python -m specviz", description="Live batched speculative decoding.")
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("run", help="one run, writes a trace")
    _add_run_args(pr)
    pr.add_argument("--out", metavar="TRACE.json")
    pr.add_argument("--show", type=int, default=4, help="print the text of the first N rows")
    pb = sub.add_parser("bench", help="speculative vs regular decoding in one process")
    _add_run_args(pb)
    pb.add_argument("--repeats", type=int, default=3)
    pb.add_argument("--no-peer", action="store_true", help="skip transformers' generate() peer")
    pb.add_argument("--peer-draft", metavar="SPEC",
                    help="the peer's draft when it differs from ours (transformers cannot run a feature draft)")
    pc = sub.add_parser("calibrate", help="fit the cost model of the target and draft on this device")
    _add_run_args(pc)
    pc.add_argument("--batch-sizes", default="1,2,4,8,16")
    pc.add_argument("--k-max", type=int, default=8)
    pc.add_argument("--prefix-len", type=int, default=128, help="cached prefix length per row")
    ps = sub.add_parser("sweep", help="measured vs predicted speedup over batch size x draft length")
    _add_run_args(ps)
    ps.add_argument("--batch-sizes", default="1,2,4,8")
    ps.add_argument("--draft-lengths", default="1,2,4,6,8")
    ps.add_argument("--repeats", type=int, default=1)
    ps.add_argument("--recalibrate", action="store_true")
    ps.add_argument("--out-dir", default="sweep-out")
    from specviz.distill.pipeline import add_distill_parser, cmd_distill

    add_distill_parser(sub)
    a = p.parse_args(argv)
    try:
        return {"run": cmd_run, "bench": cmd_bench, "calibrate": cmd_calibrate, "sweep": cmd_sweep,
                "distill": cmd_distill}[a.cmd](a)
    except SpecvizError as e:
        print(f"specviz: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specviz: interrupted", file=sys.stderr)
        return 130
    except torch.OutOfMemoryError as e:
        print(f"specviz: error: out of memory ({e.__class__.__name__}): try a smaller --batch-size or --draft-length",
              file=sys.stderr)
        return 2
