"""A diverged row shows both texts with the first difference marked; the text is a trace's, never markup."""

from specviz.analysis.divergence import first_difference
from specviz.figures.difftext import first_difference_markdown

WORDS = {1: "The", 2: " cat", 3: " sat", 4: " on", 5: " mat", 6: " rug", 7: " the", 8: " ", 9: "*bold*"}


def decode(ids):
    return "".join(WORDS[i] for i in ids)


def test_first_difference_gives_the_shared_text_then_each_sides_token_and_what_follows():
    d = first_difference([1, 2, 3, 4, 7, 5], [1, 2, 3, 4, 7, 6, 4], 5, decode, before=3, after=4)
    assert d == {"position": 5, "shared": " sat on the", "cut": True, "speculative_token": " mat",
                 "speculative_rest": "", "regular_token": " rug", "regular_rest": " on"}


def test_a_side_that_ended_at_the_difference_says_so():
    d = first_difference([1, 2], [1, 2, 3], 2, decode)
    assert d["speculative_token"] == "" and d["regular_token"] == " sat" and not d["cut"]
    md = first_difference_markdown(0, d)
    assert "speculative: The cat*(its output ended here)*" in md


def test_the_markdown_marks_the_first_differing_token_on_both_lines():
    md = first_difference_markdown(3, first_difference([1, 2, 5], [1, 2, 6], 2, decode))
    head, spec, reg = md.splitlines()
    assert head.startswith("**Row 3, token 2**")
    assert spec == "- speculative: The cat**:orange-background[⟦&#32;mat⟧]**…"
    assert reg == "- regular: The cat**:orange-background[⟦&#32;rug⟧]**…"


def test_a_white_space_token_is_shown_and_trace_text_is_escaped():
    md = first_difference_markdown(0, first_difference([9, 8], [9, 2], 1, decode))
    assert "⟦␣⟧" in md  # a space alone would be invisible
    assert r"\*bold\*" in md and "*bold*" not in md.replace(r"\*bold\*", "")
