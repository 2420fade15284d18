"""Streamlit's post-rerun gc.collect(2) is off: it took 74% of the server's CPU during a Live run
(issue 13, BENCHMARKS.md), cores the decode worker needs."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
READ = "import streamlit.config as c; c.get_config_options(force_reparse=True); print(c.get_option('runner.postScriptGC'))"


def option_seen_from(cwd) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    return subprocess.run([sys.executable, "-c", READ], cwd=cwd, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_server_started_from_the_checkout_reads_post_script_gc_off():
    assert option_seen_from(ROOT) == "False"


def test_started_elsewhere_the_option_is_on_until_the_app_turns_it_off():
    with tempfile.TemporaryDirectory() as d:
        assert option_seen_from(d) == "True"  # so the file in the checkout is what turns it off


@pytest.mark.usefixtures("navigation_owns_the_pages")
def test_the_app_turns_post_script_gc_off_when_the_config_file_was_missed():
    from streamlit import config
    from streamlit.testing.v1 import AppTest

    before = config.get_option("runner.postScriptGC")
    config.set_option("runner.postScriptGC", True)
    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
        at.run()
        assert not at.exception
        assert config.get_option("runner.postScriptGC") is False
    finally:
        config.set_option("runner.postScriptGC", before)
