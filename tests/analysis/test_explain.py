"""specviz.analysis.explain and specviz.analysis.hardware: what the pages say about a run, as numbers."""

from __future__ import annotations

import math

import pytest

from specviz.analysis import explain, hardware


def step(n, rows, k=3, t=0.0, draft=0.01, verify=0.02, accept=0.001, book=0.002):
    return {"step": n, "k": k, "batch_size": len(rows), "t_start": t, "t_draft": draft, "t_verify": verify,
            "t_accept": accept, "t_bookkeeping": book, "rows": rows}


def row(i, drafts, accepted, emitted):
    return {"index": i, "active": True, "drafted": len(drafts), "accepted": accepted, "emitted": emitted,
            "draft_tokens": drafts}


IDLE = {"index": 1, "active": False, "drafted": 0, "accepted": 0, "emitted": [], "draft_tokens": []}
TRACE = {"summary": {"prefill_s": 0.1, "wall_s": 0.2},
         "steps": [step(0, [row(0, [5, 6, 7], 1, [5, 9]), row(1, [8, 8, 8], 3, [8, 8, 8, 4])]),
                   step(1, [row(0, [1, 2, 3], 3, [1, 2, 3, 11]), IDLE], t=0.05)]}


def test_step_detail_names_the_rejected_draft_and_the_recovered_token():
    d = explain.step_detail(TRACE, row=0, step_pos=0)
    assert d["draft_tokens"] == [5, 6, 7] and d["accepted_tokens"] == [5]
    assert d["rejected_at"] == 1 and d["rejected"] == 6 and d["discarded"] == [7]
    assert d["final"] == 9 and d["final_kind"] == "recovered"


def test_step_detail_all_accepted_ends_with_a_bonus_token():
    d = explain.step_detail(TRACE, row=1, step_pos=0)
    assert d["rejected_at"] is None and d["rejected"] is None and d["discarded"] == []
    assert d["final"] == 4 and d["final_kind"] == "bonus"


def test_step_detail_of_an_old_trace_without_draft_ids_keeps_what_is_known():
    old = {"steps": [step(0, [{k: v for k, v in row(0, [5, 6, 7], 1, [5, 9]).items() if k != "draft_tokens"}])]}
    d = explain.step_detail(old, row=0, step_pos=0)
    assert d["draft_tokens"] is None and d["rejected"] is None
    assert d["accepted_tokens"] == [5] and d["rejected_at"] == 1 and d["final"] == 9


def test_step_detail_is_none_for_an_idle_row_and_a_missing_step():
    assert explain.step_detail(TRACE, row=1, step_pos=1) is None
    assert explain.step_detail(TRACE, row=0, step_pos=5) is None
    assert explain.active_steps(TRACE, 1) == [0] and explain.active_steps(TRACE, 0) == [0, 1]


def test_a_step_that_drafted_nothing_emits_a_bonus_token():
    assert explain.token_kind(0, accepted=0, drafted=0) == "bonus"
    assert [explain.token_kind(j, 1, 3) for j in range(2)] == ["accepted", "recovered"]


def test_in_a_tree_the_last_token_is_a_bonus_only_when_the_path_ends_at_a_leaf():
    # nodes: 0 and 1 children of the root (-1), 2 child of 0. Fewer accepted than drafted in both cases.
    tree = {"parent": [-1, -1, 0], "path": [0, 2]}
    assert [explain.token_kind(j, 2, 3, tree) for j in range(3)] == ["accepted", "accepted", "bonus"]
    tree = {"parent": [-1, -1, 0], "path": [0]}  # node 0 has a child (2) that was refused
    assert [explain.token_kind(j, 1, 3, tree) for j in range(2)] == ["accepted", "recovered"]
    assert explain.token_kind(0, 0, 3, {"parent": [-1, -1, 0], "path": []}) == "recovered"  # every root child refused


def test_phase_totals_add_up_to_the_wall_time():
    tot = explain.phase_totals(TRACE)
    assert tot["prefill"]["s"] == pytest.approx(0.1) and tot["verify"]["s"] == pytest.approx(0.04)
    assert tot["verify"]["pct"] == pytest.approx(20.0)
    assert sum(v["s"] for v in tot.values()) == pytest.approx(0.2)
    assert sum(v["pct"] for v in tot.values()) == pytest.approx(100.0)


def test_ragged_tail_counts_idle_row_steps():
    assert explain.ragged_tail(TRACE) == pytest.approx(0.25)


def test_gap_reason_names_the_model_terms_that_explain_a_shortfall():
    line = explain.gap_reason(0.9, 1.3, alpha=0.3, c=0.1, verify_ratio=1.5, tail=0.25)
    assert line.startswith("Below the prediction") and "verifying k+1 tokens costs 1.50" in line and "25%" in line
    assert "not above c" in explain.gap_reason(0.8, 0.9, alpha=0.05, c=0.1, verify_ratio=1.0, tail=0.0)
    assert explain.gap_reason(1.0, 1.01, 0.5, 0.1, 1.0, 0.0).startswith("Within 5%")
    assert explain.gap_reason(1.44, 1.17, 0.37, 0.14, 1.0, 0.0).startswith("Better than predicted")
    assert explain.gap_reason(None, 1.2, 0.5, 0.1, 1.0, 0.0) == ""


def test_exactness_counts_identical_rows_and_lists_the_divergences():
    rows = [{"index": 0, "match": True, "first_divergence": None, "margin": None},
            {"index": 1, "match": False, "first_divergence": 7, "margin": 0.03125}]
    assert explain.exactness(rows) == {"identical": 1, "rows": 2,
                                       "diverged": [{"row": 1, "position": 7, "margin": 0.03125}]}


# ---- MBU / MFU arithmetic (specviz.analysis.hardware) ----------------------------------------------

def test_mbu_counts_weights_and_kv_per_forward():
    # 1 GB weights + 0.1 GB KV in 10 ms = 110 GB/s, against 2 TB/s peak
    assert hardware.mbu(1e9, 1e8, 0.01, 2e12) == pytest.approx(0.055)


def test_mfu_arithmetic():
    assert hardware.mfu(2e12, 0.5, 1e13) == pytest.approx(0.4)


@pytest.mark.parametrize("seconds, peak", [(0.0, 1e12), (-1.0, 1e12), (0.01, 0.0)])
def test_utilization_is_nan_when_undefined(seconds, peak):
    assert math.isnan(hardware.mbu(1e9, 0, seconds, peak))
    assert math.isnan(hardware.mfu(1e9, seconds, peak))


def test_forward_flops_is_two_per_parameter_per_token_plus_attention():
    assert hardware.forward_flops(135e6, 5) == pytest.approx(2 * 135e6 * 5)
    assert hardware.forward_flops(100, 2, n_layers=3, context=10, d_attn=4) == pytest.approx(2 * (200 + 240))


def test_kv_cache_bytes():
    kv = hardware.kv_cache_bytes(n_layers=30, n_kv_heads=3, head_dim=64, tokens=100, bytes_per_element=2)
    assert kv == 2 * 30 * 3 * 64 * 100 * 2


def test_verify_use_takes_the_mean_verify_forward_of_a_trace():
    steps = [step(0, [row(0, [1], 1, [1, 2])], k=1, verify=0.01), step(1, [row(0, [1], 1, [1, 2])], k=1, verify=0.03)]
    use = hardware.verify_use(steps, weight_bytes=1e9, num_params=1e8, peaks={"peak_bytes_per_s": 1e11,
                                                                               "peak_flops": 1e12})
    assert use["t_verify_s"] == pytest.approx(0.02) and use["tokens"] == 2
    assert use["mbu"] == pytest.approx(1e9 / 0.02 / 1e11) and use["mfu"] == pytest.approx(2 * 1e8 * 2 / 0.02 / 1e12)
    assert hardware.verify_use([], 1e9, 1e8, {}) is None


def test_batch_gain_reason_reads_the_verify_cost_at_both_batch_sizes():
    from specviz.analysis.analytic import CostModel

    cost = CostModel(t_fixed=0.0, t_mem=1.0, t_token=1.0 / 64)  # flat up to 64 tokens per forward
    line = explain.batch_gain_reason(cost, k=2, b_small=1, b_large=64)
    assert "about 64 tokens per forward" in line
    assert "costs 1.00× one token" in line and "costs 3.00× one step" in line  # 192 tokens / 64 at b = 64
    assert "ride almost free" in line  # flat up to the knee: the drafted tokens add nothing at b = 1


def test_batch_gain_reason_says_what_a_drafted_token_costs_when_the_curve_is_not_flat():
    from specviz.analysis.analytic import CostModel

    cost = CostModel(t_fixed=0.5, t_mem=0.0, t_token=0.25)  # no flat region: every token costs a quarter unit more
    line = explain.batch_gain_reason(cost, k=3, b_small=1, b_large=64)
    extra = (cost(1, 4) / cost(1, 1) - 1) / 3  # 0.25 / 0.75 of a one-token step per drafted token
    assert f"costs {cost(1, 4) / cost(1, 1):.2f}× one token" in line
    assert f"each drafted token adds {extra:.2f} of a one-token step" in line and "ride almost free" not in line
