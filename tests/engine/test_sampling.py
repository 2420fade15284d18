"""The acceptance rule: claims on hand-made cases and a distribution test against the target."""

import pytest
import torch

from specviz.engine import sampling
from specviz.models import bf16linear, packed
from specviz.engine.sampling import (ARGMAX_CHUNK, SamplingParams, Verdict, accept_reference, argmax_last,
                                     process_logits, sample_inverse_cdf)

N = 200_000  # draws per distribution test
V = 8
# chi-square with V-1 = 7 degrees of freedom: P(X > 24.32) = 0.001, so a correct rule fails
# this bound once in a thousand seeds; the test seed is fixed, so it is deterministic.
CHI2_BOUND = 24.32


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    mask = expected > 0
    assert counts[~mask].sum() == 0, "a token of probability 0 was emitted"
    return float(((counts[mask] - expected[mask]) ** 2 / expected[mask]).sum())


def wrong_rule(target_logits, draft_tokens, num_drafted, uniforms, params, draft_probs=None):
    """A deliberately broken rule: on rejection it resamples from p, not from max(0, p - q)."""
    v = accept_reference(target_logits, draft_tokens, num_drafted, uniforms, params, draft_probs)
    p = process_logits(target_logits, params)
    rows = torch.arange(len(v.num_accepted))
    rejected = v.num_accepted < num_drafted
    redraw = sample_inverse_cdf(p[rows, v.num_accepted], uniforms[rows, num_drafted])
    v.emitted[rows, v.num_accepted] = torch.where(rejected, redraw, v.emitted[rows, v.num_accepted])
    return v


def first_token_counts(rule, params: SamplingParams, k: int, one_hot: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    p_logits = torch.randn(k + 1, V, generator=g) * 1.5
    q_logits = torch.randn(k, V, generator=g) * 1.5
    target_logits = p_logits.expand(N, k + 1, V)
    if one_hot:  # a deterministic proposer always proposes the same token
        draft_tokens = q_logits.argmax(-1).expand(N, k).clone()
        q = None
    else:
        q = process_logits(q_logits, params).expand(N, k, V)
        draft_tokens = torch.stack([torch.multinomial(q[0, j], N, replacement=True, generator=g) for j in range(k)], 1)
    uniforms = torch.rand(N, k + 1, generator=g)
    v = rule(target_logits, draft_tokens, torch.full((N,), k), uniforms, params, q)
    counts = torch.bincount(v.emitted[:, 0], minlength=V).float()
    return counts, process_logits(p_logits[0], params), v


@pytest.mark.parametrize("k,one_hot,params", [
    (1, False, SamplingParams(1.0)),
    (3, False, SamplingParams(0.7)),
    (2, True, SamplingParams(1.0)),
    (2, False, SamplingParams(1.0, top_p=0.8)),
])
def test_rule_preserves_the_target_distribution(k, one_hot, params):
    counts, p, v = first_token_counts(accept_reference, params, k, one_hot)
    assert chi_square(counts, p) < CHI2_BOUND
    assert 0.5 * (counts / N - p).abs().sum() < 0.01  # total variation
    assert 0 < v.num_accepted.float().mean() < k  # both branches (accept and reject) were taken


@pytest.mark.parametrize("k,one_hot", [(1, False), (2, True)])
def test_a_wrong_rule_fails_the_same_test(k, one_hot):
    counts, p, _ = first_token_counts(wrong_rule, SamplingParams(1.0), k, one_hot)
    assert chi_square(counts, p) > 10 * CHI2_BOUND


def test_greedy_accepts_iff_draft_is_argmax():
    logits = torch.tensor([[[0.0, 5.0, 1.0], [3.0, 0.0, 1.0], [0.0, 0.0, 9.0]]])  # argmax 1, 0, 2
    v = accept_reference(logits, torch.tensor([[1, 2]]), torch.tensor([2]), torch.zeros(1, 3), SamplingParams())
    assert v.num_accepted.tolist() == [1]
    assert v.emitted.tolist() == [[1, 0, -1]]  # accepted 1, recovered argmax 0, padding
    v = accept_reference(logits, torch.tensor([[1, 0]]), torch.tensor([2]), torch.zeros(1, 3), SamplingParams())
    assert v.emitted.tolist() == [[1, 0, 2]]  # both accepted + bonus


@pytest.mark.parametrize("B,k", [(1, 0), (1, 3), (5, 2), (7, 4)])
def test_greedy_verdict_on_the_host_equals_the_tensor_rule(monkeypatch, B, k):
    on_host = sampling._greedy_on_host
    g = torch.Generator().manual_seed(B * 10 + k)
    logits = torch.randn(B, k + 1, 50, generator=g)  # [B, k+1, V]
    best = logits.argmax(-1)  # [B, k+1]
    drafts = torch.where(torch.rand(B, k, generator=g) < 0.7, best[:, :k], torch.randint(0, 50, (B, k), generator=g))
    n = torch.randint(0, k + 1, (B,), generator=g)  # ragged: some rows drafted nothing
    drafts = torch.where(torch.arange(k) < n.unsqueeze(1), drafts, -1)  # -1 past n_b, as proposers pad
    u = torch.rand(B, k + 1, generator=g)
    calls = []
    monkeypatch.setattr(sampling, "_greedy_on_host", lambda *a: calls.append(1) or on_host(*a))
    host = accept_reference(logits, drafts, n, u, SamplingParams())
    monkeypatch.setattr(sampling, "HOST_SLOTS", 0)  # every call takes the tensor path
    tensor = accept_reference(logits, drafts, n, u, SamplingParams())
    assert calls == [1]  # the first call worked on the host, the second did not
    assert host.num_accepted.tolist() == tensor.num_accepted.tolist()
    assert host.emitted.tolist() == tensor.emitted.tolist()
    assert (host.num_accepted.dtype, host.emitted.dtype) == (tensor.num_accepted.dtype, tensor.emitted.dtype)


def test_empty_draft_emits_bonus_only():
    logits = torch.tensor([[[0.0, 5.0, 1.0], [3.0, 0.0, 1.0]]])
    v = accept_reference(logits, torch.tensor([[-1]]), torch.tensor([0]), torch.zeros(1, 2), SamplingParams())
    assert isinstance(v, Verdict) and v.num_accepted.tolist() == [0] and v.emitted.tolist() == [[1, -1]]


def test_top_p_keeps_the_smallest_set_reaching_the_mass():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    p = process_logits(logits, SamplingParams(1.0, top_p=0.8))
    torch.testing.assert_close(p, torch.tensor([0.5, 0.3, 0.0, 0.0]) / 0.8)
    p = process_logits(logits, SamplingParams(1.0, top_p=0.81))
    assert (p > 0).tolist() == [True, True, True, False]


def test_inverse_cdf_never_draws_zero_probability_tokens():
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.5, 0.0]]).expand(5, 5)
    u = torch.tensor([0.0, 0.25, 0.5, 0.999999, 1.0 - 1e-12])
    assert set(sample_inverse_cdf(probs, u).tolist()) <= {1, 3}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # bf16: one C++ pass per row where it is built
def test_fast_argmax_gives_torchs_indices_ties_nan_and_tail_included(monkeypatch, dtype):
    calls = []
    in_cpp = bf16linear.argmax_rows
    monkeypatch.setattr(bf16linear, "argmax_rows", lambda x: calls.append(1) or in_cpp(x))
    g = torch.Generator().manual_seed(0)
    V = 5 * ARGMAX_CHUNK + 37  # a tail past the last whole slice (and past the last 8 tokens' block)
    x = torch.randn(3, 4, V, generator=g).to(dtype)
    assert torch.equal(argmax_last(x), x.argmax(-1))
    ties = torch.randint(0, 3, (40, V), generator=g).to(dtype)  # many maxima per row: the first one wins
    assert torch.equal(argmax_last(ties), ties.argmax(-1))
    flat = torch.zeros(9, V, dtype=dtype)
    flat[1, V - 1] = 1.0  # the very last token
    flat[2, 3 * ARGMAX_CHUNK] = flat[2, 4 * ARGMAX_CHUNK + 1] = 2.0  # a slice's first token, tied later
    flat[3, 5 * ARGMAX_CHUNK + 3] = float("nan")  # NaN counts as the maximum, as in torch
    flat[4, ARGMAX_CHUNK - 1] = flat[4, V - 2] = float("inf")
    flat[5] = float("-inf")  # nothing above -inf: the first token
    flat[6, 7] = float("nan")
    flat[6, V - 1] = float("nan")  # the first of two NaNs
    flat[7, :] = -1.0
    flat[7, V - 3] = float("nan")  # a NaN in the tail only
    flat[8, 100] = flat[8, 9] = 3.0
    want = [0, V - 1, 3 * ARGMAX_CHUNK, 5 * ARGMAX_CHUNK + 3, ARGMAX_CHUNK - 1, 0, 7, V - 3, 9]
    assert argmax_last(flat).tolist() == flat.argmax(-1).tolist() == want
    strided = x[:, 1:3]  # a non-contiguous view
    assert torch.equal(argmax_last(strided), strided.argmax(-1))
    kernel = dtype == torch.bfloat16 and not packed.cpu_packs_bf16() and bf16linear.available()
    assert len(calls) == (4 if kernel else 0)
