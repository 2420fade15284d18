"""A calibration record stands until it is stale: there is none, its format is not this specviz's, or a
model file of the pair changed after it was measured; records from before the format field are format 1."""

from __future__ import annotations

import pytest

from specviz.analysis.analytic import CostModel
from specviz.analysis.costs import FORMAT, Calibration, created_epoch, stale_reason

CM = CostModel(t_fixed=0.001, t_mem=0.01, t_token=1e-5)


def record(**kw) -> Calibration:
    return Calibration(**{"target": "t", "draft": "ngram", "device": "cpu", "dtype": "float32", "target_cost": CM,
                          "draft_cost": CM, "overhead": {"1": 0.0}, "residuals": {}, "samples": {},
                          "created": "2026-01-01T00:00:00Z", "format": FORMAT, **kw})


def test_no_record_is_stale_and_says_so():
    assert stale_reason(None) == "no calibration of this pair on this device and dtype yet"


def test_a_fresh_record_of_this_format_stands():
    assert stale_reason(record()) is None
    assert stale_reason(record(), models_changed=created_epoch(record()) - 3600) is None  # models older than it


def test_a_record_of_another_format_is_stale():
    why = stale_reason(record(format=FORMAT + 1))
    assert why == f"its record is format {FORMAT + 1}, this specviz writes format {FORMAT}"


def test_a_record_is_stale_once_a_model_file_changed_after_it_was_measured():
    cal = record()
    why = stale_reason(cal, models_changed=created_epoch(cal) + 60)
    assert why is not None and "a model file of the pair changed" in why and cal.created in why


def test_a_record_with_no_date_is_judged_by_its_format_alone():
    assert created_epoch(record(created="")) is None
    assert stale_reason(record(created=""), models_changed=2e9) is None


def test_records_from_before_the_format_field_read_as_format_one_and_are_measured_again():
    d = record().to_json()
    del d["format"]
    old = Calibration.from_json(d)
    assert old.format == 1 and stale_reason(old) == f"its record is format 1, this specviz writes format {FORMAT}"


def test_costs_charge_a_draft_forward_as_the_draft_loop_runs_it_and_regular_steps_their_own_overhead():
    cal = record(overhead={"1": 0.002, "4": 0.004}, regular_overhead={"1": 0.001, "4": 0.003},
                 draft_overhead={"1": 0.0005, "4": 0.0015})
    at2 = cal.costs(2)  # between the measured batch sizes: linear
    assert at2.overhead == pytest.approx(0.002 + 2e-3 / 3)
    assert at2.regular_overhead == pytest.approx(0.001 + 2e-3 / 3)
    assert at2.draft(2, 1) == pytest.approx(CM(2, 1) + 0.0005 + 1e-3 / 3)
    assert at2.target(2, 3) == CM(2, 3)  # the target's forward is the fitted one
    back = Calibration.from_json(cal.to_json())
    assert back.costs(2) == at2


def test_a_format_one_record_charges_regular_steps_the_speculative_overhead_and_the_bare_draft_forward():
    old = record(format=1, overhead={"1": 0.002})
    assert old.costs(1).regular_overhead is None and old.costs(1).draft(1, 1) == CM(1, 1)


def test_a_model_free_draft_finds_its_targets_cost_in_any_pairs_newest_current_record(monkeypatch, tmp_path):
    import json
    import types

    import torch

    from specviz.analysis.costs import calibration_path, target_cost

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    target = types.SimpleNamespace(name="t", device=torch.device("cpu"), dtype=torch.float32)
    assert target_cost(target) is None  # no record at all
    newer, older = CostModel(0.002, 0.02, 2e-5), CostModel(0.003, 0.03, 3e-5)
    for draft, cost, created, fmt in (("ngram", older, "2026-01-01T00:00:00Z", FORMAT),
                                      ("d2", newer, "2026-02-01T00:00:00Z", FORMAT),
                                      ("d3", CM, "2026-03-01T00:00:00Z", FORMAT - 1)):  # newest, but stale
        p = calibration_path("t", draft, "cpu", "float32")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(record(draft=draft, target_cost=cost, created=created, format=fmt).to_json()))
    other = calibration_path("t2", "ngram", "cpu", "float32")  # another target's record is not this one's
    other.write_text(json.dumps(record(target="t2", target_cost=CM, created="2026-04-01T00:00:00Z").to_json()))
    assert target_cost(target) == newer
    assert target_cost(types.SimpleNamespace(name="t", device=torch.device("cpu"), dtype=torch.bfloat16)) is None
