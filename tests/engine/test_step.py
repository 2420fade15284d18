"""A chain is the width-1 token tree: the tree walk on a line gives the chain rule's verdict draw for
draw (greedy, chosen and sampled proposals), keeps the target's distribution for a line sampled from
the draft's q (and a walk that treats sampled proposals as chosen fails that test), and a decoder
that sends its chains through the tree's verify and walk decodes what the fast forms decode."""

import pytest
import torch

from fakes import perturbed_copy, ragged_prompts, reference_greedy, tiny_llama
from specviz.engine.decoder import SpecDecoder
from specviz.engine.policies import Fixed
from specviz.engine.proposers import ModelDraft, NgramDraft
from specviz.engine.sampling import SamplingParams, accept_reference
from specviz.engine.tree import TokenTree, accept_tree

V = 12


def line_case(seed: int, B: int = 6, w: int = 4, sampled_q: bool = True):
    """Random target logits, draft q, proposals drawn from q, ragged n_b (some rows draft nothing)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, w + 1, V, generator=g) * 2  # [B, w + 1, V]
    q = torch.softmax(torch.randn(B, w, V, generator=g) * 2, -1) if sampled_q else None  # [B, w, V]
    tokens = (torch.multinomial(q.reshape(-1, V), 1, generator=g).view(B, w) if sampled_q
              else torch.randint(0, V, (B, w), generator=g))  # [B, w]
    n = torch.randint(0, w + 1, (B,), generator=g)  # [B]
    n[0] = w  # the widest row drafts w
    u = torch.rand(B, w + 1, generator=g)  # [B, w + 1]
    return logits, q, tokens, n, u


@pytest.mark.parametrize("params", [SamplingParams(), SamplingParams(1.0), SamplingParams(0.7, top_p=0.9)],
                         ids=["greedy", "t1", "t07-topp"])
@pytest.mark.parametrize("sampled_q", [True, False], ids=["drawn-from-q", "chosen"])
@pytest.mark.parametrize("seed", range(5))
def test_the_walk_on_a_line_gives_the_chain_rules_verdict_draw_for_draw(params, sampled_q, seed):
    logits, q, tokens, n, u = line_case(seed, sampled_q=sampled_q)
    chain = accept_reference(logits, tokens, n, u, params, q)
    walk = accept_tree(logits, TokenTree.line(tokens, n), u, params, q)
    hosted = TokenTree.line(tokens, n, n.tolist())  # the same tree, its sizes named on the host
    assert torch.equal(hosted.tokens, TokenTree.line(tokens, n).tokens)
    assert walk.num_accepted.tolist() == chain.num_accepted.tolist()
    for b, a in enumerate(chain.num_accepted.tolist()):
        assert walk.emitted[b, : a + 1].tolist() == chain.emitted[b, : a + 1].tolist(), b
        assert walk.path[b] == list(range(a))  # the accepted nodes are the line's first a


# ---- a sampled line through the walk keeps the target's distribution --------------------------

N = 200_000
VS = 6


def chi2_bound(df: int) -> float:
    """The chi-square 0.999 quantile (Wilson-Hilferty; within 1% for df >= 5)."""
    z = 3.09
    return df * (1 - 2 / (9 * df) + z * (2 / (9 * df)) ** 0.5) ** 3


def walked_lines(treat_as_chosen: bool, seed: int = 0):
    """N two-token lines drawn from the draft's q, walked with the target's p; (observed, expected)
    counts over the cells (y1 = x, the step went on, y2 = z) and (y1 = x, the step ended).
    Speculative sampling's law: the step goes on past y1 = x with probability min(p0(x), q0(x)) and
    then y2 is distributed as p at slot 1 given x; it ends with y1 = x (recovered) with p0(x) - that."""
    g = torch.Generator().manual_seed(seed)
    p0 = torch.softmax(torch.randn(VS, generator=g) * 1.5, -1)  # [VS] the target at slot 0
    p1 = torch.softmax(torch.randn(VS, VS, generator=g) * 1.5, -1)  # [VS, VS] the target at slot 1 given x1
    q = torch.softmax(torch.randn(2, VS, generator=g), -1)  # [2, VS] the draft's q at each position
    x1 = torch.multinomial(q[0], N, replacement=True, generator=g)  # [N]
    x2 = torch.multinomial(q[1], N, replacement=True, generator=g)  # [N]
    logits = torch.stack([p0.log().expand(N, VS), p1[x1].log(), p0.log().expand(N, VS)], 1)  # [N, 3, VS]
    u = torch.rand(N, 3, generator=g)  # [N, 3]
    v = accept_tree(logits, TokenTree.line(torch.stack([x1, x2], 1), torch.full((N,), 2), [2] * N), u,
                    SamplingParams(1.0), None if treat_as_chosen else q.expand(N, 2, VS))
    went_on = v.num_accepted >= 1  # [N]
    y1, y2 = v.emitted[:, 0], v.emitted[:, 1]
    observed, expected = [], []
    for x in range(VS):
        go = torch.minimum(p0[x], q[0, x])
        observed.append(torch.bincount(y2[(y1 == x) & went_on], minlength=VS).float())
        expected.append(N * go * p1[x])
        observed.append(((y1 == x) & ~went_on).sum().float().view(1))
        expected.append((N * (p0[x] - go)).view(1))
    return torch.cat(observed), torch.cat(expected)


def chi_square(observed, expected) -> tuple[float, int]:
    """(chi-square, degrees of freedom); cells expecting under 5 pooled into one; an observation in a
    cell of probability 0 (min(p0, q0) = p0 leaves "ended" empty) makes it infinite."""
    if float(observed[expected <= 0].sum()) > 0:
        return float("inf"), 1
    small = (expected > 0) & (expected < 5)
    o = torch.cat([observed[expected >= 5], observed[small].sum().view(1)])
    e = torch.cat([expected[expected >= 5], expected[small].sum().view(1)])
    keep = e > 0
    return float(((o[keep] - e[keep]) ** 2 / e[keep]).sum()), int(keep.sum()) - 1


def test_a_line_drawn_from_q_walked_keeps_the_target_distribution():
    chi2, df = chi_square(*walked_lines(treat_as_chosen=False))
    assert chi2 < chi2_bound(df), (chi2, df)


def test_a_walk_that_treats_drawn_proposals_as_chosen_fails_it():
    chi2, df = chi_square(*walked_lines(treat_as_chosen=True))
    assert chi2 > 10 * chi2_bound(df), (chi2, df)


# ---- the decoder: chains through the tree's verify and walk -----------------------------------

@pytest.fixture(scope="module")
def target():
    return tiny_llama(64, layers=2)


def decode(target, prompts, proposer, k, walk_lines, params=SamplingParams(), max_new=14):
    dec = SpecDecoder(target, proposer, Fixed(k), [""] * len(prompts), prompts, params, max_new, seed=3,
                      walk_lines=walk_lines)
    steps = list(dec.steps())
    return [r.output for r in dec.rows], steps


@pytest.mark.parametrize("draft", ["ngram", "model"])
def test_chains_walked_as_width_1_trees_decode_what_the_fast_forms_decode(target, draft):
    prompts = ragged_prompts(5, 64, seed=2)
    make = {"ngram": lambda: NgramDraft(), "model": lambda: ModelDraft(perturbed_copy(target, 0.3))}[draft]
    walked, walked_steps = decode(target, prompts, make(), 3, walk_lines=True)
    fast, fast_steps = decode(target, prompts, make(), 3, walk_lines=False)
    assert walked == fast == reference_greedy(target, prompts, 14)
    assert [s.to_json()["rows"] for s in walked_steps] == [s.to_json()["rows"] for s in fast_steps]
    assert all(s.tree_width is None for s in walked_steps)  # a chain step records no tree
    assert sum(r.accepted for s in walked_steps for r in s.rows) > 0  # the drafts were accepted sometimes


def test_a_sampled_chain_walked_emits_what_the_fast_forms_emit_with_the_same_draws(target):
    """Same draws, same rule: the model draft's sampled lines give the same text either way (the two
    verify forwards agree to float rounding; a flip would show here as a different output)."""
    prompts = ragged_prompts(4, 64, seed=7)
    params = SamplingParams(1.0)
    walked, _ = decode(target, prompts, ModelDraft(perturbed_copy(target, 0.3)), 3, True, params)
    fast, _ = decode(target, prompts, ModelDraft(perturbed_copy(target, 0.3)), 3, False, params)
    assert walked == fast
