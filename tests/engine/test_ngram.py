"""Prompt lookup's scan (NgramDraft._lookup, done in C over the context's bytes) proposes exactly what the
plain scan over token lists proposes."""

import random

from specviz.engine.proposers import NgramDraft


def reference_lookup(ctx: list[int], k: int, max_ngram: int) -> list[int]:
    L = len(ctx)
    for n in range(min(max_ngram, L - 1), 0, -1):
        tail = ctx[L - n:]
        for s in range(L - n - 1, -1, -1):  # latest match first, excluding the tail itself
            if ctx[s:s + n] == tail:
                return ctx[s + n:s + n + k]
    return []


def test_the_lookup_equals_the_plain_scan_on_random_and_repetitive_contexts():
    rng = random.Random(0)
    draft = NgramDraft(max_ngram=3)
    found = 0
    for trial in range(3000):
        vocab = rng.choice([2, 3, 8, 300, 70000, 2 ** 32 - 1])  # tiny vocabularies repeat; big ids span all 4 bytes
        ctx = [rng.randrange(vocab) for _ in range(rng.randrange(0, 40))]
        k = rng.randrange(1, 6)
        want = reference_lookup(ctx, k, 3)
        assert draft._lookup(ctx, k) == want, (ctx, k)
        found += bool(want)
    assert 500 < found < 2900  # both outcomes were exercised


def test_a_byte_pattern_across_token_boundaries_is_not_a_match():
    # little-endian words: the tail 0x100 is bytes 00 01 00 00, which also sit across two earlier tokens
    ctx = [0, 1, 0x100]  # ... 00 00 00 00 | 01 00 00 00: only a misaligned copy, so no match
    assert NgramDraft(max_ngram=3)._lookup(ctx, 2) == reference_lookup(ctx, 2, 3) == []
    ctx = [0x100, 9, 0x01000000, 0, 5, 0x100]  # the latest copy of the bytes is misaligned (inside 0x01000000, 0)
    assert NgramDraft(max_ngram=1)._lookup(ctx, 2) == reference_lookup(ctx, 2, 1) == [9, 0x01000000]
