"""Text made safe for Streamlit's Markdown: user and corpus text shown as it is, never as
markup, math or HTML. A leaf module: every other module of vqlc_ui may import it."""

from __future__ import annotations

import re

_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|~<>$&])")
# In escaped HTML, a tag, a character reference, or one ASCII punctuation character of the text.
_HTML_TEXT = re.compile(r"(<[^>]*>|&(?:#\d+|#x[0-9a-fA-F]+|[A-Za-z]\w*);)|([!-/:-@\[-`{-~])")


def plain(text: str) -> str:
    """`text` for st.markdown / st.caption, shown as it is (no markup, math or HTML)."""
    return _MARKDOWN.sub(r"\\\1", text)


def literal_html(body: str) -> str:
    """Escaped HTML (tags, and text escaped with `html.escape`) for st.markdown, its text shown as
    it is: each ASCII punctuation character of the text becomes a numeric character reference,
    which Markdown takes as a literal character (no math between `$`, no escape by `\\`, no
    code, emphasis or strike-through), while tags and references stay as they are."""
    return _HTML_TEXT.sub(lambda m: m.group(1) or f"&#{ord(m.group(2))};", body)
