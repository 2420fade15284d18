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
