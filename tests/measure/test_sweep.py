"""Calibration and sweeps: the fit is built from real timings, the sweep's cells are consistent."""

import pytest

from specviz.measure import calibrate as calibration
from specviz.measure.calibrate import Calibration, calibrate, load_calibration, time_forward
from specviz.engine.proposers import NgramDraft
from specviz.runconfig import RunConfig
from specviz.run import get_model
from specviz.measure.sweep import summarize_sweep, sweep

from fakes import tiny_llama


def test_time_forward_leaves_the_prefix_as_it_was():
    m = tiny_llama()
    t = time_forward(m, b=2, n=3, prefix_len=8, repeats=2)
    assert 0 < t < 1.0


@pytest.fixture(scope="module")
def target():
    return get_model("default", "cpu", "float32")


def test_calibrate_sweep_end_to_end(target, tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setenv("SPECVIZ_CACHE", str(tmp_path_factory.mktemp("cache")))
    monkeypatch_module.setattr(calibration, "OVERHEAD_TOKENS", 4)  # short overhead runs: the fit is what is checked
    draft = NgramDraft()
    cal = calibrate(target, draft, batch_sizes=(1, 2), k_max=2, prefix_len=16, repeats=1)
    assert cal.target_cost(1, 1) > 0 and len(cal.samples["target"]) == 2 * 3
    again = load_calibration(target, draft)
    assert isinstance(again, Calibration) and again.target_cost == cal.target_cost
    base = RunConfig(prompts=["Repeat: a b c a b c a b c", "Count 1 2 3 1 2 3"], draft="ngram", max_new_tokens=8,
                     device="cpu", dtype="float32")
    rows = sweep(base, [1, 2], [1, 2], target, draft, cal)
    assert [(r["batch_size"], r["draft_length"]) for r in rows] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    for r in rows:
        assert 0 <= r["alpha"] <= 1 and r["measured_speedup"] > 0 and r["predicted_speedup"] > 0
        assert r["measured_speedup"] == pytest.approx(r["spec_tokens_per_s"] / r["regular_tokens_per_s"])
    s = summarize_sweep(rows, cal)
    assert set(s["per_batch_size"]) == {1, 2} and s["median_abs_rel_error"] >= 0
    done = []  # the Sweep page's worker: a cell at a time, stopped between cells
    partial = sweep(base, [1, 2], [1, 2], target, draft, cal, on_cell=done.append, should_stop=lambda: len(done) == 1)
    assert partial == done and [(r["batch_size"], r["draft_length"]) for r in partial] == [(1, 1)]


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_ragged_prediction_uses_each_rows_alpha_and_length():
    from specviz.analysis.analytic import CostModel, Costs, speedup_ragged
    from specviz.analysis.acceptance import alpha_from_accepted
    from specviz.analysis.tracestats import predicted_ragged, row_alphas_and_lengths

    # row 0 accepts 2 of 2 every step (3 tokens/step), row 1 nothing (1 token/step)
    steps = [{"rows": [{"index": 0, "active": True, "accepted": 2}, {"index": 1, "active": True, "accepted": 0}]}
             for _ in range(4)]
    trace = {"steps": steps, "sequences": [{"index": 1, "output_token_ids": [5] * 4},
                                           {"index": 0, "output_token_ids": [5] * 12}]}
    alphas, lengths = row_alphas_and_lengths(trace, 2)
    assert lengths == [12, 4]
    assert alphas == [alpha_from_accepted(2.0, 2), alpha_from_accepted(0.0, 2)]
    costs = Costs(target=CostModel(0.01, 0.0, 0.001), draft=CostModel(0.001, 0.0, 0.0), overhead=0.002)
    expect = speedup_ragged(lengths, alphas, 2, costs.target, costs.draft, costs.overhead)
    assert predicted_ragged([trace, trace], 2, costs) == pytest.approx(expect)


def test_live_headline_prediction_is_the_ragged_one_with_costs():
    from specviz.analysis.analytic import CostModel, Costs, speedup_batch
    from specviz.analysis.tracestats import predicted_ragged
    from specviz.analysis.tracestats import predicted_speedup

    steps = [{"k": 2, "rows": [{"index": 0, "active": True, "accepted": 2, "drafted": 2},
                               {"index": 1, "active": True, "accepted": 0, "drafted": 2}]} for _ in range(4)]
    trace = {"config": {"batch_size": 2, "draft_length": 2, "policy": "fixed", "mode": "speculative"},
             "steps": steps, "sequences": [{"index": 0, "output_token_ids": [5] * 12},
                                           {"index": 1, "output_token_ids": [5] * 4}],
             "summary": {"drafted": 16, "accepted": 8}}
    costs = Costs(target=CostModel(0.01, 0.0, 0.001), draft=CostModel(0.001, 0.0, 0.0), overhead=0.002)
    got = predicted_speedup(trace, costs)
    assert got == pytest.approx(predicted_ragged([trace], 2, costs))
    assert got != pytest.approx(speedup_batch(2, 2, 0.5, costs.target, costs.draft, costs.overhead))


def test_a_cell_faster_than_its_tokens_per_step_allow_is_flagged_as_machine_drift():
    from specviz.analysis.explain import drift_warning

    # the audit's cell: alpha 0.384 at k = 4 gives ~1.6 tokens per row-step, so 2.76x was the machine
    assert "machine's speed changed" in drift_warning({"draft_length": 4, "mean_acceptance_length": 1.6,
                                                       "measured_speedup": 2.76})
    assert drift_warning({"draft_length": 4, "mean_acceptance_length": 1.6, "measured_speedup": 1.4}) is None
    assert drift_warning({"draft_length": 1, "mean_acceptance_length": 1.9, "measured_speedup": 2.2})  # past k + 1
