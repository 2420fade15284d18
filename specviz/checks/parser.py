"""The command line's parser: every subcommand with a description, its flags in groups with their
defaults shown, and two examples (``specviz COMMAND --help``). docs/cli.md documents the same flags
(tests/checks/test_cli_docs.py walks this parser against it); specviz.checks checks their values."""

from __future__ import annotations

import argparse
import textwrap

from specviz.checks import OneLineParser
from specviz.checks.distillflags import add_distill_args
from specviz.checks.runflags import DESTS, add_run_args
from specviz.checks.tuneflags import add_tune_args
from specviz.common import EXIT_BAD_INPUT, EXIT_MISSING, EXIT_OK, EXIT_OUT_OF_MEMORY, EXIT_SIGNAL_BASE

# What calibrate and sweep read of the run flags; the rest are left out of their parsers (specviz.checks.runflags).
CALIBRATE_FLAGS = ("--target", "--draft", "--device", "--dtype", "--device-map", "--cuda-graphs")
SWEEP_OMITS = ("--batch-size", "--draft-length", "--mode", "--policy", "--policy-arg", "--tree-width",
               "--tree-nodes", "--requests", "--arrival-rate", "--static")  # the grid sets b and k; cells are static


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every flag's default beside its help (where it has one worth saying); the description and the
    examples keep their own line breaks."""

    def _get_help_string(self, action):
        text = action.help or ""
        unset = action.default is None or action.default is False or action.default == [] or action.default == argparse.SUPPRESS
        if "%(default)" not in text and action.option_strings and not unset:
            text += " (default: %(default)s)"
        return text


def add_subcommand(sub, name: str, summary: str, description: str, examples: list[str]) -> argparse.ArgumentParser:
    """A subcommand whose --help says what it does, shows the defaults and ends on examples."""
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples)
    return sub.add_parser(name, help=summary, description=textwrap.fill(description, 100), epilog=epilog,
                          formatter_class=HelpFormatter)


RUN_EXAMPLES = ['specviz run --prompt "Explain speculative decoding." --batch-size 4 --draft ngram --out trace.json',
                'specviz run --prompts bench/prompts.txt --batch-size 8 --requests 32 --arrival-rate 2 --out queue.json']
BENCH_EXAMPLES = ["specviz bench --prompts bench/prompts.txt --batch-size 8 --draft ngram",
                  'specviz bench --prompt "Count to twenty." --draft default --draft-length 2 --repeats 5 --json']
CALIBRATE_EXAMPLES = ["specviz calibrate --dtype bfloat16 --draft default",
                      "specviz calibrate --target HuggingFaceTB/SmolLM2-1.7B-Instruct --draft HuggingFaceTB/SmolLM2-135M-Instruct "
                      "--device cuda --batch-sizes 1,4,16,64"]
SWEEP_EXAMPLES = ["specviz sweep --prompts bench/prompts.txt --draft ngram --batch-sizes 1,2,4,8 --draft-lengths 1,2,4",
                  "specviz sweep --prompts bench/prompts.txt --draft default --recalibrate --out-dir sweep-default"]
DISTILL_EXAMPLES = ["specviz distill --target default --out my-draft --samples 2000 --steps 3000",
                    "specviz distill --target default --out my-feature-draft --kind feature --prompts mixed "
                    "--text /usr/share/doc/python3-doc --time-budget-min 60"]
TUNE_EXAMPLES = ["specviz tune --trace trace.json --engine vllm --vllm-version 0.32.0 --batch-sizes 1,4,16",
                 "specviz tune --metrics-url http://127.0.0.1:8000 --window 60 --calibration cal.json --draft ngram"]
VLLM_EXAMPLES = ["specviz vllm serve --target default --draft ngram --draft-length 4 --port 0 --no-compile",
                 """specviz vllm serve --speculative-config '{"method": "ngram", "num_speculative_tokens": 2, """
                 """"prompt_lookup_max": 3, "prompt_lookup_min": 1}'"""]
TOP_EPILOG = f"""exit status:
  {EXIT_OK}    done
  1    an unexpected error (a bug: Python's traceback follows)
  {EXIT_BAD_INPUT}    bad input: a flag, a value, a combination or a file's contents that cannot work
  {EXIT_MISSING}    missing: a model, a file, CUDA or the vLLM environment is not on this machine
  {EXIT_OUT_OF_MEMORY}    out of memory: refused before loading, or ran out while running
  {EXIT_SIGNAL_BASE}+N interrupted by signal N (130 Ctrl-C, 143 SIGTERM, 141 a closed pipe); what was finished is kept

'specviz COMMAND --help' shows a command's flags, defaults and examples; docs/cli.md has them all."""


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand and flag (tests/checks/test_checks.py walks them: each has a check in specviz.checks
    or a reason it needs none; tests/checks/test_cli_docs.py checks docs/cli.md names each one)."""
    p = OneLineParser(prog="specviz", formatter_class=HelpFormatter, epilog=TOP_EPILOG,
                      description="Live batched speculative decoding: run, measure and tune a target and a draft "
                                  "model.\nThe same as `python -m specviz`; the app is `streamlit run app.py`.")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    pr = add_subcommand(sub, "run", "one run; prints a summary and writes a trace",
                        "Decode the prompts with speculative (or regular) decoding and print a summary; --out writes "
                        "the trace (JSON) the app's pages load.", RUN_EXAMPLES)
    add_run_args(pr)
    out = pr.add_argument_group("output")
    out.add_argument("--out", metavar="TRACE.json", help="write the trace here (unset: no trace is written)")
    out.add_argument("--show", type=int, default=4, metavar="N", help="print the text of the first N rows")

    pb = add_subcommand(sub, "bench", "speculative vs regular decoding, interleaved in one process",
                        "Time regular decoding (our engine at k = 0) and speculative decoding on the same prompts, "
                        "interleaved round by round, and print tokens/s and their ratio; at batch size 1 also "
                        "transformers' assisted generate, or with --peer vllm a real vLLM server.", BENCH_EXAMPLES)
    add_run_args(pb, omit=("--mode",))
    g = pb.add_argument_group("benchmark")
    g.add_argument("--repeats", type=int, default=3, metavar="N", help="interleaved rounds; the ratios are their median")
    g.add_argument("--no-peer", action="store_true", help="skip transformers' generate() peer")
    g.add_argument("--peer", choices=["transformers", "vllm", "llamacpp"], default="transformers",
                   help="vllm: a real vLLM server on the same prompts (needs `bash setup.sh --vllm`); llamacpp: "
                        "llama.cpp through llama-cpp-python on GGUFs of the same weights (needs `bash setup.sh --llamacpp`)")
    g.add_argument("--peer-draft", metavar="SPEC",
                   help="the peer's draft when it differs from ours (transformers cannot run a feature draft; "
                        "with --peer vllm: none or ngram[:N], vLLM's side against our model draft; with --peer "
                        "llamacpp: llama.cpp's draft model, q4_1 (the packaged target at 4 bits, the default) or a .gguf)")
    g.add_argument("--peer-modes", metavar="LIST",
                   help="--peer llamacpp: llama.cpp's arms, of regular, lookup (its prompt lookup) and draft (a draft "
                        "model); default all three at --batch-size 1, regular above (it speculates in one lane only)")
    g.add_argument("--peer-weights", default="bf16", metavar="LIST",
                   help="--peer llamacpp: the GGUFs it runs, of bf16 (our weights, the same bits), f32 and q4_1 (the "
                        "packaged 4-bit file: a lower bandwidth floor); bf16 and f32 are written once from ours")
    g.add_argument("--json", action="store_true", help="print the summary as one JSON object instead of the table")

    pc = add_subcommand(sub, "calibrate", "fit the cost model of the target and draft on this device",
                        "Time the target's and the draft's forwards over batch size x tokens per row, fit the cost "
                        "model and cache it; the analytic policies, the Speedup page and sweep read it.",
                        CALIBRATE_EXAMPLES)
    add_run_args(pc, omit=tuple(f for f in DESTS if f not in CALIBRATE_FLAGS))
    g = pc.add_argument_group("calibration grid")
    g.add_argument("--batch-sizes", default="1,2,4,8,16", metavar="LIST", help="comma-separated batch sizes")
    g.add_argument("--k-max", type=int, default=8, metavar="K", help="longest draft timed (verify of K + 1 tokens)")
    g.add_argument("--prefix-len", type=int, default=128, metavar="N", help="cached prefix length per row")

    ps = add_subcommand(sub, "sweep", "measured vs predicted speedup over batch size x draft length",
                        "For every batch size and draft length, run each prompt with regular and speculative decoding "
                        "interleaved, and set the measured speedup beside the calibrated model's prediction; writes "
                        "sweep.csv (one line per cell) and sweep.json (the fit, best k per batch size).",
                        SWEEP_EXAMPLES)
    add_run_args(ps, omit=SWEEP_OMITS)
    g = ps.add_argument_group("grid and output")
    g.add_argument("--batch-sizes", default="1,2,4,8", metavar="LIST", help="comma-separated batch sizes")
    g.add_argument("--draft-lengths", default="1,2,4,6,8", metavar="LIST", help="comma-separated draft lengths")
    g.add_argument("--repeats", type=int, default=1, metavar="N", help="interleaved rounds per cell")
    g.add_argument("--recalibrate", action="store_true", help="measure the cost model again instead of the cached one")
    g.add_argument("--out-dir", default="sweep-out", metavar="DIR",
                   help="sweep.csv and sweep.json go here; an interrupted sweep leaves its finished cells here, and "
                        "the same command again resumes from them")
    add_distill_args(add_subcommand(
        sub, "distill", "distil a tiny draft for a target (generate data, train, evaluate, save)",
        "Make a draft model for a llama-style target: the target answers prompts (soft labels: its top --topk "
        "logits), a small draft trains on them, and the held-out acceptance and cost ratio are measured. The folder "
        "--out is itself a draft SPEC (--draft DIR) and holds report.json and a README with the command. Data, "
        "labelling and training resume after an interruption.", DISTILL_EXAMPLES))
    from specviz.peers.command import add_vllm_args

    add_vllm_args(add_subcommand(
        sub, "vllm", "start a real vLLM server on the packaged model (needs `bash setup.sh --vllm`)",
        "vllm serve: vLLM's OpenAI-compatible server (from .venv-vllm) on a loopback port, with our model SPECs "
        "and draft names mapped to vLLM's options; waits for its health check, and stops it on exit, Ctrl-C or "
        "SIGTERM. The app's Server page reads its /metrics.", VLLM_EXAMPLES))
    add_tune_args(add_subcommand(
        sub, "tune", "recommend k per batch size and write it in vLLM's, SGLang's, llama.cpp's or transformers' form",
        "From measured acceptance per position (a trace, a sweep, or a vLLM server's /metrics over a window) and the "
        "costs (a calibration, or entered numbers), recommend the draft length per batch size by predicted goodput, "
        "with its uncertainty from the sample size; say where speculation should be off; show the oracle bound (the "
        "best k per step in hindsight) for a trace; and print one engine's settings, a vLLM config as one JSON object. "
        "Loads no model.", TUNE_EXAMPLES))
    return p


