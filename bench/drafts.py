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
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.cli import _peer_generate  # noqa: E402
from specviz.runner import RunConfig, get_model, make_proposer, read_prompts, run, tokens_per_s  # noqa: E402


def parse_arms(text: str) -> list[tuple[str, str, int]]:
    arms = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        label, spec, k = item.rsplit(":", 2) if item.count(":") >= 2 else (item, item, "2")
        if label == spec:  # "SPEC:K"
            label = os.path.basename(spec.rstrip("/")) or spec
        arms.append((f"{label} k={k}", spec, int(k)))
    return arms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__), "prompts.txt"))
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--arms", required=True, help="LABEL:DRAFT_SPEC:K,...")
    ap.add_argument("--peer", help="SPEC:K[,SPEC:K...] for transformers' assisted generate (B = 1)")
    a = ap.parse_args()

    base = RunConfig(prompts=read_prompts(a.prompts), batch_size=a.batch_size, max_new_tokens=a.max_new_tokens,
                     dtype=a.dtype)
    base.validate()
    target = get_model(base.target, base.device, base.dtype)
    proposers = {}
    arms = [("regular", dataclasses.replace(base, mode="regular"), None)]
    for label, spec, k in parse_arms(a.arms):
        proposers.setdefault(spec, make_proposer(spec, target))
        arms.append((label, dataclasses.replace(base, draft=spec, draft_length=k), proposers[spec]))
    peers = {}  # label -> (proposer, config)
    for item in filter(None, (x.strip() for x in (a.peer or "").split(","))) if a.batch_size == 1 else ():
        spec, k = item.rsplit(":", 1)
        proposers.setdefault(spec, make_proposer(spec, target))
        label = f"transformers assisted generate ({os.path.basename(spec.rstrip('/'))} k={k})"
        peers[label] = (proposers[spec], dataclasses.replace(base, draft_length=int(k)))
    print(f"target {target.name} ({target.dtype}, {target.device}); B={a.batch_size}; {len(base.prompts)} prompts, "
          f"{a.max_new_tokens} new tokens; rounds {a.rounds}; torch threads {__import__('torch').get_num_threads()}",
          flush=True)
    for label, cfg, prop in arms:  # warm-up: every arm's shapes once
        run(dataclasses.replace(cfg, prompts=cfg.prompts[: a.batch_size], max_new_tokens=8), target, prop, telemetry=False)
    for prop, cfg in peers.values():
        _peer_generate(target, prop, dataclasses.replace(cfg, prompts=base.prompts[:1], max_new_tokens=8))
    labels = [lbl for lbl, _, _ in arms] + list(peers)
    results = {lbl: {"tok_s": [], "ratio": [], "acc": [], "same": []} for lbl in labels}
    regular_out = None
    for r in range(a.rounds):
        order = list(range(len(labels)))
        order = order[r % len(order):] + order[: r % len(order)]
        got = {}
        for i in order:
            lbl = labels[i]
            if lbl in peers:
                got[lbl] = _peer_generate(target, *peers[lbl])
                continue
            _, cfg, prop = arms[i]
            traces = [run(c, target, prop, telemetry=False) for c in cfg.every_prompt()]
            got[lbl] = tokens_per_s(traces)
            outs = [s["output_token_ids"] for t in traces for s in t["sequences"]]
            if lbl == "regular":
                regular_out = outs
            drafted = sum(t["summary"]["drafted"] for t in traces)
            results[lbl]["acc"].append(sum(t["summary"]["accepted"] for t in traces) / drafted if drafted else float("nan"))
            results[lbl]["same"].append(outs)
        for lbl in got:
            results[lbl]["tok_s"].append(got[lbl])
            results[lbl]["ratio"].append(got[lbl] / got["regular"])
        print(f"round {r + 1}/{a.rounds}: " + ", ".join(f"{lbl} {got[lbl]:.1f}" for lbl in labels), flush=True)

    print("\n| arm | tokens/s (median) | vs regular (median of per-round ratios) | acceptance rate | greedy rows = regular |")
    print("|---|---|---|---|---|")
    for lbl in labels:
        res = results[lbl]
        acc = f"{statistics.median(res['acc']):.3f}" if res["acc"] else "-"
        same = "-"
        if res["same"]:
            last = res["same"][-1]
            same = f"{sum(x == y for x, y in zip(last, regular_out))}/{len(last)}"
        print(f"| {lbl} | {statistics.median(res['tok_s']):.1f} | {statistics.median(res['ratio']):.2f}x | {acc} | {same} |")


if __name__ == "__main__":
    main()
