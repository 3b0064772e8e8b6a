"""What an input text must be before the explainer reads it. The dashboard cleans what a user
types (`clean_input`: it never refuses, it says what it changed); the library checks what a
caller passes (`check_input`: each problem is one sentence, raised as a ValueError).

Both keep the text's length, so character spans found in the cleaned text are spans of the
original: a control character becomes a space, a lone surrogate U+FFFD.
"""

from __future__ import annotations

import re
from vqlc_core.base.runio import RunError

CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # Unicode Cc, less tab and newlines
SURROGATE = re.compile(r"[\ud800-\udfff]")  # in a Python str every surrogate code point is a lone one
EMPTY = "The input is empty (nothing but spaces or control characters): type a sentence to explain."
UNKNOWN = ("The model's tokenizer knows none of the input's words (each becomes an unknown token), so there is "
           "nothing to explain; type words in a script the model reads.")


def clean_input(text: str) -> tuple[str, str | None]:
    """`text` with each lone surrogate replaced by U+FFFD and each control character (other than
    tab and newlines) by a space, and a notice of what was replaced (None when nothing was)."""
    text, n_bad = SURROGATE.subn("\ufffd", text)
    text, n_control = CONTROL.subn(" ", text)
    notes = []
    if n_bad:
        notes.append(f"{n_bad} character(s) that are not valid Unicode (lone surrogates) were replaced by \ufffd.")
    if n_control:
        notes.append(f"{n_control} control character(s) were replaced by spaces.")
    return text, " ".join(notes) or None


def has_known_words(backbone, text: str) -> bool:
    """Whether the tokenizer gives `text`, within the model's maximum length, any token that is
    neither unknown nor special (the explainer's words are made of those tokens only)."""
    tok = backbone.tokenizer
    ids = tok(text, add_special_tokens=False, truncation=True, max_length=backbone.max_length)["input_ids"]
    special = set(tok.all_special_ids)
    return any(i not in special for i in ids)


def check_input(text, backbone=None) -> str:
    """`text` with control characters replaced by spaces, or a ValueError in one sentence when it
    is not a string, holds a lone surrogate, is empty, or (given the `backbone`) has no word the
    model's tokenizer knows."""
    if not isinstance(text, str):
        hint = "; decode it first, e.g. data.decode('utf-8')" if isinstance(text, (bytes, bytearray)) else ""
        raise RunError(f"The input must be a string, not {type(text).__name__}{hint}.")
    bad = SURROGATE.search(text)
    if bad:
        raise RunError(f"The input holds a lone surrogate (U+{ord(bad.group()):04X} at character {bad.start()}), "
                         "which is not valid Unicode; remove it or decode the text with errors='replace'.")
    text = CONTROL.sub(" ", text)
    if not text.strip():
        raise RunError(EMPTY)
    if backbone is not None and not has_known_words(backbone, text):
        raise RunError(UNKNOWN)
    return text
