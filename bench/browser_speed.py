"""The Live page's tokens/s in a real browser against the same run from the CLI.

Starts the real `streamlit run app.py` server and a real headless chromium (tests/browser.py),
presses Run on the Live page with its defaults (b = 4, k = 2, 64 new tokens, the first 4 chat
prompts, the default pair), waits for the run to end and reads the page's "tokens/s" metric.
Interleaved with it, in rounds (the order alternates), the same run from the CLI:
`python -m specviz run --prompts <those 4 prompts> --batch-size 4 --draft-length 2
--max-new-tokens 64 --out T` (tokens/s from T's summary, the same summarize() the page shows).
A first browser run (worker start, model load) is a warm-up and not counted.

    flock /tmp/specviz-cpu.lock .venv/bin/python bench/browser_speed.py [--rounds 3] [--server-env K=V ...]

--server-env sets variables for the server process only (e.g. OMP_NUM_THREADS=1), to compare
thread policies. Prints each round, the medians and the ratio page / CLI (goal >= 0.85).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import browser  # noqa: E402  (tests/browser.py: the server + chromium driver)

from specviz.prompts import sets as promptsets  # noqa: E402

B, K, MAX_NEW = 4, 2, 64  # the Live page's defaults
PROMPTS = promptsets.CHAT[:4]  # the Live page's default prompts


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cli_run(prompts_file: str) -> float:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "trace.json")
        subprocess.run([sys.executable, "-m", "specviz", "run", "--prompts", prompts_file, "--batch-size", str(B),
                        "--draft-length", str(K), "--max-new-tokens", str(MAX_NEW), "--out", out],
                       cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        return json.loads(Path(out).read_text())["summary"]["tokens_per_s"]


def cpu_seconds(server_pid: int) -> dict:
    """CPU seconds so far of the server, its decode worker (its children) and chromium."""
    import psutil

    out = {"server": 0.0, "worker": 0.0, "chromium": 0.0}
    try:
        server = psutil.Process(server_pid)
        t = server.cpu_times()
        out["server"] = t.user + t.system
        for c in server.children(recursive=True):
            t = c.cpu_times()
            out["worker"] += t.user + t.system
    except psutil.Error:
        pass
    for p in psutil.process_iter(["name"]):
        if "chrom" in (p.info["name"] or ""):
            try:
                t = p.cpu_times()
                out["chromium"] += t.user + t.system
            except psutil.Error:
                pass
    return out


def page_run(tools, server_pid: int | None = None) -> float:
    before = cpu_seconds(server_pid) if server_pid else None
    t = time.perf_counter()
    browser.press_run_and_wait(tools)
    if before is not None:
        after, wall = cpu_seconds(server_pid), time.perf_counter() - t
        print("  page run: {:.1f} s; CPU s: ".format(wall)
              + ", ".join(f"{k} {after[k] - before[k]:.1f}" for k in after), flush=True)
    value = browser.metrics(tools).get("tokens/s")
    errors = tools.js(browser.ERRORS_JS)
    if errors:
        raise SystemExit(f"the page shows an error: {errors}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise SystemExit(f"no tokens/s metric on the page after the run (metrics: {browser.metrics(tools)})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--server-env", nargs="*", default=[], metavar="K=V")
    a = ap.parse_args()
    env = dict(kv.split("=", 1) for kv in a.server_env)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(promptsets.to_text(PROMPTS))
    print(f"load average at start: {load()}; server env: {env or 'inherited'}", flush=True)
    log = tempfile.TemporaryFile()
    page, cli = [], []
    try:
        with browser.streamlit_server(log=log, env=env) as url, browser.chromium() as tools:
            pid = browser.last_server_pid
            browser.open_live(tools, url)
            t = time.perf_counter()
            warm = page_run(tools, pid)
            print(f"warm-up page run: {warm:.1f} tokens/s ({time.perf_counter() - t:.0f} s with worker start "
                  "and model load)", flush=True)
            for r in range(a.rounds):
                arms = [("page", lambda: page_run(tools, pid)), ("cli", lambda: cli_run(f.name))]
                got = {}
                for name, fn in (arms if r % 2 == 0 else arms[::-1]):
                    got[name] = fn()
                page.append(got["page"])
                cli.append(got["cli"])
                print(f"round {r + 1}: page {got['page']:.1f} tokens/s, CLI {got['cli']:.1f} tokens/s, "
                      f"ratio {got['page'] / got['cli']:.2f} (load {load()})", flush=True)
    except BaseException:
        log.seek(0)
        print(log.read().decode(errors="replace")[-3000:], file=sys.stderr)
        raise
    finally:
        os.unlink(f.name)
    mp, mc = statistics.median(page), statistics.median(cli)
    ratios = [p / c for p, c in zip(page, cli)]
    print(f"median over {a.rounds} rounds: page {mp:.1f} tokens/s, CLI {mc:.1f} tokens/s; "
          f"page/CLI {mp / mc:.2f} (per-round median {statistics.median(ratios):.2f}); load at end {load()}")


if __name__ == "__main__":
    main()
