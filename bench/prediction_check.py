"""Is the Live page's calibrated prediction right? The default Live run, measured against what the
page predicts for it, phase by phase.

The run is the one the Live page makes with its defaults (the first four chat prompts, the default
pair, b = 1, k = 2, 64 tokens, race on), made by the device process's own job
(specviz.device.devicejobs.run: warm-up, the speculative run, then regular decoding on the same prompts).
Before the rounds the pair is calibrated as the page's first run does (specviz.measure.quickcal;
``--keep-calibration`` uses the record already on disk). Each round prints:

- measured speedup (tokens/s over the regular run's) and the page's prediction from the same trace
  (specviz.analysis.tracestats.predicted_speedup with the calibration's costs), and their gap;
- per step, what the cost model charges against what the traces measured: the regular step
  (target forward + engine overhead) and the speculative step (k draft forwards, the verify forward
  of k + 1 tokens, the rest), and the tokens per step;
- the wall time outside the steps (prefill, the first token, setup) of each side.

    .venv/bin/python bench/prediction_check.py [--rounds 5] [--keep-calibration] [--json OUT]

Needs an idle machine: nothing else may run meanwhile.
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

from specviz.analysis import explain  # noqa: E402
from specviz.analysis.costs import trace_calibration  # noqa: E402
from specviz.analysis.runcounts import step_seconds  # noqa: E402
from specviz.analysis.tracestats import predicted_speedup  # noqa: E402
from specviz.device import devicejobs  # noqa: E402
from specviz.measure.quickcal import first_run_calibration  # noqa: E402
from specviz.prompts import sets as promptsets  # noqa: E402
from specviz.runconfig import RunConfig  # noqa: E402


class Ctx:
    """What a device job sends, kept (the page's client, without the socket)."""

    def __init__(self):
        self.sent: dict[str, object] = {}

    def send(self, kind, *args):
        self.sent[kind] = args[0] if len(args) == 1 else args

    def stopped(self) -> bool:
        return False


def mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def phases(trace: dict) -> dict:
    """Per-step means (seconds) of a trace's timed phases, its steps' share of the wall time, tokens per step."""
    steps = trace["steps"]
    out = {p: mean(s[p] for s in steps) for p in ("t_draft", "t_verify", "t_accept", "t_bookkeeping")}
    step_s = sum(step_seconds(s) for s in steps)
    wall = trace["summary"]["wall_s"]
    out.update(steps=len(steps), step_total=step_s / len(steps), outside_steps_s=wall - step_s, wall_s=wall,
               tokens=trace["summary"]["tokens"], tokens_per_step=trace["summary"]["tokens"] / len(steps))
    return out


def model_side(cal, b: int, k: int) -> dict:
    """What the cost model charges per step at batch size b (seconds)."""
    c = cal.costs(b)
    return {"regular_target": c.target(b, 1), "regular_overhead": c.overhead if c.regular_overhead is None
            else c.regular_overhead, "draft": k * c.draft(b, 1), "verify": c.target(b, k + 1),
            "spec_overhead": c.overhead}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--keep-calibration", action="store_true", help="use the calibration on disk if it stands")
    ap.add_argument("--json", type=Path, help="write every round's numbers here")
    args = ap.parse_args()

    cfg = RunConfig(prompts=promptsets.CHAT[:4])  # the Live page's defaults
    cfg.validate()
    t0 = time.perf_counter()
    cal_out = first_run_calibration(cfg, force=not args.keep_calibration, note=lambda m: None)
    print(f"calibration: {cal_out['status']} in {time.perf_counter() - t0:.0f} s ({cal_out['path']})", flush=True)

    rounds = []
    for r in range(args.rounds):
        ctx = Ctx()
        devicejobs.run(ctx, cfg, race=True)
        spec, reg = ctx.sent["trace"], ctx.sent["regular_trace"]
        cal = trace_calibration(spec)
        b, k = cfg.batch_size, cfg.draft_length
        measured = explain.measured_speedup(spec, reg)
        predicted = predicted_speedup(spec, cal.costs(b))
        ps, pr, m = phases(spec), phases(reg), model_side(cal, b, k)
        row = {"round": r, "measured": measured, "predicted": predicted, "spec": ps, "regular": pr, "model": m,
               "host_load": [spec.get("host_load"), reg.get("host_load")]}
        rounds.append(row)
        ms = lambda s: f"{1e3 * s:6.2f}"  # noqa: E731
        print(f"round {r}: measured {measured:.3f}x, predicted {predicted:.3f}x ({predicted / measured - 1:+.1%})")
        print(f"  regular step  measured {ms(pr['step_total'])} ms (forward {ms(pr['t_verify'])}, rest "
              f"{ms(pr['step_total'] - pr['t_verify'])}); model {ms(m['regular_target'] + m['regular_overhead'])} "
              f"(forward {ms(m['regular_target'])}, overhead {ms(m['regular_overhead'])})")
        print(f"  spec step     measured {ms(ps['step_total'])} ms (draft {ms(ps['t_draft'])}, verify "
              f"{ms(ps['t_verify'])}, rest {ms(ps['t_accept'] + ps['t_bookkeeping'])}); model "
              f"{ms(m['draft'] + m['verify'] + m['spec_overhead'])} (draft {ms(m['draft'])}, verify "
              f"{ms(m['verify'])}, overhead {ms(m['spec_overhead'])})")
        print(f"  tokens/step   spec {ps['tokens_per_step']:.3f}, regular {pr['tokens_per_step']:.3f}; outside the "
              f"steps: spec {ps['outside_steps_s']:.3f} s of {ps['wall_s']:.2f}, regular {pr['outside_steps_s']:.3f} s "
              f"of {pr['wall_s']:.2f}", flush=True)
    gaps = [x["predicted"] / x["measured"] - 1 for x in rounds]
    print(f"prediction over measurement: median {statistics.median(gaps):+.1%} (range {min(gaps):+.1%} .. "
          f"{max(gaps):+.1%}) over {len(rounds)} rounds")
    if args.json:
        args.json.write_text(json.dumps({"config": dataclasses.asdict(cfg), "calibration": cal_out,
                                         "rounds": rounds}, indent=1))


if __name__ == "__main__":
    main()
