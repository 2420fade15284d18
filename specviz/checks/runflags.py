"""The command line's shared run flags (run, bench, calibrate, sweep), beside the checks of them
(specviz.checks: every flag here has a check or a reason it needs none; tests/checks/test_checks.py walks them).
The flags are the CLI contract (DESIGN.md, "CLI (stable contract)").

Each subcommand offers only the flags it reads: ``add_run_args(parser, omit=...)`` leaves a flag out of
its help and its parser and sets the flag's default in the parsed namespace, so the checks and the
run's configuration read every field the same way whichever subcommand parsed it.
"""

from __future__ import annotations

import argparse

from specviz.prompts.sets import SET_NAMES

POLICY_HELP = ("draft-length policy: fixed, heuristic, bass, bass-capped, table, analytic, goodput, or tree: "
                   "(depth k, width W, nodes N) per step, up to --draft-length, --tree-width and --tree-nodes, from the "
                   "calibrated costs and the running acceptance by depth x sibling rank (uncalibrated: an illustrative "
                   "roofline, a draft forward 0.1 of a target forward, both flat to 64 tokens)")

# (group title, [(flags, add_argument keywords)]). Help strings never repeat the default: the help formatter adds it.
RUN_FLAGS = [
    ("models and device", [
        ("--target", dict(default="default", metavar="SPEC",
                          help="target model: default (the packaged SmolLM2-135M-Instruct), a hub id[@revision], a "
                               "local Hugging Face folder, or a .gguf file")),
        ("--draft", dict(default="default", metavar="SPEC",
                         help="draft: default (picked for the target), ngram[:N] (prompt lookup), suffix (suffix "
                              "decoding), MODEL+suffix[:D] (the hybrid, e.g. default+suffix), none, a distilled draft "
                              "folder, or any model SPEC")),
        ("--device", dict(default="auto", metavar="DEVICE", help="auto, cpu, cuda or cuda:N")),
        ("--dtype", dict(default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                         help="auto: bfloat16 on GPUs and on CPUs where bf16 runs faster (native bf16, or AVX2 with our bf16 kernel built), else float32")),
        ("--device-map", dict(default="none", choices=["none", "auto"],
                              help="auto: the target spread over every GPU, then CPU memory, then disk (accelerate)")),
        ("--cuda-graphs", dict(action="store_true",
                               help="llama-style models through the lean forward: a static KV cache, its decode and "
                                    "verify forwards replayed as CUDA graphs on CUDA (eager elsewhere); same as "
                                    "SPECVIZ_CUDA_GRAPHS=1")),
        ("--compile", dict(action="store_true",
                           help="llama-style models through the lean forward: a static KV cache, its decode and "
                                "verify forwards' layers compiled by torch.compile (needs a C++ compiler on the CPU; "
                                "eager with one line saying why where compiling fails; compiled layers cached on "
                                "disk); same as SPECVIZ_COMPILE=1")),
    ]),
    ("prompts", [
        ("--prompt", dict(metavar="TEXT", action="append",
                          help="one prompt (quote it); repeat the flag for more prompts")),
        ("--prompts", dict(metavar="FILE", help="a file of prompts: one per line, or JSONL with a \"prompt\" key; "
                                                "cycled when the batch is larger")),
        ("--prompt-set", dict(metavar="NAME", choices=list(SET_NAMES),
                              help="a built-in prompt set, after any --prompt and --prompts: "
                                   + ", ".join(SET_NAMES) + " (the predictable ones: edit-code to multi-turn)")),
        ("--raw-prompt", dict(action="store_true", help="do not apply the tokenizer's chat template")),
        ("--max-new-tokens", dict(type=int, default=64, metavar="N",
                                  help="new tokens per row; a prompt + max new tokens + draft length past the model's "
                                       "context (8192 for default) is refused before the model loads, not clamped")),
    ]),
    ("batch and drafting", [
        ("--batch-size", dict(type=int, default=1, metavar="B", help="rows decoded together")),
        ("--draft-length", dict(type=int, default=2, metavar="K",
                                help="tokens drafted per row and step (vLLM's num_speculative_tokens); 0 drafts none")),
        ("--mode", dict(choices=["speculative", "regular"], default="speculative",
                        help="regular: plain decoding through the same engine (k = 0)")),
        ("--policy", dict(default="fixed", metavar="NAME", help=POLICY_HELP)),
        ("--policy-arg", dict(action="append", default=[], metavar="KEY=VALUE",
                                  help="an option of the policy, repeatable (e.g. table=1:4,8:2)")),
        ("--draft-confidence", dict(type=float, default=0.0, metavar="P",
                                    help="model drafts: a row stops drafting after a token the draft gives probability "
                                         "< P (transformers' assistant_confidence_threshold; 0 = always draft k)")),
        ("--tree-width", dict(type=int, default=1, metavar="W",
                              help="token trees (model drafts): expand the top W children of the W best frontier nodes "
                                   "at each depth up to --draft-length (1 = chains); with --policy tree the widest W")),
        ("--tree-nodes", dict(type=int, default=16, metavar="N",
                              help="with --tree-width > 1: draft nodes kept per row (the best by draft probability); "
                                   "with --policy tree the most nodes")),
        ("--suffix-corpus", dict(metavar="FILE",
                                 help="with --draft suffix or MODEL+suffix: the global suffix structure (earlier "
                                      "requests' outputs), loaded at the start when the file exists; run saves it "
                                      "at the end (written whole), bench and sweep only read it")),
        ("--synthetic-acceptance", dict(type=float, metavar="ALPHA",
                                        help="teaching and benchmarks (vLLM's synthetic rejection sampling): accept each "
                                             "drafted token with probability ALPHA from the row's seeded stream, "
                                             "whatever the models say; the output is then NOT the target's text "
                                             "(chains only)")),
    ]),
    ("sampling", [
        ("--temperature", dict(type=float, default=0.0, metavar="T", help="0 = greedy")),
        ("--top-p", dict(type=float, default=1.0, metavar="P", help="nucleus sampling; 1 = off")),
        ("--seed", dict(type=int, default=0, metavar="S", help="every row draws its own random stream from it")),
    ]),
    ("request queue (continuous batching)", [
        ("--requests", dict(type=int, default=None, metavar="N",
                            help="requests served through --batch-size lanes (the batch's rows), prompts cycled to N; a "
                                 "finished request's lane goes to the next request (unset: the batch size, one "
                                 "static batch)")),
        ("--arrival-rate", dict(type=float, default=0.0, metavar="R",
                                help="requests arrive at R per second (Poisson, seeded by --seed); 0 = all queued at "
                                     "the start (vLLM's benchmark writes this as inf)")),
        ("--static", dict(action="store_true",
                          help="with --requests: consecutive static batches (BASS-style), no refill of finished rows")),
    ]),
]
DESTS = {flag: flag[2:].replace("-", "_") for _, flags in RUN_FLAGS for flag, _ in flags}
# Earlier names that still parse (scripts and recorded commands use them), not shown in --help.
FORMER_NAMES = {"--policy": "--controller", "--policy-arg": "--controller-arg"}


def add_run_args(p: argparse.ArgumentParser, omit: tuple[str, ...] = ()) -> dict[str, argparse._ArgumentGroup]:
    """The run flags, in their groups, less ``omit`` (whose defaults are set instead). Returns the groups by
    title, so a subcommand can add its own flags beside the shared ones."""
    unknown = set(omit) - set(DESTS)
    assert not unknown, f"no such run flag: {unknown}"
    groups, fixed = {}, {}
    for title, flags in RUN_FLAGS:
        for flag, kw in flags:
            if flag in omit:
                fixed[DESTS[flag]] = kw.get("default", False if kw.get("action") == "store_true" else None)
                continue
            if title not in groups:
                groups[title] = p.add_argument_group(title)
            groups[title].add_argument(flag, **kw)
            if flag in FORMER_NAMES:
                same = {k: v for k, v in kw.items() if k not in ("help", "default")}
                groups[title].add_argument(FORMER_NAMES[flag], dest=DESTS[flag], help=argparse.SUPPRESS,
                                           default=argparse.SUPPRESS, **same)
    p.set_defaults(**fixed)
    return groups

