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

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from interleave import acceptance_rate, add_common_args, engine_arm, interleaved  # noqa: E402

from specviz.cli import _peer_generate  # noqa: E402
from specviz.run import RunConfig, get_model, make_proposer, read_prompts, run  # noqa: E402


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
        run(dataclasses.replace(cfg, prompts=cfg.prompts[: a.batch_size], max_new_tokens=8), target, prop, telemetry=False)
    for prop, cfg in peers.values():
        _peer_generate(target, prop, dataclasses.replace(cfg, prompts=base.prompts[:1], max_new_tokens=8))
    arms = {label: engine_arm(cfg, target, prop) for label, (cfg, prop) in configs.items()}
    arms.update({label: (lambda p=p, c=c: (_peer_generate(target, p, c), None)) for label, (p, c) in peers.items()})
    results = interleaved(arms, a.rounds)

    def outputs(traces):
        return [s["output_token_ids"] for t in traces for s in t["sequences"]]

    regular_out = outputs(results["regular"]["traces"][-1])
    print("\n| arm | tokens/s (median) | vs regular (median of per-round ratios) | acceptance rate | greedy rows = regular |")
    print("|---|---|---|---|---|")
    for lbl, res in results.items():
        acc = same = "-"
        if lbl not in peers:
            acc = f"{statistics.median(acceptance_rate(t) for t in res['traces']):.3f}"
            last = outputs(res["traces"][-1])
            same = f"{sum(x == y for x, y in zip(last, regular_out))}/{len(last)}"
        print(f"| {lbl} | {statistics.median(res['tok_s']):.1f} | {statistics.median(res['ratio']):.2f}x | {acc} | {same} |")


if __name__ == "__main__":
    main()
