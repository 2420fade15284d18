"""How much does the Live page's drawing slow decoding? The same run (B = 8, default pair on
this machine: bf16 target + the distilled draft) headless, as the CLI runs it, and through the app's run
worker while the page's charts are rebuilt and serialised at the page's throttle (the draw
interval stretches so drawing takes <= 5% of it, as pages/live.py does).

    python bench/live_overhead.py [--repeats 3]

This drives the app's own code paths (specviz.app.state.LiveRun, specviz.app.charts) in one
process, without the browser: the server's websocket push is not included.
"""

import argparse
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.app import state as appstate, charts, tokentext  # noqa: E402
from specviz.prompts.sets import CHAT  # noqa: E402
from specviz.run import RunConfig, load_pair, run  # noqa: E402


def in_thread(fn):
    """fn() in a fresh thread, as the app runs torch off Streamlit's main thread."""
    out = {}
    t = threading.Thread(target=lambda: out.update(r=fn()))
    t.start()
    t.join()
    return out["r"]


DRAW_BUDGET = 0.05  # as pages/live.py: drawing takes at most this share of the redraw interval


def draw_all(trace, decode) -> None:
    figs = [charts.acceptance_heatmap(trace, decode, 150), charts.acceptance_rate_bars(trace),
            charts.ragged_lengths(trace), charts.wasted_slots(trace), charts.phase_timeline(trace),
            charts.token_latency(trace), charts.utilization(trace), charts.position_acceptance(trace)]
    for f in figs:
        f.to_json()
    tokentext.token_html(trace, decode, 16)


def live(cfg, decode, interval: float = 0.5, draw: bool = True):
    r = appstate.LiveRun(cfg=cfg, lock=threading.Lock()).start()
    draws = [0.0]
    if not draw:  # the run worker alone: what the thread + telemetry cost without any drawing
        r.join()
    while r.running or r.status == "queued":
        t0 = time.perf_counter()
        draw_all(r.snapshot(), decode)
        d = time.perf_counter() - t0
        draws.append(d)
        interval = min(5.0, max(interval, d / DRAW_BUDGET))
        time.sleep(max(0.0, interval - d))
    r.join()
    return r.trace["summary"]["wall_s"], statistics.mean(draws), len(draws)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-draw", action="store_true", help="run the worker without drawing (isolates the worker's cost)")
    a = ap.parse_args()
    cfg = RunConfig(prompts=CHAT, batch_size=8, draft_length=2, draft="default", max_new_tokens=64)
    # All torch work runs off the main thread, as in the app. With libgomp (this torch build), a
    # main thread that has run torch keeps its own OpenMP team; with more OpenMP threads than
    # cores (2 here) idle workers stop spin-waiting and small ops in any other thread take ~1.8x
    # as long (bench/omp_threads.py, commit f54bdcc). Measuring the headless run in the main thread and the live
    # run in a worker made the worker look 1.26x slower with no drawing at all. Streamlit's main
    # thread never runs torch, so the app's worker has the cores' one team to itself, like the CLI.
    target, proposer = in_thread(lambda: load_pair(cfg))
    decode = appstate.decoder_for(target.tokenizer)
    in_thread(lambda: run(cfg, target, proposer))  # warm-up
    ratios = []
    for _ in range(a.repeats):
        cli = in_thread(lambda: run(cfg, target, proposer))["summary"]["wall_s"]  # headless, sampler on as in the CLI
        wall, draw, n = live(cfg, decode, draw=not a.no_draw)
        ratios.append(wall / cli)
        print(f"headless {cli:.2f} s, live view {wall:.2f} s (x{wall / cli:.3f}); {n} redraws of {1e3 * draw:.0f} ms", flush=True)
    print(f"median live/headless wall-time ratio over {a.repeats}: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
