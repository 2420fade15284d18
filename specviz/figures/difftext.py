"""A diverged row's two texts as Markdown, the first difference marked (pure: no Streamlit). The text
comes from a trace, so every piece is escaped (specviz.figures.safetext.md_escape): a trace is never markup."""

from __future__ import annotations

from specviz.figures.safetext import md_escape

VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥"}  # a differing token that is only white space must still show


def _marked(token: str) -> str:
    if not token:
        return "*(its output ended here)*"
    shown = "".join(VISIBLE.get(c, c) for c in token) if not token.strip() else token
    return f"**:orange-background[⟦{md_escape(shown)}⟧]**"


def first_difference_markdown(row: int, diff: dict) -> str:
    """Two lines, speculative then regular: the shared text before the first difference, the first token
    that differs (marked), and what each side wrote after it (specviz.analysis.divergence.first_difference)."""
    shared = ("…" if diff["cut"] else "") + md_escape(diff["shared"])
    lines = [f"**Row {row}, token {diff['position']}**, the first token where the outputs differ:"]
    for label, key in (("speculative", "speculative"), ("regular", "regular")):
        lines.append(f"- {label}: {shared}{_marked(diff[key + '_token'])}{md_escape(diff[key + '_rest'])}…")
    return "\n".join(lines)
