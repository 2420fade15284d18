"""A real browser on the real app: `streamlit run app.py` on a free loopback port and a headless
Debian chromium driven over the DevTools protocol (websockets), for tests/e2e/test_browser.py and
bench/browser_speed.py. No Streamlit or torch imports here.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(fn, timeout: float, what: str, interval: float = 0.25):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = fn()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def stop_process(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


last_server_pid: int | None = None  # the server streamlit_server started last (benchmarks read its CPU time)
last_chromium_pid: int | None = None  # the chromium chromium() started last (its browser process)


@contextlib.contextmanager
def streamlit_server(log=None, env: dict | None = None, root: Path = ROOT):
    """`streamlit run app.py` in ``root`` (this checkout; a benchmark may pass another one) on a
    free loopback port; yields its URL. Its output goes to ``log`` (a binary file; a temporary one
    by default, whose tail is printed at exit)."""
    port = free_port()
    base = {k: v for k, v in os.environ.items() if k != "SPECVIZ_WORKER_JOBS"}  # the tests' stand-ins: not here
    env = {**base, "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false", **(env or {})}
    own_log = log is None
    log = tempfile.TemporaryFile() if own_log else log
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.fileWatcherType", "none"],
        cwd=root, stdout=log, stderr=subprocess.STDOUT, env=env)
    global last_server_pid
    last_server_pid = proc.pid
    try:
        wait_for(lambda: proc.poll() is not None or http_ok(f"http://127.0.0.1:{port}/_stcore/health"), 60,
                 "the streamlit server")
        assert proc.poll() is None, "streamlit exited early"
        yield f"http://127.0.0.1:{port}/"
    finally:
        stop_process(proc)
        if own_log:
            log.seek(0)
            print(log.read().decode(errors="replace")[-3000:])


class DevTools:
    """The few DevTools protocol calls we need, over one page's websocket."""

    def __init__(self, ws_url: str):
        from websockets.sync.client import connect

        self.ws = connect(ws_url, max_size=None, open_timeout=20).__enter__()
        self.ids = itertools.count(1)

    def call(self, method: str, **params):
        i = next(self.ids)
        self.ws.send(json.dumps({"id": i, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == i:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def js(self, expression: str):
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return res.get("result", {}).get("value")

    def key(self, key: str, code: str, key_code: int):
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=kind, key=key, code=code, windowsVirtualKeyCode=key_code)

    def set_slider(self, label: str, value: int, minimum: int) -> None:
        """Keyboard a Streamlit slider to ``value``: focus its thumb, Home, then ArrowRight."""
        focus = f"""(() => {{ const s = [...document.querySelectorAll('[data-testid="stSlider"]')]
                       .find(e => e.innerText.startsWith({json.dumps(label)}));
                     const t = s && s.querySelector('[aria-valuetext]'); if (!t) return false; t.focus(); return true; }})()"""
        wait_for(lambda: self.js(focus), 90, f"slider {label!r}")
        self.key("Home", "Home", 36)
        for _ in range(value - minimum):
            self.key("ArrowRight", "ArrowRight", 39)
        now = f"""[...document.querySelectorAll('[data-testid="stSlider"]')].find(e => e.innerText.startsWith({json.dumps(label)}))
                  .querySelector('[aria-valuetext]').getAttribute('aria-valuetext')"""
        wait_for(lambda: self.js(now) == str(value), 10, f"slider {label!r} at {value}")

    def click(self, x: float, y: float) -> None:
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def choose(self, label: str, option: str) -> None:
        """Pick ``option`` (the text shown, or its start) in the Streamlit selectbox labelled ``label``:
        click the box as a person does, then the option in the list it opens."""
        box = f"""(() => {{ const s = [...document.querySelectorAll('[data-testid="stSelectbox"]')]
                      .find(e => e.innerText.startsWith({json.dumps(label)}));
                    const c = s && s.querySelector('[role="combobox"], input'); if (!c) return null;
                    c.scrollIntoView({{block: "center"}}); const r = c.getBoundingClientRect();
                    return [r.x + r.width / 2, r.y + r.height / 2]; }})()"""
        x, y = wait_for(lambda: self.js(box), 90, f"selectbox {label!r}")
        self.click(x, y)
        pick = f"""(() => {{ const o = [...document.querySelectorAll('[role="option"]')]
                       .find(e => e.innerText.trim().startsWith({json.dumps(option)}));
                     if (!o) return null; o.scrollIntoView({{block: "center"}}); const r = o.getBoundingClientRect();
                     return [r.x + r.width / 2, r.y + r.height / 2]; }})()"""
        x, y = wait_for(lambda: self.js(pick), 10, f"option {option!r} of {label!r}")
        self.click(x, y)
        shown = f"""(() => {{ const s = [...document.querySelectorAll('[data-testid="stSelectbox"]')]
                        .find(e => e.innerText.startsWith({json.dumps(label)}));
                      const c = s && s.querySelector('input'); return c ? c.value : s && s.innerText; }})()"""
        wait_for(lambda: option in (self.js(shown) or ""), 10, f"selectbox {label!r} showing {option!r}")

    def close(self):
        self.ws.close()


@contextlib.contextmanager
def chromium(width: int = 1600, height: int = 2400):
    """A fresh headless chromium (its own --user-data-dir); yields a DevTools on its first page."""
    profile = tempfile.mkdtemp(prefix="specviz-chromium-")
    proc = subprocess.Popen(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
         "--remote-debugging-address=127.0.0.1", f"--window-size={width},{height}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    global last_chromium_pid
    last_chromium_pid = proc.pid
    try:
        active = Path(profile) / "DevToolsActivePort"
        wait_for(lambda: active.exists() and active.read_text().strip(), 30, "chromium's DevTools port")
        port = int(active.read_text().split()[0])
        pages = wait_for(lambda: [t for t in json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
                                  if t["type"] == "page"], 20, "a chromium page")
        tools = DevTools(pages[0]["webSocketDebuggerUrl"])
        tools.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        try:
            yield tools
        finally:
            tools.close()
    finally:
        stop_process(proc)
        shutil.rmtree(profile, ignore_errors=True)


# ---- the Live page ---------------------------------------------------------------------------------

ERRORS_JS = """[...document.querySelectorAll('[data-testid="stException"], [data-testid="stAlertContentError"]')]
              .map(e => e.innerText)"""
CHART_TITLES_JS = """[...document.querySelectorAll('[data-testid="stPlotlyChart"] .gtitle')].map(e => e.textContent)"""
def nav_click_js(label: str) -> str:
    """JS that clicks the sidebar's link to page ``label`` and returns whether it found one (a link's text
    starts with its icon's name, so it is matched by its end)."""
    return f"""(() => {{ const a = [...document.querySelectorAll('[data-testid="stSidebarNavLink"]')]
                 .find(a => a.innerText.trim().endsWith({json.dumps(label)})); if (!a) return false; a.click();
                 return true; }})()"""


RUN_BUTTON_JS = """[...document.querySelectorAll('button')].find(b => b.innerText.trim() === 'Run')"""
CLICK_RUN_JS = f"""(() => {{ const b = {RUN_BUTTON_JS}; if (!b || b.disabled) return false; b.click(); return true; }})()"""
RUN_DISABLED_JS = f"""(() => {{ const b = {RUN_BUTTON_JS}; return !!b && b.disabled; }})()"""
DONE_JS = f"""(() => {{ const b = {RUN_BUTTON_JS};
  return !!b && !b.disabled && [...document.querySelectorAll('[data-testid="stDownloadButton"]')]
                                  .some(e => e.innerText.includes('Trace (JSON)')); }})()"""
ENDED_IN_ERROR_JS = f"""(() => {{ const b = {RUN_BUTTON_JS};
  return !!b && !b.disabled && document.querySelectorAll('[data-testid="stAlertContentError"]').length > 0; }})()"""
PAGE_TEXT_JS = "document.querySelector('[data-testid=\"stMain\"]')?.innerText ?? document.body.innerText"
METRICS_JS = """Object.fromEntries([...document.querySelectorAll('[data-testid="stMetric"]')].map(m => [
  m.querySelector('[data-testid="stMetricLabel"]')?.innerText.trim(),
  m.querySelector('[data-testid="stMetricValue"]')?.innerText.trim()]))"""


def no_exception(tools: DevTools) -> None:
    """Fail at once when the page shows a Python exception (it would never finish)."""
    shown = tools.js("""[...document.querySelectorAll('[data-testid="stException"]')].map(e => e.innerText)""")
    if shown:
        raise AssertionError(f"the page shows an exception: {shown[0][:2000]}")


def press_run_and_wait(tools: DevTools, load_timeout: float = 120, run_timeout: float = 300) -> None:
    """Press Live's Run, see the run start (Run disabled), and wait until it has ended and the
    finished page has drawn (Run enabled again, the trace download button shown)."""
    wait_for(lambda: no_exception(tools) or tools.js(CLICK_RUN_JS), load_timeout, "the Run button (model load included)")
    try:
        wait_for(lambda: tools.js(RUN_DISABLED_JS), 30, "the run to start", interval=0.05)
    except AssertionError:
        pass  # a run shorter than one poll: it may already have ended
    # One light check a second: each check reads the page (innerText forces a layout), and a
    # benchmark's driver should not add work a person watching the page does not.
    wait_for(lambda: no_exception(tools) or tools.js(DONE_JS) or tools.js(ENDED_IN_ERROR_JS), run_timeout,
             "the run to finish (download buttons)", interval=1.0)
    shown = tools.js(ERRORS_JS)
    if not tools.js(DONE_JS) and shown:
        raise AssertionError(f"the run ended in an error: {shown}")


def open_live(tools: DevTools, url: str) -> None:
    tools.call("Page.navigate", url=url)
    wait_for(lambda: tools.js(RUN_BUTTON_JS + " !== undefined"), 90, "the Live page")


def page_text(tools: DevTools) -> str:
    """The main area's visible text (what a reader sees, sidebar excluded)."""
    return tools.js(PAGE_TEXT_JS) or ""


def metrics(tools: DevTools) -> dict:
    """The page's st.metric tiles: label -> shown value."""
    return tools.js(METRICS_JS) or {}
