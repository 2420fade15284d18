"""The Triton tree walk (kernels/tree_verify.py) against its spec, the torch reference accept_tree.

Without CUDA the kernel runs in Triton's CPU interpreter: small vocabularies, B <= 4, and tiles
forced small (BLOCK_V = 16) so every vocabulary pass spans several tiles and a partial last one.
Random ragged trees per row (sizes 0..9, a one-node row and an empty row in every batch, random
parents, duplicate sibling tokens from the small vocabulary) with target logits that favour
about half of the drafted tokens, so both accepts and rejects happen at every depth.
"""

import os

import pytest
import torch
import locations

os.environ.setdefault("TRITON_INTERPRET", "0" if torch.cuda.is_available() else "1")
INTERPRETING = os.environ["TRITON_INTERPRET"] not in ("", "0")
DEV = "cpu" if INTERPRETING else "cuda"

pytest.importorskip("triton")

from specviz.engine import kernels  # noqa: E402
from specviz.engine.kernels.tree_verify import _accept_tree_triton, accept_tree_triton  # noqa: E402
from specviz.engine.sampling import SamplingParams  # noqa: E402
from specviz.engine.tree import TokenTree, accept_tree  # noqa: E402

GREEDY = SamplingParams(0.0)
SAMPLED = [SamplingParams(1.0), SamplingParams(0.7), SamplingParams(1.2, top_p=0.8)]
SEEDS = range(30)


def random_case(seed: int, V: int = 48, B: int = 4, ties: bool = False):
    """(logits [B, 1 + N, V], tree, uniforms [B, N + 1]) for one batch of ragged random trees."""
    g = torch.Generator().manual_seed(seed)
    sizes = [int(torch.randint(2, 10, (1,), generator=g)) for _ in range(B)]
    sizes[seed % B], sizes[(seed + 1) % B] = 1, 0  # a one-node row and an empty row
    rows = []
    for n in sizes:
        nodes = []
        for i in range(n):
            parent = int(torch.randint(-1, i, (1,), generator=g)) if i else -1
            nodes.append((int(torch.randint(0, V, (1,), generator=g)), parent))
        rows.append(nodes)
    tree = TokenTree.from_rows(rows)
    N = max(sizes)
    logits = torch.randn(B, 1 + N, V, generator=g) * 2
    if ties:  # coarse values: several tokens share the max, argmax must keep the first
        logits = logits.round().clamp(max=2.0)
    for b, nodes in enumerate(rows):  # the target favours about half the drafted tokens
        for tok, parent in nodes:
            pick = float(torch.rand(1, generator=g))
            if pick < 0.5:  # with ties, a third of these only tie the maximum (accepted iff the lowest id)
                logits[b, parent + 1, tok] = logits[b, parent + 1].max() + (float(pick > 1 / 6) if ties else 1.5)
    uniforms = torch.rand(B, N + 1, generator=g)
    return logits.to(DEV), tree_to(tree, DEV), uniforms.to(DEV)


def tree_to(tree: TokenTree, dev) -> TokenTree:
    return TokenTree(tree.tokens.to(dev), tree.parents.to(dev), tree.depth.to(dev), tree.cu_nodes.to(dev))


def run_kernel(logits, tree, uniforms, params, renormalise=True):
    return _accept_tree_triton(logits, tree, uniforms, params, renormalise=renormalise, block_v=16)


def assert_same_verdict(got, ref):
    assert got.num_accepted.tolist() == ref.num_accepted.tolist()
    D1 = ref.emitted.shape[1]  # the kernel leaves emitted at full width (no read of the longest path): -1 past D + 1
    assert got.emitted[:, :D1].tolist() == ref.emitted.tolist() and (got.emitted[:, D1:] == -1).all()
    assert got.keep_slots.tolist() == ref.keep_slots.tolist()
    assert got.keep_slots.dtype == torch.bool and got.emitted.dtype == torch.long


def outcomes(verdicts, trees) -> tuple[int, int]:
    """(accepted nodes, nodes drafted past the accepted path) over all cases: both must be > 0."""
    acc = sum(int(v.num_accepted.sum()) for v in verdicts)
    return acc, sum(int(t.tokens.numel()) for t in trees) - acc


# --- exact agreement with the reference ------------------------------------------------------


@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
def test_greedy_walk_equals_the_reference_on_random_ragged_trees(ties):
    verdicts, trees = [], []
    for seed in SEEDS:
        logits, tree, u = random_case(seed, ties=ties)
        ref = accept_tree(logits, tree, u, GREEDY)
        assert_same_verdict(run_kernel(logits, tree, u, GREEDY), ref)
        verdicts.append(ref)
        trees.append(tree)
    acc, rest = outcomes(verdicts, trees)
    assert acc > 0 and rest > 0 and max(int(v.num_accepted.max()) for v in verdicts) >= 2  # paths of depth >= 2


@pytest.mark.parametrize("params", SAMPLED, ids=["T1", "T0.7", "T1.2_top_p0.8"])
def test_sampling_walk_equals_the_reference_given_the_same_uniforms(params):
    # decisions and the final draw match exactly unless u * sum(r) falls within float rounding of a
    # threshold (the sums are taken in another order) -- not at these seeds
    verdicts, trees = [], []
    for seed in SEEDS:
        logits, tree, u = random_case(100 + seed, V=40)
        ref = accept_tree(logits, tree, u, params)
        assert_same_verdict(run_kernel(logits, tree, u, params), ref)
        verdicts.append(ref)
        trees.append(tree)
    acc, rest = outcomes(verdicts, trees)
    assert acc > 0 and rest > 0


def test_the_unrenormalised_rule_equals_the_reference_s_unrenormalised_rule():
    differs = 0
    for seed in range(8):
        logits, tree, u = random_case(200 + seed, V=32)
        ref = accept_tree(logits, tree, u, SamplingParams(1.0), renormalise=False)
        assert_same_verdict(run_kernel(logits, tree, u, SamplingParams(1.0), renormalise=False), ref)
        right = accept_tree(logits, tree, u, SamplingParams(1.0))
        differs += right.num_accepted.tolist() != ref.num_accepted.tolist()
    assert differs > 0, "the flag should change some verdicts, or this test checks nothing"


def test_a_second_child_accepted_after_a_first_rejected_and_a_row_of_no_nodes():
    # row 0: root children 4 (rejected), 6 (accepted) -> 6's child 2 (accepted) -> bonus 5;
    # row 1: no nodes, the bonus only; row 2: one node, rejected -> recovered 7
    tree = tree_to(TokenTree.from_rows([[(4, -1), (6, -1), (2, 1)], [], [(3, -1)]]), DEV)
    logits = torch.zeros(3, 4, 16)
    for b, row in enumerate([[6, 0, 2, 5], [3, 0, 0, 0], [7, 0, 0, 0]]):
        for t, a in enumerate(row):
            logits[b, t, a] = 5.0
    got = run_kernel(logits.to(DEV), tree, torch.zeros(3, 4, device=DEV), GREEDY)
    assert got.path == [[1, 2], [], []]
    assert got.emitted.tolist() == [[6, 2, 5, -1], [3, -1, -1, -1], [7, -1, -1, -1]]
    assert got.keep_slots.tolist() == [[True, False, True, True], [True] + [False] * 3, [True] + [False] * 3]


@pytest.mark.parametrize("params", [GREEDY, SamplingParams(1.0)], ids=["greedy", "sampling"])
def test_a_batch_with_no_nodes_at_all_emits_one_token_per_row(params):
    B, V = 3, 24
    empty = torch.zeros(0, dtype=torch.long, device=DEV)
    tree = TokenTree(empty, empty, empty, torch.zeros(B + 1, dtype=torch.long, device=DEV))
    logits = torch.randn(B, 1, V, generator=torch.Generator().manual_seed(7)).to(DEV)
    u = torch.rand(B, 1, generator=torch.Generator().manual_seed(8)).to(DEV)
    got = run_kernel(logits, tree, u, params)
    assert got.num_accepted.tolist() == [0] * B and got.emitted.shape == (B, 1)
    assert_same_verdict(got, accept_tree(logits, tree, u, params))


def test_bf16_logits_and_the_default_tiling_through_the_public_wrapper():
    logits, tree, u = random_case(300, V=64)
    logits = logits.to(torch.bfloat16)
    for params in (GREEDY, SamplingParams(0.9)):
        assert_same_verdict(accept_tree_triton(logits, tree, u, params), accept_tree(logits, tree, u, params))


# --- in the engine ----------------------------------------------------------------------------------


@pytest.mark.parametrize("params", [GREEDY, SamplingParams(1.0)], ids=["greedy", "sampling"])
def test_a_tree_decoder_through_the_kernel_writes_what_the_torch_walk_writes(params):
    from fakes import perturbed_copy, ragged_prompts, tiny_llama
    from specviz.engine.proposers import ModelDraft
    from specviz.engine.step import TreeShape
    from specviz.run import decoder_for_ids

    target = tiny_llama(32)
    prompts = ragged_prompts(3, 32, seed=4)
    outputs = []
    for walk in ("torch", "triton"):
        dec = decoder_for_ids(target, ModelDraft(perturbed_copy(target, 0.3)), prompts, 3, 8, params=params,
                              tree=TreeShape(2, 6))
        assert dec.accept_tree_fn is accept_tree  # a model on the CPU: the decoder picks the torch walk
        if walk == "triton":
            dec.accept_tree_fn = accept_tree_triton  # the interpreter runs it on CPU tensors
        steps = [s.to_json() for s in dec.steps()]
        outputs.append(([r.output for r in dec.rows], len(steps)))
    assert outputs[0] == outputs[1]
    assert all(len(o) == 8 for o in outputs[0][0]) and outputs[0][1] < 8  # some steps accepted tree nodes


# --- dispatch ---------------------------------------------------------------------------------------


def test_tree_dispatch_force_env_and_default(monkeypatch):
    assert kernels.get_accept_tree_fn("torch") is accept_tree
    assert kernels.get_accept_tree_fn("triton") is accept_tree_triton
    with pytest.raises(ValueError):
        kernels.get_accept_tree_fn("cuda")
    for env, want in [("torch", accept_tree), ("triton", accept_tree_triton)]:
        monkeypatch.setenv(kernels.ENV_VAR, env)
        kernels._default_impl.cache_clear()
        assert kernels.get_accept_tree_fn() is want
        assert kernels.get_accept_tree_fn("torch") is accept_tree  # force beats the env var
    monkeypatch.delenv(kernels.ENV_VAR)
    kernels._default_impl.cache_clear()
    assert kernels.get_accept_tree_fn() is (accept_tree_triton if torch.cuda.is_available() else accept_tree)
    kernels._default_impl.cache_clear()


def test_choosing_the_torch_tree_walk_does_not_import_triton():
    import subprocess
    import sys

    code = "import sys; from specviz.engine import kernels; kernels.get_accept_tree_fn('torch'); assert 'triton' not in sys.modules"
    root = str(locations.ROOT)
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True)
