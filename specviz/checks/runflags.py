"""The command line's shared run flags (run, bench, calibrate, sweep), beside the checks of them
(specviz.checks: every flag here has a check or a reason it needs none; tests/test_checks.py walks them).
The flags are the CLI contract (DESIGN.md, "CLI (stable contract)")."""

from __future__ import annotations

import argparse


def add_run_args(p: argparse.ArgumentParser) -> None:
    """The flags run, bench, calibrate and sweep share."""
    p.add_argument("--target", default="default", help="model SPEC: default, hub id[@rev], local dir, or .gguf")
    p.add_argument("--draft", default="default", help="draft SPEC: a model SPEC, default, ngram[:N], or none")
    p.add_argument("--prompts", metavar="FILE", help="one prompt per line, or JSONL with a \"prompt\" key")
    p.add_argument("--prompt", metavar="TEXT", nargs="+", action="extend", help="prompt text (repeatable)")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--draft-length", type=int, default=2)
    p.add_argument("--max-new-tokens", type=int, default=64,
                   help="new tokens per row; a prompt + max new tokens + draft length past the model's context "
                        "(8192 for default) is refused before the model loads, not clamped")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--controller", default="fixed",
                   help="draft-length policy: fixed, heuristic, bass, bass-capped, table, analytic, goodput, or tree: "
                        "(depth k, width W, nodes N) per step, up to --draft-length, --tree-width and --tree-nodes, "
                        "from the calibrated costs and the running acceptance by depth x sibling rank (uncalibrated: "
                        "an illustrative roofline, a draft forward 0.1 of a target forward, both flat to 64 tokens)")
    p.add_argument("--controller-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="extra policy argument (e.g. table=1:4,8:2)")
    p.add_argument("--mode", choices=["speculative", "regular"], default="speculative")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--device-map", default="none", choices=["none", "auto"],
                   help="auto: the target spread over every GPU, then CPU memory, then disk (accelerate)")
    p.add_argument("--raw-prompt", action="store_true", help="do not apply the chat template")
    p.add_argument("--draft-confidence", type=float, default=0.0, metavar="P",
                   help="model drafts: a row stops drafting after a token the draft gives probability < P "
                        "(transformers' assistant_confidence_threshold; 0 = always draft k)")
    p.add_argument("--requests", type=int, default=None, metavar="N",
                   help="requests served through --batch-size slots, prompts cycled to N; a finished row's slot "
                        "goes to the next request (default: the batch size, one static batch)")
    p.add_argument("--arrival-rate", type=float, default=0.0, metavar="R",
                   help="requests arrive at R per second (Poisson, seeded by --seed); 0 = all queued at the start")
    p.add_argument("--tree-width", type=int, default=1, metavar="W",
                   help="token trees (model drafts): expand the top W children of the W best frontier nodes at "
                        "each depth up to --draft-length (1 = chains); with --controller tree the widest W")
    p.add_argument("--tree-nodes", type=int, default=16, metavar="N",
                   help="with --tree-width > 1: draft nodes kept per row (the best by draft probability); with "
                        "--controller tree the most nodes")
    p.add_argument("--static", action="store_true",
                   help="with --requests: consecutive static batches (BASS-style), no refill of finished rows")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="llama-style models through the lean forward: a static KV cache, its decode and verify "
                        "forwards replayed as CUDA graphs on CUDA (eager elsewhere); same as SPECVIZ_CUDA_GRAPHS=1")
