"""What an input text must be before the explainer reads it. The dashboard cleans what a user
types (`clean_input`: it never refuses, it says what it changed, and the box then shows the
cleaned text); the library checks what a caller passes (`check_input`: each problem is one
sentence, raised as a ValueError).

`check_input` keeps the text's length, so the explanation's character spans are spans of the
caller's text: a control character becomes a space. `clean_input` also normalises the text to
NFKC (fullwidth 'ｆ' and mathematical '𝐟' become 'f'), which may change its length; the page
explains the cleaned text it shows.
"""

from __future__ import annotations

import re
import unicodedata

from vqlc_core.base.runio import RunError

CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # Unicode Cc, less tab and newlines
SURROGATE = re.compile(r"[\ud800-\udfff]")  # in a Python str every surrogate code point is a lone one
EMPTY = "The input is empty (nothing but spaces or control characters): type a sentence to explain."
UNKNOWN = ("The model's tokenizer knows none of the input's words (each becomes an unknown token), so there is "
           "nothing to explain; type words in a script the model reads.")
NFKC_HINT = ("The model's tokenizer knows none of the input's words as written, but their Unicode NFKC form "
             "(e.g. fullwidth 'ｆ' as 'f') it does; normalise the text first with "
             "unicodedata.normalize('NFKC', text).")


def nfkc_notice(before: str, after: str) -> str | None:
    """What NFKC normalisation changed in `before` (giving `after`), as one sentence; None if nothing."""
    if before == after:
        return None
    changed = [c for c in before if unicodedata.normalize("NFKC", c) != c]
    if not changed:  # only sequences changed: a letter and its combining mark became one character
        return "The text was normalised to Unicode NFKC before tokenizing (letters and their combining marks joined)."
    return (f"The text was normalised to Unicode NFKC before tokenizing: {len(changed)} character(s) in a "
            f"compatibility form (fullwidth or mathematical letters, ligatures, ...) are now in their plain form, "
            f"e.g. '{changed[0]}' as '{unicodedata.normalize('NFKC', changed[0])}'.")


def clean_input(text: str) -> tuple[str, str | None]:
    """`text` as the explainer should read it: each lone surrogate replaced by U+FFFD, the text
    normalised to NFKC and each control character (other than tab and newlines) replaced by a
    space; and a notice of what changed (None when nothing did). A U+FFFD already in the text is
    named too: the browser puts one where a typed or pasted character was a lone surrogate."""
    text, n_bad = SURROGATE.subn("\ufffd", text)
    n_replacement = text.count("\ufffd") - n_bad
    normal = unicodedata.normalize("NFKC", text)
    notes = [nfkc_notice(text, normal)]
    text, n_control = CONTROL.subn(" ", normal)
    if n_bad:
        notes.append(f"{n_bad} character(s) that are not valid Unicode (lone surrogates) were replaced by \ufffd.")
    if n_replacement:
        notes.append(f"The text holds {n_replacement} replacement character(s) \ufffd, each where a typed or pasted "
                     f"character was not valid Unicode (e.g. half of an emoji); the model cannot read what it was.")
    if n_control:
        notes.append(f"{n_control} control character(s) were replaced by spaces.")
    return text, " ".join(n for n in notes if n) or None


def has_known_words(backbone, text: str) -> bool:
    """Whether the tokenizer gives `text`, within the model's maximum length, any token that is
    neither unknown nor special (the explainer's words are made of those tokens only)."""
    tok = backbone.tokenizer
    ids = tok(text, add_special_tokens=False, truncation=True, max_length=backbone.max_length)["input_ids"]
    special = set(tok.all_special_ids)
    return any(i not in special for i in ids)


def word_limit(tokenizer) -> int | None:
    """The longest word, in characters, the tokenizer splits into pieces (WordPiece reads a longer
    one as a single unknown token); None when it has no such limit."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return getattr(getattr(backend, "model", None), "max_input_chars_per_word", None)


def unknown_sentence(backbone, text: str) -> str:
    """Why the tokenizer knows none of `text`'s words, in one sentence: words past its word-length
    limit, a text whose NFKC form it would read, or words in a script it does not read."""
    tok = backbone.tokenizer
    limit = word_limit(tok)
    pre = getattr(getattr(tok, "backend_tokenizer", None), "pre_tokenizer", None)
    words = [w for w, _ in pre.pre_tokenize_str(text)] if pre is not None else text.split()
    long = [w for w in words if limit is not None and len(w) > limit]
    if long:
        rest = ", and the input's other words are unknown to it too" if len(long) < len(words) else ""
        return (f"The model's tokenizer reads a word of more than {limit} characters as one unknown token (its "
                f"word-length limit), and the input's {len(long)} such word(s) are up to "
                f"{max(map(len, long)):,} characters long{rest}, so there is nothing to explain; put spaces "
                f"between the words.")
    normal = unicodedata.normalize("NFKC", text)
    if normal != text and has_known_words(backbone, normal):
        return NFKC_HINT
    return UNKNOWN


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
        raise RunError(unknown_sentence(backbone, text))
    return text
