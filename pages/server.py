"""Server: attach to any vLLM server (local or a cluster's) and watch its speculative decoding from
its /metrics, once a second, with the analytic model's prediction beside it and the k it recommends.
Until something answers at the address the page explains itself and, where vLLM is installed, starts
one (specviz.device.localvllm). No model loads here."""

import streamlit as st

from specviz.app import exposure, recommend, servermon, state as appstate
from specviz.device import localvllm
from specviz.figures import servercharts
from specviz.common import SpecvizError
from specviz.peers import metrics
from specviz.peers.metrics import PER_POSITION

appstate.init_state()
st.title("Server")
appstate.run_banner()
for key, value in {"server_url": servermon.DEFAULT_URL, "server_poll": True, "server_window": 5,
                   "server_costs": "entered", "server_step_ms": 20.0, "server_redraw": 2, "server_c": 0.05, "server_knee": 64,
                   "server_overhead_ms": 0.0}.items():
    st.session_state.setdefault(key, value)

st.markdown("Reads a **vLLM** server's Prometheus `/metrics` every second — the one `python -m specviz vllm serve` "
            "starts, or any deployment you can reach — and plots what its speculative decoding does. "
            "Nothing is decoded here and no model is loaded.")
c1, c2, c3, c4 = st.columns([3, 1, 1, 1])
c1.text_input("vLLM server address", key="server_url", help="e.g. http://127.0.0.1:8000 or http://gpu-node:8000; "
              "/metrics is added when missing")
c2.slider("window (s)", 1, 30, key="server_window", help="each point is what happened over this many seconds")
c3.selectbox("redraw charts every (s)", [1, 2, 5, 10], key="server_redraw")
c4.toggle("poll every second", key="server_poll")

with st.expander("Costs for the model's prediction", expanded=False):
    files = servermon.calibration_files()
    st.radio("costs", ["entered"] + list(files), key="server_costs", horizontal=True,
             help="a calibration from `python -m specviz calibrate`, or a roofline from the numbers below")
    e1, e2, e3, e4 = st.columns(4)
    e1.number_input("target step at b=1 (ms)", 0.01, 1e5, key="server_step_ms")
    e2.number_input("draft cost ratio c", 0.0, 10.0, step=0.01, key="server_c", help="≈ 0 for n-gram drafts")
    e3.number_input("knee N* (tokens per forward)", 1, 100_000, key="server_knee")
    e4.number_input("overhead per step (ms)", 0.0, 1e5, key="server_overhead_ms")


def chosen_calibration():
    """The calibration file chosen for the costs, or None for the entered roofline."""
    choice = st.session_state["server_costs"]
    return servermon.calibration_files().get(choice) if choice != "entered" else None


def costs_at():
    if (path := chosen_calibration()) is not None:
        return servermon.calibrated_costs(path)
    costs = servermon.entered_costs(st.session_state["server_step_ms"] / 1e3, st.session_state["server_c"],
                                    st.session_state["server_knee"], st.session_state["server_overhead_ms"] / 1e3)
    return lambda b: costs


def costs_note() -> str:
    if chosen_calibration() is not None:
        return f"the calibration {st.session_state['server_costs']}"
    return (f"entered: target step {st.session_state['server_step_ms']:g} ms at b = 1, draft cost ratio "
            f"{st.session_state['server_c']:g}, flat up to {st.session_state['server_knee']} tokens per forward, "
            f"{st.session_state['server_overhead_ms']:g} ms overhead per step")


def fmt(x, spec=".3f"):
    return "—" if x is None else format(x, spec)


def attached():
    """(address, watch, since-attached delta) once two scrapes are in, else None (poll_panel says why)."""
    try:
        url = metrics.metrics_url(st.session_state["server_url"])
    except SpecvizError:
        return None
    watch = servermon.watch_for(st.session_state, url)
    total = servermon.since_attached(watch.scrapes)
    return None if total is None else (url, watch, total)


POLL_S = 1.0 if st.session_state["server_poll"] else None
CHARTS_S = float(st.session_state["server_redraw"]) if st.session_state["server_poll"] else None


SERVED = "SmolLM2-135M-Instruct"  # the name `vllm serve --target default` serves the packaged model under
REQUEST = ("curl -s {base}/v1/completions -H 'Content-Type: application/json' -d '{{\"model\": \"" + SERVED
           + "\", \"prompt\": \"Count from 1 to 60, one number a line:\", \"max_tokens\": 300}}'")


def explanation(url: str) -> None:
    """Until something answers at ``url``: what the page does, what it needs, and how to get a server."""
    base = url.removesuffix("/metrics")
    st.markdown(f"**No vLLM server has answered at {servermon.plain(base, 300)} yet.** This page reads a running vLLM "
                "server's Prometheus `/metrics` once a second and plots its speculative decoding (acceptance per "
                "draft position, mean acceptance length, throughput) beside what the analytic model predicts at "
                "the same α, then recommends a draft length k per batch size. It needs a vLLM server started with a "
                "speculative config, reachable from here, and requests to decode: its counters move only while it "
                "works. Nothing is decoded in this app.")
    port = localvllm.loopback_port(url)
    command = localvllm.command_text(port or 8000)
    here, local = port is not None and not exposure.exposed_now(), localvllm.current()
    if here and localvllm.installed():
        if local is None or not local.running:  # (a running one: local_server says how it does)
            st.markdown(f"vLLM is installed here: the button below runs `{command}`, which serves the "
                        f"packaged model ({SERVED}) with n-gram drafts of k = {localvllm.DRAFT_LENGTH}, listening on "
                        f"127.0.0.1:{port} only, until you stop it or this app ends.")
    elif here:
        st.markdown("vLLM is not installed here (it lives in its own environment, `.venv-vllm`). To install it and "
                    "start a server on the packaged model, run in a terminal, in the repository (on a CUDA machine "
                    "setup.sh says which vLLM build to install instead):")
        st.code(f"{localvllm.INSTALL}\n{command}", language="bash")
    else:
        why = ("This app listens beyond this machine, so it starts no server itself. " if exposure.exposed_now()
               else "")
        st.markdown(f"{why}On the machine that should serve, start vLLM with a speculative config, e.g. from this "
                    "repository (after `bash setup.sh --vllm`), or any vLLM with `--speculative-config "
                    "'{\"method\": \"ngram\", \"num_speculative_tokens\": 4, \"prompt_lookup_max\": 3}'`, "
                    "then type its address above:")
        st.code(command, language="bash")
    st.caption("Then send it requests: its counters move only while it decodes. For example:")
    st.code(REQUEST.format(base=base), language="bash")


def local_server(url: str, answered: bool) -> None:
    """The server this app starts (specviz.device.localvllm): Start while nothing answers here (or after it
    ended), then where it is, its last log lines, and Stop."""
    if exposure.exposed_now():
        return
    local, port = localvllm.current(), localvllm.loopback_port(url)
    if (port is not None and (local is None or not local.running) and (not answered or local is not None)
            and localvllm.installed()):
        st.button("Start a local vLLM server" if local is None else "Start the local vLLM server again",
                  key="server_local_start", type="primary", on_click=localvllm.start, args=(port,))
    if local is None:
        return
    where = f"http://127.0.0.1:{local.port}"
    if local.running:
        if local.stopping:
            st.info(f"Stopping the vLLM server started here ({where}) …")
        elif local.ready:
            st.success(f"A vLLM server started here serves {SERVED} at {where} (n-gram drafts, k = "
                       f"{localvllm.DRAFT_LENGTH}), up {local.seconds():.0f} s.")
        else:
            st.info(f"Starting a vLLM server at {where} ({local.seconds():.0f} s so far): specviz converts the packaged "
                    "model on first use, then vLLM loads it; the page attaches by itself once it answers.")
        if not local.stopping:
            st.button("Stop the local vLLM server", key="server_local_stop", on_click=local.stop)
    elif local.stopping:
        st.caption(f"The vLLM server started here ({where}) was stopped.")
        return
    else:
        st.error(f"The vLLM server started here exited (code {local.exit_code}); "
                 "its last lines are below. Fix what they say, or run the command in a terminal to see it all.")
    if tail := local.log_tail():
        with st.expander("its log (last lines)", expanded=not local.ready):
            st.code("\n".join(tail), language="text")


# Scraping and the numbers: every second. The charts redraw on their own, slower clock (a browser on a
# busy machine took longer than a second to re-draw six plots, which then blinked); they show every scrape.
@st.fragment(run_every=POLL_S)
def poll_panel():
    try:
        url = metrics.metrics_url(st.session_state["server_url"])
    except SpecvizError as e:
        st.error(str(e))
        return
    watch = servermon.watch_for(st.session_state, url)
    servermon.poll(watch)
    answered = servermon.answered_before(st.session_state, watch)
    if watch.error and answered:
        st.warning(servermon.stopped_message(watch))
    elif watch.error and not (servermon.unreachable(watch) and url == metrics.metrics_url(servermon.DEFAULT_URL)):
        st.error(watch.error)  # an address typed, or one where something else answers: what failed, in one line
    if watch.restarted:
        st.warning("the server's counters went down: it restarted, so the history starts again")
    if not answered:
        explanation(url)
    local_server(url, answered)
    if not watch.scrapes:
        return
    last = watch.scrapes[-1]
    # The version and model names are the server's text: plain() makes them inert for Markdown.
    version = servermon.plain(watch.version) if watch.version else "(version not reported)"
    models = ", ".join(servermon.plain(m) for m in last.models[:8]) or "(unnamed)"
    st.caption(f"{servermon.plain(url, 300)} · vLLM {version} · model {models} · {len(watch.scrapes)} scrapes")
    total = servermon.since_attached(watch.scrapes)
    if total is None:
        st.info("attached: the first numbers come with the next scrape, a second from now")
        return
    for note in total.notes():
        st.info(note)
    latest = metrics.delta(watch.scrapes[max(0, len(watch.scrapes) - 1 - st.session_state["server_window"])], last)
    m = st.columns(6)
    m[0].metric("acceptance rate", fmt(total.acceptance_rate))
    m[1].metric("mean acceptance length", fmt(total.mean_acceptance_length, ".2f"),
                help="output tokens per draft: 1 + accepted / drafts")
    m[2].metric("α (per position)", fmt(total.alpha))
    m[3].metric("output tokens/s", fmt(latest.throughput, ".1f"), help="over the window")
    m[4].metric("running", fmt(last.gauges.get("running"), ".0f"))
    m[5].metric("waiting", fmt(last.gauges.get("waiting"), ".0f"))
    st.caption("acceptance rate, mean acceptance length and α: since attached; tokens/s: over the window")


@st.fragment(run_every=CHARTS_S)
def charts_panel():
    got = attached()
    if got is None:
        return
    _, watch, total = got
    rows = servermon.series(watch.scrapes, st.session_state["server_window"])
    try:
        pred = servermon.prediction(total, costs_at(), servermon.observed_batch_sizes(watch.scrapes))
    except SpecvizError as e:
        st.error(str(e))
        pred = None
    charts = []  # (key, figure, its sentence), drawn two a row in this order
    if total.has_spec:
        acc_fields = {"acceptance rate": "acceptance_rate", "α": "alpha"}
        acc_model = {"model α": pred["alpha"]} if pred else None
        len_fields = {"mean acceptance length": "mean_acceptance_length"}
        len_model = {"model E(α, k)": pred["expected_length"]} if pred else None
        charts += [("server_per_position", servercharts.per_position_over_time(rows),
                    servercharts.per_position_sentence(rows)),
                   ("server_acceptance", servercharts.over_time(
                       rows, acc_fields, "Acceptance over time", {"title": "fraction", "range": [0, 1.02]}, acc_model),
                    servercharts.over_time_sentence(rows, acc_fields, model=acc_model)),
                   ("server_length", servercharts.over_time(
                       rows, {"measured": "mean_acceptance_length"}, "Mean acceptance length over time",
                       "output tokens per draft", len_model),
                    servercharts.over_time_sentence(rows, len_fields, " tokens per draft", len_model))]
    req_fields = {"running": "running", "waiting": "waiting"}
    charts += [("server_throughput", servercharts.over_time(rows, {"output tokens/s": "throughput"}, "Throughput",
                                                            "tokens / s"),
                servercharts.over_time_sentence(rows, {"output tokens/s": "throughput"}, digits=1)),
               ("server_requests", servercharts.over_time(rows, req_fields, "Requests", "requests"),
                servercharts.over_time_sentence(rows, req_fields, digits=0))]
    for i in range(0, len(charts), 2):
        for col, (key, fig, sentence) in zip(st.columns(2), charts[i:i + 2]):
            col.plotly_chart(fig, key=key)
            col.caption(sentence)

    st.subheader("The analytic model at the observed α")
    if pred is None:
        st.info("no prediction: nothing drafted yet since attached" if total.has_spec else
                "no prediction without speculative decoding")
        return
    p1, p2 = st.columns([1, 1])
    p1.markdown(f"α = **{pred['alpha']:.3f}**, k = **{pred['k']}**: the model expects "
                f"E(α, k) = **{pred['expected_length']:.2f}** output tokens per draft; the server measured "
                f"**{fmt(total.mean_acceptance_length, '.2f')}**. The suggested k*(b) for the batch sizes the "
                "server ran (its running requests), with the costs chosen above:")
    p1.dataframe(pred["rows"], hide_index=True, key="server_k_table")
    if total.acceptance_per_position is not None:
        p2.plotly_chart(servercharts.per_position_vs_model(total.acceptance_per_position, pred["per_position"]),
                        key="server_position_model")
        p2.caption(servercharts.position_vs_model_sentence(total.acceptance_per_position, pred["per_position"]))
    else:
        p2.caption(f"no {PER_POSITION} on this server: per-position acceptance not shown")


@st.fragment(run_every=CHARTS_S)
def recommend_panel():
    """`specviz tune`'s answer from the counters since attached, the costs chosen above and the batch sizes run."""
    got = attached()
    if got is None:
        return
    url, watch, total = got
    st.subheader("Recommend")
    d1, d2 = st.columns(2)
    kind = d1.selectbox("the server's draft", list(servermon.DRAFT_KINDS), key="server_rec_draft",
                        format_func=servermon.DRAFT_KINDS.get, help="/metrics does not say: the settings name it")
    model = d2.text_input("draft model", key="server_rec_model", placeholder="hub id or folder",
                          disabled=kind != "model")
    try:
        inputs = servermon.tune_inputs(total, watch.scrapes, url, costs_at(), costs_note(),
                                       servermon.server_draft(kind, model), watch.version)
    except SpecvizError as e:
        st.caption(f"No recommendation: {servermon.plain(e, 300)}")
        return
    if inputs is None:
        st.caption("No recommendation yet: the server drafted nothing since attached; send it requests "
                   "(it reads the acceptance per position of its drafts)" if total.has_spec else
                   "No recommendation without speculative decoding: start the server with a speculative config.")
        return
    st.caption(f"From the server's drafts since attached, at the batch sizes it ran (its running requests); a single "
               f"k is for batch {inputs.serve_batch}, its median.")
    recommend.panel(inputs, "server_rec", chosen_calibration() is not None)


poll_panel()
charts_panel()
recommend_panel()
