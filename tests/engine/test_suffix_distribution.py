"""Sampling with the suffix draft keeps the target's distribution (the point-mass rule, SPECDEC.md), and a
deliberately wrong rule that accepts every proposal fails the same check.

Many rows of one prompt whose earlier text the draft matches (it proposes " grape" and " cherry", which
the target gives about 0.39 and 0.08 at T = 1, 0.62 and 0.06 at T = 0.7), one token each, T = 1 and 0.7, chains and trees: the rows'
first output tokens must be distributed as p (specviz.measure.firsttoken.frequency_check, pass at
p-value > 1e-3)."""

import pytest
import torch

from specviz.engine.sampling import SamplingParams, Verdict, process_logits, sample_inverse_cdf
from specviz.engine.suffix import SuffixDraft
from specviz.engine.tree import TreeVerdict
from specviz.engine.step import TreeShape
from specviz.measure.firsttoken import frequency_check, next_token_probs
from specviz.models.loading import encode_prompts, get_model
from specviz.run import decoder_for_ids

PROMPT = "A. Fruits: apple, banana, cherry. Fruits: apple, banana, grape. Fruits: apple, banana,"
ROWS = 64  # accept-always fails here at p-values below 1e-8; more rows would cost prefill time
pytestmark = pytest.mark.slow  # the real model in fp32


def accept_always(target_logits, draft_tokens, num_drafted, uniforms, params, draft_probs=None) -> Verdict:
    """Wrong: every proposal is accepted, then a bonus token from p."""
    B, k1, _ = target_logits.shape
    rows = torch.arange(B)
    emitted = torch.full((B, k1), -1, dtype=torch.long)
    keep = torch.arange(k1 - 1).unsqueeze(0) < num_drafted.unsqueeze(1)  # [B, k]
    emitted[:, :-1] = torch.where(keep, draft_tokens, -1)
    p = process_logits(target_logits[rows, num_drafted], params)  # [B, V] at the slot after the last proposal
    emitted[rows, num_drafted] = sample_inverse_cdf(p, uniforms[rows, num_drafted])
    return Verdict(num_drafted.clone(), emitted)


def accept_first_children(target_logits, tree, uniforms, params) -> TreeVerdict:
    """Wrong: every row accepts its tree's rank-0 path (each node's first child), then a bonus token from p."""
    tokens, parents, _, real = tree.padded()  # [B, N] each
    B, N = tokens.shape
    keep = torch.zeros(B, 1 + N, dtype=torch.bool)
    keep[:, 0] = True
    emitted = torch.full((B, N + 1), -1, dtype=torch.long)
    last = []
    for b in range(B):
        cur, path = -1, []
        for i in range(N):
            if real[b, i] and int(parents[b, i]) == cur:
                cur = i
                path.append(i)
        keep[b, [1 + i for i in path]] = True
        emitted[b, :len(path)] = tokens[b, path]
        last.append((len(path), 1 + cur))
    rows = torch.arange(B)
    slot = torch.tensor([s for _, s in last])
    n = torch.tensor([a for a, _ in last])
    emitted[rows, n] = sample_inverse_cdf(process_logits(target_logits[rows, slot], params), uniforms[rows, -1])
    return TreeVerdict(n, emitted, keep)


@pytest.fixture(scope="module")
def target():
    return get_model("default", "cpu", "float32")


def first_tokens(target, temperature: float, tree, wrong: bool, seed: int = 0) -> tuple[list[int], int]:
    """Every row's first output token, and how many rows took the draft's first proposal."""
    ids = encode_prompts(target.tokenizer, [PROMPT], True)[0]
    dec = decoder_for_ids(target, SuffixDraft(), [ids] * ROWS, 3, 1, SamplingParams(temperature), seed=seed,
                          tree=tree, accept_fn=accept_always if wrong and tree is None else None)
    if wrong and tree is not None:
        dec.accept_tree_fn = accept_first_children
    step = next(dec.steps())
    assert all(r.drafted > 0 for r in step.rows)  # every row drafted from its own prompt
    return [r.output[0] for r in dec.rows], sum(r.accepted > 0 for r in step.rows)


@pytest.mark.parametrize("tree", [None, TreeShape(2, 6)], ids=["chain", "tree"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_suffix_draft_keeps_the_targets_distribution_and_accept_always_does_not(target, temperature, tree):
    p = next_token_probs(target.model, encode_prompts(target.tokenizer, [PROMPT], True)[0],
                         SamplingParams(temperature))
    toks, took = first_tokens(target, temperature, tree, wrong=False)
    check = frequency_check(toks, p)
    assert check["passed"], check
    assert 0 < took < ROWS  # proposals were accepted and rejected: both branches of the rule ran
    wrong, _ = first_tokens(target, temperature, tree, wrong=True)
    bad = frequency_check(wrong, p)
    assert not bad["passed"], bad
