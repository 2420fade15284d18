"""Is the cached calibration still true? Re-time a few of its grid points now and compare.

This machine's speed drifts by 10-40% over minutes, and the calibration is one measurement.
The script re-times target forwards at (b, tokens) points of the cached grid with the same code
(`specviz.measure.calibrate.time_forward`) and prints cached fit, cached sample and now, side by side.

    python bench/calibration_drift.py [--draft default] [--dtype bfloat16]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.measure.calibrate import load_calibration, time_forward  # noqa: E402
from specviz.run import RunConfig, load_pair  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draft", default="default")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--points", default="1:1,1:3,8:1,8:3", help="b:tokens,...")
    a = ap.parse_args()
    target, proposer = load_pair(RunConfig(prompts=["x"], draft=a.draft, dtype=a.dtype))
    cal = load_calibration(target, proposer)
    if cal is None:
        sys.exit("no cached calibration for this pair: run python -m specviz calibrate first")
    samples = {(int(b), int(n)): t for b, n, t in cal.samples["target"]}
    print(f"calibration of {cal.created} for {cal.target} + {cal.draft}; now {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    print(f"{'b':>3} {'tokens':>6} {'fit (ms)':>9} {'sample (ms)':>11} {'now (ms)':>9} {'now / fit':>9}")
    for item in a.points.split(","):
        b, n = map(int, item.split(":"))
        now = time_forward(target, b, n, 128, repeats=5)
        fit = cal.target_cost(b, n)
        sample = samples.get((b, n))
        print(f"{b:>3} {n:>6} {1e3 * fit:>9.1f} {('%.1f' % (1e3 * sample)) if sample else '-':>11} "
              f"{1e3 * now:>9.1f} {now / fit:>9.2f}")


if __name__ == "__main__":
    main()
