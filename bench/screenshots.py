"""The README's screenshot and a screenshot of every page, from the real app in a real browser.

Starts `streamlit run app.py` and a headless chromium (tests/browser.py), and makes two runs on the
Live page, each in a fresh browser session:

  hero   a run where speculation pays: a predictable workload and a model-free draft at b = 1
         (default: the rewrite-text prompt set, the suffix draft, k = 12, 96 new tokens), race on. The
         top of the finished Live page is written to --hero (docs/screenshot.png), but only when the
         page measured a speedup of at least --min-speedup (1.0): the README shows a run that wins,
         and a run that lost says so and writes nothing.
  tour   the Live page's defaults, pressed as a newcomer would; then every page of the app, reached
         through the sidebar in the same session (so each opens on that run), one full-page
         screenshot each in --out (docs/screenshots/live.png, speedup-model.png, ...).

Both need an idle machine: another busy process makes the page report a slow, unreliable run.

    .venv/bin/python bench/screenshots.py [--only hero|tour] [--draft suffix] [--prompt-set rewrite-text]
"""

from __future__ import annotations

import argparse
import base64
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import browser  # noqa: E402  (tests/browser.py: the server + chromium driver)

from specviz.app.state import DRAFT_KINDS  # noqa: E402
from specviz.bounds import SLIDERS  # noqa: E402
from specviz.prompts.sets import PROMPT_SETS, SET_NAMES  # noqa: E402

PAGES = ["Live", "Speedup model", "Sweep", "Correctness", "Hardware", "Server", "Lessons"]  # app.py's navigation
SETTLE_S = 2.0  # plotly lays out after the page's last rerun


def capture(tools: browser.DevTools, path: Path, height: int | None = None) -> None:
    """A PNG of the page: its top ``height`` pixels, or all of it."""
    if height is None:
        shot = tools.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
    else:
        width = tools.js("document.documentElement.clientWidth")
        shot = tools.call("Page.captureScreenshot", format="png",
                          clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", flush=True)


def finished_run(tools: browser.DevTools) -> dict:
    browser.press_run_and_wait(tools, load_timeout=180, run_timeout=600)
    browser.wait_for(lambda: len(tools.js(browser.CHART_TITLES_JS) or []) >= 6, 60, "the charts")
    time.sleep(SETTLE_S)
    return browser.metrics(tools)


def speedup(metrics: dict) -> float | None:
    m = re.match(r"([0-9.]+)x", metrics.get("measured speedup", ""))
    return float(m.group(1)) if m else None


def hero(url: str, a) -> int:
    title = next(t for t in PROMPT_SETS if SET_NAMES.get(a.prompt_set) == t or t == a.prompt_set)
    with browser.chromium(width=1600, height=1400) as tools:
        browser.open_live(tools, url)
        tools.choose("Prompt set", title.split(" (")[0])
        tools.choose("Draft", DRAFT_KINDS[a.draft])
        tools.set_slider("Batch size b", a.batch_size, SLIDERS["batch_size"][0])
        tools.set_slider("Draft length k", a.draft_length, SLIDERS["draft_length"][0])
        tools.set_slider("Max new tokens", a.max_new_tokens, SLIDERS["max_new_tokens"][0])
        metrics = finished_run(tools)
        won = speedup(metrics)
        print(f"hero run: {a.prompt_set}, draft {a.draft}, b = {a.batch_size}, k = {a.draft_length}, "
              f"{a.max_new_tokens} tokens: measured {metrics.get('measured speedup')}, "
              f"{metrics.get('tokens/s')} tokens/s", flush=True)
        if won is None or won < a.min_speedup:
            print(f"not written: the run measured {won}x, below --min-speedup {a.min_speedup} (a busy machine?)")
            return 1
        tools.js("window.scrollTo(0, 0)")
        capture(tools, a.hero, height=1400)
    return 0


def tour(url: str, a) -> int:
    with browser.chromium(width=1600, height=1200) as tools:
        browser.open_live(tools, url)
        metrics = finished_run(tools)
        print(f"default run: measured {metrics.get('measured speedup')}, {metrics.get('tokens/s')} tokens/s", flush=True)
        for page in PAGES:
            if page != "Live":
                browser.wait_for(lambda: tools.js(browser.nav_click_js(page)), 30, f"the sidebar link to {page}")
                browser.wait_for(lambda: not tools.js("document.querySelector('[data-testid=\"stStatusWidget\"]')"),
                                 120, f"{page} to finish drawing")
                time.sleep(SETTLE_S)
            browser.no_exception(tools)
            capture(tools, a.out / (page.lower().replace(" ", "-") + ".png"))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", choices=["hero", "tour"], help="make one of the two (default: both)")
    p.add_argument("--hero", type=Path, default=ROOT / "docs" / "screenshot.png", help="the README's screenshot")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots", help="the tour's folder")
    p.add_argument("--prompt-set", default="rewrite-text", help="the hero run's prompt set (a short name)")
    p.add_argument("--draft", default="suffix", choices=list(DRAFT_KINDS), help="the hero run's draft")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--draft-length", type=int, default=12)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--min-speedup", type=float, default=1.0, help="write the hero only if the page measured this")
    a = p.parse_args()
    code = 0
    with browser.streamlit_server() as url:
        if a.only in (None, "hero"):
            code |= hero(url, a)
        if a.only in (None, "tour"):
            code |= tour(url, a)
    return code


if __name__ == "__main__":
    sys.exit(main())
