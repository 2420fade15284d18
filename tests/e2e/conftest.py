"""One `streamlit run app.py` (tests/browser.py) for the browser tests that need no server of their own:
starting it, the first page's imports and the device process's model load are paid once, not per file.
Each test opens its own page (a new Streamlit session) in its own chromium; a test that needs another
environment (tests/e2e/test_browser_firstcal.py) starts its own server."""

from __future__ import annotations

import dataclasses

import browser
import pytest


@dataclasses.dataclass
class Server:
    url: str
    pid: int  # the server process (tests read its memory map)


@pytest.fixture(scope="session")
def app_server():
    with browser.streamlit_server() as url:
        yield Server(url, browser.last_server_pid)
