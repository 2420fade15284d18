"""The engine's per-row random streams (specviz.engine.streams): a pure function of (seed, request,
step, draw), the same whichever rows share the batch, and uniform."""

import pytest
import torch

from specviz.engine import streams
from specviz.engine.proposers import ModelDraft
from specviz.engine.sampling import SamplingParams

from fakes import decode, perturbed_copy, ragged_prompts, tiny_llama

V = 64


def draws(seed: int, indices: list[int], steps: list[int], n: int) -> torch.Tensor:
    keys = torch.tensor([streams.row_key(seed, i) for i in indices])
    return streams.uniforms(keys, torch.tensor(steps), n)


def test_a_rows_draws_are_fixed_by_its_seed_request_and_step():
    a = draws(7, [0, 1, 2], [5, 5, 5], 9)
    assert torch.equal(a, draws(7, [0, 1, 2], [5, 5, 5], 9))  # recomputed: the same
    assert not torch.equal(a, draws(8, [0, 1, 2], [5, 5, 5], 9))  # another seed
    assert not torch.equal(a[0], a[1])  # another request
    assert not torch.equal(a, draws(7, [0, 1, 2], [6, 6, 6], 9))  # another step
    assert torch.equal(a[:, :4], draws(7, [0, 1, 2], [5, 5, 5], 4))  # fewer draws: a prefix of the same ones
    assert len(set(a.flatten().tolist())) == a.numel()  # no draw repeats within these


def test_a_rows_draws_do_not_depend_on_the_other_rows():
    alone = draws(3, [4], [2], 7)
    for indices, steps in [([0, 4, 9], [0, 2, 5]), ([4, 1], [2, 2]), ([11, 12, 13, 4], [9, 9, 9, 2])]:
        batch = draws(3, indices, steps, 7)
        assert torch.equal(batch[indices.index(4)], alone[0])


def test_draws_lie_in_the_unit_interval_as_float32():
    u = draws(0, list(range(64)), list(range(64)), 65)
    assert u.dtype == torch.float32
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0
    keys = torch.tensor([streams.row_key(0, 0)] * 3)
    assert float(streams.uniforms(keys, torch.tensor([0, 2 ** 40, -1]), 3).max()) < 1.0  # any step counter


def test_draws_are_uniform_and_uncorrelated():
    """200,000 draws (1,000 requests x 20 steps x 10 draws) in 64 equal bins: chi-square below the
    0.999 quantile of chi-square with 63 degrees of freedom (103.4), so a uniform source fails once in
    a thousand seeds (the seed is fixed, so the test is deterministic). Neighbouring draws, steps
    and requests: correlation below 4 standard errors (4 / sqrt(n))."""
    R, S, J = 1000, 20, 10
    keys = torch.tensor([streams.row_key(12345, i) for i in range(R)]).repeat_interleave(S)  # [R * S]
    steps = torch.arange(S).repeat(R)  # [R * S]
    u = streams.uniforms(keys, steps, J).double().view(R, S, J)
    counts = torch.bincount((u * 64).long().flatten(), minlength=64).double()
    expected = u.numel() / 64
    assert float(((counts - expected) ** 2 / expected).sum()) < 103.4
    assert abs(float(u.mean()) - 0.5) < 4 * (1 / 12) ** 0.5 / u.numel() ** 0.5

    def corr(a: torch.Tensor, b: torch.Tensor) -> float:
        a, b = a.flatten() - a.mean(), b.flatten() - b.mean()
        return float((a * b).sum() / (a.norm() * b.norm())), a.numel()

    for a, b in [(u[:, :, :-1], u[:, :, 1:]), (u[:, :-1], u[:, 1:]), (u[:-1], u[1:])]:
        r, n = corr(a, b)
        assert abs(r) < 4 / n ** 0.5, f"correlation {r:.4f} between neighbours"


@pytest.fixture(scope="module")
def target():
    return tiny_llama(V)


def test_a_sampled_rows_output_does_not_depend_on_its_batch(target):
    """Sampling at T = 1: request 1's tokens are the same whichever prompts fill the batch's other rows
    (one-token prompts here, real ones there)."""
    params = SamplingParams(temperature=1.0)
    draft = ModelDraft(perturbed_copy(target, noise=0.3), vocab_size=V)
    prompts = ragged_prompts(4, V, seed=11)
    full, _ = decode(target, prompts, draft, 3, 12, params=params, seed=5)
    other = [[prompts[2][0]], prompts[1], [prompts[3][0]], [prompts[0][0]]]  # request 1 beside other rows
    mixed, _ = decode(target, other, draft, 3, 12, params=params, seed=5)
    assert mixed.rows[1].output == full.rows[1].output
    assert len({tuple(r.output) for r in full.rows}) == 4  # the rows did sample differently
