"""specviz: the Streamlit entry point (navigation + the shared sidebar: models and device)."""

import streamlit as st
from streamlit import config as st_config

from specviz.app import state as appstate
from specviz.figures.safetext import md_escape
from specviz.common import SpecvizError

st.set_page_config(page_title="specviz: speculative decoding, live", page_icon="⏩", layout="wide",
                   initial_sidebar_state="expanded")
if st_config.get_option("runner.postScriptGC"):  # a server started outside this folder missed .streamlit/config.toml
    try:  # a full gc.collect(2) after every rerun takes a core from the decoder (see that file)
        st_config.set_option("runner.postScriptGC", False)
    except Exception:  # an internal API: if a Streamlit release moves it, the app only redraws slower
        pass
appstate.init_state()

pages = [
    st.Page("pages/live.py", title="Live", icon=":material/play_circle:", default=True),
    st.Page("pages/speedup.py", title="Speedup model", icon=":material/show_chart:"),
    st.Page("pages/sweep.py", title="Sweep", icon=":material/grid_on:"),
    st.Page("pages/correctness.py", title="Correctness", icon=":material/rule:"),
    st.Page("pages/hardware.py", title="Hardware", icon=":material/memory:"),
    st.Page("pages/server.py", title="Server", icon=":material/dns:"),
    st.Page("pages/lessons.py", title="Lessons", icon=":material/school:"),
]
page = st.navigation(pages)

# ---- shared sidebar: the model pair and where it runs ------------------------------------------
with st.sidebar:
    st.header("Models")
    st.text_input("Target SPEC", key="target",
                  help="`default` (packaged SmolLM2-135M-Instruct), a hub id[@revision], a local HF directory, or a .gguf file")
    # Option texts short enough for the sidebar's width (longer ones were cut off); the help says the rest.
    st.selectbox("Draft", ["default", "ngram", "suffix", "none", "model"], key="draft_kind",
                  format_func=appstate.DRAFT_KINDS.get,
                  help="`default` = the best cheap draft measured for the target: the shipped distilled draft for "
                       "the packaged target in bf16, the target itself in bf16 when it runs in fp32, else "
                       "prompt-lookup n-grams. `suffix` = suffix decoding: continuations of this request and of "
                       "earlier outputs, no model. `none` = regular decoding.")
    if st.session_state.get("draft_kind") == "model":
        st.text_input("Draft model SPEC", key="draft_spec", placeholder="org/name, a directory or a .gguf file")
    c1, c2 = st.columns(2)
    c1.selectbox("Device", ["auto", "cpu", "cuda"], key="device")
    c2.selectbox("dtype", ["auto", "float32", "bfloat16"], key="dtype")
    cuda = appstate.has_cuda()  # None: another job holds the device, which has not said yet
    st.checkbox("CUDA graphs", key="cuda_graphs", disabled=not cuda,
                help="replay the target's and the draft's forwards as CUDA graphs over a static KV cache: the same "
                     "tokens, less host work per step" if cuda else "needs a CUDA GPU: this machine has none"
                if cuda is False else "the device is busy with another job: this switch is offered once it ends")
    st.checkbox("Compiled forward", key="compile_forward",
                help="compile the target's and the draft's layers with torch.compile over a static KV cache: the same "
                     "tokens; the first run compiles each step shape (~15 s each on a 2-core CPU), later runs load "
                     "them from the disk cache; runs eagerly, saying why, where no C++ compiler is found")

    try:  # a SPEC this bind does not serve (specviz.app.exposure) stops here: no page runs with it
        v = appstate.sidebar_values(st.session_state)
        draft = appstate.draft_spec(st.session_state)
    except SpecvizError as e:
        st.error(str(e))
        st.stop()
    # The Server page reads a vLLM server's counters: it needs no model, so none loads for it.
    if page.title == "Server":
        st.caption("the Server page loads no model: it reads a vLLM server's /metrics")
    else:
        try:
            with st.spinner(f"loading {v['target']}…"):
                target = appstate.model_facts(v["target"], v["device"], v["dtype"])
            st.caption(f"target: **{md_escape(target['name'])}** — {target['num_params'] / 1e6:.0f}M params, "
                       f"{target['dtype']} on {target['device']}")
            if st.session_state.get("draft_kind") == "model" and not draft:
                st.warning("enter a draft model SPEC")
            elif draft not in appstate.MODEL_FREE_DRAFTS:
                with st.spinner(f"loading draft {draft}…"):
                    problem = appstate.pair_problem(v["target"], draft, v["device"], v["dtype"])
                if problem:
                    st.error(problem)
                else:
                    st.caption(f"draft: **{draft}**")
        except appstate.DeviceBusy as e:  # a page that needs the facts says so; the others draw as they are
            st.caption(f"target: **{md_escape(v['target'])}** (its details once the device is free: {e})")
        except SpecvizError as e:
            st.error(f"target not loaded: {e}")
        except Exception as e:  # a broken model file, a missing package...: the app keeps working
            st.error(f"target not loaded: {type(e).__name__}: {e}")

page.run()
