"""The Lessons page in a real browser (tests/browser.py): every step set up, its answer opened, Next to
the last, without an error element; then a step set up again and "Go to Live" shows its settings in the Live
controls.
Skips (with the reason) when /usr/bin/chromium is absent."""

from __future__ import annotations

import json
import os

import browser
import pytest

from specviz.app import lessons
from specviz.bounds import SLIDERS

pytestmark = pytest.mark.skipif(not os.path.exists(browser.CHROMIUM),
                                reason=f"{browser.CHROMIUM} not installed (apt-get install -y chromium)")


def click_button(tools, label: str) -> bool:
    return tools.js(f"""(() => {{ const b = [...document.querySelectorAll('button')]
        .find(e => e.innerText.trim() === {json.dumps(label)}); if (!b || b.disabled) return false; b.click(); return true; }})()""")


def shows(tools, text: str) -> bool:
    return text in browser.page_text(tools)


def test_the_lessons_page_walks_every_step_in_a_real_browser(app_server):
    count = len(lessons.LESSONS)
    with browser.chromium() as tools:
        tools.call("Page.navigate", url=app_server.url + "lessons")
        for i, step in enumerate(lessons.LESSONS):
            browser.wait_for(lambda: browser.no_exception(tools) or shows(tools, f"Step {i + 1} of {count}"), 90,
                             f"step {i + 1}")
            browser.wait_for(lambda: click_button(tools, "Set up this step"), 30, "Set up this step")
            browser.wait_for(lambda: shows(tools, "Now press Run on the Live page"), 30, f"step {i + 1} set up")
            assert not shows(tools, step.answer[:60])  # behind the expander until asked for
            tools.js("""[...document.querySelectorAll('[data-testid="stExpander"] summary')]
                        .find(e => e.innerText.includes('Show the answer')).click()""")
            browser.wait_for(lambda: shows(tools, step.answer[:60]), 30, f"step {i + 1}'s answer")
            assert tools.js(browser.ERRORS_JS) == [], step.title
            if i < count - 1:
                browser.wait_for(lambda: click_button(tools, "Next ▶"), 30, "Next")
        # back one step (the suffix draft on text rewrites: k = 12, not Live's default) and set it up again
        browser.wait_for(lambda: click_button(tools, "◀ Previous"), 30, "Previous")
        browser.wait_for(lambda: shows(tools, f"Step {count - 1} of {count}"), 30, f"step {count - 1}")
        browser.wait_for(lambda: click_button(tools, "Set up this step"), 30, "Set up this step")
        browser.wait_for(lambda: shows(tools, "Now press Run on the Live page"), 30, "the step set up")
        tools.js("""[...document.querySelectorAll('a')].find(a => a.innerText.includes('Go to Live')).click()""")
        browser.wait_for(lambda: tools.js(browser.RUN_BUTTON_JS + " !== undefined"), 90, "the Live page")
        k = f"""[...document.querySelectorAll('[data-testid="stSlider"]')].find(e => e.innerText.startsWith('Draft length k'))
                ?.querySelector('[aria-valuetext]')?.getAttribute('aria-valuetext')"""
        want = str(lessons.LESSONS[-2].settings["draft_length"])
        assert want != str(SLIDERS["draft_length"][2])  # a value Live would not show by itself
        browser.wait_for(lambda: tools.js(k) == want, 30, f"Live's draft length at {want}")
        assert tools.js(browser.ERRORS_JS) == []
