"""Text from a trace shows as its own characters: md_escape against a real CommonMark renderer
(markdown-it, with raw HTML on, tables and strikethrough), html_text and the token HTML built with
it (specviz.figures.tokentext), and the decoder the pages use on ids the tokenizer lacks."""

from __future__ import annotations

import html
import re

import pytest

from specviz.analysis.tracestats import decoder_for
from specviz.figures import tokentext
from specviz.figures.safetext import html_text, md_escape

HOSTILE = [
    "<img src=x id=pwned onerror=alert(1)><b id=pwnedb>x</b>",
    "![x](http://127.0.0.1:9/x.png)",
    "[a](javascript:alert(1))",
    ":red[x] and :material/home: and :blue-badge[y]",
    "$x$ and $$y$$",
    "**bold** _it_ ~~gone~~ `code` ``two``",
    "# heading",
    "1. first",
    "- item",
    "+ item",
    "> quote",
    "| a | b |",
    "www.example.com http://example.com a@b.co <http://x.y>",
    "&lt;b&gt; &amp; &#60;",
    "back\\slash \\<b>",
    "    four spaces",
    "\tleading tab",
    "line one\n\n<script>alert(1)</script>\r\n# two\rthree",
    "{curly} <!-- comment --> <![CDATA[x]]>",
    "---",
    "===",
    "[x]: http://example.com",
    "[^1] footnote",
    "",
]


def render(markdown: str) -> str:
    md = pytest.importorskip("markdown_it").MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    return md.render(markdown)


@pytest.mark.parametrize("value", HOSTILE)
def test_md_escape_renders_as_one_paragraph_of_exactly_the_values_characters(value):
    shown = render(md_escape(value))
    expected = re.sub(r"\r\n|\r|\n", " ", value)
    if not expected.strip():
        assert shown == ""
        return
    assert shown.startswith("<p>") and shown.endswith("</p>\n"), shown
    inner = shown[3:-5]
    assert "<" not in inner, shown  # no tag of any kind: no img, link, heading, list, code, emphasis
    assert html.unescape(inner).strip() == expected.strip()


@pytest.mark.parametrize("value", HOSTILE)
def test_md_escape_stays_in_the_line_it_is_put_in(value):
    shown = render(f"target={md_escape(value)}, steps")
    assert shown.count("<p>") == 1 and "<" not in shown[3:-5], shown


def test_md_escape_keeps_streamlits_own_markup_from_starting():
    """Streamlit adds $math$ and :colour[text] directives to CommonMark; both need their
    punctuation unescaped, and ours escapes every ASCII punctuation character."""
    for value, must in (("$x$", r"\$x\$"), (":red[x]", r"\:red\[x\]"), ("![x](y)", r"\!\[x\]\(y\)")):
        assert md_escape(value) == must


def test_md_escape_takes_any_value():
    assert md_escape(None) == "None" and md_escape(3.5) == r"3\.5"


@pytest.mark.parametrize("value", HOSTILE)
def test_html_text_is_one_text_node_with_no_raw_line_break(value):
    out = html_text(value)
    assert "<" not in out and ">" not in out and '"' not in out and "\n" not in out and "\r" not in out
    assert html.unescape(out) == value


def test_token_html_shows_a_hostile_finish_reason_and_token_text_as_text():
    """Token text comes from the tokenizer, but an uploaded trace picks the ids: a blank line in it
    must not end the HTML block (Streamlit would read the rest as Markdown: an image, a link)."""
    trace = {"sequences": [{"index": 0, "finish_reason": "<img src=x onerror=alert(1)>", "output_token_ids": [1]}],
             "steps": [{"step": 0, "k": 0, "rows": [{"index": 0, "active": True, "drafted": 0, "accepted": 0,
                                                      "emitted": [1]}]}]}
    decode = lambda ids: "\n\n![x](http://127.0.0.1:9/x.png) <b id=pwnedb>x</b>"  # noqa: E731
    [(row, out)] = tokentext.token_html(trace, decode)
    assert row == 0
    assert "\n" not in out and "<img" not in out and "<b id" not in out
    assert "&lt;img src=x onerror=alert(1)&gt;" in out and "&#10;&#10;![x]" in out
    rendered = render(f"<p><b>row 0</b> {out}</p>")
    assert "<img" not in rendered and "<a " not in rendered and "<b id" not in rendered


def test_step_html_shows_token_text_as_text():
    d = {"step": 0, "k": 1, "drafted": 1, "accepted": 0, "draft_tokens": [5], "accepted_tokens": [], "rejected_at": 0,
         "final": 6, "final_kind": "recovered", "output": [6]}
    out = tokentext.step_html(d, lambda ids: '"><img src=x onerror=alert(1)>\n\n[a](javascript:x)')
    assert "<img" not in out and "\n" not in out and "&quot;&gt;&lt;img" in out


def test_draft_and_exactness_lines_escape_the_traces_names():
    line = tokentext.draft_text({"draft_name": "<b>d</b> [a](javascript:x)"}, None)
    assert "<b>" not in line and r"\<b\>d\<\/b\> \[a\]\(javascript\:x\)" in line
    ex = {"identical": 0, "rows": 1, "diverged": [{"row": 0, "position": 1, "margin": None}]}
    assert r"\<img\>" in tokentext.exactness_text(ex, "<img>") and "<img>" not in tokentext.exactness_text(ex, "<img>")


class OverflowingTokenizer:
    """A fast tokenizer's decode: ids past its integer type overflow (Rust's u32)."""

    def decode(self, ids, skip_special_tokens=False):
        if any(t < 0 or t >= 2**32 for t in ids):
            raise OverflowError("out of range integral type conversion attempted")
        return "".join(f"<{t}>" for t in ids)


def test_the_pages_decoder_shows_an_id_the_tokenizer_lacks_as_the_id():
    decode = decoder_for(OverflowingTokenizer())
    assert decode([1, -1, 2**40, 2]) == "<1>[-1][1099511627776]<2>"
