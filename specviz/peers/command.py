"""``python -m specviz vllm serve`` and ``bench --peer vllm``: arguments and commands (the CLI adds the
signal handling).

    python -m specviz vllm serve --target default [--draft ngram|SPEC] --draft-length K [--port P]
    python -m specviz vllm serve --speculative-config '{"method": "ngram", "num_speculative_tokens": 3, ...}'
    python -m specviz bench --peer vllm --draft ngram|none --draft-length K --batch-size B [--requests N]
    python -m specviz bench --peer vllm --draft default --peer-draft none|ngram ...   (our pair vs vLLM's best)

Its flags are checked in specviz.checks (check_vllm_args) before anything starts, like every
subcommand's.
"""

from __future__ import annotations

import sys

from specviz.peers.server import ServeConfig, serve


def add_vllm_args(p) -> None:
    """``vllm serve``'s flags, in groups, on its parser (specviz.checks.parser makes it, with the help text)."""
    p.add_argument("vllm_action", choices=["serve"], metavar="serve",
                   help="serve: vLLM's OpenAI-compatible server on a loopback port until Ctrl-C or SIGTERM")
    g = p.add_argument_group("models")
    g.add_argument("--target", default="default", metavar="SPEC",
                   help="model SPEC: default, a Hugging Face directory or a hub id")
    g.add_argument("--draft", default="none", metavar="SPEC",
                   help="none (regular decoding), ngram[:N] (vLLM's prompt lookup, N = longest n-gram, default 3), "
                        "or a full-vocabulary model SPEC; specviz's distilled drafts are refused")
    g.add_argument("--draft-length", type=int, default=4, metavar="K", help="vLLM's num_speculative_tokens")
    g.add_argument("--speculative-config", metavar="JSON",
                   help="vLLM's own speculative config, passed as given (e.g. what `specviz tune` prints for vLLM), "
                        "instead of --draft and --draft-length")
    g.add_argument("--dtype", default="bfloat16", choices=["auto", "float32", "bfloat16", "float16"],
                   help="the server's --dtype")
    g = p.add_argument_group("server")
    g.add_argument("--port", type=int, default=8000,
                   help="loopback port (vLLM's own default and the Server page's default address; 0 = a free one)")
    g.add_argument("--max-model-len", type=int, default=2048, metavar="N",
                   help="context per request (bounds vLLM's KV cache)")
    g.add_argument("--max-num-seqs", type=int, default=8, metavar="N", help="vLLM's batch lanes (requests decoded at once)")
    g.add_argument("--no-compile", action="store_true",
                   help="run vLLM's model eagerly, without torch.compile: starts in under a minute instead of several "
                        "on a 2-core CPU, decodes slower")
    g.add_argument("--startup-timeout", type=float, default=300.0, metavar="S",
                   help="seconds to wait for the server's /health")


def config_of(a) -> ServeConfig:
    return ServeConfig(target=a.target, draft=a.draft, draft_length=a.draft_length, port=a.port, dtype=a.dtype,
                       max_model_len=a.max_model_len, max_num_seqs=a.max_num_seqs,
                       startup_timeout_s=a.startup_timeout, compile=not a.no_compile,
                       speculative_config=a.speculative_config)


def run_vllm(a, cfg=None) -> int:
    """``vllm serve`` (blocks while the server runs; ends through an error or the caller's signal
    handling), or ``bench --peer vllm`` with its RunConfig ``cfg``."""
    if a.cmd == "vllm":
        serve(config_of(a))
        return 0
    if a.peer == "llamacpp":  # the other peer in its own environment (the CLI's signal handling is the same)
        from specviz.peers.llamacpp import run_llamacpp

        return run_llamacpp(a, cfg)
    from specviz.peers.bench import check_peer, format_result, peer_bench

    check_peer(cfg, a.peer_draft)
    for res in peer_bench(cfg, rounds=a.repeats, peer_draft=a.peer_draft,
                          on_round=lambda i, o, v: print(f"round {i + 1}: ours {o:.1f}, vLLM {v:.1f} tokens/s",
                                                         file=sys.stderr, flush=True)):
        print(format_result(res))
    return 0
