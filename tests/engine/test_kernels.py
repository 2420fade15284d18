"""The Triton acceptance rule (kernels/spec_verify.py) against its spec, the torch reference.

Without CUDA the kernels run in Triton's CPU interpreter, so shapes are tiny and tiles are
forced small (BLOCK_V = 32, 2 tiles per chunk) to exercise multi-tile, multi-chunk and
partial-tile code. Every run poisons the outputs with -7 (and the partials with NaN) first:
an element the kernels forget to write cannot pass. Full-size comparisons run only on CUDA.
"""

import os

import torch  # does not import triton
import locations

# Before anything imports triton or kernels.spec_verify: @triton.jit reads it at decoration.
# tests/conftest.py does the same; with CUDA the kernels are compiled and run on the GPU.
os.environ.setdefault("TRITON_INTERPRET", "0" if torch.cuda.is_available() else "1")
INTERPRETING = os.environ["TRITON_INTERPRET"] not in ("", "0")
DEV = "cpu" if INTERPRETING else "cuda"

import pytest  # noqa: E402

from specviz.engine import kernels  # noqa: E402
from specviz.engine.kernels.spec_verify import _accept_triton, accept_triton  # noqa: E402
from specviz.engine.sampling import SamplingParams, accept_reference  # noqa: E402

TINY_TILES = dict(block_v=32, tiles_per_chunk=2)
SHAPES = [(97, 3, 1), (1000, 5, 3)]  # (V, B, k): awkward sizes, partial last tile
GREEDY, T08 = SamplingParams(0.0), SamplingParams(0.8)


def run_kernel(*args, approx_sigmoid=False, **tiles):
    v = _accept_triton(*args, approx_sigmoid=approx_sigmoid, poison=True, **(tiles or TINY_TILES))
    assert (v.num_accepted != -7).all() and (v.emitted != -7).all(), "an output element was not written"
    return v


def make_case(V, B, k, seed=0, draft_probs=False, ties=False):
    """Peaked target logits whose argmax is often the draft token, ragged n_b in 0..k."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, k + 1, V, generator=g) * 2
    if ties:  # coarse values: many tokens share the max, argmax must keep the first
        logits = logits.round().clamp(max=2.0)
    drafts = torch.randint(0, V, (B, k), generator=g)
    planted = torch.rand(B, k, generator=g) < 0.7
    rows, pos = planted.nonzero(as_tuple=True)
    logits[rows, pos, drafts[rows, pos]] = logits[rows, pos].max(-1).values + 2.0  # p(x) ~ 0.6..0.9
    num_drafted = torch.randint(0, k + 1, (B,), generator=g)
    num_drafted[0] = k  # at least one full row
    q = None
    if draft_probs:
        q = torch.softmax(torch.randn(B, k, V, generator=g), -1)
        q.scatter_(-1, drafts.unsqueeze(-1), 0.3)  # q(x) > 0: x could have been drawn from q
        q = q / q.sum(-1, keepdim=True)
    uniforms = torch.rand(B, k + 1, generator=g)
    to = lambda t: None if t is None else t.to(DEV)  # noqa: E731
    return to(logits), to(drafts), to(num_drafted), to(uniforms), to(q)


def assert_same_verdict(got, ref):
    assert got.num_accepted.tolist() == ref.num_accepted.tolist()
    assert got.emitted.tolist() == ref.emitted.tolist()


# --- exact agreement with the reference ------------------------------------------------------


@pytest.mark.parametrize("V,B,k", SHAPES)
@pytest.mark.parametrize("ties", [False, True])
def test_greedy_equals_reference_exactly(V, B, k, ties):
    logits, drafts, n, u, _ = make_case(V, B, k, ties=ties)
    assert_same_verdict(run_kernel(logits, drafts, n, u, GREEDY), accept_reference(logits, drafts, n, u, GREEDY))


@pytest.mark.parametrize("V,B,k", SHAPES)
@pytest.mark.parametrize("draft_probs", [False, True], ids=["one_hot", "draft_probs"])
def test_sampling_equals_reference_given_the_same_uniforms(V, B, k, draft_probs):
    # num_accepted must match exactly; the recovered/bonus token too, unless u * total fell
    # within float rounding of a CDF step (sums are taken in another order) -- not at these seeds
    logits, drafts, n, u, q = make_case(V, B, k, seed=3, draft_probs=draft_probs)
    ref = accept_reference(logits, drafts, n, u, T08, q)
    assert 0 < ref.num_accepted.sum() < n.sum(), "both branches (accept and reject) should occur"
    assert_same_verdict(run_kernel(logits, drafts, n, u, T08, q), ref)


def test_top_p_uses_the_torch_processed_probabilities():
    params = SamplingParams(1.0, top_p=0.8)
    for seed, draft_probs in [(2, False), (3, True)]:
        logits, drafts, n, u, q = make_case(97, 5, 3, seed=seed, draft_probs=draft_probs)
        assert_same_verdict(run_kernel(logits, drafts, n, u, params, q), accept_reference(logits, drafts, n, u, params, q))


def test_empty_draft_emits_bonus_only():
    logits, _, _, u, _ = make_case(97, 3, 1, seed=4)
    drafts = torch.empty(3, 0, dtype=torch.long, device=DEV)  # k = 0, as the engine passes it
    n = torch.zeros(3, dtype=torch.long, device=DEV)
    logits, u = logits[:, :1].contiguous(), u[:, :1].contiguous()
    for params in (GREEDY, T08):
        got = run_kernel(logits, drafts, n, u, params)
        assert got.num_accepted.tolist() == [0, 0, 0]
        assert_same_verdict(got, accept_reference(logits, drafts, n, u, params))


def test_public_wrapper_has_the_reference_signature():
    logits, drafts, n, u, q = make_case(97, 3, 1, seed=5, draft_probs=True)
    assert_same_verdict(accept_triton(logits, drafts, n, u, T08, q), accept_reference(logits, drafts, n, u, T08, q))
    assert kernels.get_accept_fn("triton") is accept_triton


# --- the output distribution is the target's ---------------------------------------------------

N = 512  # draws, batched as rows of one launch (the interpreter runs ~50 rows/s); at this N the
# broken rule below scores chi2 75 against a bound of 41
V_STAT = 97
ALPHA_Z = 3.0902  # standard normal quantile for alpha = 1e-3


def chi_square(counts, probs, min_expected=5.0):
    """Pearson statistic vs probs, cells expected < 5 pooled; a p = 0 token drawn -> inf."""
    if counts[probs == 0].sum() > 0:
        return float("inf"), 1
    expected = probs * counts.sum()
    small = expected < min_expected
    obs = torch.cat([counts[~small], counts[small].sum().view(1)])
    exp = torch.cat([expected[~small], expected[small].sum().view(1)])
    return float(((obs - exp) ** 2 / exp).sum()), len(obs) - 1


def chi2_bound(df):
    """P(X > bound) = 1e-3 for X ~ chi2(df) (Wilson-Hilferty; within 1% for df >= 3)."""
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + ALPHA_Z * c**0.5) ** 3


def first_tokens(logits, drafts, num_drafted, u, q):
    v = run_kernel(logits, drafts, num_drafted, u, SamplingParams(1.0), q, block_v=128, tiles_per_chunk=1)
    return v, v.emitted[:, 0].cpu()


def stat_case(seed, one_hot, N=N):
    g = torch.Generator().manual_seed(seed)
    p_logits = torch.randn(2, V_STAT, generator=g) * 1.5
    q = torch.softmax(torch.randn(V_STAT, generator=g) * 1.5, -1)
    if one_hot:  # a deterministic proposer: always the same token, here the most likely one
        drafts, q_rows = torch.full((N, 1), int(p_logits[0].argmax())), None
    else:
        drafts, q_rows = torch.multinomial(q, N, replacement=True, generator=g).view(N, 1), q.expand(N, 1, V_STAT)
    u = torch.rand(N, 2, generator=g)
    to = lambda t: None if t is None else t.to(DEV)  # noqa: E731
    args = (to(p_logits.expand(N, 2, V_STAT)), to(drafts), torch.ones(N, dtype=torch.long, device=DEV), to(u), to(q_rows))
    return args, torch.softmax(p_logits[0], -1)


@pytest.mark.slow  # hundreds of rows through the Triton interpreter: tens of seconds
def test_output_and_bonus_follow_the_target_and_a_broken_rule_fails():
    (logits, drafts, n, u, q), p = stat_case(seed=0, one_hot=False)
    v, first = first_tokens(logits, drafts, n, u, q)
    rejected = (v.num_accepted == 0).cpu()
    assert 0.2 < rejected.float().mean() < 0.9
    stat, df = chi_square(torch.bincount(first, minlength=V_STAT).float(), p)
    assert stat < chi2_bound(df), f"accepted + recovered tokens do not follow p: chi2 {stat:.1f}, df {df}"

    # bonus path: no draft, the token comes from p itself (fresh uniforms)
    u_bonus = torch.rand(N, 2, generator=torch.Generator().manual_seed(99)).to(DEV)
    _, bonus = first_tokens(logits, drafts, torch.zeros_like(n), u_bonus, q)
    stat, df = chi_square(torch.bincount(bonus, minlength=V_STAT).float(), p)
    assert stat < chi2_bound(df), f"bonus tokens do not follow p: chi2 {stat:.1f}, df {df}"

    # deliberately broken: on rejection draw from p instead of the residual max(0, p - q)
    broken = torch.where(rejected, bonus, first)
    stat, df = chi_square(torch.bincount(broken, minlength=V_STAT).float(), p)
    assert stat > chi2_bound(df), f"the test cannot tell a broken residual: chi2 {stat:.1f}, df {df}"


@pytest.mark.slow  # hundreds of rows through the Triton interpreter: tens of seconds
def test_one_hot_proposals_keep_the_target_distribution():
    (logits, drafts, n, u, _), p = stat_case(seed=1, one_hot=True, N=256)  # no power claim here: fewer draws
    v, first = first_tokens(logits, drafts, n, u, None)
    assert 0.2 < (v.num_accepted == 0).float().mean() < 0.9
    stat, df = chi_square(torch.bincount(first, minlength=V_STAT).float(), p)
    assert stat < chi2_bound(df), f"chi2 {stat:.1f}, df {df}"


# --- the APPROXIMATE sigmoid variant ---------------------------------------------------------------


@pytest.mark.parametrize("draft_probs", [False, True], ids=["one_hot", "draft_probs"])
def test_sigmoid_variant_runs_and_emits_valid_tokens(draft_probs):
    V, B, k = 1000, 5, 3
    logits, drafts, n, u, q = make_case(V, B, k, seed=6, draft_probs=draft_probs)
    v = run_kernel(logits, drafts, n, u, T08, q, approx_sigmoid=True)
    # its acceptance test is u * q(x) < sigmoid(logit(x) / T), position by position
    p_x = torch.sigmoid(logits[:, :k].gather(-1, drafts.unsqueeze(-1)).squeeze(-1) / T08.temperature)
    q_x = torch.ones_like(p_x) if q is None else q.gather(-1, drafts.unsqueeze(-1)).squeeze(-1)
    ok = (u[:, :k] * q_x < p_x) & (torch.arange(k, device=DEV) < n.unsqueeze(1))
    assert v.num_accepted.tolist() == ok.int().cumprod(-1).sum(-1).tolist()
    for row, a in enumerate(v.num_accepted.tolist()):
        out = v.emitted[row].tolist()
        assert out[:a] == drafts[row, :a].tolist() and 0 <= out[a] < V and out[a + 1:] == [-1] * (k - a)
        if a < n[row] and q is None:
            assert out[a] != drafts[row, a], "the recovered token excludes the rejected draft"
    with pytest.raises(ValueError):
        accept_triton(logits, drafts, n, u, SamplingParams(1.0, top_p=0.9), q, approx_sigmoid=True)
    # greedy ignores it: sigmoid is monotone
    assert_same_verdict(run_kernel(logits, drafts, n, u, GREEDY, approx_sigmoid=True),
                        accept_reference(logits, drafts, n, u, GREEDY))


# --- dispatch ---------------------------------------------------------------------------------------


def test_importing_kernels_does_not_import_triton():
    import subprocess
    import sys

    code = "import sys; from specviz.engine import kernels; kernels.get_accept_fn('torch'); assert 'triton' not in sys.modules"
    root = str(locations.ROOT)
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True)


def test_dispatch_force_env_and_default(monkeypatch):
    assert kernels.get_accept_fn("torch") is accept_reference
    with pytest.raises(ValueError):
        kernels.get_accept_fn("cuda")
    for env, want in [("torch", accept_reference), ("triton", accept_triton)]:
        monkeypatch.setenv(kernels.ENV_VAR, env)
        kernels._default_impl.cache_clear()
        assert kernels.get_accept_fn() is want
        assert kernels.get_accept_fn("torch") is accept_reference  # force beats the env var
    monkeypatch.delenv(kernels.ENV_VAR)
    kernels._default_impl.cache_clear()
    assert kernels.get_accept_fn() is (accept_triton if torch.cuda.is_available() else accept_reference)
    kernels._default_impl.cache_clear()


# --- full size, CUDA only ----------------------------------------------------------------------------

needs_compiled_cuda = pytest.mark.skipif(
    not torch.cuda.is_available() or INTERPRETING, reason="needs CUDA and TRITON_INTERPRET=0 (compiled kernels)")


@pytest.mark.gpu
@needs_compiled_cuda
@pytest.mark.parametrize("V", [50257, 128256])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_full_size_matches_reference_on_gpu(V, dtype):
    B, k = 64, 8
    logits, drafts, n, u, _ = make_case(V, B, k, seed=7)
    logits = (logits * 3).to(dtype)  # sharper: real-model-like acceptance
    assert_same_verdict(accept_triton(logits, drafts, n, u, GREEDY), accept_reference(logits, drafts, n, u, GREEDY))
    for q in (None, torch.softmax(torch.randn(B, k, V, device=DEV), -1)):
        got, ref = accept_triton(logits, drafts, n, u, T08, q), accept_reference(logits, drafts, n, u, T08, q)
        assert got.num_accepted.tolist() == ref.num_accepted.tolist()
        # recovered/bonus tokens: the reference's float32 cumsum over V rounds differently from
        # the kernel's chunked sums; a rare draw at a CDF step may differ, never the layout
        same = (got.emitted == ref.emitted).all(-1).float().mean()
        assert same >= 0.95 and ((got.emitted >= 0) == (ref.emitted >= 0)).all()
