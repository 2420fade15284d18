"""The suffix draft, prompt lookup, the default model draft and the hybrid (default+suffix) against regular
decoding, in one process, interleaved (specviz.measure.bench): on edit-code at B = 1 and B = 8 (with, at
B = 1, the hybrid's token trees per row against one merged tree), and the hybrid against the model draft
alone on chat at B = 1 and B = 8; then each draft's cost per step (median draft-phase ms of the steps that
drafted) beside the model draft's.

    .venv/bin/python bench/suffix_hybrid.py --rounds 3 --max-new-tokens 48

Greedy, the packaged target (``--dtype``, bf16 by default: the default draft is then the shipped distilled
draft). A suffix draft starts every run empty (engine_arm restores its global structure), so a round never
learns from an earlier round's answers.
"""

import argparse
import dataclasses
import os
import platform
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.engine.hybrid import HybridDraft  # noqa: E402
from specviz.engine.suffix import SuffixDraft  # noqa: E402
from specviz.measure.bench import engine_arm, interleaved, warm_up  # noqa: E402
from specviz.prompts.sets import prompt_set  # noqa: E402
from specviz.run import get_model, make_proposer  # noqa: E402
from specviz.runconfig import RunConfig  # noqa: E402


def draft_ms(traces: list[dict]) -> float | None:
    """Median draft-phase ms over the steps that drafted (k > 0)."""
    t = [s["t_draft"] * 1e3 for tr in traces for s in tr["steps"] if s["k"] > 0]
    return statistics.median(t) if t else None


def arms_for(target, prompts, B, k, max_new, drafts: dict, trees: bool):
    """{label: arm}: regular, then each draft (label -> proposer), chains; with ``trees`` the hybrid's trees too."""
    base = RunConfig(target="default", dtype=str(target.dtype).removeprefix("torch."), prompts=prompts, batch_size=B,
                     draft_length=k, max_new_tokens=max_new)
    cfgs = {"regular": (dataclasses.replace(base, mode="regular", draft="none"), None)}
    for label, proposer in drafts.items():
        cfgs[label] = (base, proposer)
    if trees:
        tree = dataclasses.replace(base, tree_width=2, tree_nodes=8)
        cfgs["hybrid tree (per row)"] = (tree, drafts["default+suffix"])
        cfgs["hybrid tree (merged)"] = (tree, HybridDraft(drafts["default"], SuffixDraft(device=target.device), merge=True))
    for cfg, proposer in cfgs.values():
        warm_up(cfg, target, proposer)
    return {label: engine_arm(cfg, target, proposer) for label, (cfg, proposer) in cfgs.items()}


def report(title: str, results) -> None:
    print(f"\n{title}")
    print(f"{'arm':<24} {'tok/s':>7} {'x regular (median, range)':>27} {'accept':>7} {'draft ms/step':>14}")
    for label, r in results.items():
        acc = r.acceptance
        ms = draft_ms([t for round_ in r.traces for t in round_])
        print(f"{label:<24} {r.median_tok_s:7.1f} {r.median_ratio:8.2f}x ({min(r.ratio):.2f}-{max(r.ratio):.2f})"
              f"{'':>8} {acc if acc == acc else float('nan'):7.3f} {'' if ms is None else f'{ms:14.2f}'}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--draft-length", type=int, default=4)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batch-sizes", default="1,8")
    a = ap.parse_args()
    print(f"command: {' '.join(sys.argv)}\nmachine: {platform.platform()}, {os.cpu_count()} cores "
          "(shared unless you made sure it was idle)", flush=True)
    target = get_model("default", "cpu", a.dtype)
    model = make_proposer("default", target)
    for B in (int(x) for x in a.batch_sizes.split(",")):
        edit = prompt_set("edit-code")[: max(B, 4)]
        drafts = {"ngram": make_proposer("ngram", target), "suffix": SuffixDraft(device=target.device),
                  "default": model, "default+suffix": HybridDraft(model, SuffixDraft(device=target.device))}
        report(f"edit-code, B = {B}, k = {a.draft_length}, {len(edit)} prompts",
               interleaved(arms_for(target, edit, B, a.draft_length, a.max_new_tokens, drafts, trees=B == 1), a.rounds))
        chat = prompt_set("chat")[: max(B, 4)]
        drafts = {"default": model, "default+suffix": HybridDraft(model, SuffixDraft(device=target.device))}
        report(f"chat, B = {B}, k = {a.draft_length}, {len(chat)} prompts",
               interleaved(arms_for(target, chat, B, a.draft_length, a.max_new_tokens, drafts, trees=False), a.rounds))


if __name__ == "__main__":
    main()
