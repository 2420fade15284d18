"""A real browser on an uploaded hostile trace: `streamlit run app.py` and headless Debian chromium
over the DevTools protocol (tests/browser.py), the file put into the Live page's uploader with
DOM.setFileInputFiles as a person's file dialog would.

The trace is made by the CLI on the default model (batch 2, 8 new tokens); then every string value
in it is replaced by an HTML and Markdown payload. That file is refused in one line (its
finish_reason is none the engine writes); the same with the finish_reasons kept is shown, its text
literally. After each upload every page (Live, Speedup model, Sweep, Correctness, Hardware,
Server) is visited in the same session: none has the payload's elements (#pwned, #pwnedb), none
ran its onerror, none shows an exception.
Skips (with the reason) when /usr/bin/chromium is absent (`apt-get install -y chromium`).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import time

import browser
import pytest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(browser.CHROMIUM),
                                 reason=f"{browser.CHROMIUM} not installed (apt-get install -y chromium)")]

# An element that would run code, one that would only be bold, and what Streamlit's Markdown would
# turn into an image, a link, colour, a formula and bold.
PAYLOAD = ('<img src=x id=pwned onerror="document.body.dataset.pwned=1"><b id=pwnedb>x</b> '
           "![i](http://127.0.0.1:9/i.png) [a](javascript:alert(1)) :red[x] $x$ **b**")
FILE_NAME = "<img src=x id=pwned onerror=document.body.dataset.pwned=1>.json"  # a name may hold no '/'
PAGES = {"Live": "Live batched speculative decoding", "Speedup model": "Speedup model",
         "Sweep": "Sweep: batch size × draft length", "Correctness": "Correctness", "Hardware": "Hardware",
         "Server": "Server"}

PAGE_STATE_JS = """(() => ({
  pwned: document.getElementById('pwned') !== null || document.getElementById('pwnedb') !== null,
  ran: document.body.dataset.pwned !== undefined,
  links: [...document.querySelectorAll('img[src*="127.0.0.1:9"], a[href^="javascript"]')].length,
  exceptions: [...document.querySelectorAll('[data-testid="stException"]')].map(e => e.innerText),
  errors: [...document.querySelectorAll('[data-testid="stAlertContentError"]')].map(e => e.innerText),
  title: document.querySelector('[data-testid="stMain"] h1')?.innerText ?? '',
  running: !!document.querySelector('[data-testid="stStatusWidget"]'),
  text: document.querySelector('[data-testid="stMain"]')?.innerText ?? ''}))()"""


def every_text_replaced(o, keep=()):
    if isinstance(o, dict):
        return {k: o[k] if k in keep else every_text_replaced(v, keep) for k, v in o.items()}
    if isinstance(o, list):
        return [every_text_replaced(v, keep) for v in o]
    return PAYLOAD if isinstance(o, str) else o


@pytest.fixture(scope="module")
def cli_trace(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("trace") / "t.json"
    subprocess.run([sys.executable, "-m", "specviz", "run", "--prompt", "Hi there", "--batch-size", "2",
                    "--max-new-tokens", "8", "--draft", "ngram", "--out", str(out)],
                   cwd=browser.ROOT, check=True, capture_output=True, timeout=300)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def live_page(app_server):
    with browser.chromium() as tools:
        browser.open_live(tools, app_server.url)
        yield tools


def upload(tools: browser.DevTools, path) -> None:
    """Put ``path`` in the Live page's uploader, as choosing it in the file dialog does."""
    root = tools.call("DOM.getDocument", depth=-1)["root"]["nodeId"]
    node = tools.call("DOM.querySelector", nodeId=root,
                      selector='[data-testid="stFileUploaderDropzoneInput"]')["nodeId"]
    assert node, "no file input on the Live page"
    tools.call("DOM.setFileInputFiles", files=[str(path)], nodeId=node)


def settled(tools: browser.DevTools, title: str, until=lambda s: True, timeout: float = 90) -> dict:
    """The page's state once ``title`` is drawn, its script has finished and ``until`` holds."""
    def ready():
        s = tools.js(PAGE_STATE_JS)
        if s["exceptions"] or s["pwned"] or s["ran"]:
            return s  # ends the wait: the assertion says what it was
        return s if s["title"] == title and not s["running"] and until(s) else None

    browser.wait_for(ready, timeout, f"the page {title!r}")
    time.sleep(1.0)  # a late rerun (a fragment, the banner) would show its exception now
    return tools.js(PAGE_STATE_JS)


def assert_nothing_from_the_trace_ran(state: dict, page: str) -> None:
    assert state["exceptions"] == [], (page, state["exceptions"])
    assert not state["pwned"] and not state["ran"] and state["links"] == 0, (page, state)


def visit_every_page(tools: browser.DevTools) -> dict:
    """Each page through the sidebar (a client-side switch: the same session, the same trace)."""
    seen = {}
    for label, title in PAGES.items():
        assert tools.js(browser.nav_click_js(label)), label
        seen[label] = state = settled(tools, title)
        assert_nothing_from_the_trace_ran(state, label)
    return seen


def test_a_trace_with_html_in_every_text_is_refused_in_one_line_and_no_page_runs_it(cli_trace, live_page,
                                                                                     tmp_path):
    path = tmp_path / FILE_NAME
    path.write_text(json.dumps(every_text_replaced(cli_trace)))
    tools = live_page
    tools.js(f"""[...document.querySelectorAll('[data-testid="stSidebarNavLink"]')]
                 .find(a => a.innerText.trim().endsWith('Live')).click()""")
    settled(tools, PAGES["Live"])
    upload(tools, path)
    state = settled(tools, PAGES["Live"], until=lambda s: any("finish_reason" in e for e in s["errors"]))
    assert_nothing_from_the_trace_ran(state, "Live")
    [refusal] = [e for e in state["errors"] if "finish_reason" in e]
    assert "\n" not in refusal.strip(), refusal
    assert refusal.startswith(f"{FILE_NAME}: not a specviz trace: sequences[0].finish_reason must be one of"), refusal
    visit_every_page(tools)


def test_a_trace_with_html_in_its_texts_shows_them_literally_and_no_page_runs_it(cli_trace, live_page, tmp_path):
    path = tmp_path / FILE_NAME
    path.write_text(json.dumps(every_text_replaced(cli_trace, keep=("finish_reason",))))
    tools = live_page
    tools.js(f"""[...document.querySelectorAll('[data-testid="stSidebarNavLink"]')]
                 .find(a => a.innerText.trim().endsWith('Live')).click()""")
    settled(tools, PAGES["Live"])
    upload(tools, path)
    state = settled(tools, PAGES["Live"], until=lambda s: "showing upload" in s["text"])
    assert_nothing_from_the_trace_ran(state, "Live")
    assert state["errors"] == [], state["errors"]
    assert f"showing upload: {FILE_NAME}" in state["text"]
    assert f"policy={PAYLOAD}, mode={PAYLOAD}, target={PAYLOAD}, draft={PAYLOAD}" in state["text"]
    assert f"What is this draft: {PAYLOAD}" in state["text"]
    seen = visit_every_page(tools)
    torch_version = importlib.metadata.version("torch")
    assert torch_version in seen["Hardware"]["text"]  # the device table's Markdown shows its text as it is
