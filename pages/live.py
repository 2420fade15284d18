"""Live page: run batched speculative decoding on the chosen pair and watch it."""

import streamlit as st

from specviz.runner import RunConfig, load_pair, run

st.title("specviz — live batched speculative decoding")
prompt = st.text_area("Prompt", "Explain speculative decoding in two sentences.", key="prompt")
b = st.slider("Batch size", 1, 64, 1, key="batch_size")
k = st.slider("Draft length (0 = regular decoding)", 0, 16, 4, key="draft_length")
if st.button("Run", key="run"):
    cfg = RunConfig(prompts=[prompt], batch_size=b, draft_length=k, draft="ngram", max_new_tokens=48)
    try:
        cfg.validate()
        target, proposer = load_pair(cfg)
        trace = run(cfg, target, proposer)
    except Exception as e:  # shown in the page; the app keeps working
        st.error(str(e))
    else:
        st.metric("tokens/s", f"{trace['summary']['tokens_per_s']:.1f}")
        for s in trace["sequences"]:
            st.write(s["text"])
