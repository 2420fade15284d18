"""Text from a trace or a file, made safe for the two ways the pages show text, so that whatever a
value holds it shows as its own characters and never becomes a tag, a link, an image, a formula or
a colour:

  md_escape   for Markdown: st.markdown, st.caption, st.info / warning / error / success, st.table
              cells and widget labels
  html_text   for the HTML the pages draw with unsafe_allow_html (which Streamlit still reads as
              Markdown around the HTML)

Pure functions; no Streamlit.
"""

from __future__ import annotations

import html
import re
import string

_PUNCTUATION = re.compile("([" + re.escape(string.punctuation) + "])")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def md_escape(value) -> str:
    """``value`` as Markdown that shows literally.

    Every ASCII punctuation character is backslash-escaped: in CommonMark an escaped punctuation
    character is that character and nothing else, and every construct Streamlit's Markdown knows
    starts with one (emphasis, code, links and images, raw HTML, entities, GFM tables,
    strikethrough and autolinks such as www.x or http://x or a@b.c, $math$, :colour[text]
    directives, headings, lists, quotes). Line breaks become spaces, so the value stays inside the
    line it is put in, and a leading space or tab is written as a character reference, so a value
    at the start of a line cannot indent it into a code block."""
    text = _PUNCTUATION.sub(r"\\\1", _LINE_BREAK.sub(" ", str(value)))
    if text[:1] in (" ", "\t"):
        text = f"&#{ord(text[0])};{text[1:]}"
    return text


def html_text(value) -> str:
    """``value`` as HTML text: html.escape (quotes too, so it may stand in an attribute), and line
    breaks as character references. Streamlit reads an unsafe_allow_html body as Markdown in which
    HTML is a raw block, and a blank line ends that block: a raw line break from a value could
    end it and let the rest be read as Markdown. Inside white-space: pre-wrap the references still
    break the line."""
    return html.escape(str(value), quote=True).replace("\r", "&#13;").replace("\n", "&#10;")
