"""The Recommend panel the Speedup and Server pages share: ``specviz tune``'s answer (specviz.peers.tune) for
the acceptance and costs the page has, drawn as one table of k per batch size with its predicted goodput,
where speculation should be off, and the settings of the engine chosen in the panel with their one-line
explanation. The page builds the tune.Inputs (a trace's, or a server's counters since attached); the
drawing is here once."""

from __future__ import annotations

import streamlit as st

from specviz.analysis.engineconfig import ENGINES
from specviz.figures import runlabel
from specviz.figures.safetext import md_escape
from specviz.peers import tune

ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp", "transformers": "transformers"}
VERSION_EXAMPLE = "0.32.0"


def rows(ans: dict, unit: str, calibrated: bool) -> list[dict]:
    """The table: one row per batch size (k "off" where regular decoding is predicted faster)."""
    return [{"batch size": x["batch_size"], "k": "off" if x["off"] else str(x["k"]),
             f"goodput ({unit})": round(x["goodput"], 2),
             "90% interval": "-" if not x["interval"] else f"{x['interval'][0]:.2f} – {x['interval'][1]:.2f}",
             runlabel.prediction_label("speedup", calibrated): f"{x['speedup']:.2f}x", "P(k best)": x["p_best"]}
            for x in ans["recommendations"]]


def summary(ans: dict) -> str:
    """One caption (Markdown, escaped where it quotes text): the sample, the costs, the statistics, where
    speculation is off, and the oracle bound when a trace gives one."""
    s = ans["statistics"] or {}
    off = ans["off_at"]
    return (f"From {s.get('rounds', 0)} rounds; costs: {md_escape(ans['costs'])}. Acceptance per position "
            + " ".join(f"{p:.2f}" for p in s.get("acceptance_per_position", [])) + "; zero-accept rounds "
            + (f"{s['zero_accept_rate']:.0%}" if s.get("zero_accept_rate") is not None else "–")
            + ", drafted tokens wasted "
            + (f"{s['wasted_draft_share']:.0%}" if s.get("wasted_draft_share") is not None else "–") + ". "
            + (f"Speculation off at batch size {', '.join(map(str, off))}: predicted slower than regular decoding "
               "there. " if off else "Speculation is predicted to pay at every batch size shown. ")
            + (f"Oracle bound (best k per step in hindsight): {ans['oracle']['oracle']:.2f} vs the best fixed "
               f"k = {ans['oracle']['best_fixed_k']}: {ans['oracle']['best_fixed']:.2f}." if ans["oracle"] else ""))


def panel(inputs: tune.Inputs, key: str, calibrated: bool) -> dict:
    """Draw the panel (widgets keyed ``{key}_engine``, ``{key}_vllm``, ``{key}_table``) and return the answer.
    ``inputs.vllm_version`` (a server's own) is what an empty version box stands for."""
    reported = inputs.vllm_version
    r1, r2 = st.columns(2)
    engine = r1.selectbox("engine", ENGINES, key=f"{key}_engine", format_func=ENGINE_NAMES.get)
    typed = r2.text_input("vLLM version", key=f"{key}_vllm", placeholder=reported or VERSION_EXAMPLE,
                          help="from 0.24.0 on the settings carry a per-batch-size schedule"
                               + ("; empty: the version the server reports" if reported else ""))
    inputs.vllm_version = typed.strip() or reported
    ans = tune.answer(inputs, engine)
    st.dataframe(rows(ans, inputs.unit, calibrated), hide_index=True, key=f"{key}_table")
    st.caption(summary(ans))
    settings = ans["settings"]
    if settings["text"]:
        st.code(settings["text"], language="json" if settings["text"].startswith("{") else "bash")
    st.caption(md_escape(settings["explanation"]))
    return ans
