"""oneDNN-packed bf16 weights (specviz.models.packed) against plain F.linear, interleaved in one process.

Arms: regular decoding and an n-gram chain (k = --draft-length), each with packed weights on and
off (SPECVIZ_PACKED_WEIGHTS, read once per forward). Every round runs every arm once, in an order
that rotates each round; reported per arm: median tokens/s and the median per-round ratio to plain
regular decoding, then packed/unpacked per mode and whether every greedy row is identical.

    python bench/packed_weights.py --batch-size 1 --rounds 6
    python bench/packed_weights.py --forwards    # one target forward per shape, 24 alternations

``--forwards`` times the target's lean forward alone over a 60-slot ragged cache at (B, T) in
(1, 1), (1, 5), (8, 1), (8, 5): 5 forwards per arm, the arms alternating 24 times, median ms.
"""

import argparse
import dataclasses
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from drafts import print_round  # noqa: E402
from specviz.measure.bench import engine_arm, interleaved, same_rows, warm_up  # noqa: E402
from specviz.runconfig import RunConfig  # noqa: E402
from specviz.run import get_model, make_proposer, read_prompts  # noqa: E402


def switched(arm, on: bool):
    def run():
        os.environ["SPECVIZ_PACKED_WEIGHTS"] = "1" if on else "0"
        return arm()
    return run


def forwards(target) -> None:
    import torch

    from specviz.engine.ragged import RaggedCache

    @torch.inference_mode()
    def step(kv, ids, valid):  # one verify-shaped forward, then its slots dropped again
        T = ids.shape[1]
        kv.forward(ids, valid, reuse_logits=True)
        kv.cache.crop(-T)
        kv.valid, kv.lengths = kv.valid[:, :-T], kv.lengths - T

    for B, T in ((1, 1), (1, 5), (8, 1), (8, 5)):
        kv = RaggedCache(target.model)
        kv.forward(torch.randint(0, 1000, (B, 60)), torch.ones(B, 60, dtype=torch.bool), last_only=True)
        ids, valid = torch.randint(0, 1000, (B, T)), torch.ones(B, T, dtype=torch.bool)
        ms = {"0": [], "1": []}
        for rep in range(24):
            for arm in (("0", "1") if rep % 2 == 0 else ("1", "0")):
                os.environ["SPECVIZ_PACKED_WEIGHTS"] = arm
                step(kv, ids, valid)  # the first forward after a switch makes the packs (once)
                t = time.perf_counter()
                for _ in range(5):
                    step(kv, ids, valid)
                ms[arm].append((time.perf_counter() - t) / 5 * 1e3)
        ratios = [a / b for a, b in zip(ms["0"], ms["1"])]
        q = statistics.quantiles(ratios, n=4)
        print(f"B={B} T={T}: plain {statistics.median(ms['0']):.1f} ms, packed {statistics.median(ms['1']):.1f} ms "
              f"per forward; plain/packed {statistics.median(ratios):.2f}x (quartiles {q[0]:.2f}-{q[2]:.2f})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__), "prompts.txt"))
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--draft-length", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--forwards", action="store_true", help="time single target forwards instead of runs")
    a = ap.parse_args()
    base = RunConfig(prompts=read_prompts(a.prompts), batch_size=a.batch_size, max_new_tokens=a.max_new_tokens,
                     dtype="bfloat16", draft="ngram", draft_length=a.draft_length)
    target = get_model(base.target, base.device, base.dtype)
    if a.forwards:
        return forwards(target)
    modes = {"regular": (dataclasses.replace(base, mode="regular", draft="none"), None),
             f"ngram k={a.draft_length}": (base, make_proposer(base.draft, target))}
    arms = {}
    for mode, (cfg, proposer) in modes.items():
        for on in (False, True):
            os.environ["SPECVIZ_PACKED_WEIGHTS"] = "1" if on else "0"
            warm_up(cfg, target, proposer)
            arms[f"{mode} {'packed' if on else 'plain'}"] = switched(engine_arm(cfg, target, proposer), on)
    print(f"torch threads {__import__('torch').get_num_threads()}, B = {a.batch_size}, {len(base.prompts)} prompts, "
          f"{a.max_new_tokens} new tokens, bf16, {a.rounds} rounds", flush=True)
    res = interleaved(arms, a.rounds, reference="regular plain", on_round=print_round)
    print(f"{'arm':<24}{'tok/s':>8}{'vs regular plain':>18}")
    for lbl, r in res.items():
        print(f"{lbl:<24}{statistics.median(r.tok_s):>8.1f}{statistics.median(r.ratio):>17.2f}x")
    for mode in modes:
        p, q = res[f"{mode} packed"], res[f"{mode} plain"]
        ratios = [x / y for x, y in zip(p.tok_s, q.tok_s)]
        same = all(all(same_rows(tp, tq)) for tp, tq in zip(p.traces, q.traces))
        print(f"{mode}: packed/plain {statistics.median(ratios):.2f}x (per round: "
              + ", ".join(f"{x:.2f}" for x in ratios) + f"); greedy rows identical: {same}")


if __name__ == "__main__":
    main()
