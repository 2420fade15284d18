"""The app's shared state: the session keys the pages agree on, the sidebar's values, and the
resources every session shares (the device lock, what the device process said about models).
Only this module touches Streamlit; the device client (specviz.device.deviceclient) and the trace
helpers never do. Nothing here imports torch: every model lives in the device process.

The pages call everything through ``appstate``: the names re-exported below live in
specviz.device.deviceclient (jobs of the device process) and specviz.analysis.tracestats (numbers
derived from a trace).
"""

from __future__ import annotations

import threading

import streamlit as st

from specviz.analysis.divergence import divergence_rows  # noqa: F401
from specviz.device.deviceclient import (HEARTBEAT_TIMEOUT_S, PEAKS_JOB, RUNNING, DeviceBusy, LiveRun, ask, page_tokenizer,  # noqa: F401
                                      start_job, start_run, warm_up)
from specviz.device.worker import yield_cores  # noqa: F401
from specviz.app import exposure
from specviz.common import SpecvizError
from specviz.analysis.costs import trace_calibration
from specviz.analysis.tracestats import alpha_from_trace, decoder_for, draft_cost_ratio, predicted_speedup  # noqa: F401

# Session keys shared by app.py and the pages (sidebar widgets write them).
SIDEBAR_DEFAULTS = {"target": "default", "draft_kind": "default", "draft_spec": "", "device": "auto", "dtype": "auto",
                    "cuda_graphs": False}
TRACE_KEY = "trace"  # the trace every page shows: the last run, or an uploaded one
TRACE_SOURCE_KEY = "trace_source"
RUN_KEY = "live_run"

BANNER_POLL_S = 5.0  # how often another page's run banner polls the run (its heartbeat)


# The sidebar's draft kinds (short enough for its width) and the drafts that load no model of their own.
DRAFT_KINDS = {"default": "default", "ngram": "n-grams (prompt lookup)", "suffix": "suffix (earlier output)",
               "default+suffix": "default + suffix (per row)", "none": "none (regular)", "model": "a model SPEC…"}
MODEL_FREE_DRAFTS = ("none", "ngram", "suffix", "default", "default+suffix")  # no pair check: nothing or the default


def draft_spec(state) -> str:
    """The draft SPEC from the sidebar: default, ngram, none, or a model SPEC. SpecvizError when this
    bind may not load it (specviz.app.exposure): every run and job reads its draft here."""
    kind = state.get("draft_kind", "default")
    spec = (state.get("draft_spec") or "").strip() if kind == "model" else kind
    exposure.check_model_allowed(spec, exposure.exposed_now())
    return spec


# The Live page's request queue (specviz.app.queueview's controls): 0 requests = one static batch.
QUEUE_DEFAULTS = {"requests": 0, "arrival_rate": 0.0}


def queue_settings(state) -> dict:
    """RunConfig fields from the queue controls: requests (None = the batch size) and arrival_rate."""
    n = int(state.get("requests", 0) or 0)
    return {"requests": n or None, "arrival_rate": float(state.get("arrival_rate", 0.0) or 0.0)}


def has_cuda() -> bool | None:
    """Whether the device process sees a CUDA device; None while another job holds the device."""
    try:
        return bool(device_facts("auto", "auto").get("cuda"))
    except DeviceBusy:
        return None


def sidebar_values(state) -> dict:
    """The sidebar's settings. SpecvizError when this bind may not load the target (specviz.app.exposure):
    every run, job and cached model reads its target here."""
    values = {k: state.get(k, v) for k, v in SIDEBAR_DEFAULTS.items()}
    exposure.check_model_allowed(values["target"], exposure.exposed_now())
    return values


# ---- cached resources shared by every session ------------------------------------------------------

@st.cache_resource(show_spinner=False)
def model_lock() -> threading.Lock:
    """One lock per server process: held for a whole device job so sessions queue on the device."""
    return threading.Lock()


FACTS_TIMEOUT_S = 600.0  # a hub model's first download and conversion can take minutes
BUSY_WAIT_S = 3.0  # how long a page waits in line for facts before it draws without them (DeviceBusy)


@st.cache_data(show_spinner=False, max_entries=32)
def model_facts(spec: str, device: str, dtype: str) -> dict:
    """What the device process says of a model (name, size, dtype, device, vocabulary, tokenizer
    JSON), loading it there into its bounded model cache; SpecvizError with its one line (not kept)."""
    return ask("facts", model_lock(), "loading a model", FACTS_TIMEOUT_S, BUSY_WAIT_S, target=spec, device=device,
               dtype=dtype)


@st.cache_data(show_spinner=False, max_entries=8)
def device_facts(device: str, dtype: str) -> dict:
    """What the device process says of the device (specviz.device.devicejobs.device_facts)."""
    return ask("device", model_lock(), "reading the device", FACTS_TIMEOUT_S, BUSY_WAIT_S, device=device, dtype=dtype)


@st.cache_data(show_spinner=False, max_entries=32)
def pair_problem(target: str, draft: str, device: str, dtype: str) -> str | None:
    """Why this target/draft pair cannot run (e.g. incompatible tokenizers), or None."""
    return ask("pair_problem", model_lock(), "checking a model pair", FACTS_TIMEOUT_S, BUSY_WAIT_S, target=target,
               draft=draft, device=device, dtype=dtype)


def facts_tokenizer(facts: dict):
    """The tokenizer the pages decode a model's ids with (tokenizers.Tokenizer), or None."""
    return page_tokenizer(facts["name"], facts.get("tokenizer_json"))


def trace_costs(trace: dict | None):
    """Fitted costs (analytic.Costs) at the trace's batch size, from the calibration of the pair,
    device and dtype that made it; None when that pair is not calibrated."""
    cal = trace_calibration(trace)
    return None if cal is None else cal.costs(int(trace["config"].get("batch_size", 1)))


def init_state() -> None:
    """Session keys every page relies on (widgets set the sidebar ones).

    Also: with a pages/ folder beside app.py, Streamlit runs a page file on its own (old-style
    multipage mode, no app.py, no sidebar) until some run has called st.navigation — e.g. when
    the first request to a fresh server is /speedup. Then switch to app.py's navigation and rerun.
    """
    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:
        PagesManager = None
    if PagesManager is not None and PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()
    for k, v in SIDEBAR_DEFAULTS.items():
        st.session_state.setdefault(k, v)
    st.session_state.setdefault(TRACE_KEY, None)
    st.session_state.setdefault(TRACE_SOURCE_KEY, None)
    st.session_state.setdefault(RUN_KEY, None)
    for k, v in QUEUE_DEFAULTS.items():
        st.session_state.setdefault(k, v)


LAST_RUN_PROMPTS = "the last run's prompts"  # a measuring page's first prompt choice once a run exists


def follow_last_run(keys: dict[str, tuple[str, int, int]], prompts_key: str) -> list[str]:
    """Set a measuring page's widgets to the last run's settings, once per new run: ``keys`` maps a widget
    key to (the trace config field, low, high) it takes, clamped to the widget's range; ``prompts_key``
    gets LAST_RUN_PROMPTS. Returns the last run's prompts (distinct, in order; [] without a run)."""
    trace = st.session_state.get(TRACE_KEY)
    if trace is None:
        return []
    prompts = list(dict.fromkeys(s.get("prompt", "") for s in trace.get("sequences", []) if s.get("prompt")))
    seen = st.session_state.setdefault("_followed_runs", {})
    if seen.get(prompts_key) is not trace:
        seen[prompts_key] = trace
        cfg = trace.get("config", {})
        for key, (field, low, high) in keys.items():
            if isinstance(cfg.get(field), (int, float)):
                st.session_state[key] = min(max(int(cfg[field]), low), high)
        if prompts:
            st.session_state[prompts_key] = LAST_RUN_PROMPTS
    return prompts


def session_id() -> str | None:
    """This browser session's id (Streamlit's), or None outside a script run."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else None


def current_run() -> LiveRun | None:
    """This session's run. Looking at it is the page's heartbeat: every script run and live redraw
    of the session passes here, and a run that no page looks at stops itself (specviz.device.deviceclient)."""
    run = st.session_state.get(RUN_KEY)
    if run is not None:
        run.beat()
    return run


def current_trace() -> dict | None:
    """The trace pages show: a finished run is adopted from the worker once it is done."""
    run = current_run()
    if run is not None and not run.running and run.trace is not None and not getattr(run, "_adopted", False):
        st.session_state[TRACE_KEY] = run.trace
        st.session_state[TRACE_SOURCE_KEY] = "run"
        st.session_state["regular_trace"] = run.regular_trace
        run._adopted = True
    return st.session_state.get(TRACE_KEY)


def loaded_target() -> dict | None:
    """The facts of the sidebar's target if it loads without error, else None."""
    try:
        v = sidebar_values(st.session_state)  # refuses a target this bind does not serve
        return model_facts(v["target"], v["device"], v["dtype"])
    except Exception:
        return None


def trace_decoder(trace: dict | None):
    """decode(ids) with the tokenizer that made ``trace``, when we have it; else None (ids shown)."""
    run = current_run()
    if run is not None and run.tokenizer is not None and trace is not None and (
            trace is run.trace or trace.get("partial")):
        return decoder_for(run.tokenizer)
    target = loaded_target()
    if target is not None and trace is not None:
        name = trace.get("config", {}).get("target_name")
        if name in (None, target["name"]):
            return decoder_for(facts_tokenizer(target))
    return None


def run_banner() -> None:
    """On the other pages: what the background run is doing (a page switch does not stop it).
    The banner redraws itself while the run goes, which keeps the run's heartbeat going."""
    run = current_run()
    if run is not None and run.running:
        st.fragment(_banner, run_every=BANNER_POLL_S)()


def _banner() -> None:
    run = current_run()
    if run is not None and run.running:
        st.info(f"A run is {run.status} in the background (b={run.cfg.batch_size}, "
                f"k={run.cfg.draft_length}); switching pages does not stop it. Stop it on the Live page.")


# While a run goes, the Live page's fragments redraw every second or so. Streamlit fades each
# element of a rerunning fragment ("stale": an opacity transition per element) and animates its
# status widget's running icon; in the browser every fade is a composited animation (the DevTools
# trace of a run: ~150 opacity animations, frames at up to 60 a second), CPU the decoder loses.
QUIET_REDRAWS_CSS = """<style>
[data-testid="stElementContainer"], [data-testid="stStatusWidget"] { transition: none !important; animation: none !important; }
[data-testid="stElementContainer"][data-stale="true"] { opacity: 1 !important; }
[data-testid="stStatusWidgetRunningIcon"] { display: none !important; }
</style>"""


def quiet_redraws() -> None:
    """No fades or running animations on this page until its next full rerun."""
    st.markdown(QUIET_REDRAWS_CSS, unsafe_allow_html=True)
