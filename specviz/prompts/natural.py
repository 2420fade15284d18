"""Natural chat prompts: ``natural.jsonl``, about 1,500 prompts written in the hand-written style of
the free-form yardstick (``specviz.prompts.gen.FREEFORM``) but on none of its subjects, for the part
of a draft's data that should look like what people type (issue 19).

The templated (``gen``) and varied (``varied``) prompts fill slots in a few dozen sentence shapes;
a draft trained on their answers agrees with the target 0.53 of the time on held-out prompts of
that kind but 0.41 on the free-form set (teacher-forced, the shipped feature draft). These are
one-off requests of ten kinds (explain, howto, writing, compare, facts, code, lists, language,
math, casual) in many phrasings and lengths.

Split: a prompt is held out when the first byte of its text's sha256 is below 26 (about 10%), so
the split never changes with the file's order or size. tests/prompts/test_prompts_natural.py checks that
no prompt is a free-form prompt or close to one (word-set Jaccard similarity below 0.25).

    natural_prompts(n, seed, heldout=False) -> n prompts of that split, prefix-stable; past the
    split's size it starts again in another seeded order, so each prompt gets more answers

``natural2.jsonl`` is a second, larger set written the same way and to the same rules, for drafts
that have answered the first set several times over: more prompts rather than more answers to the
same ones (``natural_prompts(..., second=True)``; its held-out prompts are never trained on, and a
distill run on it keeps checking on the first set's held-out prompts, its yardstick so far).
"""

from __future__ import annotations

import hashlib
import json
import random
from functools import lru_cache
from pathlib import Path

FILE = Path(__file__).with_name("natural.jsonl")
FILE2 = Path(__file__).with_name("natural2.jsonl")
HELDOUT_BELOW = 26  # first sha256 byte < 26 of 256: about 10% held out


def is_heldout(prompt: str) -> bool:
    return hashlib.sha256(prompt.encode()).digest()[0] < HELDOUT_BELOW


@lru_cache(maxsize=2)
def records(file: Path = FILE) -> tuple[dict, ...]:
    return tuple(json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip())


def split(heldout: bool = False, second: bool = False) -> list[str]:
    """The prompts of one split of the first set (or the second), in file order."""
    return [r["prompt"] for r in records(FILE2 if second else FILE) if is_heldout(r["prompt"]) == heldout]


def natural_prompts(n: int, seed: int = 0, heldout: bool = False, second: bool = False) -> list[str]:
    """n prompts of the split: a seeded shuffle of it, then another, and so on (prefix-stable)."""
    pool = split(heldout, second)
    out: list[str] = []
    cycle = 0
    while len(out) < n:
        order = pool[:]
        random.Random(f"natural{'2' if second else ''}-{int(heldout)}-{seed}-{cycle}").shuffle(order)
        out += order[: n - len(out)]
        cycle += 1
    return out
