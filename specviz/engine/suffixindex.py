"""Where earlier text continues: an occurrence index over token sequences, the structure behind the
suffix draft (specviz.engine.suffix).

SuffixDecoding (Oliaro et al. 2024, arXiv 2411.04975) keeps suffix trees: a path from the root spells a
substring, a node counts the substring's occurrences, and the subtree under the node of the context's
longest matching suffix holds what followed every occurrence of that suffix. This module answers the
same two questions:

  match      the longest suffix of a context (up to ``max_match`` tokens) that occurred before with at
             least one token after it, and the end position of each such occurrence
  following  the tokens after one occurrence, which the draft merges into a counted trie: the suffix
             tree's subtree under the match, built on demand and only as deep as the draft goes

How: every position is filed under the n-grams (n = 1..KEY) that end there. A lookup starts from the
context's last KEY tokens (fewer when those never occurred), then extends each candidate backwards, token
by token, to its full match length. Memory is KEY index entries per stored token, where a depth-D suffix
trie holds up to D nodes per token (D Python objects: too many for a corpus kept all run).

Positions are one int each: ``sequence id << SHIFT | offset``. A sequence's entries sit in every list
in the order they were added, so removing the oldest (or newest) sequence cuts each list at its front
(or back), with no search.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

from specviz.common import SpecvizError, write_atomic

KEY = 3  # n-gram lengths the index files a position under: 1..KEY
SHIFT = 32  # offset bits of a position: sequences up to 2**32 tokens
MASK = (1 << SHIFT) - 1
MAX_SCAN = 512  # candidate occurrences a match looks at, latest first (the cost bound of one lookup)
FORMAT = "specviz suffix corpus"


class Occurrences:
    """Token sequences, each under an id, and the n-gram index over all of them."""

    def __init__(self):
        self.seqs: dict[int, list[int]] = {}  # sequence id -> its tokens
        self.index: dict[tuple[int, ...], list[int]] = {}  # n-gram -> positions where it ends, oldest first
        self.tokens = 0  # stored tokens, all sequences

    def _grams(self, seq: list[int], p: int):
        """The n-grams (n = 1..KEY) ending at offset p."""
        return (tuple(seq[p - n + 1:p + 1]) for n in range(1, min(KEY, p + 1) + 1))

    def extend(self, sid: int, tokens: list[int]) -> None:
        """Append tokens to sequence ``sid`` (a new id starts a sequence)."""
        seq = self.seqs.setdefault(sid, [])
        base = sid << SHIFT
        for t in tokens:
            seq.append(int(t))
            p = len(seq) - 1
            for g in self._grams(seq, p):
                self.index.setdefault(g, []).append(base | p)
        self.tokens += len(tokens)

    def remove(self, sid: int, newest: bool = False) -> None:
        """Drop sequence ``sid``, which must be the oldest one stored (or the newest: ``newest``)."""
        seq = self.seqs.pop(sid)
        counts = collections.Counter(g for p in range(len(seq)) for g in self._grams(seq, p))
        for g, c in counts.items():
            entries = self.index[g]
            cut = slice(len(entries) - c, None) if newest else slice(0, c)
            assert all(e >> SHIFT == sid for e in entries[cut]), "only the oldest or the newest sequence can go"
            del entries[cut]
            if not entries:
                del self.index[g]
        self.tokens -= len(seq)

    def match(self, ctx: list[int], max_match: int, max_found: int) -> tuple[int, list[int]]:
        """(L, ends): the longest suffix of ``ctx`` (L <= max_match tokens) that occurred with a token after
        it, and the end positions of up to ``max_found`` such occurrences, latest first; (0, []) if none."""
        for n in range(min(KEY, len(ctx), max_match), 0, -1):
            ends = self.index.get(tuple(ctx[len(ctx) - n:]))
            if not ends:
                continue
            best, found = 0, []
            for e in reversed(ends[-MAX_SCAN:]):
                seq, p = self.seqs[e >> SHIFT], e & MASK
                if p + 1 >= len(seq):  # nothing followed it (the context's own end)
                    continue
                L = n
                while L < max_match and L < len(ctx) and p - L >= 0 and seq[p - L] == ctx[-1 - L]:
                    L += 1
                if L > best:
                    best, found = L, [e]
                elif L == best and len(found) < max_found:
                    found.append(e)
            if found:
                return best, found
        return 0, []

    def following(self, end: int, depth: int) -> list[int]:
        """Up to ``depth`` tokens after the occurrence ending at position ``end``."""
        p = end & MASK
        return self.seqs[end >> SHIFT][p + 1:p + 1 + depth]


class Corpus:
    """The global structure: finished requests (their output after a short prompt tail), kept for the run,
    bounded to ``max_tokens`` stored tokens by evicting the oldest requests first."""

    def __init__(self, max_tokens: int = 65536):
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be positive (got {max_tokens})")
        self.max_tokens = max_tokens
        self.occ = Occurrences()
        self.order: collections.deque[int] = collections.deque()  # stored sequence ids, oldest first
        self.next_id = 0
        self.learnt = 0  # tokens added over this structure's life (loaded ones included), evicted or not

    @property
    def tokens(self) -> int:
        return self.occ.tokens

    @property
    def requests(self) -> int:
        return len(self.order)

    def add(self, tokens: list[int]) -> None:
        """One finished request's tokens; the oldest requests leave until they fit (a request longer than
        the whole cap keeps its last ``max_tokens``)."""
        tokens = list(tokens[-self.max_tokens:])
        if not tokens:
            return
        while self.occ.tokens + len(tokens) > self.max_tokens:
            self.occ.remove(self.order.popleft())
        self.occ.extend(self.next_id, tokens)
        self.order.append(self.next_id)
        self.next_id += 1
        self.learnt += len(tokens)

    def snapshot(self) -> list[list[int]]:
        """The stored requests, oldest first (``restore`` puts exactly these back)."""
        return [list(self.occ.seqs[i]) for i in self.order]

    def restore(self, requests: list[list[int]]) -> None:
        """Forget everything, then store ``requests`` (a ``snapshot``) again, oldest first."""
        learnt = self.learnt
        self.occ, self.order = Occurrences(), collections.deque()
        for r in requests:
            self.add(r)
        self.learnt = learnt

    # ---- the corpus file (--suffix-corpus) --------------------------------------------------------

    def save(self, path, tokenizer: str) -> Path:
        """Write the stored requests to ``path`` whole (a temporary file, then os.replace)."""
        doc = {"format": FORMAT, "version": 1, "tokenizer": tokenizer, "max_tokens": self.max_tokens,
               "requests": self.snapshot()}
        return write_atomic(path, json.dumps(doc, separators=(",", ":")))

    def load(self, path, tokenizer: str, vocab_size: int) -> None:
        """Add the requests of a file ``save`` wrote for the same tokenizer; SpecvizError (one line) otherwise."""
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise SpecvizError(f"suffix corpus {path} cannot be read: {e}") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != 1:
            raise SpecvizError(f"suffix corpus {path} is not a specviz suffix corpus (version 1)")
        if doc.get("tokenizer") != tokenizer:
            raise SpecvizError(f"suffix corpus {path} holds token ids of {doc.get('tokenizer')!r}, not of this "
                               f"run's target {tokenizer!r}: give another file")
        requests = doc.get("requests")
        ok = isinstance(requests, list) and all(
            isinstance(r, list) and all(type(t) is int and 0 <= t < vocab_size for t in r) for r in requests)
        if not ok:
            raise SpecvizError(f"suffix corpus {path}: \"requests\" must be lists of token ids below {vocab_size}")
        for r in requests:
            self.add(r)
