"""The Live page's tokens/s in a real browser against the same run from the CLI.

Starts the real `streamlit run app.py` server and a real headless chromium (tests/browser.py),
presses Run on the Live page with its defaults (specviz.bounds.SLIDERS: b = 1, k = 2, 64 new tokens;
the first 4 chat prompts, the default pair), waits for the run to end and reads the page's "tokens/s"
metric. Interleaved with it, in rounds (the order alternates), the same run from the CLI:
`python -m specviz run --prompts <those 4 prompts> --batch-size B --draft-length K
--max-new-tokens N --out T` with the page's B, K, N (tokens/s from T's summary, the same summarize()
the page shows). A --compare-root checkout must have the same page defaults for its row to compare.
A first browser run (worker start, model load) is a warm-up and not counted.

    flock /tmp/specviz-cpu.lock .venv/bin/python bench/browser_speed.py [--rounds 3] [--server-env K=V ...]

--server-env sets variables for the server process only (e.g. OMP_NUM_THREADS=1), to compare
thread policies. Prints each round, the medians and the ratio page / CLI (goal >= 0.85).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import browser  # noqa: E402  (tests/browser.py: the server + chromium driver)

from specviz.bounds import SLIDERS  # noqa: E402
from specviz.prompts import sets as promptsets  # noqa: E402

# the Live page's defaults (its sliders start at RunConfig's, so at `specviz run`'s)
B, K, MAX_NEW = (SLIDERS[name][2] for name in ("batch_size", "draft_length", "max_new_tokens"))
PROMPTS = promptsets.CHAT[:4]  # the Live page's default prompts


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cli_run(prompts_file: str) -> tuple[float, int]:
    """tokens/s and output tokens of the CLI's run."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "trace.json")
        subprocess.run([sys.executable, "-m", "specviz", "run", "--prompts", prompts_file, "--batch-size", str(B),
                        "--draft-length", str(K), "--max-new-tokens", str(MAX_NEW), "--out", out],
                       cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        s = json.loads(Path(out).read_text())["summary"]
        return s["tokens_per_s"], s["tokens"]


CLASSES = ("worker", "server", "renderer", "gpu", "browser", "chromium other", "rest of machine")


class CpuSampler:
    """Per-process CPU time, sampled every ``every`` s in a thread: the decode worker (the server's
    children), the Streamlit server, chromium's renderer / GPU process / browser process / other
    helpers (network, storage, zygotes), and the rest of the machine (/proc/stat busy time minus
    all of those: other users of the cores, this script and the CLI runs)."""

    def __init__(self, server_pid: int, chromium_pid: int, every: float = 0.25):
        import psutil

        self.psutil, self.every = psutil, every
        self.server = psutil.Process(server_pid)
        self.chromium = psutil.Process(chromium_pid)
        self.samples: list = []  # (monotonic time, {class: CPU s so far})
        self._procs: dict = {}  # pid -> (Process, class)
        self._gone = {c: 0.0 for c in CLASSES}  # CPU s of processes that have exited
        self._last: dict = {}  # pid -> last CPU s seen
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _classify(self, p) -> str:
        if p.pid == self.server.pid:
            return "server"
        if p.pid == self.chromium.pid:
            return "browser"
        cmd = " ".join(p.cmdline())
        if "--type=renderer" in cmd:
            return "renderer"
        if "--type=gpu-process" in cmd:
            return "gpu"
        return "chromium other" if "chrom" in cmd else "worker"

    def _refresh(self) -> None:
        now = [self.server, *self.server.children(recursive=True), self.chromium,
               *self.chromium.children(recursive=True)]
        for p in now:
            if p.pid not in self._procs:
                try:
                    self._procs[p.pid] = (p, self._classify(p))
                except self.psutil.Error:
                    pass

    @staticmethod
    def _machine_busy() -> float:
        f = [float(x) for x in open("/proc/stat").readline().split()[1:]]
        return (sum(f) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK")  # minus idle and iowait

    def sample(self) -> dict:
        self._refresh()
        out = dict(self._gone)
        for pid, (p, cls) in list(self._procs.items()):
            try:
                t = p.cpu_times()
                self._last[pid] = t.user + t.system + t.children_user + t.children_system
            except self.psutil.Error:
                self._gone[cls] += self._last.pop(pid, 0.0)
                del self._procs[pid]
                out[cls] += 0.0
                continue
            out[cls] += self._last[pid]
        out["rest of machine"] = self._machine_busy() - sum(v for k, v in out.items() if k != "rest of machine")
        return out

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self.sample()))
            self._stop.wait(self.every)

    def __enter__(self):
        self.samples.append((time.monotonic(), self.sample()))
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.samples.append((time.monotonic(), self.sample()))

    def between(self, t0: float, t1: float) -> dict:
        """CPU seconds per class from the sample nearest t0 to the one nearest t1."""
        near = lambda t: min(self.samples, key=lambda s: abs(s[0] - t))[1]  # noqa: E731
        a, b = near(t0), near(t1)
        return {c: b[c] - a[c] for c in CLASSES}


def fmt_cpu(d: dict, wall: float) -> str:
    return ", ".join(f"{c} {d[c]:.1f}" for c in CLASSES) + f" (CPU s over {wall:.1f} s on {os.cpu_count()} cores)"


RENDERER_METRICS = ("TaskDuration", "ScriptDuration", "LayoutDuration", "RecalcStyleDuration", "LayoutCount",
                    "RecalcStyleCount")


def renderer_metrics(tools) -> dict:
    """The page's main-thread totals from DevTools Performance.getMetrics (seconds, counts)."""
    got = {m["name"]: m["value"] for m in tools.call("Performance.getMetrics")["metrics"]}
    return {k: got.get(k, 0.0) for k in RENDERER_METRICS}


def page_run(tools, sampler: CpuSampler | None = None, cli_tokens: int | None = None) -> float:
    """One page run; with a sampler, prints its CPU split over the speculative run (the window the
    page's tokens/s measures: the CLI's token count / the page's tokens/s from the click) and over
    the whole page run (race and final drawing included)."""
    m0 = renderer_metrics(tools) if sampler else None
    t = time.monotonic()
    browser.press_run_and_wait(tools)
    wall = time.monotonic() - t
    value = browser.metrics(tools).get("tokens/s")
    errors = tools.js(browser.ERRORS_JS)
    if errors:
        raise SystemExit(f"the page shows an error: {errors}")
    try:
        tps = float(value)
    except (TypeError, ValueError):
        raise SystemExit(f"no tokens/s metric on the page after the run (metrics: {browser.metrics(tools)})")
    if sampler is not None:
        m1 = renderer_metrics(tools)
        print(f"  page run {wall:.1f} s: " + fmt_cpu(sampler.between(t, t + wall), wall), flush=True)
        if cli_tokens:
            spec = cli_tokens / tps
            print(f"  speculative run ~{spec:.1f} s: " + fmt_cpu(sampler.between(t, t + spec), spec), flush=True)
        print("  renderer main thread: " + ", ".join(
            f"{k} {m1[k] - m0[k]:.2f}" + ("" if k.endswith("Count") else " s") for k in RENDERER_METRICS), flush=True)
    return tps


TRACE_CATEGORIES = ["devtools.timeline", "disabled-by-default-devtools.timeline", "disabled-by-default-devtools.timeline.frame",
                    "v8", "blink", "cc", "gpu", "viz", "toplevel", "__metadata"]
TIMELINE = ("RunTask", "ThreadControllerImpl::RunTask", "FunctionCall", "EvaluateScript", "TimerFire",
            "FireAnimationFrame", "EventDispatch", "UpdateLayoutTree", "Layout", "PrePaint", "Paint", "Layerize",
            "RasterTask", "MinorGC", "MajorGC", "V8.GC_SCAVENGER", "ParseHTML", "BeginFrame", "DrawFrame",
            "Graphics.Pipeline", "Display::DrawAndSwap", "Commit", "ActivateLayerTree", "ProxyMain::BeginMainFrame")


def timeline(sampler: CpuSampler, t0: float, t1: float, step: float = 0.5) -> None:
    """CPU use per class in ``step`` s bins from t0 (the click), in % of one core."""
    shown = ("worker", "server", "renderer", "gpu", "rest of machine")
    print("  t (s)  " + "  ".join(f"{c[:8]:>8}" for c in shown))
    t = t0
    while t < t1:
        d = sampler.between(t, t + step)
        print(f"  {t - t0:5.1f}  " + "  ".join(f"{100 * d[c] / step:7.0f}%" for c in shown))
        t += step


def traced_page_run(tools, path: str, sampler: CpuSampler | None = None) -> None:
    """One page run under a DevTools trace (written to ``path``, Chrome's JSON), then per process
    and thread: busy time (top-level tasks) and the timeline events that took the most."""
    import collections

    tools.call("Tracing.start", categories=",".join(TRACE_CATEGORIES), transferMode="ReturnAsStream")
    t = time.monotonic()
    browser.press_run_and_wait(tools)
    wall = time.monotonic() - t
    if sampler is not None:
        timeline(sampler, t, t + wall)
    tools.ws.send(json.dumps({"id": 999_999, "method": "Tracing.end", "params": {}}))
    while True:  # the trace arrives as a stream handle in the tracingComplete event
        msg = json.loads(tools.ws.recv(timeout=120))
        if msg.get("method") == "Tracing.tracingComplete":
            stream = msg["params"]["stream"]
            break
    chunks = []
    while True:
        got = tools.call("IO.read", handle=stream, size=1 << 20)
        chunks.append(got["data"])
        if got.get("eof"):
            break
    tools.call("IO.close", handle=stream)
    data = json.loads("".join(chunks))
    events = data["traceEvents"] if isinstance(data, dict) else data
    Path(path).write_text(json.dumps(events))
    names, procs = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
        if e.get("ph") == "M" and e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
    busy = collections.Counter()
    by_name = collections.defaultdict(collections.Counter)
    counts = collections.Counter()
    for e in events:
        if e.get("name") in TIMELINE:
            key = (e["pid"], e["tid"])
            counts[e["name"]] += 1
            if e.get("ph") == "X":
                by_name[key][e["name"]] += e.get("dur", 0) / 1e6
                if e["name"] in ("RunTask", "ThreadControllerImpl::RunTask"):
                    busy[key] += e.get("dur", 0) / 1e6
    print(f"  traced page run {wall:.1f} s ({len(events)} events, {path}); busy s per thread (top-level tasks):")
    for key, sec in busy.most_common(10):
        top = ", ".join(f"{n} {v:.2f}" for n, v in by_name[key].most_common(8) if "RunTask" not in n)
        print(f"    {procs.get(key[0], key[0])} / {names.get(key, key[1])}: {sec:.2f} s; {top}")
    main = [k for k in busy if "Main" in str(names.get(k, ""))]
    if main:
        k = max(main, key=busy.get)
        start = min(e["ts"] for e in events if e.get("ph") == "X" and (e["pid"], e["tid"]) == k)
        bins = collections.Counter()
        for e in events:
            if (e.get("pid"), e.get("tid")) == k and e.get("ph") == "X" and e["name"] in (
                    "RunTask", "ThreadControllerImpl::RunTask"):
                bins[int((e["ts"] - start) / 5e5)] += e.get("dur", 0) / 1e6
        print("  renderer main thread busy per 0.5 s from its first task: "
              + " ".join(f"{100 * bins[i] / 0.5:.0f}%" for i in range(max(bins) + 1)))
    print("  event counts: " + ", ".join(f"{n} {c}" for n, c in counts.most_common(14)), flush=True)


def idle_split(sampler: CpuSampler, seconds: float, what: str) -> None:
    t = time.monotonic()
    time.sleep(seconds)
    print(f"idle {what}: " + fmt_cpu(sampler.between(t, time.monotonic()), seconds), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--server-env", nargs="*", default=[], metavar="K=V")
    ap.add_argument("--compare", nargs="*", default=None, metavar="K=V",
                    help="a second server with these variables on top of --server-env, run in the same rounds")
    ap.add_argument("--compare-root", metavar="DIR",
                    help="the second server runs the app of this checkout instead (e.g. `git archive` of the previous "
                         "commit), with --compare's variables if given")
    ap.add_argument("--idle", type=float, default=5.0, help="seconds of the page sitting idle to measure (0: skip)")
    ap.add_argument("--trace", metavar="FILE", help="also one page run under a DevTools trace, written to FILE")
    a = ap.parse_args()
    env = dict(kv.split("=", 1) for kv in a.server_env)
    setups = [("page", env, ROOT)]
    if a.compare is not None or a.compare_root:
        extra = a.compare or []
        name = " ".join(["page", *([a.compare_root] if a.compare_root else []), *extra])
        setups.append((name, {**env, **dict(kv.split("=", 1) for kv in extra)}, Path(a.compare_root or ROOT)))
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(promptsets.to_text(PROMPTS))
    print(f"load average at start: {load()}; server env: {env or 'inherited'}", flush=True)
    log = tempfile.TemporaryFile()
    got_all = {name: [] for name, _, _ in setups}
    got_all["cli"] = []
    try:
        warm_cli, tokens = cli_run(f.name)
        print(f"warm-up CLI run: {warm_cli:.1f} tokens/s, {tokens} output tokens", flush=True)
        with contextlib.ExitStack() as stack:
            arms = []
            for name, e, root in setups:
                url = stack.enter_context(browser.streamlit_server(log=log, env=e, root=root))
                server = browser.last_server_pid
                tools = stack.enter_context(browser.chromium())
                tools.call("Performance.enable")
                browser.open_live(tools, url)
                sampler = stack.enter_context(CpuSampler(server, browser.last_chromium_pid))
                print(f"[{name}]", flush=True)
                if a.idle:
                    idle_split(sampler, a.idle, "before any run (page loaded)")
                t = time.perf_counter()
                warm = page_run(tools)
                print(f"warm-up page run: {warm:.1f} tokens/s ({time.perf_counter() - t:.0f} s with worker start "
                      "and model load)", flush=True)
                if a.idle:
                    idle_split(sampler, a.idle, "after a run (finished page drawn)")
                if a.trace:
                    traced_page_run(tools, a.trace, sampler)
                arms.append((name, lambda tools=tools, sampler=sampler: page_run(tools, sampler, tokens)))
            arms.append(("cli", lambda: cli_run(f.name)[0]))
            for r in range(a.rounds):
                got = {}
                for name, fn in (arms if r % 2 == 0 else arms[::-1]):
                    if name != "cli":
                        print(f"[{name}]", flush=True)
                    got[name] = fn()
                for name in got:
                    got_all[name].append(got[name])
                print(f"round {r + 1}: " + ", ".join(f"{n} {v:.1f}" for n, v in got.items()) + " tokens/s; "
                      + ", ".join(f"{n}/CLI {got[n] / got['cli']:.2f}" for n, _, _ in setups) + f" (load {load()})",
                      flush=True)
    except BaseException:
        log.seek(0)
        print(log.read().decode(errors="replace")[-3000:], file=sys.stderr)
        raise
    finally:
        os.unlink(f.name)
    if not got_all["cli"]:
        return
    mc = statistics.median(got_all["cli"])
    for name, _, _ in setups:
        mp = statistics.median(got_all[name])
        ratios = [p / c for p, c in zip(got_all[name], got_all["cli"])]
        print(f"median over {a.rounds} rounds: {name} {mp:.1f} tokens/s, CLI {mc:.1f} tokens/s; "
              f"{name}/CLI {mp / mc:.2f} (per-round median {statistics.median(ratios):.2f})")
    print(f"load at end {load()}")


if __name__ == "__main__":
    main()
