"""Live: run batched speculative decoding on the sidebar's pair and watch it, step by step.

Decoding runs in the device process (specviz.device.deviceclient, specviz.device.worker); this page
draws its snapshots, at a rate that leaves the cores to the decoder (TEXT_S, CHART_S below).
"""

import json
import time

import streamlit as st

from specviz.analysis import explain
from specviz.app import state as appstate, firstcal, showcase
from specviz.figures import chartcaptions, charts, runlabel, tokentext
from specviz.device import devicequeue
from specviz.app import treeview, queueview
from specviz.app.headline import headline
from specviz.figures.safetext import md_escape
from specviz.app.upload import read_trace_upload, trace_csv_zip

from specviz.prompts import sets as promptsets
from specviz.common import SpecvizError
from specviz.engine.policies import POLICIES, COST_AWARE, UNCALIBRATED
from specviz.bounds import SLIDERS
from specviz.runconfig import RunConfig
from specviz.analysis.trace import to_chrome_trace

# While a run goes the numbers and text redraw every TEXT_S s (2 s: the page made 0.97x the CLI's
# tokens/s against 0.89x at 1 s, bench/browser_speed.py), the charts (their own fragment) every chart_s:
# server draw time x (1 + BROWSER_FACTOR, plotly's SVG layout in the browser) / DRAW_BUDGET, within CHART_S.
TEXT_S, BROWSER_FACTOR, DRAW_BUDGET, CHART_S = 2.0, 2.0, 0.10, (4.0, 20.0)
TREE_BOUNDS = (4, 16)  # the tree policy's widest W and most nodes N (the CLI's --tree-width, --tree-nodes)

appstate.init_state()
appstate.warm_up()  # the decode worker process starts now, not when Run is pressed
appstate.yield_cores()  # this page's drawing runs nicer than the decode worker (specviz.device.worker)
st.session_state.setdefault("prompts_text", promptsets.to_text(promptsets.CHAT[:4]))
st.session_state.setdefault("chart_s", CHART_S[0])


def load_prompt_set():
    st.session_state["prompts_text"] = promptsets.to_text(promptsets.PROMPT_SETS[st.session_state["prompt_set"]])


st.title("Live batched speculative decoding")


def pair_caption() -> None:
    """Which pair this page runs (the sidebar's choice), with the target's size once the device said it."""
    try:
        v, draft = appstate.sidebar_values(st.session_state), appstate.draft_spec(st.session_state)
    except SpecvizError:
        return  # the sidebar already said why
    facts = appstate.loaded_target()
    target = (f"**{md_escape(facts['name'])}** ({facts['num_params'] / 1e6:.0f}M parameters, {facts['dtype']} on "
              f"{facts['device']})" if facts else f"**{md_escape(v['target'])}**")
    kind = st.session_state.get("draft_kind", "default")
    what = f"**{md_escape(draft)}**" if kind == "model" else f"**{appstate.DRAFT_KINDS.get(kind, kind)}**"
    st.caption(f"Target {target}, draft {what}: change them in the sidebar.")


pair_caption()

# ---- controls ------------------------------------------------------------------------------------
c1, c2, c3 = st.columns(3)
with c1:
    st.slider("Batch size b", *SLIDERS["batch_size"][:3], key="batch_size")
    st.slider("Draft length k (0 = regular decoding)", *SLIDERS["draft_length"][:3], key="draft_length")
    st.selectbox("Draft-length policy", list(POLICIES), key="policy",
                 help="fixed k, transformers' heuristic (+2/-1), BASS (Algorithm 1 as the paper states it), "
                      "BASS capped by the calibrated k*, a batch-size table, the analytic optimum, SmartSpec's "
                      f"goodput, or tree: token trees, each step's (depth, width, nodes) up to (k, {TREE_BOUNDS[0]}, "
                      f"{TREE_BOUNDS[1]}) from the costs and the acceptance by depth x sibling rank")
    if st.session_state.get("policy") == "table":
        st.text_input("k table (batch size:k, ...)", "1:4,4:3,16:1,64:0", key="k_table")
    if st.session_state.get("policy") in COST_AWARE and appstate.trace_costs(appstate.current_trace()) is None:
        how = UNCALIBRATED.get(st.session_state["policy"], UNCALIBRATED["k"])
        st.caption(f"Not calibrated yet: this policy picks {how} until `python -m specviz calibrate` has run for this pair.")
with c2:
    st.slider("Temperature (0 = greedy)", *SLIDERS["temperature"], key="temperature")
    st.slider("Top-p", *SLIDERS["top_p"], key="top_p")
    st.slider("Max new tokens", *SLIDERS["max_new_tokens"][:3], key="max_new_tokens")
    st.checkbox("Synthetic acceptance: set α by hand", key="synthetic_on",
                help="teaching (vLLM's synthetic rejection sampling): each drafted token is accepted by a seeded draw "
                     "with probability α, whatever the target says, so the speedup model's effect shows apart from "
                     "the draft's quality; the text is then not the target's (chains only)")
    if st.session_state.get("synthetic_on"):
        st.slider("α: chance each drafted token is accepted", *SLIDERS["synthetic_acceptance"], key="synthetic_alpha")
with c3:
    st.selectbox("Prompt set", list(promptsets.PROMPT_SETS), key="prompt_set", on_change=load_prompt_set,
                 format_func=tokentext.short_label, help="n-gram drafts shine on the copy-heavy summarize/rewrite set")
    st.number_input("Seed", *SLIDERS["seed"][:3], key="seed")
    st.checkbox("Race against regular decoding", value=True, key="race",
                help="afterwards, run regular decoding on the same prompts: the measured speedup, the exactness "
                     "check and the race replay need it")
    queueview.controls()  # requests through the b lanes, arrival rate (continuous batching)
st.text_area("Prompts, one per line (write a newline inside a prompt as \\n; rows cycle through them)",
             key="prompts_text", height=130)

run = appstate.current_run()
running = run is not None and run.running
start = bool(st.session_state.get("run")) and not running  # read before the buttons: they show the run it starts


def config_from_widgets() -> RunConfig:
    ss = st.session_state
    v = appstate.sidebar_values(ss)
    return RunConfig(target=v["target"], draft=appstate.draft_spec(ss), device=v["device"], dtype=v["dtype"],
                     cuda_graphs=bool(v["cuda_graphs"]), compile=bool(ss.get("compile_forward", False)),
                     prompts=promptsets.from_text(ss["prompts_text"]), batch_size=int(ss["batch_size"]),
                     draft_length=int(ss["draft_length"]), policy=ss["policy"],
                     temperature=float(ss["temperature"]), top_p=float(ss["top_p"]),
                     max_new_tokens=int(ss["max_new_tokens"]), seed=int(ss["seed"]),
                     synthetic_acceptance=float(ss.get("synthetic_alpha", SLIDERS["synthetic_acceptance"][2]))
                     if ss.get("synthetic_on") else None,
                     mode="regular" if appstate.draft_spec(ss) == "none" else "speculative",
                     **appstate.queue_settings(ss),
                     **(dict(zip(("tree_width", "tree_nodes"), TREE_BOUNDS)) if ss["policy"] == "tree" else {}),
                     policy_args={"table": ss["k_table"]} if ss["policy"] == "table" else {})


if start:
    cfg = config_from_widgets()
    try:
        if not cfg.prompts:
            raise SpecvizError("no prompts: write at least one prompt (one per line)")
        cfg.validate()
        if cfg.mode == "speculative" and cfg.draft not in appstate.MODEL_FREE_DRAFTS:
            if not cfg.draft:
                raise SpecvizError("choose a draft: enter a draft model SPEC in the sidebar")
            problem = appstate.pair_problem(cfg.target, cfg.draft, cfg.device, cfg.dtype)
            if problem:
                raise SpecvizError(problem)
    except SpecvizError as e:
        st.error(str(e))
    else:
        run = appstate.start_run(cfg, appstate.model_lock(), race=bool(st.session_state.get("race")),
                                 session=appstate.session_id())
        st.session_state[appstate.RUN_KEY] = run
        running = True
        time.sleep(0.05)  # let the worker take the lock (or find it taken) before the first draw
b1, b2, _ = st.columns([1, 1, 6])
b1.button("Run", key="run", type="primary", disabled=running)
stop = b2.button("Stop", key="stop", disabled=not running)
if stop and run is not None:
    run.stop()
    st.info("Stopping after the current step; what was generated stays visible.")
showcase.section(st.session_state)  # a pair of runs: where speculation wins, where it loses

if running:
    now = config_from_widgets()
    changed = [name for name, a, b in (("batch size", now.batch_size, run.cfg.batch_size),
                                       ("draft length", now.draft_length, run.cfg.draft_length),
                                       ("policy", now.policy, run.cfg.policy),
                                       ("temperature", now.temperature, run.cfg.temperature),
                                       ("top-p", now.top_p, run.cfg.top_p),
                                       ("max new tokens", now.max_new_tokens, run.cfg.max_new_tokens),
                                       ("prompts", now.prompts, run.cfg.prompts)) if a != b]
    if changed:
        st.warning(f"Changed {', '.join(changed)} during the run: the run continues with its start config "
                   f"(b={run.cfg.batch_size}, k={run.cfg.draft_length}); press Run again afterwards to use them.")

# ---- drawing ---------------------------------------------------------------------------------------

def glossary() -> None:
    """The vocabulary before any chart uses it: the token roles (the text's colours) open, the rest one click away."""
    st.markdown("**What the words mean** (the charts and the coloured text below use them)")
    st.markdown(tokentext.legend_html(), unsafe_allow_html=True)
    with st.expander("More terms: step, row-step, slot, wasted slot, mean acceptance length, phases, lane"):
        st.markdown(tokentext.terms_markdown())


def draw(trace: dict, decode, live: bool, regular: dict | None = None, with_charts: bool = True) -> None:
    cfg = trace.get("config", {})

    def text(*keys) -> str:  # the first of these config texts, shown as it is (it may come from an upload)
        return md_escape(next((cfg[k] for k in keys if cfg.get(k)), None))

    st.caption(f"b={cfg.get('batch_size')}, k={cfg.get('draft_length')}, policy={text('policy')}, "
               f"mode={text('mode')}, target={text('target_name', 'target')}, "
               f"draft={text('draft_name', 'draft')}, {len(trace.get('steps', []))} steps")
    if note := runlabel.page_note(trace):
        st.warning(note)
    glossary()
    headline(trace, regular)
    if with_charts:
        draw_charts(trace, decode, live)
    st.subheader("Generated text")
    st.caption("Colours as in *What the words mean* at the top: accepted, recovered, bonus. "
               + tokentext.model_note(cfg))
    rows = tokentext.token_html(trace, decode, max_rows=16)
    st.markdown("".join(f"<p><b>row {i}</b> {h}</p>" for i, h in rows), unsafe_allow_html=True)
    if len(trace.get("sequences", [])) > 16:
        st.caption(f"first 16 of {len(trace['sequences'])} rows shown")
    if not live:
        step_explainer(trace, decode)


def draw_charts(trace: dict, decode, live: bool) -> None:
    cols = st.columns(2)  # left, right, left, ...: each chart with the sentence that states its key number
    for n, (key, fig, sentence) in enumerate(chartcaptions.live_grid(trace, decode, live, _util_labels())):
        cols[n % 2].plotly_chart(runlabel.mark(fig, trace), key=key)  # a synthetic run says so on every chart
        cols[n % 2].caption(sentence)
    treeview.section(trace, decode)  # token trees only; nothing for chain runs
    queueview.draw(trace)  # request queues only; nothing for a static batch


def _move_step(delta: int, count: int) -> None:
    st.session_state["explain_step"] = min(max(st.session_state.get("explain_step", 0) + delta, 0), count - 1)


@st.fragment  # Previous / Next redraw this section alone, not the page and its charts (0.6-2.9 s a click)
def step_explainer(trace: dict, decode) -> None:
    """One row-step at a time, like slides: what was drafted, accepted, rejected, and added."""
    rows = sorted({r["index"] for s in trace.get("steps", []) for r in s["rows"] if r.get("active")})
    if not rows or trace.get("config", {}).get("mode") == "regular":
        return
    st.subheader("Step explainer: one row, one step")
    st.caption("Pick a row and step through its steps: the draft proposes k tokens, the target checks them all in "
               "one forward, keeps the accepted prefix, and adds one token of its own (recovered or bonus).")
    c1, c2, c3, c4 = st.columns([2, 4, 1, 1])
    row = c1.selectbox("row", rows, key="explain_row", format_func=lambda i: f"row {i}")
    steps = explain.active_steps(trace, row)
    count = len(steps)
    if st.session_state.get("explain_step", 0) >= count:
        st.session_state["explain_step"] = count - 1
    if count > 1:
        n = c2.slider("step of this row", 0, count - 1, key="explain_step")
    else:
        st.session_state["explain_step"] = n = 0
    c3.button("◀ Previous", key="explain_prev", on_click=_move_step, args=(-1, count), disabled=n <= 0)
    c4.button("Next ▶", key="explain_next", on_click=_move_step, args=(1, count), disabled=n >= count - 1)
    d = explain.step_detail(trace, row, steps[n])
    st.markdown(f"**Row {row}, step {d['step']}** ({n + 1} of {count} for this row)")
    st.markdown(tokentext.step_html(d, decode), unsafe_allow_html=True)


def _util_labels():
    try:
        from specviz.telemetry import UTIL_LABELS

        return UTIL_LABELS
    except Exception:
        return {}


def live_view() -> None:
    appstate.yield_cores()  # a fragment rerun may come on a fresh script thread
    run = appstate.current_run()
    if run is not None and run.running:
        if run.status == "queued":
            st.info(devicequeue.queued_note(run.lock, run, "this run"))
        elif run.status == "loading":
            st.info("loading the model pair…")
        elif run.status == "racing":
            # drawing the finished run's text and charts while regular decoding runs took the cores it was
            # timed on: in a real browser its tokens/s fell from 34 to 13 and the page showed 2.3x for a 1.0x run
            summary = run.snapshot().get("summary", {})
            st.info("speculative run done" + (f" ({summary['tokens_per_s']:.1f} tokens/s)" if summary.get("tokens_per_s")
                                              else "") + "; now running regular decoding on the same prompts for "
                    "the race. The page waits to draw until it ends, so that drawing does not slow the run it is "
                    "timed against.")
            return
        elif run.note and not run.snapshot().get("steps"):  # the compiled forward compiling its first step
            st.info(run.note)
        trace = run.snapshot()
        if trace.get("steps") or run.status != "queued":
            draw(trace, appstate.trace_decoder(trace), live=True, with_charts=False)
        return
    if run is not None and not run.running and not getattr(run, "_shown_final", False):
        run._shown_final = True
        if st.session_state.get("_live_fragment"):
            st.rerun(scope="app")  # the run ended during a fragment rerun: redraw the whole page
    if run is not None and run.status == "error":
        st.error(run.error)
    elif run is not None and run.status == "stopped":
        why = (f"this page did not poll the run for {run.heartbeat_timeout:.0f} s (tab closed or asleep), so it "
               "stopped and freed the model for other sessions. " if run.abandoned else "")
        st.info(f"Stopped: {why}rows that had not finished end as \"stopped\"; their output so far is kept.")
    trace = appstate.current_trace()
    if trace is None:
        st.info("Press Run to start, or load a trace below.")
        return
    if (st.session_state.get(appstate.TRACE_SOURCE_KEY) or "").startswith("upload"):
        st.caption(f"showing {md_escape(st.session_state[appstate.TRACE_SOURCE_KEY])}")  # the file's name
    firstcal.follow(run, trace)  # a pair with no calibration yet: a short one now, then this prediction again
    draw(trace, appstate.trace_decoder(trace), live=False, regular=st.session_state.get("regular_trace"))


def live_charts() -> None:  # the charts of the run so far, every chart_s
    appstate.yield_cores()
    run = appstate.current_run()
    if run is None or not run.running or run.status == "racing":
        return  # live_view's fragment reruns the whole page now (or, racing, waits for the race to end)
    t0, trace = time.perf_counter(), run.snapshot()
    interval = st.session_state["chart_s"]
    if not trace.get("steps"):
        st.caption(f"The charts are drawn every {interval:.0f} s while the run goes, and in full when it ends.")
        return
    draw_charts(trace, appstate.trace_decoder(trace), live=True)
    cost = (draw_s := time.perf_counter() - t0) * (1 + BROWSER_FACTOR)
    st.caption(f"live: text every {TEXT_S:.0f} s, charts every {interval:.0f} s (last: {draw_s * 1e3:.0f} ms here, ~"
               f"{BROWSER_FACTOR:.0f}x in the browser: {100 * cost / interval:.0f}% of a core); decoding has its own process")
    st.session_state["chart_s_next"] = wanted = min(CHART_S[1], max(CHART_S[0], cost / DRAW_BUDGET))
    if wanted > 2 * interval:  # far over budget (a big batch): slow down now, not only from the next run
        st.session_state["chart_s"] = wanted
        st.rerun(scope="app")  # a fragment's interval is set when the page draws it


if running:
    st.session_state["_live_fragment"] = True
    appstate.quiet_redraws()
    st.fragment(live_view, run_every=TEXT_S)()
    st.fragment(live_charts, run_every=st.session_state["chart_s"])()
else:
    st.session_state["_live_fragment"] = False
    live_view()
    st.session_state["chart_s"] = st.session_state.pop("chart_s_next", st.session_state["chart_s"])


# ---- race replay ---------------------------------------------------------------------------------------

def replay_view() -> None:
    spec, reg = st.session_state.get(appstate.TRACE_KEY), st.session_state.get("regular_trace")
    t = time.perf_counter() - st.session_state["replay_t0"]
    end = max(charts.run_duration(spec), charts.run_duration(reg))
    st.plotly_chart(runlabel.mark(charts.race({"speculative": spec, "regular": reg}, until=t), spec), key="race_replay")
    st.caption(chartcaptions.race_caption({"speculative": spec, "regular": reg}, until=t))
    cols = st.columns(2)
    for col, name, tr in ((cols[0], "speculative", spec), (cols[1], "regular", reg)):
        decode = appstate.trace_decoder(tr)
        toks = charts.tokens_at(tr, t)
        col.markdown(f"**{name}** — {sum(map(len, toks.values()))} tokens at {min(t, end):.2f} s")
        for i, ids in list(toks.items())[:4]:
            col.text(f"row {i}: " + (charts.visible(decode(ids)) if decode else " ".join(map(str, ids))))
    if t > end:
        st.session_state["replay_t0"] = None
        st.rerun(scope="app")


trace_now = st.session_state.get(appstate.TRACE_KEY)
if not running and trace_now is not None and st.session_state.get("regular_trace") is not None:
    st.subheader("Race: speculative vs regular decoding")
    st.markdown(charts.race_sentence(trace_now, st.session_state["regular_trace"]))
    if st.button("Replay race in real time", key="replay"):
        st.session_state["replay_t0"] = time.perf_counter()
    if st.session_state.get("replay_t0"):
        st.fragment(replay_view, run_every=0.2)()
    else:
        pair = {"speculative": trace_now, "regular": st.session_state["regular_trace"]}
        st.plotly_chart(runlabel.mark(charts.race(pair), trace_now), key="race_chart")
        st.caption(chartcaptions.race_caption(pair))


# ---- export / import ---------------------------------------------------------------------------------

st.subheader("Export / import")
if trace_now is not None and not running:
    d1, d2, d3 = st.columns(3)
    d1.download_button("Trace (JSON)", json.dumps(trace_now), "trace.json", "application/json", key="dl_json")
    d2.download_button("Tables (CSV zip)", trace_csv_zip(trace_now), "trace_tables.zip", "application/zip", key="dl_csv")
    d3.download_button("Chrome / Perfetto trace", json.dumps(to_chrome_trace(trace_now)), "trace.chrome.json",
                       "application/json", key="dl_chrome")
upload = st.file_uploader("Load a trace recorded elsewhere (specviz JSON): every page then shows it",
                          type=["json"], key="upload")
if upload is not None and st.session_state.get("_upload_id") == upload.file_id and st.session_state.get("_upload_error"):
    st.error(md_escape(st.session_state["_upload_error"]))
if upload is not None and st.session_state.get("_upload_id") != upload.file_id:
    st.session_state["_upload_id"] = upload.file_id
    st.session_state["_upload_error"] = None
    target = appstate.loaded_target()  # its tokenizer decodes the trace's ids: they must be in its vocabulary
    try:  # size, UTF-8, JSON, version and the shape of every field the pages read (specviz.app.upload)
        loaded = read_trace_upload(upload.name, upload.getvalue(), vocab_size=target["vocab_size"] if target else None,
                                   target_name=target["name"] if target else None)
        charts.token_kinds(loaded)  # reject a file whose steps are not trace records
    except (ValueError, KeyError, TypeError) as e:
        msg = str(e) if isinstance(e, ValueError) else f"{upload.name}: not a specviz trace ({e})"
        st.session_state["_upload_error"] = msg
        st.error(md_escape(msg))  # the file's name and what it holds, shown as text
    else:
        st.session_state[appstate.TRACE_KEY] = loaded
        st.session_state[appstate.TRACE_SOURCE_KEY] = f"upload: {upload.name}"
        st.session_state["regular_trace"] = None
        st.rerun()
