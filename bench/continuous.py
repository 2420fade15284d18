"""Continuous batching (issue 17): speculative vs regular decoding under the same request queue,
interleaved in one process (specviz.measure.bench.interleaved), against the same arms as static
batches, with the steady-state model's prediction next to each measurement.

    python bench/continuous.py [--requests 32] [--batch-size 8] [--max-new-tokens 64] [--rounds 3]
                               [--ks 1,2] [--dtype bfloat16] [--draft default] [--rotate R] [--out F.json]
    python bench/continuous.py --merge A.json B.json ...   # pool the rounds of several runs

A long measurement can be split into short runs (each with --out, and --rotate 0, 1, 2, ... so
the arm order keeps rotating across runs); --merge pools their rounds: median tokens/s and median
per-round ratio over all rounds, the mean of the runs' predictions.

Requests: bench/prompts.txt then specviz.prompts.sets.CHAT (chat prompts the shipped draft never
saw), cycled to --requests, all queued at t = 0. Arms: regular and fixed k under the refilled
queue, the goodput policy (needs `python -m specviz calibrate` for the pair), and regular and
speculative as consecutive static batches of --batch-size (--static). Prints per arm the median
tokens/s, the median of per-round ratios to the same round's refilled regular arm, acceptance,
p50/p95 latency, and the prediction of specviz.analysis.steady.refilled_run_time from the
calibration and the arm's own per-request acceptance (successes / positions tried) and lengths.
"""

import argparse
import dataclasses
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.analysis import steady  # noqa: E402
from specviz.analysis import acceptance  # noqa: E402
from specviz.analysis.costs import load_calibration  # noqa: E402
from specviz.measure.bench import engine_arm, interleaved, warm_up  # noqa: E402
from specviz.prompts.sets import CHAT  # noqa: E402
from specviz.runconfig import RunConfig  # noqa: E402
from specviz.run import load_pair, read_prompts  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def request_alphas(trace: dict) -> list[float]:
    """Per request: alpha (acceptance.alpha: accepted / positions tried) over its row-steps that drafted."""
    acc, tried = {}, {}
    for s in trace["steps"]:
        for r in s["rows"]:
            if r["active"] and r["drafted"]:
                acc[r["index"]] = acc.get(r["index"], 0) + r["accepted"]
                tried[r["index"]] = tried.get(r["index"], 0) + acceptance.positions_tried(r["drafted"], r["accepted"])
    return [acceptance.alpha(acc.get(i, 0), tried.get(i, 0), empty=0.0) for i in range(len(trace["sequences"]))]


def predict(trace: dict, costs, lanes: int, k: int, static: bool, draft_prefills: bool) -> float:
    """Predicted tokens/s of this trace's queue (refilled, or static batches of ``lanes``)."""
    seqs = trace["sequences"]
    lengths = [len(s["output_token_ids"]) for s in seqs]
    alphas = request_alphas(trace) if k else [0.0] * len(seqs)
    joins = [steady.join_seconds(len(s["prompt_token_ids"]), costs, draft_prefills and k > 0) for s in seqs]
    if not static:
        t = steady.refilled_run_time(lengths, alphas, lanes, k, costs, joins)
    else:  # each batch of ``lanes`` runs alone until its slowest row is done
        t = sum(steady.refilled_run_time(lengths[i:i + lanes], alphas[i:i + lanes], lanes, k, costs,
                                         joins[i:i + lanes]) for i in range(0, len(seqs), lanes))
    return sum(lengths) / t


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ks", default="1,2")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--draft", default="default")
    ap.add_argument("--no-static", action="store_true")
    ap.add_argument("--no-goodput", action="store_true")
    ap.add_argument("--out", help="write the medians, every round and the predictions as JSON")
    ap.add_argument("--rotate", type=int, default=0, help="start the arm order this many places on")
    ap.add_argument("--merge", nargs="+", metavar="JSON", help="pool the rounds of earlier --out files; runs nothing")
    a = ap.parse_args()
    if a.merge:
        return merge(a.merge)

    prompts = read_prompts(os.path.join(HERE, "prompts.txt")) + list(CHAT)
    base = RunConfig(draft=a.draft, prompts=prompts, batch_size=a.batch_size, requests=a.requests,
                     max_new_tokens=a.max_new_tokens, dtype=a.dtype, device="cpu")
    base.validate()
    target, proposer = load_pair(base)
    cal = load_calibration(target, proposer)
    costs = cal.costs(a.batch_size) if cal is not None else None
    if costs is None:
        print(f"no calibration for {target.name} + {proposer.name}: no predictions, no goodput arm "
              f"(run `python -m specviz calibrate --dtype {a.dtype}`)")
    ks = [int(x) for x in a.ks.split(",")]
    regular = dataclasses.replace(base, mode="regular")
    cfgs = {"regular": (regular, None), **{f"k={k}": (dataclasses.replace(base, draft_length=k), proposer) for k in ks}}
    if costs is not None and not a.no_goodput:
        cfgs["goodput"] = (dataclasses.replace(base, policy="goodput", draft_length=ks[0]), proposer)
    if not a.no_static:
        cfgs["static regular"] = (dataclasses.replace(regular, static=True), None)
        cfgs[f"static k={ks[0]}"] = (dataclasses.replace(base, draft_length=ks[0], static=True), proposer)
    for cfg, prop in cfgs.values():
        warm_up(dataclasses.replace(cfg, requests=None), target, prop)
    order = list(cfgs)[a.rotate % len(cfgs):] + list(cfgs)[: a.rotate % len(cfgs)]
    arms = {lbl: engine_arm(cfgs[lbl][0], target, cfgs[lbl][1]) for lbl in order}
    res = interleaved(arms, a.rounds, reference="regular",
                      on_round=lambda r, got: print(f"round {r + 1}: " + "  ".join(f"{k} {v:.1f}" for k, v in got.items()),
                                                    flush=True))
    print(f"\n{target.name} ({target.dtype}) + {proposer.name}, {a.requests} requests through {a.batch_size} lanes, "
          f"{a.max_new_tokens} new tokens, all queued at t = 0, {a.rounds} interleaved rounds")
    print(f"{'arm':<16} {'tok/s':>7} {'vs regular':>10} {'acceptance rate':>15} {'p50 lat':>8} {'p95 lat':>8} "
          f"{'predicted tok/s':>15} {'pred/meas':>9} {'k used':>8}")
    table = {}
    for lbl in cfgs:
        r = res[lbl]
        cfg, prop = cfgs[lbl]
        trace = r.traces[-1][0]
        s = trace["summary"]
        ks_used = [st["k"] for st in trace["steps"]]
        k_mean = statistics.mean(ks_used) if ks_used else 0
        pred = None
        if costs is not None:
            k_model = cfg.draft_length if cfg.mode == "speculative" and cfg.policy == "fixed" else round(k_mean)
            pred = predict(trace, costs, a.batch_size, k_model if prop is not None else 0, cfg.static,
                           getattr(prop, "kind", "") in ("model", "feature"))
        table[lbl] = {"tok_s": r.median_tok_s, "ratio": r.median_ratio, "ratios": r.ratio, "tok_s_rounds": r.tok_s,
                      "compactions": sum(st["compacted"] for st in trace["steps"]),
                      "joins": sum(bool(st["joined"]) for st in trace["steps"]),
                      "acceptance": r.acceptance, "latency_p50_s": s["latency_p50_s"],
                      "latency_p95_s": s["latency_p95_s"], "ttft_p50_s": s["ttft_p50_s"], "predicted_tok_s": pred,
                      "mean_k": k_mean, "join_prefill_s": s["join_prefill_s"], "wall_s": s["wall_s"]}
        acc = f"{r.acceptance:.3f}" if r.acceptance is not None and r.acceptance == r.acceptance else "-"
        print(f"{lbl:<16} {r.median_tok_s:7.1f} {r.median_ratio:9.2f}x {acc:>15} {s['latency_p50_s']:8.2f} "
              f"{s['latency_p95_s']:8.2f} {pred or float('nan'):15.1f} {(pred or float('nan')) / r.median_tok_s:9.2f} "
              f"{k_mean:8.2f}")
    if costs is not None:
        pooled = request_alphas(res[f"k={ks[0]}"].traces[-1][0])
        out_len = statistics.mean(len(q["output_token_ids"]) for q in res["regular"].traces[-1][0]["sequences"])
        join = steady.join_seconds(statistics.mean(len(q["prompt_token_ids"]) for q in res["regular"].traces[-1][0]["sequences"]), costs)
        print("\nsteady-state ceiling (specviz.analysis.steady.steady_speedup, B lanes always full, "
              f"per-request alphas of the k={ks[0]} arm, L = {out_len:.0f}):")
        for k in range(0, 5):
            print(f"  k={k}: {steady.steady_speedup(a.batch_size, pooled or [0.0], k, costs, out_len, join):.3f}x")
        table["ceiling"] = {k: steady.steady_speedup(a.batch_size, pooled or [0.0], k, costs, out_len, join)
                            for k in range(0, 5)}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(table, f, indent=1)
    return 0


def merge(paths: list[str]) -> int:
    """Pool the rounds of several --out files: one table over all of them."""
    runs = []
    for p in paths:
        with open(p) as f:
            runs.append(json.load(f))
    arms = list(dict.fromkeys(k for r in runs for k in r if k != "ceiling"))  # every arm of every run, in order
    reg_pred = statistics.mean(r["regular"]["predicted_tok_s"] for r in runs if r["regular"].get("predicted_tok_s"))
    print(f"{len(paths)} runs, {sum(len(r['regular']['tok_s_rounds']) for r in runs)} rounds pooled")
    print(f"{'arm':<16} {'tok/s':>7} {'vs regular':>10} {'acceptance rate':>15} {'p50 lat':>8} {'p95 lat':>8} {'compact':>7} "
          f"{'pred tok/s':>10} {'pred/meas':>9} {'pred ratio':>10} {'k used':>7}")
    for lbl in arms:
        got = [r[lbl] for r in runs if lbl in r]
        tok = statistics.median(x for g in got for x in g["tok_s_rounds"])
        ratio = statistics.median(x for g in got for x in g["ratios"])
        preds = [g["predicted_tok_s"] for g in got if g.get("predicted_tok_s")]
        pred = statistics.mean(preds) if preds else float("nan")
        acc = [g["acceptance"] for g in got if g.get("acceptance") is not None and g["acceptance"] == g["acceptance"]]
        mean = lambda key: statistics.mean(g[key] for g in got)  # noqa: E731
        print(f"{lbl:<16} {tok:7.1f} {ratio:9.2f}x {(statistics.mean(acc) if acc else float('nan')):15.3f} "
              f"{mean('latency_p50_s'):8.2f} {mean('latency_p95_s'):8.2f} {mean('compactions'):7.1f} {pred:10.1f} "
              f"{pred / tok:9.2f} {pred / reg_pred:9.2f}x {mean('mean_k'):7.2f}")
    ceil = [r["ceiling"] for r in runs if "ceiling" in r]
    if ceil:
        print("steady-state ceiling (mean over runs): " + "  ".join(
            f"k={k}: {statistics.mean(c[k] for c in ceil):.3f}x" for k in ceil[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
