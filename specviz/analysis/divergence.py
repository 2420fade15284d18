"""A speculative and a regular trace compared row by row: where each row's output first differs.

Pure (no torch): the Streamlit server draws these rows. The margin at a divergence (the regular
run's top-1 minus top-2 logit there, which says whether it was a near-tie) needs a target forward:
the device process passes ``margin`` (specviz.measure.correctness.divergence_rows)."""

from __future__ import annotations

from typing import Callable


def divergence_rows(spec: dict, regular: dict, margin: Callable[[list[int]], float] | None = None) -> list[dict]:
    """Per row: exact match of speculative vs regular output, the first divergent position and
    ``margin(prompt + regular output up to that position)`` there (None without ``margin``)."""
    rows = []
    for s, r in zip(spec["sequences"], regular["sequences"]):
        a, b = s["output_token_ids"], r["output_token_ids"]
        pos = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if pos is None and len(a) != len(b):
            pos = min(len(a), len(b))
        m = margin(r["prompt_token_ids"] + b[:pos]) if pos is not None and margin is not None and pos < len(b) else None
        rows.append({"index": s["index"], "match": pos is None, "first_divergence": pos, "margin": m,
                     "length": len(b), "speculative": a, "regular": b})
    return rows


def first_difference(speculative: list[int], regular: list[int], position: int, decode: Callable[[list[int]], str],
                     before: int = 24, after: int = 16) -> dict:
    """The two outputs of one row around their first difference, as text: up to ``before`` tokens they share
    ("shared", with "cut": whether earlier text was left out), then from ``position`` each side's first
    differing token ("speculative_token", "regular_token"; "" where that side ended) and up to ``after``
    tokens after it ("speculative_rest", "regular_rest")."""
    start = max(0, position - before)
    side = lambda ids: (decode(ids[position:position + 1]), decode(ids[position + 1:position + 1 + after]))  # noqa: E731
    (s_tok, s_rest), (r_tok, r_rest) = side(speculative), side(regular)
    return {"position": position, "shared": decode(regular[start:position]), "cut": start > 0,
            "speculative_token": s_tok, "speculative_rest": s_rest, "regular_token": r_tok, "regular_rest": r_rest}
