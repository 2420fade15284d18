"""Every draft implements one interface (specviz.engine.proposers.Proposer), and the engine calls it the
same way for every kind: ``features`` go to every call, the target's hidden states only for a draft that
reads them."""

from __future__ import annotations

import inspect

import pytest
import torch

from fakes import ScriptedDraft, decode, ragged_prompts, reference_greedy, tiny_llama
from specviz.engine.hybrid import HybridDraft
from specviz.engine.proposers import FeatureDraft, ModelDraft, NgramDraft, Proposer
from specviz.engine.suffix import SuffixDraft

KINDS = [ModelDraft, FeatureDraft, NgramDraft, SuffixDraft, HybridDraft]
METHODS = ["start", "add_rows", "propose", "propose_tree", "commit", "commit_tree", "select_rows"]


def parameters(fn) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p != "self"]


@pytest.mark.parametrize("kind", KINDS, ids=lambda c: c.__name__)
def test_every_draft_kind_takes_the_protocols_calls_with_the_protocols_parameters(kind):
    for name in METHODS:
        assert parameters(getattr(kind, name)) == parameters(getattr(Proposer, name)), (kind.__name__, name)
    assert isinstance(kind.wants_features, bool) and isinstance(kind.kind, str)


def test_drafts_without_a_model_are_proposers_at_run_time():
    assert isinstance(NgramDraft(), Proposer) and isinstance(SuffixDraft(), Proposer)


class Recording(ScriptedDraft):
    """A scripted draft that keeps the ``features`` each call got."""

    def __init__(self, *args, wants: bool):
        super().__init__(*args)
        self.wants_features, self.got = wants, []

    def start(self, contexts, features=None):
        self.got.append(("start", features))

    def commit(self, num_accepted, emitted, features=None):
        self.got.append(("commit", features))


@pytest.mark.parametrize("wants", [False, True])
def test_the_engine_hands_the_targets_hidden_states_only_to_a_draft_that_reads_them(wants):
    target = tiny_llama()
    prompts = ragged_prompts(2)
    reference = reference_greedy(target, prompts, max_new=6)
    draft = Recording(prompts, reference, ["half", "all"], 64, wants=wants)
    dec, _ = decode(target, prompts, draft, k=2, max_new=6)
    assert [r.output for r in dec.rows] == reference  # the scripted proposals change nothing under greedy
    calls = [name for name, _ in draft.got]
    assert calls[0] == "start" and "commit" in calls
    for _, features in draft.got:
        assert (features is not None) == wants
    if wants:  # the verify's hidden states, one row per batch row
        commits = [f for name, f in draft.got if name == "commit"]
        assert all(isinstance(f, torch.Tensor) and f.shape[0] == 2 for f in commits[:1])
