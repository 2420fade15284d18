"""A real browser: `streamlit run app.py` + headless Debian chromium over the DevTools protocol.

Presses Run on the Live page with the default model, waits until the run has finished and the
charts have drawn, checks there is no error element and that the acceptance heatmap and the
step timeline are on the page, and saves docs/screenshot.png. Skips (with the reason) when
/usr/bin/chromium is absent (`apt-get install -y chromium`).
"""

from __future__ import annotations

import base64
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

import pytest

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parent.parent
SCREENSHOT = ROOT / "docs" / "screenshot.png"

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} not installed (apt-get install -y chromium)")


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


class DevTools:
    """The few DevTools protocol calls the test needs, over one page's websocket."""

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

    def close(self):
        self.ws.close()


@pytest.fixture(scope="module")
def server():
    port = free_port()
    env = {**os.environ, "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.fileWatcherType", "none"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for(lambda: proc.poll() is not None or http_ok(f"http://127.0.0.1:{port}/_stcore/health"), 60,
                 "the streamlit server")
        assert proc.poll() is None, "streamlit exited early"
        yield f"http://127.0.0.1:{port}/"
    finally:
        stop_process(proc)
        log.seek(0)
        print(log.read().decode(errors="replace")[-3000:])


def stop_process(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def browser():
    profile = tempfile.mkdtemp(prefix="specviz-chromium-")
    proc = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--remote-debugging-port=0",
         "--remote-debugging-address=127.0.0.1", "--window-size=1600,2400", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        active = Path(profile) / "DevToolsActivePort"
        wait_for(lambda: active.exists() and active.read_text().strip(), 30, "chromium's DevTools port")
        port = int(active.read_text().split()[0])
        pages = wait_for(lambda: [t for t in json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
                                  if t["type"] == "page"], 20, "a chromium page")
        tools = DevTools(pages[0]["webSocketDebuggerUrl"])
        yield tools
        tools.close()
    finally:
        stop_process(proc)
        shutil.rmtree(profile, ignore_errors=True)


ERRORS_JS = """[...document.querySelectorAll('[data-testid="stException"], [data-testid="stAlertContentError"]')]
              .map(e => e.innerText)"""
CHART_TITLES_JS = """[...document.querySelectorAll('[data-testid="stPlotlyChart"] .gtitle')].map(e => e.textContent)"""
CLICK_RUN_JS = """(() => { const b = [...document.querySelectorAll('button')].find(b => b.innerText.trim() === 'Run');
                         if (!b || b.disabled) return false; b.click(); return true; })()"""
DONE_JS = """[...document.querySelectorAll('[data-testid="stDownloadButton"]')].some(e => e.innerText.includes('Trace (JSON)'))"""


def test_live_run_in_a_real_browser_draws_the_charts(server, browser):
    browser.call("Emulation.setDeviceMetricsOverride", width=1600, height=2400, deviceScaleFactor=1, mobile=False)
    browser.call("Page.navigate", url=server)
    browser.set_slider("Batch size", 2, 1)  # a short run: the CPU may be shared
    browser.set_slider("Max new tokens", 12, 1)
    time.sleep(1.0)  # let the last slider value reach the server
    wait_for(lambda: browser.js(CLICK_RUN_JS), 90, "the Run button (model load included)")
    wait_for(lambda: browser.js(DONE_JS), 120, "the run to finish (download buttons)")
    titles = wait_for(lambda: (t := browser.js(CHART_TITLES_JS)) and len(t) >= 8 and t, 30, "8 drawn charts")
    time.sleep(1.0)  # let plotly finish laying out before the screenshot
    assert browser.js(ERRORS_JS) == []
    assert any(t.startswith("Acceptance per sequence and step") for t in titles), titles
    assert any(t.startswith("Step timeline") for t in titles), titles
    assert browser.js("document.querySelectorAll('.heatmaplayer image, .heatmaplayer .hm').length") > 0
    shot = browser.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    SCREENSHOT.write_bytes(base64.b64decode(shot["data"]))
    assert SCREENSHOT.stat().st_size > 10_000
