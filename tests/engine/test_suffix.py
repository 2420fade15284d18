"""The suffix draft's structures and rules (specviz.engine.suffixindex, specviz.engine.suffix): the index
finds what a plain scan finds, the depth rule and the frequencies shape the tree, the global structure
learns across requests and stays under its cap, and an empty match drafts nothing."""

import json
import random
import tracemalloc

import pytest
import torch

from specviz.common import SpecvizError
from specviz.analysis.analytic import CostModel
from specviz.engine.suffix import PROMPT_TAIL, SuffixDraft, grow
from specviz.engine.suffixindex import Corpus, Occurrences
from specviz.engine.step import TreeShape
from specviz.run import decoder_for_ids

from fakes import tiny_llama


def reference_match(seqs: list[list[int]], ctx: list[int], max_match: int) -> tuple[int, set[tuple[int, int]]]:
    """The plain scan: every (sequence, end) whose last L tokens equal ctx's, with a token after, L maximal."""
    best, found = 0, set()
    for sid, seq in enumerate(seqs):
        for p in range(len(seq) - 1):  # p + 1 < len(seq): something followed
            L = 0
            while L < max_match and L < len(ctx) and p - L >= 0 and seq[p - L] == ctx[-1 - L]:
                L += 1
            if L and L > best:
                best, found = L, {(sid, p)}
            elif L and L == best:
                found.add((sid, p))
    return best, found


def test_the_index_finds_the_longest_match_and_all_its_occurrences_as_a_plain_scan_does():
    rng = random.Random(0)
    checked = 0
    for trial in range(600):
        vocab = rng.choice([2, 3, 5, 50])  # tiny vocabularies repeat a lot
        seqs = [[rng.randrange(vocab) for _ in range(rng.randrange(0, 30))] for _ in range(rng.randrange(1, 4))]
        ctx = [rng.randrange(vocab) for _ in range(rng.randrange(1, 12))]
        max_match = rng.choice([1, 2, 4, 32])
        occ = Occurrences()
        for sid, s in enumerate(seqs):
            occ.extend(sid, s)
        L, ends = occ.match(ctx, max_match, max_found=10 ** 6)
        want_L, want = reference_match(seqs, ctx, max_match)
        assert L == want_L, (seqs, ctx, max_match)
        assert {(e >> 32, e & 0xFFFFFFFF) for e in ends} == want
        checked += bool(want)
    assert 300 < checked < 600  # matches and misses were both exercised


def test_removing_the_oldest_or_newest_sequence_leaves_the_index_of_the_rest():
    rng = random.Random(1)
    seqs = [[rng.randrange(4) for _ in range(rng.randrange(1, 20))] for _ in range(6)]
    occ = Occurrences()
    for sid, s in enumerate(seqs):
        occ.extend(sid, s)
    occ.remove(0)
    occ.remove(5, newest=True)
    fresh = Occurrences()
    for sid in range(1, 5):
        fresh.extend(sid, seqs[sid])
    assert occ.index == fresh.index and occ.tokens == fresh.tokens == sum(map(len, seqs[1:5]))


def test_the_tree_takes_continuations_by_frequency_and_drops_rare_ones():
    conts = [[1, 2, 3]] * 6 + [[1, 4]] * 3 + [[5]]  # 10 occurrences: token 5 follows one of them
    d = grow(conts, depth=3, width=2, nodes=16, min_prob=0.1)
    # best-first by path probability: 1 (0.9), 2 (0.6), 3 (0.6), 4 (0.3), 5 (0.1); siblings by count
    assert list(zip(d.tokens, d.parents)) == [(1, -1), (2, 0), (3, 1), (4, 0), (5, -1)]
    assert d.ranks == [0, 0, 0, 1, 1] and d.probs == [0.9, 6 / 9, 1.0, 3 / 9, 0.1]
    assert d.score == pytest.approx(0.9 + 0.6 + 0.3 + 0.6 + 0.1)  # path probabilities
    assert grow(conts, 3, 2, 16, min_prob=0.2).tokens == [1, 2, 3, 4]  # 5 (path probability 0.1) is dropped
    chain = grow(conts, depth=3, width=1, nodes=3, min_prob=0.1)  # a chain: the most frequent child at each depth
    assert chain.tokens == [1, 2, 3] and chain.parents == [-1, 0, 1]


def test_the_depth_is_bounded_by_factor_times_the_match_length():
    draft = SuffixDraft(factor=1.0)
    ctx = [9, 1, 2, 3, 4, 5, 6, 7, 8, 7, 1, 2]  # "1 2" occurred before: a match of 2 tokens
    draft.start([ctx])
    assert draft.draft(ctx, draft.rows[0], k=8, width=1, nodes=8).tokens == [3, 4]  # depth <= 1.0 x 2
    ctx = ctx + [3, 4, 5]  # now "1 2 3 4 5" matches: depth up to 5
    draft.start([ctx])
    d = draft.draft(ctx, draft.rows[0], k=8, width=1, nodes=8)
    assert d.match == 5 and d.tokens == [6, 7, 8, 7, 1] and d.source == "request"
    assert draft.draft(ctx, draft.rows[0], k=3, width=1, nodes=8).tokens == [6, 7, 8]  # and by k
    assert SuffixDraft(factor=0.5).draft(ctx, draft.rows[0], k=8, width=1, nodes=8).tokens == [6, 7]  # 0.5 x 5


def _drafts():
    """Two rows' drafts: a sure three-token chain, and a tree of one sure node and a rare tail."""
    conts = [[1, 2, 3]] * 4
    sure = grow(conts, depth=3, width=1, nodes=3, min_prob=0.1)
    mixed = grow([[7, 8]] * 6 + [[7, 9, 9]] * 2 + [[5]] * 2, depth=3, width=2, nodes=8, min_prob=0.1)
    return [sure, mixed]


def test_with_free_verify_tokens_goodput_keeps_every_node():
    draft = SuffixDraft(costs=CostModel(t_fixed=0.02, t_mem=0.01, t_token=0.0001))  # flat far past these widths
    drafts = _drafts()
    assert draft.sized(drafts) == drafts
    assert SuffixDraft().sized(drafts) == drafts  # no costs: the depth rule alone


def test_where_verified_tokens_cost_goodput_keeps_the_likeliest_nodes_as_prefixes():
    draft = SuffixDraft(costs=CostModel(t_fixed=0.02, t_mem=0.0, t_token=0.004))  # a token: a fifth of a step
    sure, mixed = drafts = _drafts()
    pp = mixed.path_probs()
    assert pp == sorted(pp, reverse=True)  # best-first: a prefix is the likeliest nodes
    kept = draft.sized(drafts)
    assert kept[0] == sure  # path probability 1: always worth a fifth of a step
    assert 0 < len(kept[1].tokens) < len(mixed.tokens)  # the rare tail (0.2, 0.2) is not
    assert kept[1].tokens == mixed.tokens[: len(kept[1].tokens)] and kept[1].score == pytest.approx(sum(pp[:len(kept[1].tokens)]))
    expensive = SuffixDraft(costs=CostModel(t_fixed=0.0, t_mem=0.0, t_token=0.01))  # a token: a whole step
    assert [d.tokens for d in expensive.sized(drafts)] == [[], []]  # nothing drafted pays


def test_the_calibration_learns_how_far_the_counts_overstate_acceptance():
    draft = SuffixDraft()
    draft.start([[1, 2, 3]])
    assert draft.calibration == 1.0  # no evidence yet: the counts as they are
    draft.last = [grow([[4, 5, 6]], depth=3, width=1, nodes=3, min_prob=0.1)]  # expected 3 by the counts
    for _ in range(8):
        draft.commit([1], [[4, 5]])  # one accepted of the three, step after step
    assert draft.calibration == pytest.approx((8 + 8) / (24 + 8))
    draft.start([[1]])
    assert draft.calibration == 1.0  # a new run calibrates afresh


def test_after_a_stretch_of_drafts_that_did_not_pay_the_batch_drafts_again_later():
    """The calibration's sums fade each step, drafted or not: a run that stopped drafting tries again."""
    draft = SuffixDraft(costs=CostModel(t_fixed=0.02, t_mem=0.0, t_token=0.004))
    draft.start([[1]])
    draft.expected, draft.accepted = 100.0, 0.0  # every recent draft rejected
    sure = _drafts()[:1]
    assert draft.sized(sure)[0].tokens == []  # not worth a verified token now
    steps = 1
    while not draft.sized(sure)[0].tokens:
        steps += 1
        assert steps < 200
    assert 10 < steps < 100  # some tens of steps later (CAL_DECAY 0.95 a step)


def test_an_empty_match_drafts_nothing_and_the_step_verifies_only_the_last_token():
    target = tiny_llama()
    draft = SuffixDraft()
    prompts = [[1, 2, 3, 4, 5], [6, 7, 8]]  # no token repeats: nothing to match
    draft.start(prompts)
    prop = draft.propose(prompts, 4, None, None)
    assert prop.num_drafted.tolist() == [0, 0] and prop.widest == 0 and prop.counts == [0, 0]
    assert draft.propose_tree(prompts, 4, 3, 8, None).sizes() == [0, 0]
    for tree in (None, TreeShape(3, 8)):
        dec = decoder_for_ids(target, SuffixDraft(), prompts, 4, 1, tree=tree)
        step = next(dec.steps())
        assert [r.drafted for r in step.rows] == [0, 0]
        assert step.verify_width == 1  # the regular step's one slot per row: no draft forward, no extra slots


def test_a_second_identical_request_accepts_more_from_the_global_structure():
    target = tiny_llama(seed=3)
    draft = SuffixDraft()
    prompt = [5, 17, 33, 2, 41, 9]
    dec = decoder_for_ids(target, draft, [prompt, prompt], 4, 24, lanes=1)  # one after the other
    for _ in dec.steps():
        pass
    first, second = dec.rows
    assert first.output == second.output  # greedy: the same answer
    # both learnt on leaving: prompt and output, and at most k - 1 tokens the target emitted past max_new_tokens
    assert draft.corpus.requests == 2 and 0 <= draft.corpus.tokens - 2 * (len(prompt) + 24) <= 2 * 3
    assert second.accepted > first.accepted and second.accepted >= 20  # 24 tokens: all but the few bonus ones
    assert second.steps < first.steps


def test_the_global_structure_stays_under_its_cap_over_1000_requests():
    rng = random.Random(2)
    cap = 4000
    draft = SuffixDraft(corpus=Corpus(max_tokens=cap))
    draft.start([])
    tracemalloc.start()
    sizes = {}
    for i in range(1000):  # each request joins, emits its output, then retires through select_rows
        prompt = [rng.randrange(500) for _ in range(rng.randrange(5, 40))]
        draft.add_rows([prompt])
        draft.commit([0], [[rng.randrange(500) for _ in range(rng.randrange(10, 60))]])
        draft.select_rows(torch.zeros(0, dtype=torch.long))
        assert draft.corpus.tokens <= cap
        if i + 1 in (500, 1000):
            sizes[i + 1] = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    c = draft.corpus
    assert draft.rows == [] and 40 < c.requests < 200 and c.learnt > 10 * cap  # most requests were evicted
    assert c.requests == len(c.occ.seqs) and c.tokens == sum(map(len, c.occ.seqs.values()))
    entries = sum(len(v) for v in c.occ.index.values())
    assert entries == sum(min(3, p + 1) for s in c.occ.seqs.values() for p in range(len(s)))  # no stale entry
    assert sizes[1000] < 1.2 * sizes[500]  # memory flat once the cap is reached


def test_a_finished_request_joins_the_global_structure_with_its_prompt_tail():
    draft = SuffixDraft()
    prompt = list(range(100, 140))
    draft.start([prompt, [1, 2]])
    draft.commit([1, 0], [[7, 8], [3]])
    draft.select_rows(torch.tensor([1]))  # row 0 finished
    assert draft.corpus.snapshot() == [prompt[-PROMPT_TAIL:] + [7, 8]] and len(draft.rows) == 1


def test_a_saved_corpus_loads_the_same_requests_and_refuses_another_tokenizer(tmp_path):
    c = Corpus()
    c.add([1, 2, 3])
    c.add([4, 5])
    path = c.save(tmp_path / "corpus.json", "tok-a")
    assert [p.name for p in tmp_path.iterdir()] == ["corpus.json"]  # written whole: no temporary file left
    d = Corpus()
    d.load(path, "tok-a", vocab_size=10)
    assert d.snapshot() == [[1, 2, 3], [4, 5]]
    with pytest.raises(SpecvizError, match="tok-a"):
        Corpus().load(path, "tok-b", vocab_size=10)
    with pytest.raises(SpecvizError, match="below 5"):
        Corpus().load(path, "tok-a", vocab_size=5)
    (tmp_path / "bad.json").write_text(json.dumps({"format": "something else"}))
    with pytest.raises(SpecvizError, match="not a specviz suffix corpus"):
        Corpus().load(tmp_path / "bad.json", "tok-a", vocab_size=10)
