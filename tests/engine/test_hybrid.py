"""The hybrid draft's choice and bookkeeping: its estimates, the merged tree, the choice on a repetitive vs a
fresh prompt, the tree records' origin, and a clear message for a bad MODEL+suffix."""

import pytest

from specviz.checks import check_draft
from specviz.common import SpecvizError
from specviz.engine.hybrid import PRIOR_ALPHA, Acceptance, expected_accepted, merge_rows
from specviz.engine.step import TreeShape
from specviz.prompts.sets import prompt_set
from specviz.models.loading import encode_prompts, get_model
from specviz.run import DEFAULT_DRAFT_DIR, decoder_for_ids, make_proposer

REPETITIVE = prompt_set("edit-code")[0]  # return a given function with one change: the answer copies it
FRESH = "Write a haiku about autumn leaves."


def test_a_fresh_row_expects_the_prior_and_learns_its_own_rate():
    fresh, pooled = Acceptance(), Acceptance()
    assert expected_accepted(fresh, pooled, 2) == pytest.approx(PRIOR_ALPHA + PRIOR_ALPHA ** 2)
    for _ in range(50):
        fresh.observe(4, 0)  # every step's first token rejected
    assert expected_accepted(fresh, pooled, 4) < 0.1
    sure = Acceptance()
    for _ in range(50):
        sure.observe(4, 4)
    assert expected_accepted(sure, pooled, 4) > 3.5


def test_a_merged_tree_keeps_one_node_per_path_and_marks_who_proposed_it():
    model = {"token": [5, 6, 7], "parent": [-1, 0, -1], "prob": [0.6, 0.5, 0.3], "rank": [0, 0, 1],
             "fed_slot": [0, 1, -1]}
    suffix = {"token": [5, 9, 8], "parent": [-1, 0, -1], "prob": [1.0, 1.0, 0.5], "rank": [0, 0, 1],
              "fed_slot": [-1, -1, -1]}
    out = merge_rows(model, suffix)
    assert out["token"] == [5, 6, 7, 9, 8]
    assert out["parent"] == [-1, 0, -1, 0, -1]  # 9 hangs under the shared 5, 8 is a new branch at the root
    assert out["origin"] == ["both", "model", "model", "suffix", "suffix"]
    assert out["rank"][3:] == [1, 2]  # after the model's siblings
    assert out["fed_slot"] == [0, 1, -1, -1, -1]  # suffix-only nodes were never fed to the model's cache


def test_model_plus_suffix_wants_a_model_draft_before_the_plus():
    for bad in ("ngram+suffix", "none+suffix", "+suffix", "suffix+suffix", "ngram:3+suffix"):
        with pytest.raises(SpecvizError, match="MODEL\\+suffix wants a model draft"):
            check_draft(bad, "--draft")
    assert check_draft("default+suffix", "--draft") is None


@pytest.fixture(scope="module")
def target():
    return get_model("default", "cpu", "float32")


def choices(target, prompt: str, tree=None):
    """(per step, whether the row drafted with the suffix draft; the run's steps). The shipped distilled draft
    (in fp32 the default draft is the target itself in bf16, which accepts nearly everything)."""
    draft = make_proposer(f"{DEFAULT_DRAFT_DIR}+suffix", target)
    ids = encode_prompts(target.tokenizer, [prompt])
    dec = decoder_for_ids(target, draft, ids, 4, 32, tree=tree)
    picks, steps = [], []
    for step in dec.steps():
        picks.append(draft.use_suffix[0])
        steps.append(step)
    return picks, steps


@pytest.mark.slow
def test_the_hybrid_takes_the_suffix_draft_on_a_repetitive_prompt_and_the_model_on_a_fresh_one(target):
    rep, _ = choices(target, REPETITIVE)
    fresh, _ = choices(target, FRESH)
    assert sum(rep) > len(rep) / 2, rep
    assert sum(fresh) < len(fresh) / 2, fresh


@pytest.mark.slow
def test_every_tree_node_records_the_draft_that_proposed_it(target):
    picks, steps = choices(target, REPETITIVE, TreeShape(2, 6))
    origins = [set(r.tree.origin) for s in steps for r in s.rows if r.tree is not None]
    assert {"suffix"} in origins and {"model"} in origins  # one draft per row and step, each recorded
    back = [r.tree for s in steps for r in s.rows if r.tree is not None][0]
    assert type(back).from_json(back.to_json()) == back  # the trace keeps it


@pytest.mark.slow
@pytest.mark.slow
@pytest.mark.parametrize("tree", [None, TreeShape(1, 16)], ids=["chain", "tree"])
def test_the_suffix_side_drafts_past_the_models_k_when_the_spec_says_so_and_stays_exact(target, tree):
    """k = 2: with +suffix:12 a long match lets the suffix side draft up to 12 deep (never the model's rows),
    and the output is still plain greedy's; with +suffix no proposal passes k."""
    from exact_default import assert_exact
    from specviz.measure.correctness import compare

    ids = encode_prompts(target.tokenizer, [REPETITIVE])
    reference = decoder_for_ids(target, None, ids, 0, 40)
    for _ in reference.steps():
        pass
    for spec, longest in (("+suffix:12", lambda n: 2 < n <= 12), ("+suffix", lambda n: n <= 2)):
        draft = make_proposer(f"{DEFAULT_DRAFT_DIR}{spec}", target)
        dec = decoder_for_ids(target, draft, ids, 2, 40, tree=tree)
        drafted = [(s.rows[0].drafted, draft.use_suffix[0]) for s in dec.steps()]
        assert longest(max(n for n, _ in drafted)), drafted
        assert all(n <= 2 for n, by_suffix in drafted if not by_suffix)  # the model drafts k
        assert_exact(compare(target, ids, [dec.rows[0].output], [reference.rows[0].output]))


def test_the_suffix_sides_depth_is_a_whole_number_from_1_to_64_and_the_context_leaves_room_for_it():
    from specviz.bounds import draft_reach

    assert check_draft("default+suffix:12", "--draft") is None
    for bad in ("default+suffix:0", "default+suffix:65", "default+suffix:x", "default+suffix:"):
        with pytest.raises(SpecvizError, match="MODEL\\+suffix:D wants the suffix side's depth D from 1 to 64"):
            check_draft(bad, "--draft")
    assert draft_reach("default+suffix:12", 4) == 12 and draft_reach("default+suffix:12", 16) == 16
    assert draft_reach("default+suffix", 4) == 4 and draft_reach("suffix", 4) == 4
    assert draft_reach("default+suffix:12", 0) == 0  # a regular run drafts nothing
