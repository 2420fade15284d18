"""A real browser: `streamlit run app.py` + headless Debian chromium over the DevTools protocol
(tests/browser.py).

Presses Run on the Live page with the default model (a short run: batch 2, 12 new tokens), waits
until the run, decoded by the app's worker process, has finished and the charts have drawn,
checks there is no error element and that the acceptance heatmap and the step timeline are on the
page, and takes a screenshot. Tests of what the finished page says read
``finished_live_page.text`` (the main area's visible text) and ``.metrics`` (st.metric tiles).
Skips (with the reason) when /usr/bin/chromium is absent (`apt-get install -y chromium`).
"""

from __future__ import annotations

import base64
import dataclasses
import os
import time

import browser
import pytest

pytestmark = pytest.mark.skipif(not os.path.exists(browser.CHROMIUM),
                                reason=f"{browser.CHROMIUM} not installed (apt-get install -y chromium)")


@dataclasses.dataclass
class FinishedPage:
    tools: browser.DevTools
    text: str  # the main area's visible text after the run
    metrics: dict  # metric label -> shown value
    chart_titles: list
    errors: list  # error alerts and exceptions shown


@pytest.fixture(scope="module")
def finished_live_page(app_server):
    """One short Live run in a real browser on the real server; the page as it stands after it."""
    with browser.chromium() as tools:
        browser.open_live(tools, app_server.url)
        tools.set_slider("Batch size", 2, 1)  # a short run: the CPU may be shared
        tools.set_slider("Max new tokens", 12, 1)
        time.sleep(1.0)  # let the last slider value reach the server
        browser.press_run_and_wait(tools, load_timeout=120, run_timeout=240)
        titles = browser.wait_for(lambda: (t := tools.js(browser.CHART_TITLES_JS)) and len(t) >= 8 and t, 30,
                                  "8 drawn charts")
        time.sleep(1.0)  # let plotly finish laying out before the screenshot
        yield FinishedPage(tools, browser.page_text(tools), browser.metrics(tools), titles,
                           tools.js(browser.ERRORS_JS))


def test_live_run_in_a_real_browser_draws_the_charts(finished_live_page, tmp_path):
    page = finished_live_page
    assert page.errors == []
    assert any(t.startswith("Acceptance per sequence and step") for t in page.chart_titles), page.chart_titles
    assert any(t.startswith("Step timeline") for t in page.chart_titles), page.chart_titles
    assert page.tools.js("document.querySelectorAll('.heatmaplayer image, .heatmaplayer .hm').length") > 0
    assert float(page.metrics["tokens/s"]) > 0, page.metrics
    shot = page.tools.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
    screenshot = tmp_path / "live.png"  # the README's screenshot is made by a script, not by the tests
    screenshot.write_bytes(base64.b64decode(shot["data"]))
    assert screenshot.stat().st_size > 10_000


def test_the_finished_live_page_explains_what_it_shows(finished_live_page):
    """Issue 13: after a default run (the race is on by default) the page shows a measured speedup
    beside the predicted one, the time per phase, whether the output changed, and what each
    colour of the text means."""
    from specviz.figures.tokentext import DEFINITIONS

    page = finished_live_page
    assert page.metrics["measured speedup"].endswith("x"), page.metrics
    predicted = next(v for k, v in page.metrics.items() if k.startswith("predicted speedup"))  # "(uncalibrated)" too
    assert predicted.endswith("x"), page.metrics
    assert "vs predicted" in page.text
    assert any(t.startswith("Where the time went") for t in page.chart_titles), page.chart_titles
    assert "Output identical to regular decoding:" in page.text and " rows." in page.text
    for kind, sentence in DEFINITIONS.items():
        assert f"{kind}: {sentence}" in page.text, kind
