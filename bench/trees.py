"""Token trees vs chains vs regular decoding (issue 16), the default pair, interleaved in one process.

Every round runs every arm once on the same prompts (greedy), in an order that rotates each round
(specviz.measure.bench.interleaved), so the machine's drift hits every arm alike. Arms: regular
decoding, a chain at each --chains k, and a tree at each --trees K:W:N (depth K, width W, N nodes
per row). Reported per arm: median tokens/s, the median of its per-round ratio to the same round's
regular pass, output tokens per row-step, the verify forward's width (slots per row) and median
time, and greedy rows equal to regular decoding's.

    flock /tmp/specviz-cpu.lock python bench/trees.py --batch-size 1 --rounds 3 \
        --chains 1,2,3 --trees 3:2:6,4:3:10,5:4:16 [--policies 3:4:12]

``--drafts LABEL:SPEC,...`` runs the chain and tree arms for each draft (default: ``default``), all
in the same rounds: a token draft's trees against a feature draft's (EAGLE-2), for one.
"""

import argparse
import dataclasses
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.measure.bench import engine_arm, interleaved, same_rows, warm_up  # noqa: E402
from specviz.runconfig import RunConfig  # noqa: E402
from specviz.run import get_model, make_proposer, read_prompts  # noqa: E402


def step_stats(traces: list[dict]) -> tuple[float, float, float, float]:
    """(output tokens per row-step, median verify width, median verify seconds, median draft seconds)."""
    steps = [s for t in traces for s in t["steps"]]
    row_steps = [r for s in steps for r in s["rows"] if r.get("active", True)]
    out = sum(len(r["emitted"]) for r in row_steps) / max(len(row_steps), 1)
    width = statistics.median(s.get("verify_width", s["k"] + 1) for s in steps) if steps else 0
    t_verify = statistics.median(s["t_verify"] for s in steps) if steps else 0.0
    t_draft = statistics.median(s["t_draft"] for s in steps) if steps else 0.0
    return out, width, t_verify, t_draft


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__), "prompts.txt"))
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--chains", default="1,2,3", help="chain draft lengths k")
    ap.add_argument("--trees", default="3:2:6,4:3:10", help="K:W:N,... depth, width, nodes per row")
    ap.add_argument("--drafts", default="default", help="LABEL:SPEC,... (or SPEC): the drafts whose chains and trees run")
    ap.add_argument("--policies", default="", help="K:W:N,... the tree policy (--policy tree) with these "
                    "bounds: it picks depth, width and nodes per step from the pair's calibration")
    a = ap.parse_args()

    base = RunConfig(prompts=read_prompts(a.prompts), batch_size=a.batch_size, max_new_tokens=a.max_new_tokens,
                     dtype=a.dtype)
    base.validate()
    target = get_model(base.target, base.device, base.dtype)
    drafts = {}
    for item in filter(None, (x.strip() for x in a.drafts.split(","))):
        label, spec = item.split(":", 1) if ":" in item else ("", item)
        drafts[label] = make_proposer(spec, target)
    configs = {"regular": (dataclasses.replace(base, mode="regular"), None)}
    for label, draft in drafts.items():
        name = f"{label} " if label else ""
        for k in map(int, filter(None, a.chains.split(","))):
            configs[f"{name}chain k={k}"] = (dataclasses.replace(base, draft_length=k), draft)
        for item in filter(None, a.trees.split(",")):
            k, w, n = map(int, item.split(":"))
            configs[f"{name}tree k={k} W={w} N={n}"] = (
                dataclasses.replace(base, draft_length=k, tree_width=w, tree_nodes=n), draft)
        for item in filter(None, a.policies.split(",")):
            k, w, n = map(int, item.split(":"))
            configs[f"{name}tree policy k<={k} W<={w} N<={n}"] = (dataclasses.replace(
                base, draft_length=k, tree_width=w, tree_nodes=n, policy="tree"), draft)
    names = ", ".join(d.name for d in drafts.values())
    print(f"target {target.name} ({target.dtype}, {target.device}); drafts {names}; B={a.batch_size}; "
          f"{len(base.prompts)} prompts, {a.max_new_tokens} new tokens; rounds {a.rounds}; "
          f"torch threads {__import__('torch').get_num_threads()}", flush=True)
    for cfg, prop in configs.values():  # warm-up: every arm's shapes once
        warm_up(cfg, target, prop)
    arms = {label: engine_arm(cfg, target, prop) for label, (cfg, prop) in configs.items()}
    results = interleaved(arms, a.rounds, on_round=lambda r, t: print(
        f"round {r + 1}: " + ", ".join(f"{lbl} {v:.1f}" for lbl, v in t.items()), flush=True))

    print("\n| arm | tokens/s (median) | vs regular (median of per-round ratios) | output tokens / row-step "
          "| verify width | verify ms (median) | draft ms (median) | greedy rows = regular |")
    print("|---|---|---|---|---|---|---|---|")
    for lbl, res in results.items():
        out, width, t_verify, t_draft = step_stats(res.traces[-1])
        rows = same_rows(res.traces[-1], results["regular"].traces[-1])
        print(f"| {lbl} | {res.median_tok_s:.1f} | {res.median_ratio:.2f}x | {out:.2f} | {width:g} | "
              f"{1000 * t_verify:.1f} | {1000 * t_draft:.1f} | {sum(rows)}/{len(rows)} |")


if __name__ == "__main__":
    main()
