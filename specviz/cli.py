"""Command line: ``python -m specviz run|bench ...`` (DESIGN.md, "CLI (stable contract)").

User mistakes end as one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from .models import SpecvizError


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="default", help="model SPEC: default, hub id[@rev], local dir, or .gguf")
    p.add_argument("--draft", default="default", help="draft SPEC: a model SPEC, default, ngram[:N], or none")
    p.add_argument("--prompts", metavar="FILE", help="one prompt per line, or JSONL with a \"prompt\" key")
    p.add_argument("--prompt", metavar="TEXT", nargs="+", action="extend", help="prompt text (repeatable)")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--draft-length", type=int, default=4)
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


def _config(a):
    from .runner import RunConfig, read_prompts

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
                     dtype=a.dtype, raw_prompt=a.raw_prompt, controller_args=cargs)


def _progress(total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="tok", file=sys.stderr, leave=False,
                disable=not sys.stderr.isatty() and not os.environ.get("SPECVIZ_PROGRESS"))


def _run_with_progress(cfg, target, proposer, desc: str, telemetry: bool = True):
    from .runner import run

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
    from .runner import load_pair
    from .trace import save_json

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
    from .runner import encode_prompts

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


def cmd_bench(a) -> int:
    import dataclasses

    from .runner import load_pair

    cfg = _config(a)
    cfg.validate()
    target, proposer = load_pair(dataclasses.replace(cfg, mode="speculative"))
    reg_cfg = dataclasses.replace(cfg, mode="regular")
    # warm-up: first forwards allocate and pick kernels
    warm = dataclasses.replace(cfg, max_new_tokens=min(8, cfg.max_new_tokens))
    _run_with_progress(warm, target, proposer, "warm-up", telemetry=False)
    results = {"regular": [], "speculative": []}
    traces = {}
    for rep in range(a.repeats):  # interleaved so drift hits both alike
        for mode, c, prop in (("regular", reg_cfg, None), ("speculative", cfg, proposer)):
            tr = _run_with_progress(c, target, prop, f"{mode} {rep + 1}/{a.repeats}", telemetry=False)
            results[mode].append(tr["summary"]["tokens_per_s"])
            traces[mode] = tr
    reg, spec = statistics.median(results["regular"]), statistics.median(results["speculative"])
    s = traces["speculative"]["summary"]
    print(f"target {target.name} ({target.dtype}, {target.device}); draft {getattr(proposer, 'name', '-')}; "
          f"B={cfg.batch_size} k={cfg.draft_length} max_new_tokens={cfg.max_new_tokens} repeats={a.repeats}")
    print(f"{'run':<28}{'tokens/s':>10}{'ratio':>8}")
    print(f"{'regular (ours, k=0)':<28}{reg:>10.1f}{1.0:>8.2f}")
    print(f"{'speculative (ours)':<28}{spec:>10.1f}{spec / reg:>8.2f}")
    if cfg.batch_size == 1 and not a.no_peer and cfg.temperature == 0:
        peer = _peer_generate(target, proposer, cfg)
        if peer is not None:
            print(f"{'transformers generate peer':<28}{peer:>10.1f}{peer / reg:>8.2f}")
            print(f"ours vs peer: {spec / peer:.2f}x")
    print(f"acceptance rate {_fmt(s['acceptance_rate'])}, mean acceptance length {_fmt(s['mean_acceptance_length'])}, "
          f"overhead fraction {_fmt(s['overhead_frac'])}")
    same = [a_["output_token_ids"] == b_["output_token_ids"] for a_, b_ in
            zip(traces["regular"]["sequences"], traces["speculative"]["sequences"])]
    if cfg.temperature == 0:
        print(f"greedy outputs identical to regular decoding: {sum(same)}/{len(same)} rows")
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
    a = p.parse_args(argv)
    try:
        return {"run": cmd_run, "bench": cmd_bench}[a.cmd](a)
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
