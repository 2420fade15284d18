"""Lessons: short guided steps through the Live page for a class. The steps are data
(specviz.app.lessons); this page draws one at a time and puts its settings into the Live controls."""

import streamlit as st

from specviz.app import lessons, state as appstate

appstate.init_state()
st.title("Lessons")
appstate.run_banner()
st.markdown(lessons.INTRO)

COUNT = len(lessons.LESSONS)
st.session_state.setdefault("lesson", 0)


def move(delta: int) -> None:
    st.session_state["lesson"] = min(max(st.session_state["lesson"] + delta, 0), COUNT - 1)


def set_up(i: int) -> None:
    """The step's settings into the Live page's controls and the sidebar (their session keys)."""
    st.session_state.update(lessons.LESSONS[i].settings)
    st.session_state["lesson_set_up"] = i


c1, c2, c3 = st.columns([6, 1, 1])
i = c1.selectbox("Step", range(COUNT), key="lesson", format_func=lambda j: f"{j + 1}. {lessons.LESSONS[j].title}")
c2.button("◀ Previous", key="lesson_prev", on_click=move, args=(-1,), disabled=i <= 0)
c3.button("Next ▶", key="lesson_next", on_click=move, args=(1,), disabled=i >= COUNT - 1)

step = lessons.LESSONS[i]
st.subheader(f"Step {i + 1} of {COUNT}: {step.title}")
st.markdown(f"**Touch.** {step.touch}\n\n**Run.** {step.run}\n\n**Look for.** {step.look}")
st.button("Set up this step", key="lesson_setup", type="primary", on_click=set_up, args=(i,),
          help="puts this step's settings into the Live controls and the sidebar's draft: " + lessons.settings_text(step))
if st.session_state.get("lesson_set_up") == i:
    st.success(f"Set: {lessons.settings_text(step)}. Now press Run on the Live page.")
    st.page_link("pages/live.py", label="Go to Live", icon=":material/play_circle:")

st.markdown(f"**Check question.** {step.question}")
with st.expander("Show the answer"):
    st.markdown(step.answer)
