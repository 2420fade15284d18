"""The Lessons page walks its steps, each step's "Set up this step" puts its settings into the Live
controls and the sidebar, and docs/teaching.md walks the same steps (AppTest, the packaged default model)."""

from __future__ import annotations

import re

import pytest

import locations

pytest.importorskip("streamlit")

from specviz.app import lessons  # noqa: E402
from test_app import new_app  # noqa: E402

pytestmark = pytest.mark.usefixtures("navigation_owns_the_pages")
PAGE = "pages/lessons.py"


def test_five_to_seven_steps_each_with_every_part():
    assert 5 <= len(lessons.LESSONS) <= 7
    for step in lessons.LESSONS:
        assert all(getattr(step, f).strip() for f in ("title", "touch", "run", "look", "question", "answer")), step.title
        assert step.question.endswith("?"), step.title


def test_every_setting_a_step_sets_is_a_control_of_live_or_the_sidebar():
    sources = "".join((locations.ROOT / f).read_text() for f in ("pages/live.py", "app.py", "specviz/app/queueview.py"))
    keys = set(re.findall(r'key="([a-z_]+)"', sources))
    for step in lessons.LESSONS:
        assert set(step.settings) <= keys, (step.title, set(step.settings) - keys)


def test_the_page_walks_every_step_sets_each_up_and_reveals_its_answer():
    at = new_app()
    at.switch_page(PAGE).run()
    assert not at.exception and at.title[0].value == "Lessons"
    for i, step in enumerate(lessons.LESSONS):
        assert any(f"Step {i + 1} of {len(lessons.LESSONS)}: {step.title}" in h.value for h in at.subheader)
        assert any(step.question in m.value for m in at.markdown)
        assert any(step.answer in m.value for e in at.expander for m in e.markdown)  # behind "Show the answer"
        at.button(key="lesson_setup").click().run()
        assert not at.exception, (step.title, [e.value for e in at.exception])
        assert any("Now press Run on the Live page" in s.value for s in at.success)
        assert all(at.session_state[k] == v for k, v in step.settings.items()), step.title
        if i < len(lessons.LESSONS) - 1:
            at.button(key="lesson_next").click().run()
    assert at.button(key="lesson_next").disabled


def test_set_up_shows_the_steps_settings_in_the_live_controls():
    at = new_app()
    at.switch_page(PAGE).run()
    alpha = next(i for i, s in enumerate(lessons.LESSONS) if s.settings["synthetic_on"])
    at.selectbox(key="lesson").set_value(alpha).run()
    at.button(key="lesson_setup").click().run()
    at.switch_page("pages/live.py").run()
    assert not at.exception
    want = lessons.LESSONS[alpha].settings
    assert at.slider(key="draft_length").value == want["draft_length"]
    assert at.checkbox(key="synthetic_on").value is True
    assert at.slider(key="synthetic_alpha").value == pytest.approx(want["synthetic_alpha"])
    suffix = next(i for i, s in enumerate(lessons.LESSONS) if s.settings["draft_kind"] == "suffix")
    at.switch_page(PAGE).run()
    at.selectbox(key="lesson").set_value(suffix).run()
    at.button(key="lesson_setup").click().run()
    at.switch_page("pages/live.py").run()
    assert at.selectbox(key="draft_kind").value == "suffix"
    assert at.selectbox(key="prompt_set").value.startswith("rewrite text")
    assert at.text_area(key="prompts_text").value == lessons.LESSONS[suffix].settings["prompts_text"]
    assert at.checkbox(key="synthetic_on").value is False


def test_the_teaching_guide_walks_the_same_steps():
    guide = (locations.ROOT / "docs" / "teaching.md").read_text()
    for step in lessons.LESSONS:
        assert step.title in guide, step.title
