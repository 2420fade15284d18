"""Synthetic acceptance: each drafted position accepted by a seeded Bernoulli(alpha) draw, in the one
step body (StepParts.accept's variant for chains), on a tiny model pair whose draft agrees with the target rarely."""

from __future__ import annotations

import math

import pytest
import torch

from fakes import perturbed_copy, ragged_prompts, reference_greedy, tiny_llama
from specviz.common import SpecvizError
from specviz.engine.proposers import ModelDraft
from specviz.engine.sampling import SamplingParams, accept_synthetic
from specviz.engine.step import TreeShape
from specviz.run import decoder_for_ids, trace_config
from specviz.runconfig import RunConfig

V = 64


@pytest.fixture(scope="module")
def pair():
    target = tiny_llama(V, seed=0)
    return target, perturbed_copy(target, noise=3.0)  # a poor draft: its real acceptance is far from alpha


def run(pair, alpha, k=4, rows=16, max_new=48, seed=0, params=SamplingParams()):
    target, draft = pair
    dec = decoder_for_ids(target, ModelDraft(draft, vocab_size=V), ragged_prompts(rows, V), k, max_new, params, seed,
                          synthetic=alpha)
    steps = list(dec.steps())
    return dec, [r for s in steps for r in s.rows if r.active and r.drafted]


@pytest.mark.parametrize("alpha,params", [(0.3, SamplingParams()), (0.7, SamplingParams()),
                                          (0.6, SamplingParams(temperature=1.0))])
def test_measured_per_position_acceptance_matches_alpha_within_a_binomial_margin(pair, alpha, params):
    _, row_steps = run(pair, alpha, params=params)
    # every position the target checked is one Bernoulli trial: the accepted ones, and the first rejection
    trials = sum(r.accepted + (r.accepted < r.drafted) for r in row_steps)
    accepted = sum(r.accepted for r in row_steps)
    margin = 4 * math.sqrt(alpha * (1 - alpha) / trials)  # 4 standard deviations: seeded, so never flaky
    assert trials > 300
    assert abs(accepted / trials - alpha) < margin, (accepted, trials)


def test_the_same_seed_gives_the_same_tokens(pair):
    a, _ = run(pair, 0.5, seed=7)
    b, _ = run(pair, 0.5, seed=7)
    c, _ = run(pair, 0.5, seed=8)
    assert [r.output for r in a.rows] == [r.output for r in b.rows]
    assert [r.output for r in a.rows] != [r.output for r in c.rows]


def test_alpha_one_accepts_every_drafted_token(pair):
    _, row_steps = run(pair, 1.0)
    assert row_steps and all(r.accepted == r.drafted for r in row_steps)


def test_alpha_zero_emits_the_targets_own_greedy_text(pair):
    dec, row_steps = run(pair, 0.0, rows=4, max_new=16)
    assert all(r.accepted == 0 for r in row_steps)
    assert [r.output for r in dec.rows] == reference_greedy(pair[0], ragged_prompts(4, V), 16)


def test_a_synthetic_run_is_not_the_targets_greedy_text(pair):
    dec, _ = run(pair, 1.0, rows=4, max_new=16)
    assert [r.output for r in dec.rows] != reference_greedy(pair[0], ragged_prompts(4, V), 16)


def test_the_rule_accepts_a_prefix_then_emits_the_targets_token_at_the_first_rejection():
    logits = torch.zeros(1, 4, V)
    logits[0, torch.arange(4), torch.tensor([5, 6, 7, 8])] = 1.0  # the target's argmax per position: 5, 6, 7, 8
    drafts = torch.tensor([[1, 2, 3]])  # none of them the target's
    u = torch.tensor([[0.1, 0.2, 0.9, 0.5]])  # alpha 0.5: positions 0 and 1 pass, 2 fails
    v = accept_synthetic(0.5, logits, drafts, torch.tensor([3]), u, SamplingParams())
    assert v.num_accepted.tolist() == [2]
    assert v.emitted.tolist() == [[1, 2, 7, -1]]


def test_token_trees_are_refused(pair):
    target, draft = pair
    with pytest.raises(ValueError, match="chain"):
        decoder_for_ids(target, ModelDraft(draft, vocab_size=V), ragged_prompts(2, V), 2, 4, tree=TreeShape(2, 4),
                        synthetic=0.5)
    with pytest.raises(SpecvizError, match="chain"):
        RunConfig(prompts=["x"], tree_width=2, synthetic_acceptance=0.5).validate()
    with pytest.raises(SpecvizError, match="regular decoding"):
        RunConfig(prompts=["x"], mode="regular", synthetic_acceptance=0.5).validate()
    with pytest.raises(SpecvizError, match=r"synthetic acceptance must be in \[0, 1\]"):
        RunConfig(prompts=["x"], synthetic_acceptance=1.5).validate()


def test_the_trace_config_carries_alpha_and_a_regular_partner_does_not(pair):
    target, draft = pair
    cfg = RunConfig(prompts=["x"], synthetic_acceptance=0.4)
    assert trace_config(cfg, target, ModelDraft(draft, vocab_size=V))["synthetic_acceptance"] == 0.4
    assert "synthetic_acceptance" not in trace_config(cfg, target, None)  # the race's regular run: the real rule
    assert "synthetic_acceptance" not in RunConfig(prompts=["x"]).to_trace_config()
