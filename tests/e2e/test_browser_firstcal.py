"""The first-run calibration in a real browser (tests/browser.py): on a server whose calibration cache is
empty, a default Live run ends with "(uncalibrated)" beside the prediction and a calibration under way, and
the page, polling the calibration job, draws the same run's prediction again from the new record without
a reload or a new run. The server's cache is a scratch folder that sees the converted packaged model.
Skips (with the reason) when /usr/bin/chromium is absent."""

from __future__ import annotations

import os
import time

import browser
import pytest

from specviz.common import cache_dir

pytestmark = [pytest.mark.skipif(not os.path.exists(browser.CHROMIUM),
                                 reason=f"{browser.CHROMIUM} not installed (apt-get install -y chromium)"),
              pytest.mark.slow]

MODEL = "SmolLM2-135M-Instruct"


def prediction(tools) -> tuple[str, str] | None:
    return next(((k, v) for k, v in browser.metrics(tools).items() if k and k.startswith("predicted speedup")), None)


def test_the_live_page_shows_uncalibrated_then_the_calibrated_prediction_by_itself(tmp_path):
    if (cache_dir() / MODEL).is_dir():
        (tmp_path / MODEL).symlink_to(cache_dir() / MODEL)
    env = {"SPECVIZ_CACHE": str(tmp_path), "SPECVIZ_AUTO_CALIBRATE": "1"}
    with browser.streamlit_server(env=env) as url, browser.chromium() as tools:
        browser.open_live(tools, url)
        tools.set_slider("Batch size", 2, 1)
        tools.set_slider("Max new tokens", 12, 1)
        time.sleep(1.0)  # let the last slider value reach the server
        browser.press_run_and_wait(tools, load_timeout=120, run_timeout=240)
        first = browser.wait_for(lambda: browser.no_exception(tools) or prediction(tools), 30, "the prediction tile")
        assert first[0] == "predicted speedup (uncalibrated)", first
        assert "Calibrating this pair's costs on this machine" in browser.page_text(tools)
        after = browser.wait_for(lambda: browser.no_exception(tools) or ((p := prediction(tools)) and
                                 p[0] == "predicted speedup" and p), 180, "the calibrated prediction", interval=1.0)
        assert after[1] not in ("", "—"), after
        text = browser.page_text(tools)
        assert "Calibrated this pair just now" in text and "Calibrating this pair's costs" not in text
        assert tools.js(browser.ERRORS_JS) == []
        assert list((tmp_path / "calibration").glob(f"{MODEL}__*.json"))  # the record is in the server's cache
