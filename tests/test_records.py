"""specviz.records: the engine yields typed step records, the trace stores their JSON form, and a
trace file's steps read back into the same records."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fakes import Fixed, SpecDecoder, ScriptedDraft, perturbed_copy, ragged_prompts, reference_greedy, tiny_llama
from specviz.analysis.trace import TraceBuilder, load_json
from specviz.engine.proposers import ModelDraft
from specviz.engine.sampling import SamplingParams
from specviz.engine.step import TreeShape
from specviz.records import RowStep, Step, TreeNodes
from specviz.run import decoder_for_ids

V = 64


@pytest.fixture(scope="module")
def target():
    return tiny_llama(V)


def test_the_engine_yields_typed_steps_and_rows_for_chains_and_trees(target):
    prompts = ragged_prompts(3, V, seed=2)
    chain = SpecDecoder(target, ScriptedDraft(prompts, reference_greedy(target, prompts, 6), ["all", "none", "all"], V),
                        Fixed(2), ["p"] * 3, prompts, SamplingParams(), 6)
    tree = decoder_for_ids(target, ModelDraft(perturbed_copy(target, 0.3)), prompts, 2, 6, tree=TreeShape(2, 5))
    for dec in (chain, tree):
        for step in dec.steps():
            assert type(step) is Step and all(type(r) is RowStep for r in step.rows)
            assert all(r.tree is None or type(r.tree) is TreeNodes for r in step.rows)
            with pytest.raises(dataclasses.FrozenInstanceError):
                step.k = 99  # a record is what happened: nobody edits it afterwards


def test_a_tree_steps_rows_carry_their_trees(target):
    prompts = ragged_prompts(2, V, seed=4)
    dec = decoder_for_ids(target, ModelDraft(perturbed_copy(target, 0.3)), prompts, 2, 6, tree=TreeShape(2, 5))
    trees = [r.tree for s in dec.steps() for r in s.rows if r.active and s.k]
    assert trees and all(t is not None and len(t.token) == len(t.parent) == len(t.depth) for t in trees)


def test_the_builder_refuses_a_plain_dict():
    with pytest.raises(TypeError, match="specviz.records.Step"):
        TraceBuilder({}).add({"step": 0, "k": 0, "rows": []})


def test_a_steps_json_form_is_the_trace_format_and_reads_back_to_the_same_record(target, tmp_path):
    prompts = ragged_prompts(2, V, seed=3)
    dec = decoder_for_ids(target, ModelDraft(perturbed_copy(target, 0.3)), prompts, 2, 5, tree=TreeShape(2, 5))
    builder = TraceBuilder({"mode": "speculative"})
    steps = [s for s in dec.steps()]
    for s in steps:
        builder.add(s)
    trace = builder.final([], [], 1.0, 0.1)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    back = load_json(path)
    assert [Step.from_json(d) for d in back["steps"]] == steps
    first = back["steps"][0]
    assert list(first)[:3] == ["step", "k", "verify_width"] and "rows" in first and "queue_length" in first


def test_a_version_one_step_reads_with_the_fields_it_lacks_defaulted():
    old = {"step": 0, "k": 2, "t_start": 0.0, "t_draft": 0.1, "t_verify": 0.2, "t_accept": 0.01,
           "rows": [{"index": 0, "active": True, "drafted": 2, "accepted": 1, "emitted": [5, 6]}]}
    s = Step.from_json(old)
    assert (s.verify_width, s.t_prefill, s.joined, s.rows[0].draft_tokens) == (3, 0.0, (), ())
