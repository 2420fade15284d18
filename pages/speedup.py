"""Speedup model: the analytic speedup of speculative decoding vs k and batch size, with the
measured points of the last run and sweep overlaid."""

import streamlit as st

from specviz.analysis import analytic as an
from specviz.app import state as appstate, charts

appstate.init_state()
st.title("Speedup model")
appstate.run_banner()

BATCHES = [1, 2, 4, 8, 16, 32, 64]
K_MAX = 16

st.markdown("Expected output tokens per step with i.i.d. per-position acceptance α "
            "(Leviathan et al. 2022, arXiv 2211.17192) and the batch-1 walltime speedup, with "
            "c = cost of a draft step / cost of a target step:")
st.latex(r"E(\alpha, k) = \frac{1 - \alpha^{k+1}}{1 - \alpha} \qquad "
         r"S = \frac{1 - \alpha^{k+1}}{(1 - \alpha)(k c + 1)}")
st.markdown("Batched (after Su et al. 2023, arXiv 2310.18813 — a reconstruction, their exact formulas are "
            "*unverified*): a forward over b rows × n tokens costs T(b, n), flat until the knee b·n = N*, "
            "linear after it:")
st.latex(r"T_{step}(b, k) = k\,T_{draft}(b, 1) + T_{target}(b, k+1) \qquad "
         r"\mathrm{speedup}(b, k) = \frac{E(\alpha, k) / T_{step}(b, k)}{1 / T_{target}(b, 1)}")
st.markdown("Ragged batches (our own extension): a padded step costs as if every row accepted the most any row did:")
st.latex(r"\mathbb{E}[\max_i A_i] = \sum_{j=1}^{k} \Big[1 - \prod_i (1 - \alpha_i^{\,j})\Big]")

trace = appstate.current_trace()
measured_alpha = appstate.alpha_from_trace(trace) if trace else None
measured_c = appstate.draft_cost_ratio(trace) if trace else None

c1, c2, c3 = st.columns(3)
b = c1.slider("batch size b", 1, 64, 1, key="sp_b")
k = c1.slider("draft length k", 0, K_MAX, 4, key="sp_k")
alpha = c2.slider("acceptance α", 0.0, 1.0, round(measured_alpha, 2) if measured_alpha is not None else 0.7, 0.01,
                  key="sp_alpha", help="default: the last run's measured per-position acceptance, if any")
c = c2.slider("cost ratio c = T_draft / T_target", 0.0, 1.0, 0.05, 0.01, key="sp_c",
              help="≈ 0 for n-gram drafts; ~0.05–0.3 for a small draft model")
knee = c3.slider("knee N* (tokens per forward where compute-bound starts)", 1, 512, 64, key="sp_knee",
                 help="used only without a calibration: below N* tokens a forward costs the same as one token")

costs = appstate.trace_costs(trace)
if costs is None:
    st.info("not calibrated yet: using an illustrative roofline (target step = 1 unit, flat up to N* tokens; "
            "draft = c units) instead of fitted costs")
    target_cost = an.CostModel(t_fixed=0.0, t_mem=1.0, t_token=1.0 / knee)
    draft_cost = an.CostModel(t_fixed=0.0, t_mem=c, t_token=c / knee)
    costs = an.Costs(target=target_cost, draft=draft_cost)


def speedup(bb: int, kk: int) -> float:
    return an.speedup_batch(bb, kk, alpha, costs.target, costs.draft, costs.overhead, costs.regular_overhead)


m1, m2, m3, m4 = st.columns(4)
m1.metric("E tokens / step", f"{an.expected_tokens_per_step(alpha, k):.2f}")
m2.metric(f"speedup at b={b}, k={k}", f"{speedup(b, k):.2f}x")
m3.metric("batch-1 formula S", f"{an.speedup_batch1(alpha, k, c):.2f}x")
m4.metric(f"k*(b={b})", an.optimal_k(b, alpha, costs, K_MAX))

# measured points: the last live run raced against regular decoding, and the sweep's cells
measured = []
reg = st.session_state.get("regular_trace")
if trace and reg and trace["summary"].get("tokens_per_s") and reg["summary"].get("tokens_per_s"):
    measured.append({"b": trace["config"]["batch_size"], "k": trace["config"]["draft_length"],
                     "speedup": trace["summary"]["tokens_per_s"] / reg["summary"]["tokens_per_s"]})
for cell in st.session_state.get("sweep_results") or []:
    if cell.get("speedup") is not None:
        measured.append({"b": cell["b"], "k": cell["k"], "speedup": cell["speedup"]})

batches = sorted(set(BATCHES + [b]))
curves = {bb: [speedup(bb, kk) for kk in range(K_MAX + 1)] for bb in batches}
st.plotly_chart(charts.speedup_vs_k(curves, [m for m in measured if m["b"] in curves]), key="speedup_vs_k")
if measured_alpha is not None:
    st.caption(f"last run: α = {measured_alpha:.3f}" + (f", measured c ≈ {measured_c:.3f}" if measured_c else ""))

left, right = st.columns(2)
all_b = list(range(1, 65))
best_measured = {}
for m in measured:
    if m["b"] not in best_measured or m["speedup"] > best_measured[m["b"]]["speedup"]:
        best_measured[m["b"]] = m
left.plotly_chart(charts.optimal_k_curve(all_b, [an.optimal_k(bb, alpha, costs, K_MAX) for bb in all_b],
                                         list(best_measured.values())), key="optimal_k")
ks = list(range(K_MAX + 1))
right.plotly_chart(charts.bk_heatmap(BATCHES, ks, [[speedup(bb, kk) for kk in ks] for bb in BATCHES],
                                     title="Predicted speedup by (b, k)"), key="bk_heatmap")
