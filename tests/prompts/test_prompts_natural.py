"""specviz.prompts.natural: the hand-written-style training prompts stay clear of the free-form
yardstick, and their split is fixed, disjoint and resumable."""

import json
import re

import pytest

from specviz.prompts.gen import FREEFORM
from specviz.prompts.natural import FILE, FILE2, is_heldout, natural_prompts, records, split

KINDS = {"explain", "howto", "writing", "compare", "facts", "code", "lists", "language", "math", "casual"}


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]{4,}", text.lower()))


def jaccard(a: set, b: set) -> float:
    return len(a & b) / max(1, len(a | b))


@pytest.mark.parametrize("file,least", [(FILE, 1200), (FILE2, 2000)])
def test_each_natural_set_is_distinct_of_ten_kinds_and_none_is_or_resembles_a_freeform_prompt(file, least):
    records = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    prompts = [r["prompt"] for r in records]
    assert len(prompts) >= least and len(set(prompts)) == len(prompts)
    assert {r["kind"] for r in records} == KINDS
    assert not set(prompts) & set(FREEFORM)
    closest = max((jaccard(words(p), words(f)), p, f) for p in prompts for f in FREEFORM)
    assert closest[0] < 0.25, closest


def test_the_split_is_disjoint_about_a_tenth_held_out_and_fixed_by_the_text():
    train, held = split(), split(heldout=True)
    assert not set(train) & set(held) and len(train) + len(held) == len(set(train) | set(held))
    assert 0.05 < len(held) / (len(train) + len(held)) < 0.15
    assert all(is_heldout(p) for p in held) and not any(is_heldout(p) for p in train)


def test_natural_prompts_are_prefix_stable_and_past_the_split_start_again_in_another_order():
    n = len(split())
    long = natural_prompts(2 * n + 5, seed=3)
    assert natural_prompts(40, seed=3) == long[:40] and natural_prompts(40, seed=4) != long[:40]
    assert sorted(long[:n]) == sorted(split()) == sorted(long[n:2 * n]) and long[:n] != long[n:2 * n]
    assert set(natural_prompts(30, seed=1, heldout=True)) <= set(split(heldout=True))


def test_the_second_set_repeats_nothing_of_the_first_and_stays_clear_of_its_held_out_prompts():
    first, second = [r["prompt"] for r in records(FILE)], [r["prompt"] for r in records(FILE2)]
    assert not set(second) & set(first)
    held = [words(p) for p in split(heldout=True)]  # the first set's held-out prompts stay unseen in spirit too
    closest = max((jaccard(words(p), h), p) for p in split(second=True) for h in held if len(words(p)) >= 2)
    assert closest[0] < 0.6, closest


def test_the_second_set_has_its_own_fixed_split_and_its_own_prefix_stable_order():
    train, held = split(second=True), split(heldout=True, second=True)
    assert 0.05 < len(held) / (len(train) + len(held)) < 0.15 and not set(train) & set(held)
    long = natural_prompts(len(train) + 5, seed=3, second=True)
    assert natural_prompts(40, seed=3, second=True) == long[:40] and sorted(long[:len(train)]) == sorted(train)
    assert not set(long) & set(split())
