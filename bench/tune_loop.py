"""Closing the loop on our engine: does `specviz tune`'s k measure as well as the best fixed k?

For each setting (static batches of B = 1, 4, 16, and a queue of 32 requests through 8 lanes), on
chat prompts with the default pair:

  1. probe runs at k = --probe-k over every prompt give the acceptance per position (what `tune --trace`
     reads from a trace);
  2. tune's recommendation at that batch size, from those counts and the pair's calibration
     (specviz.analysis.tune.recommend_k, the function `specviz tune` prints);
  3. every fixed k in --ks (k = 0 is regular decoding) runs interleaved in one process
     (specviz.measure.bench.interleaved, --rounds rounds, rotating order), the recommendation among them.

It prints, per setting, tokens/s of each k (median and range over rounds), the best fixed k, the
recommended k and its tokens/s as a share of the best, and the project's default k's; and writes
all of it as JSON (--out). The claim checked: the recommendation within 5% of the best fixed k, and
ahead of the default k where the two differ. Needs an idle machine.

    .venv/bin/python bench/tune_loop.py [--rounds 3] [--max-new-tokens 48] [--out tune_loop.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specviz.analysis.costs import load_calibration  # noqa: E402
from specviz.analysis.tune import recommend_k  # noqa: E402
from specviz.measure.bench import engine_arm, interleaved, warm_up  # noqa: E402
from specviz.measure.calibrate import calibrate  # noqa: E402
from specviz.measure.hostload import OtherLoad  # noqa: E402
from specviz.peers.tune import trace_parts  # noqa: E402
from specviz.prompts.sets import prompt_set  # noqa: E402
from specviz.run import load_pair, run  # noqa: E402
from specviz.runconfig import RunConfig  # noqa: E402

SETTINGS = {"B=1": (1, None), "B=4": (4, None), "B=16": (16, None), "queue 32 through 8": (8, 32)}
DEFAULT_K = RunConfig.__dataclass_fields__["draft_length"].default  # the project's default k


def measure(cfg: RunConfig, target, proposer, ks: list[int], rounds: int, probe_k: int, cal) -> dict:
    b = cfg.batch_size
    # the probe sees the arms' workload: every prompt once (RunConfig.every_prompt), its steps pooled
    probes = [run(c, target, proposer, telemetry=False)
              for c in dataclasses.replace(cfg, draft_length=probe_k).every_prompt()]
    acc = trace_parts({**probes[0], "steps": [s for t in probes for s in t["steps"]]}, "the probe runs")["acceptance"]
    choice = recommend_k(acc, cal.costs(b), b)
    ks = sorted(set(ks) | {choice.k, DEFAULT_K})
    cfgs = {k: dataclasses.replace(cfg, draft_length=k, mode="regular" if k == 0 else "speculative") for k in ks}
    for k, c in cfgs.items():
        warm_up(c, target, None if k == 0 else proposer)
    arms = {("regular" if k == 0 else f"k={k}"): engine_arm(c, target, None if k == 0 else proposer)
            for k, c in cfgs.items()}
    res = interleaved(arms, rounds)
    tok = {k: res["regular" if k == 0 else f"k={k}"].tok_s for k in ks}
    med = {k: statistics.median(v) for k, v in tok.items()}
    best = max(med, key=med.get)
    return {"batch_size": b, "requests": cfg.requests, "probe_k": probe_k,
            "acceptance_per_position": [round(x, 4) for x in acc.survival(probe_k)],  # positions 1..probe_k
            "recommended_k": choice.k, "predicted_tokens_per_s": choice.goodput,
            "tokens_per_s": {str(k): v for k, v in tok.items()}, "median": {str(k): m for k, m in med.items()},
            "best_fixed_k": best, "recommended_share_of_best": med[choice.k] / med[best],
            "default_k": DEFAULT_K, "recommended_over_default": med[choice.k] / med[DEFAULT_K]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--draft", default="default")
    p.add_argument("--ks", default="0,1,2,3,4,6", help="fixed draft lengths to measure (0 = regular)")
    p.add_argument("--probe-k", type=int, default=6, help="the probe run's k: acceptance is counted up to it")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--settings", default=",".join(SETTINGS), help="which of: " + ", ".join(SETTINGS))
    p.add_argument("--recalibrate", action="store_true", help="measure the pair's costs again first")
    p.add_argument("--out", type=Path, default=Path("tune_loop.json"))
    a = p.parse_args()
    ks = [int(k) for k in a.ks.split(",")]
    base = RunConfig(draft=a.draft, prompts=prompt_set("chat"), max_new_tokens=a.max_new_tokens)
    target, proposer = load_pair(base)
    cal = None if a.recalibrate else load_calibration(target, proposer)
    if cal is None:
        print("calibrating the pair (a few minutes)...", flush=True)
        cal = calibrate(target, proposer, batch_sizes=(1, 2, 4, 8, 16))
    print(f"pair {target.name} + {proposer.name}, calibration of {cal.created}", flush=True)
    out = {"command": " ".join(sys.argv), "pair": f"{target.name} + {proposer.name}", "calibration": cal.created,
           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "settings": {}}
    for name in a.settings.split(","):
        b, requests = SETTINGS[name]
        cfg = dataclasses.replace(base, batch_size=b, requests=requests)
        with OtherLoad(name) as load:
            r = measure(cfg, target, proposer, ks, a.rounds, a.probe_k, cal)
        r["other_load_cores"] = load.cores
        out["settings"][name] = r
        line = "  ".join(f"k={k}: {m:.1f}" for k, m in r["median"].items())
        print(f"{name}: {line} tok/s | best fixed k = {r['best_fixed_k']}, recommended k = {r['recommended_k']} "
              f"({r['recommended_share_of_best']:.1%} of best; {r['recommended_over_default']:.2f}x the default "
              f"k = {DEFAULT_K}); other load {load.cores:.2f} cores", flush=True)
        a.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
