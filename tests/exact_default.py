"""Fixtures for greedy-exactness tests on the packaged model in fp32, shared by the modules that
check it (static batches, refilled batches, token trees). A module using them defines PROMPTS
(ragged: every prompt encodes to a different length) and MAX_NEW, and imports the three fixtures
from here."""

from __future__ import annotations

import pytest

from specviz.measure.correctness import greedy_outputs
from specviz.models.loading import encode_prompts, get_model


# Ragged chat prompts (each encodes to a different length) for the queue and tree checks.
RAGGED_PROMPTS = [
    "Repeat exactly: the quick brown fox jumps over the lazy dog, the quick brown fox jumps over the lazy dog.",
    "What is the capital of France?",
    "List the first ten even numbers, separated by commas.",
    "Write a Python function that returns the square of a number.",
    "Name three synonyms for the word happy, please.",
    "Summarize: Cats sleep a lot. Cats sleep up to sixteen hours a day. Sleeping cats save energy by resting.",
    "Translate to French: Good morning, how are you today?",
    "Write a haiku about autumn leaves.",
]
NEAR_TIE = 1e-3  # a logit margin below this is a float near-tie: the only divergence an exactness test accepts


def assert_exact(checks) -> None:
    """Every row of ``compare``'s checks equals its reference, or diverges only at a near-tie of its logits."""
    for c in checks:
        assert c.exact or c.margin < NEAR_TIE, f"row {c.index} diverges at {c.first_divergence}, margin {c.margin}"


@pytest.fixture(scope="module")
def target():
    return get_model("default", "cpu", "float32")


@pytest.fixture(scope="module")
def prompt_ids(target, request):
    ids = encode_prompts(target.tokenizer, request.module.PROMPTS)
    assert len({len(p) for p in ids}) == len(ids)  # ragged
    return ids


@pytest.fixture(scope="module")
def references(target, prompt_ids, request):
    """Plain greedy at batch size 1, one prompt at a time: what every speculative row must equal."""
    return [greedy_outputs(target, None, [p], 0, request.module.MAX_NEW)[0] for p in prompt_ids]
