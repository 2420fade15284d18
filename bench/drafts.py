"""Drafts side by side at one batch size, in one process, interleaved: regular decoding, each
(draft, k) arm, and (at B = 1) transformers' assisted generate with a token draft.

Every round runs every arm once on the same prompts (greedy), in an order that rotates each
round, so the machine's drift hits every arm alike. Reported per arm: median tokens/s, the median
of its per-round ratio to the same round's regular pass, acceptance rate, and greedy rows equal
to regular decoding's.

    python bench/drafts.py --batch-size 1 --rounds 3 \
        --arms token:specviz/assets/draft-SmolLM2-135M-Instruct:2,feature:DIR:3 \
        --peer specviz/assets/draft-SmolLM2-135M-Instruct:4

An arm is LABEL:DRAFT_SPEC:K. ``--peer SPEC:K[,SPEC:K...]`` adds transformers'
generate(assistant_model=...) with that token draft, k tokens per round and transformers' default
confidence threshold (0.4), one arm per item, so the peer gets its best k too (B = 1 only;
transformers cannot run a feature draft).
"""

import argparse
import dataclasses
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.measure.bench import engine_arm, interleaved, peer_arm, same_rows, warm_up, warm_up_peer  # noqa: E402
from specviz.runconfig import RunConfig  # noqa: E402
from specviz.run import get_model, make_proposer, read_prompts  # noqa: E402


def add_common_args(ap: argparse.ArgumentParser, batch_size: int, rounds: int) -> None:
    """The arguments drafts.py and policies.py share."""
    ap.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__), "prompts.txt"))
    ap.add_argument("--batch-size", type=int, default=batch_size)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--dtype", default="bfloat16")


def print_round(r: int, tok_s: dict[str, float]) -> None:
    print(f"round {r + 1}: " + ", ".join(f"{lbl} {v:.1f}" for lbl, v in tok_s.items()), flush=True)


def parse_arms(text: str) -> list[tuple[str, str, int]]:
    arms = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        label, spec, k = item.rsplit(":", 2) if item.count(":") >= 2 else (item, item, "2")
        if label == spec:  # a bare SPEC (k = 2): label it by its folder name
            label = os.path.basename(spec.rstrip("/")) or spec
        arms.append((f"{label} k={k}", spec, int(k)))
    return arms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(ap, batch_size=1, rounds=3)
    ap.add_argument("--arms", required=True, help="LABEL:DRAFT_SPEC:K,...")
    ap.add_argument("--peer", help="SPEC:K[,SPEC:K...] for transformers' assisted generate (B = 1)")
    a = ap.parse_args()

    base = RunConfig(prompts=read_prompts(a.prompts), batch_size=a.batch_size, max_new_tokens=a.max_new_tokens,
                     dtype=a.dtype)
    base.validate()
    target = get_model(base.target, base.device, base.dtype)
    proposers = {}
    configs = {"regular": (dataclasses.replace(base, mode="regular"), None)}
    for label, spec, k in parse_arms(a.arms):
        proposers.setdefault(spec, make_proposer(spec, target))
        configs[label] = (dataclasses.replace(base, draft=spec, draft_length=k), proposers[spec])
    peers = {}  # label -> (proposer, config)
    for item in filter(None, (x.strip() for x in (a.peer or "").split(","))) if a.batch_size == 1 else ():
        spec, k = item.rsplit(":", 1)
        proposers.setdefault(spec, make_proposer(spec, target))
        label = f"transformers assisted generate ({os.path.basename(spec.rstrip('/'))} k={k})"
        peers[label] = (proposers[spec], dataclasses.replace(base, draft_length=int(k)))
    print(f"target {target.name} ({target.dtype}, {target.device}); B={a.batch_size}; {len(base.prompts)} prompts, "
          f"{a.max_new_tokens} new tokens; rounds {a.rounds}; torch threads {__import__('torch').get_num_threads()}",
          flush=True)
    for cfg, prop in configs.values():  # warm-up: every arm's shapes once
        warm_up(cfg, target, prop)
    for prop, cfg in peers.values():
        warm_up_peer(target, prop, cfg)
    arms = {label: engine_arm(cfg, target, prop) for label, (cfg, prop) in configs.items()}
    arms.update({label: peer_arm(target, p, c) for label, (p, c) in peers.items()})
    results = interleaved(arms, a.rounds, on_round=print_round)

    print("\n| arm | tokens/s (median) | vs regular (median of per-round ratios) | acceptance rate | greedy rows = regular |")
    print("|---|---|---|---|---|")
    for lbl, res in results.items():
        acc = same = "-"
        if lbl not in peers:
            acc = f"{res.acceptance:.3f}"
            rows = same_rows(res.traces[-1], results["regular"].traces[-1])
            same = f"{sum(rows)}/{len(rows)}"
        print(f"| {lbl} | {res.median_tok_s:.1f} | {res.median_ratio:.2f}x | {acc} | {same} |")


if __name__ == "__main__":
    main()
