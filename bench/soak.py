"""Soak (issue 15 item 4): N consecutive runs through the real Live page (streamlit AppTest on
app.py, the packaged default model), one session clicking Run again and again; resident memory
(this process and any worker processes it started) after each run.

The claim it checks: after the first 10 runs (model load, allocator warm-up, caches), RSS grows
by less than 5% over the rest. Exit status 1 when it does not.

    .venv/bin/python bench/soak.py --runs 200            # ~1-3 s per run on a 2-core CPU
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TRITON_INTERPRET", "1")  # as tests/conftest.py: kernels on CPU run interpreted


def rss_mb() -> float:
    """This process and its children (a decode worker in its own process counts too)."""
    import psutil

    me = psutil.Process()
    procs = [me] + me.children(recursive=True)
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:  # a child that ended between the listing and the reading
            pass
    return total / 2**20


def keep_navigation() -> None:
    """As tests/app/test_app.py: AppTest resets the pages-folder flag before each run; app.py's
    st.navigation clears it for good on a live server."""
    from streamlit.runtime.pages_manager import PagesManager

    real_init = PagesManager.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        PagesManager.uses_pages_directory = False

    PagesManager.__init__ = init


def one_run(at, timeout: float) -> str:
    from specviz.app import state as appstate

    at.button(key="run").click().run()
    run = at.session_state[appstate.RUN_KEY]
    deadline = time.monotonic() + timeout
    while run.running and time.monotonic() < deadline:
        run.beat()  # the page polls while a run goes
        run.join(0.5)
    if run.running:
        raise SystemExit(f"a run did not finish in {timeout} s")
    at.run()  # the page draws the finished run
    if at.exception:
        raise SystemExit(f"the page raised: {[e.value for e in at.exception]}")
    return run.status


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--warm-runs", type=int, default=10, help="runs before the baseline RSS is read")
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument("--limit", type=float, default=0.05, help="allowed RSS growth after the warm runs")
    a = ap.parse_args()
    if a.runs <= a.warm_runs:
        ap.error("--runs must be more than --warm-runs")

    import torch
    from streamlit.testing.v1 import AppTest

    keep_navigation()
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=120)
    at.run()
    at.session_state["draft_kind"] = "ngram"
    at.slider(key="batch_size").set_value(a.batch_size)
    at.slider(key="max_new_tokens").set_value(a.max_new_tokens)
    at.run()
    print(f"soak: {a.runs} Live-page runs, B={a.batch_size}, {a.max_new_tokens} new tokens, n-gram draft; "
          f"torch {torch.__version__}, {os.cpu_count()} CPUs", flush=True)
    t0, base, samples = time.perf_counter(), None, []
    for i in range(1, a.runs + 1):
        status = one_run(at, timeout=300)
        if status != "done":
            raise SystemExit(f"run {i} ended {status}")
        samples.append(rss_mb())
        if i == a.warm_runs:
            base = samples[-1]
        if i % 10 == 0 or i == a.runs:
            print(f"run {i:>4}  rss {samples[-1]:8.1f} MB  ({time.perf_counter() - t0:6.0f} s)", flush=True)
    growth = (samples[-1] - base) / base
    peak = (max(samples[a.warm_runs - 1:]) - base) / base
    print(f"RSS after run {a.warm_runs}: {base:.1f} MB; after run {a.runs}: {samples[-1]:.1f} MB; growth "
          f"{100 * growth:+.1f}% (peak {100 * peak:+.1f}%), limit {100 * a.limit:.0f}%")
    return 0 if growth < a.limit else 1


if __name__ == "__main__":
    sys.exit(main())
