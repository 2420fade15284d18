"""specviz: the Streamlit entry point (navigation + the shared sidebar)."""

import streamlit as st

st.set_page_config(page_title="specviz", layout="wide")
pages = [st.Page("pages/live.py", title="Live", default=True)]
st.navigation(pages).run()
