"""The suffix draft, prompt lookup, the default model draft and the hybrid (default+suffix) against regular
decoding, in one process, interleaved (specviz.measure.bench): on every predictable prompt set (edit-code,
rewrite-text, reformat-data, multi-turn) at B = 1 and B = 8, the suffix draft both at the shared draft
length k and at its own longer cap (--suffix-draft-length: the depth rule drafts only as deep as a match
supports, so a long cap costs little where matches are short), there also with the depth rule's factor 1
(Arctic's default, the hybrid's) beside the default 4; on edit-code at B = 1 also the hybrid's
token trees per row against one merged tree; and the hybrid against the model draft alone on chat at
B = 1 and B = 8. The hybrid runs with its suffix side at the shared k (``default+suffix``) and up to
12 deep (``default+suffix:12``). Each table gives each draft's cost per step (median draft-phase ms of
the steps that drafted) beside the model draft's. Where a calibration of the target is kept (``specviz calibrate`` for any
pair with it, on this device and dtype), also the suffix draft at its cap with the batch's node count chosen
by goodput (``--policy goodput``: specviz.engine.suffix). ``--arms`` keeps only the arms named (regular always
runs); ``--no-chat`` skips the chat tables.

    .venv/bin/python bench/suffix_hybrid.py --rounds 2 --max-new-tokens 96

Greedy, the packaged target (``--dtype``, bf16 by default: the default draft is then the shipped distilled
draft). A suffix draft starts every run empty (engine_arm restores its global structure), so a round never
learns from an earlier round's answers: every prompt is one the draft has never seen.
"""

import argparse
import dataclasses
import os
import platform
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.analysis.costs import target_cost  # noqa: E402
from specviz.engine.hybrid import SUFFIX_FACTOR, HybridDraft  # noqa: E402
from specviz.engine.suffix import SuffixDraft  # noqa: E402
from specviz.measure.bench import engine_arm, interleaved, warm_up  # noqa: E402
from specviz.prompts.sets import prompt_set  # noqa: E402
from specviz.run import get_model, make_proposer  # noqa: E402
from specviz.runconfig import RunConfig  # noqa: E402


def hybrid_suffix(target) -> SuffixDraft:
    """The suffix draft as the hybrid uses it (its depth rule's factor 1, as run.make_proposer builds it)."""
    return SuffixDraft(device=target.device, factor=SUFFIX_FACTOR)


def draft_ms(traces: list[dict]) -> float | None:
    """Median draft-phase ms over the steps that drafted (k > 0)."""
    t = [s["t_draft"] * 1e3 for tr in traces for s in tr["steps"] if s["k"] > 0]
    return statistics.median(t) if t else None


def arms_for(target, prompts, B, k, max_new, drafts: dict, trees: bool):
    """{label: arm}: regular, then each draft (label -> proposer, or -> (proposer, its own k[, its policy])),
    chains; with
    ``trees`` the hybrid's trees too."""
    base = RunConfig(target="default", dtype=str(target.dtype).removeprefix("torch."), prompts=prompts, batch_size=B,
                     draft_length=k, max_new_tokens=max_new)
    cfgs = {"regular": (dataclasses.replace(base, mode="regular", draft="none"), None)}
    for label, proposer in drafts.items():
        proposer, own_k, policy = (proposer + ("fixed",))[:3] if isinstance(proposer, tuple) else (proposer, k, "fixed")
        cfgs[label] = (dataclasses.replace(base, draft_length=own_k, policy=policy), proposer)
    if trees:
        tree = dataclasses.replace(base, tree_width=2, tree_nodes=8)
        cfgs["hybrid tree (per row)"] = (tree, drafts["default+suffix"])
        cfgs["hybrid tree (merged)"] = (tree, HybridDraft(drafts["default"], hybrid_suffix(target), merge=True))
    for cfg, proposer in cfgs.values():
        warm_up(cfg, target, proposer)
    return {label: engine_arm(cfg, target, proposer) for label, (cfg, proposer) in cfgs.items()}


def report(title: str, results) -> None:
    print(f"\n{title}")
    print(f"{'arm':<24} {'tok/s':>7} {'x regular (median, range)':>27} {'acceptance rate':>15} {'draft ms/step':>14}")
    for label, r in results.items():
        acc = r.acceptance
        ms = draft_ms([t for round_ in r.traces for t in round_])
        print(f"{label:<24} {r.median_tok_s:7.1f} {r.median_ratio:8.2f}x ({min(r.ratio):.2f}-{max(r.ratio):.2f})"
              f"{'':>8} {acc if acc == acc else float('nan'):15.3f} {'' if ms is None else f'{ms:14.2f}'}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--draft-length", type=int, default=4)
    ap.add_argument("--suffix-draft-length", type=int, default=12, help="the suffix-only arm's own cap")
    ap.add_argument("--prompt-sets", default="edit-code,rewrite-text,reformat-data,multi-turn")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--arms", help="arm labels to run, separated by ';' (default: all); regular always runs")
    ap.add_argument("--no-chat", action="store_true", help="skip the hybrid-vs-model tables on chat")
    a = ap.parse_args()
    print(f"command: {' '.join(sys.argv)}\nmachine: {platform.platform()}, {os.cpu_count()} cores "
          "(shared unless you made sure it was idle)", flush=True)
    target = get_model("default", "cpu", a.dtype)
    model = make_proposer("default", target)
    costs = target_cost(target)
    print(f"target cost for goodput sizing: {costs}", flush=True)
    keep = None if not a.arms else set(a.arms.split(";"))
    for B in (int(x) for x in a.batch_sizes.split(",")):
        for name in a.prompt_sets.split(","):
            prompts = prompt_set(name)[: max(B, 8)]
            drafts = {"ngram": make_proposer("ngram", target), "suffix": SuffixDraft(device=target.device),
                      f"suffix, k = {a.suffix_draft_length}": (SuffixDraft(device=target.device),
                                                               a.suffix_draft_length),
                      f"suffix, k = {a.suffix_draft_length}, factor 1": (hybrid_suffix(target), a.suffix_draft_length),
                      "default": model, "default+suffix": HybridDraft(model, hybrid_suffix(target)),
                      "default+suffix:12": HybridDraft(model, hybrid_suffix(target), suffix_depth=12)}
            if costs is not None:  # run.make_decoder gives the draft the target's cost under this policy
                drafts[f"suffix, k = {a.suffix_draft_length}, goodput"] = (
                    SuffixDraft(device=target.device), a.suffix_draft_length, "goodput")
            if keep is not None:
                drafts = {label: d for label, d in drafts.items() if label in keep}
            trees = B == 1 and name == "edit-code" and "default+suffix" in drafts and "default" in drafts
            report(f"{name}, B = {B}, k = {a.draft_length}, {len(prompts)} prompts",
                   interleaved(arms_for(target, prompts, B, a.draft_length, a.max_new_tokens, drafts, trees), a.rounds))
        if a.no_chat:
            continue
        chat = prompt_set("chat")[: max(B, 8)]
        drafts = {"default": model, "default+suffix": HybridDraft(model, hybrid_suffix(target)),
                  "default+suffix:12": HybridDraft(model, hybrid_suffix(target), suffix_depth=12)}
        if keep is not None:
            drafts = {label: d for label, d in drafts.items() if label in keep}
        report(f"chat, B = {B}, k = {a.draft_length}, {len(chat)} prompts",
               interleaved(arms_for(target, chat, B, a.draft_length, a.max_new_tokens, drafts, trees=False), a.rounds))


if __name__ == "__main__":
    main()
