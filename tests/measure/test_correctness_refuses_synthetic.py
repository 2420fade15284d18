"""The exactness checks never read a run made with synthetic acceptance: its text is not the target's."""

from __future__ import annotations

import pytest

from specviz.common import SpecvizError
from specviz.measure.correctness import divergence_rows, refuse_synthetic
from specviz.runconfig import RunConfig


def test_a_synthetic_trace_is_refused_with_the_reason():
    spec = {"config": {"synthetic_acceptance": 0.7}, "sequences": []}
    with pytest.raises(SpecvizError, match=r"synthetic acceptance \(alpha = 0.7\): not the target's text"):
        divergence_rows(spec, {"config": {}, "sequences": []})


def test_an_exactness_run_with_synthetic_acceptance_is_refused_before_it_decodes():
    with pytest.raises(SpecvizError, match="run it again without synthetic acceptance"):
        refuse_synthetic(RunConfig(prompts=["x"], synthetic_acceptance=0.5).to_trace_config())


def test_an_exact_run_passes_the_guard():
    refuse_synthetic(RunConfig(prompts=["x"]).to_trace_config())
    assert divergence_rows({"config": {}, "sequences": []}, {"config": {}, "sequences": []}) == []
