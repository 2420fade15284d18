"""The Streamlit server holds no torch: every device job goes to the one device process.

The real `streamlit run app.py` and a real headless chromium (tests/browser.py): every page is
visited, a Live run is made (the race on), a Sweep is started and a Correctness check runs to its
result; then the server process's memory map (/proc/<pid>/maps) has no torch library in it, while
the decode worker's has (the work was done, there). Skips when /usr/bin/chromium is absent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import browser
import pytest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(browser.CHROMIUM),
                                 reason=f"{browser.CHROMIUM} not installed (apt-get install -y chromium)")]

TORCH_LIBS = ("libtorch", "libc10", "torch/_C")
PAGES = ["Speedup model", "Sweep", "Correctness", "Hardware", "Server", "Live"]


def torch_libraries(pid: int) -> set[str]:
    """The torch shared objects mapped into process ``pid``."""
    paths = {line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines() if "/" in line}
    return {p for p in paths if any(lib in p for lib in TORCH_LIBS)}


def children(pid: int) -> list[int]:
    return [int(c) for t in Path(f"/proc/{pid}/task").iterdir()
            for c in (t / "children").read_text().split()]


def go_to(tools: browser.DevTools, label: str) -> None:
    browser.wait_for(lambda: tools.js(browser.nav_click_js(label)), 30, f"the {label} link")
    title = "Live batched speculative decoding" if label == "Live" else label
    browser.wait_for(lambda: browser.no_exception(tools) or title.split(":")[0] in
                     (tools.js("document.querySelector('[data-testid=\"stMain\"] h1')?.innerText ?? ''") or ""),
                     90, f"the {label} page")


def press(tools: browser.DevTools, label: str, timeout: float = 120) -> None:
    js = f"""(() => {{ const b = [...document.querySelectorAll('button')].find(b => b.innerText.trim() === {json.dumps(label)});
              if (!b || b.disabled) return false; b.click(); return true; }})()"""
    browser.wait_for(lambda: browser.no_exception(tools) or tools.js(js), timeout, f"the {label!r} button")


def shows(tools: browser.DevTools, text: str, timeout: float) -> None:
    browser.wait_for(lambda: browser.no_exception(tools) or text in browser.page_text(tools), timeout,
                     f"{text!r} on the page", interval=0.5)


def test_after_every_page_a_run_a_sweep_and_a_check_the_server_has_no_torch_mapped(app_server):
    with browser.chromium() as tools:
        server = app_server.pid
        browser.open_live(tools, app_server.url)
        for label in PAGES:
            go_to(tools, label)
            browser.no_exception(tools)
        browser.press_run_and_wait(tools)  # the Live page's defaults, raced against regular decoding
        assert "tokens/s" in browser.page_text(tools)

        go_to(tools, "Sweep")
        press(tools, "Run sweep")
        shows(tools, "cells done", 120)  # the sweep is in the device process (calibrating or measuring)
        press(tools, "Stop")
        shows(tools, "stopped after", 600)

        go_to(tools, "Correctness")
        press(tools, "Check exactness")
        shows(tools, "rows identical to regular decoding", 600)
        browser.no_exception(tools)

        assert torch_libraries(server) == set(), "the Streamlit server mapped torch"
        workers = [c for c in children(server) if torch_libraries(c)]
        assert workers, "no child of the server holds torch: where did the jobs run?"
