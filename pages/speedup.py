"""Speedup model: the analytic speedup of speculative decoding vs k and batch size. It opens on
the last run's b, k, α and c, with that run's measured point (and the sweep's) on the curves, and
recommends k per batch size for that run, in a serving engine's own settings (``specviz tune``)."""

import html

import streamlit as st

from specviz.analysis import analytic as an
from specviz.analysis.costs import synthetic_calibrations, trace_calibration
from specviz.analysis.explain import batch_gain_reason, measured_speedup
from specviz.figures import modelcharts, runlabel, tokentext
from specviz.app import recommend, state as appstate
from specviz.figures.safetext import md_escape
from specviz.common import SpecvizError
from specviz.peers import tune

appstate.init_state()
st.title("Speedup model")
appstate.run_banner()

BATCHES = [1, 2, 4, 8, 16, 32, 64]
K_MAX = 16
DEFAULTS = {"sp_b": 1, "sp_k": 4, "sp_alpha": 0.7, "sp_c": 0.05}

trace = appstate.current_trace()
reg = st.session_state.get("regular_trace")


def run_values(trace: dict) -> dict:
    """The sliders' values for a run: its b, k, counted α and measured c (clamped to the sliders)."""
    cfg = trace.get("config", {})
    alpha = appstate.alpha_from_trace(trace)
    c = appstate.draft_cost_ratio(trace)
    out = {"sp_b": min(64, max(1, int(cfg.get("batch_size", 1)))), "sp_k": min(K_MAX, int(cfg.get("draft_length", 0)))}
    if alpha is not None:
        out["sp_alpha"] = round(min(1.0, alpha), 3)
    if c is not None:
        out["sp_c"] = round(min(1.0, c), 3)
    return out


# A new trace (a finished run, an upload) moves the sliders to it once; moving them afterwards is the reader's.
# (Streamlit drops a widget's state when its page is left, so coming back re-opens on the run too.)
if trace is not None and (st.session_state.get("sp_from") != id(trace) or "sp_b" not in st.session_state):
    st.session_state["sp_from"] = id(trace)
    st.session_state.update(run_values(trace))
for key, value in DEFAULTS.items():
    st.session_state.setdefault(key, value)

st.markdown("Expected output tokens per step with i.i.d. per-position acceptance α "
            "(Leviathan et al. 2022, arXiv 2211.17192) and the batch-1 walltime speedup, with "
            "c = cost of a draft step / cost of a target step:")
st.latex(r"E(\alpha, k) = \frac{1 - \alpha^{k+1}}{1 - \alpha} \qquad "
         r"S = \frac{1 - \alpha^{k+1}}{(1 - \alpha)(k c + 1)}")
st.markdown(tokentext.ALPHA_DEFINITION)
st.markdown("Batched (after Su et al. 2023, arXiv 2310.18813 — a reconstruction, their exact formulas are "
            "*unverified*): a forward over b rows × n tokens costs T(b, n), flat until the knee b·n = N*, "
            "linear after it:")
st.latex(r"T_{step}(b, k) = k\,T_{draft}(b, 1) + T_{target}(b, k+1) \qquad "
         r"\mathrm{speedup}(b, k) = \frac{E(\alpha, k) / T_{step}(b, k)}{1 / T_{target}(b, 1)}")
st.markdown("Ragged batches (our own extension): a padded step costs as if every row accepted the most any row did:")
st.latex(r"\mathbb{E}[\max_i A_i] = \sum_{j=1}^{k} \Big[1 - \prod_i (1 - \alpha_i^{\,j})\Big]")

if trace is not None:
    rv = run_values(trace)
    st.info(f"Opened on the last run: b = {rv['sp_b']}, k = {rv['sp_k']}"
            + (f", α = {rv['sp_alpha']:.3f}" if "sp_alpha" in rv else "")
            + (f", c = {rv['sp_c']:.3f}" if "sp_c" in rv else "") + ". Move the sliders to ask about other cases.")
    if note := runlabel.page_note(trace):
        st.warning(note)
c1, c2, c3 = st.columns(3)
b = c1.slider("batch size b", 1, 64, key="sp_b")
k = c1.slider("draft length k", 0, K_MAX, key="sp_k")
alpha = c2.slider("acceptance α (per position)", 0.0, 1.0, step=0.001, format="%.3f", key="sp_alpha",
                  help="opens on the last run's counted α")
c = c2.slider("cost ratio c = T_draft / T_target", 0.0, 1.0, step=0.001, format="%.3f", key="sp_c",
              help="≈ 0 for n-gram drafts; ~0.05–0.3 for a small draft model; opens on the last run's measured c")
knee = c3.slider("knee N* (tokens per forward)", 1, 512, 64, key="sp_knee",
                 help="used only without a calibration: below N* tokens a forward costs the same as one token")

cal = trace_calibration(trace)
if cal is None:
    st.info("not calibrated yet: using an illustrative roofline (target step = 1 unit, flat up to N* tokens; "
            "draft = c units) instead of fitted costs")
    illustrative = an.Costs(target=an.CostModel(t_fixed=0.0, t_mem=1.0, t_token=1.0 / knee),
                            draft=an.CostModel(t_fixed=0.0, t_mem=c, t_token=c / knee))


def costs_at(bb: int) -> an.Costs:
    return cal.costs(bb) if cal is not None else illustrative


def speedup(bb: int, kk: int) -> float:
    cs = costs_at(bb)
    return an.speedup_batch(bb, kk, alpha, cs.target, cs.draft, cs.overhead, cs.regular_overhead)


m1, m2, m3, m4 = st.columns(4)
m1.metric("mean acceptance length E(α, k)", f"{an.expected_tokens_per_step(alpha, k):.2f}",
          help=tokentext.MODEL_MEAN_ACCEPTANCE_LENGTH_DEFINITION)
m2.metric(runlabel.prediction_label(f"predicted speedup at b={b}, k={k}", cal is not None), f"{speedup(b, k):.2f}x")
m3.metric("batch-1 formula S", f"{an.speedup_batch1(alpha, k, c):.2f}x")
m4.metric(runlabel.prediction_label(f"k*(b={b})", cal is not None), an.optimal_k(b, alpha, costs_at(b), K_MAX))
if cal is None:
    m2.caption(runlabel.WHY_ROOFLINE)

# measured points: the last live run raced against regular decoding, and the sweep's cells
measured = []
ms = measured_speedup(trace, reg)
if ms is not None:
    measured.append({"b": trace["config"]["batch_size"], "k": trace["config"]["draft_length"], "speedup": ms})
    st.caption(f"✕ = measured: the last run gave {ms:.2f}x at b = {measured[0]['b']}, k = {measured[0]['k']} "
               "(its tokens/s over regular decoding of the same prompts).")
for cell in st.session_state.get("sweep_results") or []:
    if cell.get("measured_speedup") is not None:
        measured.append({"b": cell["batch_size"], "k": cell["draft_length"], "speedup": cell["measured_speedup"]})

batches = sorted(set(BATCHES + [b]))
curves = {bb: [speedup(bb, kk) for kk in range(K_MAX + 1)] for bb in batches}
shown = trace if ms is not None else None  # the run's measured point is on the charts: so is its label
st.plotly_chart(runlabel.mark(runlabel.mark_uncalibrated(
    modelcharts.speedup_vs_k(curves, [m for m in measured if m["b"] in curves]), cal is not None), shown), key="speedup_vs_k")
st.caption(modelcharts.speedup_vs_k_sentence(curves, b))
st.markdown("**Why a bigger batch gains less.** "
            + batch_gain_reason(costs_at(64).target, k, 1, 64, calibrated=cal is not None))

left, right = st.columns(2)
all_b = list(range(1, 65))
k_star, best_seen = [an.optimal_k(bb, alpha, costs_at(bb), K_MAX) for bb in all_b], modelcharts.best_measured(measured)
left.plotly_chart(runlabel.mark(runlabel.mark_uncalibrated(modelcharts.optimal_k_curve(all_b, k_star, best_seen),
                                                           cal is not None), shown), key="optimal_k")
left.caption(modelcharts.optimal_k_sentence(all_b, k_star, best_seen))
ks = list(range(K_MAX + 1))
grid = [[speedup(bb, kk) for kk in ks] for bb in BATCHES]
right.plotly_chart(modelcharts.bk_heatmap(BATCHES, ks, grid, title=runlabel.prediction_label(
    "Predicted speedup by (b, k)", cal is not None)), key="bk_heatmap")
right.caption(modelcharts.bk_sentence(BATCHES, ks, grid))

# Recommend: `specviz tune`'s answer for this trace (specviz.peers.tune), with one engine's settings
st.subheader("Recommend")
try:
    parts = tune.trace_parts(trace) if trace is not None else None
except SpecvizError:
    parts = None
if parts is None:
    st.caption("Run (or upload) a speculative trace: the recommendation reads its acceptance per position.")
else:
    note = ("the pair's calibration" if cal is not None else
            f"the illustrative roofline above (a target step = 1 unit, draft cost ratio c = {c:.3f}, knee N* = {knee})")
    inputs = tune.Inputs(**{name: parts[name] for name in ("acceptance", "counts", "steps", "draft", "serve_batch",
                                                  "tree_bounds", "source")}, costs_at=costs_at, costs_note=note,
                         unit="tokens/s" if cal is not None else "tokens per target step")
    recommend.panel(inputs, "sp_rec", cal is not None)

# k*(b) at a BASS-like scale: a random-weight 7B-shaped target's measured costs (bench/gpu_check.sh on a
# GPU, or bench/gpu_synthetic.py calibrate), with this page's α, next to the pair above
st.subheader("At a 7B scale (synthetic: timing only)")
synthetic = synthetic_calibrations()
if not synthetic:
    st.caption("No synthetic calibration yet: `bash bench/gpu_check.sh` on a GPU measures the costs of a random-weight "
               "Llama-2-7B-shaped target and llama-160m-shaped draft (`bench/results/gpu-*/calibration-synthetic-*.json`).")
else:
    labels = [f"{c.target} + {c.draft} ({c.device}, {c.dtype}, {c.created or 'undated'})" for _, c in synthetic]
    pick = st.selectbox("synthetic calibration", labels, key="sp_synth")
    path, big = synthetic[labels.index(pick)]
    small_name = f"{cal.target} + {cal.draft} ({cal.device}, {cal.dtype})" if cal is not None else "illustrative roofline (uncalibrated)"
    ks_small = [an.optimal_k(bb, alpha, costs_at(bb), K_MAX) for bb in all_b]
    ks_big = [an.optimal_k(bb, alpha, big.costs(bb), K_MAX) for bb in all_b]
    st.caption(f"SYNTHETIC: random weights, so only the costs are real, measured on {md_escape(big.device)} in "
               f"{md_escape(big.dtype)} ({md_escape(path.name)}); acceptance is the α slider's ({alpha:.3f}), the same "
               "for both.")
    names = {html.escape(small_name): ks_small, html.escape(f"{big.target} (synthetic)"): ks_big}  # plotly reads tags
    st.plotly_chart(modelcharts.optimal_k_compare(all_b, names), key="optimal_k_synthetic")
    st.caption(modelcharts.k_compare_sentence(all_b, names))

    def best(cs_at, bb: int, kk: int) -> float:
        cs = cs_at(bb)
        return an.speedup_batch(bb, kk, alpha, cs.target, cs.draft, cs.overhead, cs.regular_overhead)

    rows = [f"| b | k* small pair | {runlabel.prediction_label('its speedup', cal is not None)} | k* 7B-shaped | its speedup |",
            "|---|---|---|---|---|"]
    for bb in (1, 4, 8, 16, 32, 64):
        ks, kb = ks_small[bb - 1], ks_big[bb - 1]
        rows.append(f"| {bb} | {ks} | {best(costs_at, bb, ks):.2f}x | {kb} | {best(big.costs, bb, kb):.2f}x |")
    st.markdown("\n".join(rows))
