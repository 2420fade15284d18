"""Tree drafting for model drafts (issue 16, EAGLE-2 style): the grown trees' shape, the draft cache
after tree steps, and greedy exactness of tree decoding (ragged B 1/3/8, several (k, W, N), both
forwards) against plain greedy at batch 1. The packaged pair's exactness is bench/exactness.py's."""

import pytest
import torch

from specviz.engine.proposers import ModelDraft
from specviz.engine.sampling import SamplingParams
from specviz.engine.step import TreeShape
from specviz.run import decoder_for_ids

from fakes import perturbed_copy, ragged_prompts, reference_greedy, tiny_llama

V = 64


@pytest.fixture(scope="module")
def pair():
    target = tiny_llama(V)
    return target, perturbed_copy(target, 0.3)


def test_a_grown_tree_keeps_n_nodes_with_their_ancestors_and_top_w_siblings(pair):
    target, draft_model = pair
    prompts = ragged_prompts(3, V, seed=4)
    draft = ModelDraft(draft_model)
    draft.start(prompts)
    tree = draft.propose_tree(prompts, 4, 3, 10, SamplingParams())
    assert tree.sizes() == [10, 10, 10]
    for b in range(3):
        row = tree.row(b)
        assert max(row["depth"]) <= 4 and all(p < i for i, p in enumerate(row["parent"]))
        kids = {}
        for i, (t, p) in enumerate(zip(row["token"], row["parent"])):
            kids.setdefault(p, []).append((row["rank"][i], t))
        for p, ks in kids.items():
            assert [r for r, _ in ks] == sorted(r for r, _ in ks) and len({t for _, t in ks}) == len(ks)
            assert len(ks) <= 3
        # the root's top child is the draft's own greedy token
    fresh = ModelDraft(draft_model)
    fresh.start(prompts)
    chain = fresh.propose(prompts, 1, SamplingParams(), torch.zeros(3, 1))
    assert [tree.row(b)["token"][0] for b in range(3)] == chain.tokens[:, 0].tolist()


@pytest.mark.parametrize("B,k,W,N", [(1, 3, 2, 6), (3, 4, 3, 10), (8, 2, 4, 5), (3, 5, 4, 40), (2, 1, 3, 2)])
def test_the_batched_tree_growth_equals_the_per_row_reference(pair, B, k, W, N):
    from treedraft_reference import reference_tree

    _, draft_model = pair
    prompts = ragged_prompts(B, V, seed=20 + B + k)
    trees = []
    for grow in (lambda d: d.propose_tree(prompts, k, W, N, SamplingParams()), lambda d: reference_tree(d, k, W, N)):
        draft = ModelDraft(draft_model)
        draft.start(prompts)
        trees.append(grow(draft))
    got, want = trees
    assert got.sizes() == want.sizes() == [min(N, W + (k - 1) * W * W)] * B
    assert got.tokens.tolist() == want.tokens.tolist() and got.parents.tolist() == want.parents.tolist()
    assert got.depth.tolist() == want.depth.tolist() and got.rank.tolist() == want.rank.tolist()
    torch.testing.assert_close(got.probs.float(), want.probs.float(), atol=1e-5, rtol=1e-4)


def test_after_tree_steps_the_draft_cache_equals_a_fresh_prefill_of_the_context(pair):
    target, draft_model = pair
    prompts = ragged_prompts(3, V, seed=6)
    draft = ModelDraft(draft_model)
    dec = decoder_for_ids(target, draft, prompts, 3, 12, tree=TreeShape(3, 8))
    steps = dec.steps()
    for _ in range(3):
        next(steps)
    contexts = [r.context for r in dec.active]
    grown = draft.propose_tree(contexts, 1, 4, 4, SamplingParams())  # depth 1: the root's top 4
    draft._tree_fed = None
    fresh = ModelDraft(draft_model)
    fresh.start(contexts)
    want = fresh.propose_tree(contexts, 1, 4, 4, SamplingParams())
    assert grown.tokens.tolist() == want.tokens.tolist()
    torch.testing.assert_close(grown.probs, want.probs, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("lean", ["1", "0"])
@pytest.mark.parametrize("B,k,W,N", [(1, 3, 2, 6), (3, 4, 3, 10), (8, 2, 4, 5), (3, 5, 4, 20)])  # 21 slots: SDPA
def test_tree_decoding_equals_batch_one_greedy(pair, monkeypatch, lean, B, k, W, N):
    monkeypatch.setenv("SPECVIZ_LEAN_FORWARD", lean)
    target, draft_model = pair
    prompts = ragged_prompts(B, V, seed=B + k)
    ref = reference_greedy(target, prompts, max_new=10)
    dec = decoder_for_ids(target, ModelDraft(draft_model), prompts, k, 10, tree=TreeShape(W, N))
    steps = [s.to_json() for s in dec.steps()]
    assert [r.output for r in dec.rows] == ref
    accepted = sum(r["accepted"] for s in steps for r in s["rows"])
    assert accepted > 0  # the trees were used, not only the bonus tokens
    ranks = [r["tree"]["rank"][i] for s in steps for r in s["rows"] if r.get("tree") for i in r["tree"]["path"]]
    assert max(ranks) > 0  # some accepted node was not the draft's top guess: the tree's second guesses paid


def test_each_tree_row_step_records_its_tree_and_accepted_path_in_a_version_3_trace(pair, tmp_path):
    from specviz.analysis.trace import TRACE_VERSION, build_trace, load_json, save_json, to_tables

    target, draft_model = pair
    prompts = ragged_prompts(3, V, seed=8)
    dec = decoder_for_ids(target, ModelDraft(draft_model), prompts, 3, 10, tree=TreeShape(3, 7))
    steps = [s.to_json() for s in dec.steps()]
    for s in steps:
        for r in s["rows"]:
            t = r["tree"]
            n = len(t["token"])
            assert r["drafted"] == n == len(t["parent"]) == len(t["prob"]) == len(t["rank"]) <= 7
            assert all(0 < p <= 1 for p in t["prob"]) and all(0 <= k < 3 for k in t["rank"])
            path = t["path"]
            assert [t["parent"][i] for i in path] == ([-1] + path[:-1])[: len(path)]  # one root-to-node chain
            assert [t["token"][i] for i in path] == r["emitted"][: len(path)]  # the accepted tokens
            assert r["accepted"] == len(path)
    seqs = [{"index": r.index, "output_token_ids": r.output, "prompt_token_ids": r.prompt_ids} for r in dec.rows]
    trace = build_trace({"tree_width": 3, "tree_nodes": 7}, {}, seqs, steps, [], 1.0, 0.1)
    save_json(trace, tmp_path / "t.json")
    back = load_json(tmp_path / "t.json")
    assert back["version"] == TRACE_VERSION == 5 and back["steps"][0]["rows"][0]["tree"] == steps[0]["rows"][0]["tree"]
    assert len(to_tables(back)["rows"]) == sum(len(s["rows"]) for s in steps)


def test_an_ngram_tree_merges_several_matches_into_a_trie():
    from specviz.engine.treedraft import ngram_tree

    ctx = [1, 2, 3, 1, 2, 4, 5, 1, 2]  # "1 2" was followed by 4 (latest) and by 3; "2" likewise
    tree = ngram_tree([ctx], 3, 2, 8, 3)
    row = tree.row(0)
    assert list(zip(row["token"], row["parent"])) == [(4, -1), (5, 0), (1, 1), (3, -1), (1, 3), (2, 4)]
    assert row["rank"] == [0, 0, 0, 1, 0, 0]
    assert ngram_tree([ctx], 3, 1, 8, 3).row(0)["token"] == [4, 5, 1]  # width 1: the chain's lookup
    assert ngram_tree([[7, 8, 9]], 3, 2, 8, 3).sizes() == [0]  # no match: nothing drafted


@pytest.mark.parametrize("B,k,W,N", [(3, 3, 2, 6), (8, 4, 3, 10)])
def test_ngram_tree_decoding_equals_batch_one_greedy(pair, B, k, W, N):
    from specviz.engine.proposers import NgramDraft

    target, _ = pair
    prompts = [p * 3 for p in ragged_prompts(B, V, seed=B)]  # repeats, so lookups find matches
    ref = reference_greedy(target, prompts, max_new=10)
    dec = decoder_for_ids(target, NgramDraft(), prompts, k, 10, tree=TreeShape(W, N))
    steps = [s.to_json() for s in dec.steps()]
    assert [r.output for r in dec.rows] == ref
    assert sum(r["drafted"] for s in steps for r in s["rows"]) > 0


def test_sampled_tree_decoding_is_reproducible_from_the_seed_and_takes_second_guesses(pair):
    target, draft_model = pair
    prompts = ragged_prompts(3, V, seed=12)

    def sample(seed):
        dec = decoder_for_ids(target, ModelDraft(draft_model), prompts, 3, 12, SamplingParams(1.0), seed,
                              tree=TreeShape(3, 8))
        steps = [s.to_json() for s in dec.steps()]
        return [r.output for r in dec.rows], steps

    a, steps = sample(0)
    assert a == sample(0)[0] and a != sample(1)[0]
    assert all(len(o) == 12 and all(0 <= t < V for t in o) for o in a)
    ranks = [r["tree"]["rank"][i] for s in steps for r in s["rows"] if r.get("tree") for i in r["tree"]["path"]]
    assert ranks and max(ranks) > 0  # under sampling too, a sibling past the draft's top guess was accepted


def test_the_tree_formula_predicts_the_measured_output_tokens_per_step(pair):
    from specviz.analysis.treestats import acceptance_by_depth_rank, expected_tree_tokens, rates

    target, draft_model = pair
    dec = decoder_for_ids(target, ModelDraft(draft_model), ragged_prompts(8, V, seed=1), 3, 40, tree=TreeShape(3, 8))
    steps = [s.to_json() for s in dec.steps()]
    a = rates(acceptance_by_depth_rank(steps))
    assert a[(1, 1)] > 0  # second guesses at depth 1 were accepted sometimes
    rs = [r for s in steps for r in s["rows"] if r.get("tree")]
    predicted = sum(expected_tree_tokens(r["tree"]["parent"], r["tree"]["depth"], r["tree"]["rank"], a) for r in rs)
    measured = sum(1 + r["accepted"] for r in rs)  # before the max-tokens cut
    assert predicted / len(rs) == pytest.approx(measured / len(rs), rel=0.05)  # measured: 2.466 vs 2.489
