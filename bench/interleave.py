"""Interleaved rounds, shared by the side-by-side bench scripts (drafts.py, policies.py).

These machines drift 10-40% within minutes, so arms are never timed in separate blocks: every
round runs every arm once, in an order that rotates each round, and each arm's speed is read as
its ratio to the same round's regular pass.
"""

import argparse
import os
import sys
from typing import Callable

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.analysis.trace import tokens_per_s  # noqa: E402
from specviz.run import run  # noqa: E402

# An arm: () -> (tokens/s, traces of our engine, or None for a peer outside it)
Arm = Callable[[], tuple[float, list[dict] | None]]


def add_common_args(ap: argparse.ArgumentParser, batch_size: int, rounds: int) -> None:
    ap.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__), "prompts.txt"))
    ap.add_argument("--batch-size", type=int, default=batch_size)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--dtype", default="bfloat16")


def engine_arm(cfg, target, proposer) -> Arm:
    """Every prompt of ``cfg`` through our engine, in batches of its batch size."""
    def arm():
        traces = [run(c, target, proposer, telemetry=False) for c in cfg.every_prompt()]
        return tokens_per_s(traces), traces
    return arm


def acceptance_rate(traces: list[dict]) -> float:
    drafted = sum(t["summary"]["drafted"] for t in traces)
    return sum(t["summary"]["accepted"] for t in traces) / drafted if drafted else float("nan")


def interleaved(arms: dict[str, Arm], rounds: int, reference: str = "regular") -> dict[str, dict[str, list]]:
    """Run ``rounds`` rotating rounds and print each; per arm: "tok_s", "ratio" (to the same
    round's ``reference`` arm) and "traces", one entry per round."""
    labels = list(arms)
    results = {lbl: {"tok_s": [], "ratio": [], "traces": []} for lbl in labels}
    for r in range(rounds):
        got = {lbl: arms[lbl]() for lbl in labels[r % len(labels):] + labels[: r % len(labels)]}
        for lbl in labels:
            tok_s, traces = got[lbl]
            results[lbl]["tok_s"].append(tok_s)
            results[lbl]["ratio"].append(tok_s / got[reference][0])
            results[lbl]["traces"].append(traces)
        print(f"round {r + 1}/{rounds}: " + ", ".join(f"{lbl} {got[lbl][0]:.1f}" for lbl in labels), flush=True)
    return results
