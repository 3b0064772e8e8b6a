"""Word alignment: which tokens of a text make up each of its words, for every common tokenizer
family, and the check that those words are the words a reader sees.

A tokenizer whose pre-tokenizer splits words (WordPiece, byte-level BPE with its split regex)
names them in its `word_ids`. One whose pre-tokenizer keeps the text whole (SentencePiece's
`Metaspace(split=False)`, the Gemma and Phi-3 tokenizers built from a GGUF file) has one "word"
per text there, so its words are read from the tokens instead: a word starts after whitespace (the
tokens' own offsets show it), at a word-start marker (`▁`, `Ġ`), and where letters give way to
punctuation. Either way, text written without spaces (CJK) is cut at every token boundary between
two characters: with no segmenter, the tokenizer's own pieces are the words there.
"""

from __future__ import annotations

import logging
import unicodedata
from dataclasses import dataclass

import numpy as np
import regex

from vqlc_core.base.runio import RunError

log = logging.getLogger(__name__)

# Scripts written without spaces between words: Han, kana and their marks (々, ー, half-width kana).
CJK = ("\u3005-\u3007\u3021-\u3029\u3031-\u3035\u3038-\u303c\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf"
       "\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f")
_WORD = rf"[\p{{L}}\p{{M}}\p{{N}}_--[{CJK}]]"
# The reference split: a run of letters, marks and digits (apostrophes inside it kept: "isn't" is
# one word), one punctuation character, or one CJK character.
REFERENCE = regex.compile(rf"[{CJK}]|{_WORD}+(?:['’]{_WORD}+)*|[^\p{{L}}\p{{M}}\p{{N}}_\s]", regex.V1)
_IS_CJK = regex.compile(rf"[{CJK}]", regex.V1)

PROBE = "Words, and more words."  # four words apart: a pre-tokenizer that splits gives at least four
# Measured on 200 MR and 200 BBC texts, the four tokenizer families give 0.99 to 1.05 aligned words
# per reference word; a tokenizer that takes a whole text for one word gives 0.05, one that merges
# pairs would give 0.5, characters taken for words 4.3. Sub-word pieces taken for words give 1.08 to
# 1.26, too close to WordPiece's own 1.05 (it splits "isn't" in three) to be told apart by a count.
MIN_RATIO = 0.7  # below: words are being merged
MAX_RATIO = 1.6  # above: words are being split apart


def reference_words(text: str) -> list[str]:
    """The plain word split the alignment is checked against (see `REFERENCE`)."""
    return REFERENCE.findall(text)


def _kind(text: str, p: int) -> str:
    """'space', 'cjk', 'word' or 'punct' for the character at p; an apostrophe between two word
    characters is part of the word."""
    c = text[p]
    if c.isspace():
        return "space"
    if _IS_CJK.match(c):
        return "cjk"
    if unicodedata.category(c)[0] in "LMN" or c == "_":
        return "word"
    if c in "'’" and 0 < p < len(text) - 1 and _kind(text, p - 1) == _kind(text, p + 1) == "word":
        return "word"
    return "punct"


def _last_char(text: str, end: int) -> int:
    """Index of the last non-space character before `end` (-1 if none)."""
    while end > 0 and text[end - 1].isspace():
        end -= 1
    return end - 1


def _as_list(x) -> list:
    return x.tolist() if hasattr(x, "tolist") else list(x)


def tokenizer_family(tokenizer) -> str:
    """'WordPiece', 'byte-level BPE', 'SentencePiece (BPE)', 'SentencePiece (Unigram)', or the
    model type of a tokenizer with no known word marker."""
    backend = tokenizer.backend_tokenizer
    kind = type(backend.model).__name__  # BPE, WordPiece, Unigram, WordLevel
    parts = " ".join(repr(c) for c in (backend.normalizer, backend.pre_tokenizer, backend.decoder))
    if kind == "WordPiece":
        return "WordPiece"
    if "ByteLevel" in parts:
        return "byte-level BPE"
    if "Metaspace" in parts or "▁" in parts:
        return f"SentencePiece ({kind})"
    return f"{kind} without a known word marker"


def _start_markers(family: str) -> tuple[str, ...]:
    """The vocabulary's word-start markers. WordPiece has none to read here: its model cannot cross
    a space, so a WordPiece tokenizer always splits words and gives them in its word ids."""
    return ("Ġ",) if family == "byte-level BPE" else ("▁",) if family.startswith("SentencePiece") else ()


def word_scheme(tokenizer) -> str:
    """'word_ids' when the tokenizer's pre-tokenizer splits words, else 'markers'."""
    enc = tokenizer(PROBE, add_special_tokens=False)
    return "word_ids" if len({w for w in enc.word_ids() if w is not None}) >= 4 else "markers"


@dataclass
class WordSpan:
    """One word of a text: its characters, its position in the text and its token positions."""

    word: str
    start: int
    end: int
    tokens: list[int]


class Aligner:
    """Words of a tokenized text for one tokenizer: its scheme and markers are read once."""

    def __init__(self, tokenizer):
        self.family = tokenizer_family(tokenizer)
        self.scheme = word_scheme(tokenizer)
        self.start_markers = _start_markers(self.family)
        # an unknown-token stands for real characters of the text, so it is a word like any other
        self.special = set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}
        self.tokenizer = tokenizer

    def words(self, enc, i: int, text: str, shift: int = 0) -> list[WordSpan]:
        """Text i of a batch encoded with offsets: its words, positions counted without the first
        `shift` characters (a BOS written into the text)."""
        ids, offsets = _as_list(enc["input_ids"][i]), _as_list(enc["offset_mapping"][i])
        mask = _as_list(enc["attention_mask"][i]) if "attention_mask" in enc else [1] * len(ids)
        word_ids = enc.word_ids(i) if self.scheme == "word_ids" else None
        tokens = self.tokenizer.convert_ids_to_tokens(ids) if self.scheme == "markers" else None
        groups: list[list[int]] = []
        prev_end = prev_word = None  # of the last token kept
        space = False  # whitespace-only tokens since it
        for pos, tid in enumerate(ids):
            if not mask[pos] or tid in self.special:
                continue
            s, e = offsets[pos]
            if e <= max(s, shift) or not text[s:e].strip():
                space = True  # a bare marker, a space, or a token with no characters
                continue
            if prev_end is None:
                new = True
            elif word_ids is not None:
                new = word_ids[pos] != prev_word or self._cjk_cut(text, prev_end, s, e)
            else:
                new = space or self._starts_word(text, tokens[pos], prev_end, s)
            if new:
                groups.append([pos])
            else:
                groups[-1].append(pos)
            prev_end, prev_word, space = e, word_ids[pos] if word_ids is not None else None, False
        return [span for g in groups if (span := self._span(text, offsets, g, shift)) is not None]

    @staticmethod
    def _cjk_cut(text: str, prev_end: int, s: int, e: int) -> bool:
        """A token boundary between two characters with CJK on either side."""
        if s < prev_end:
            return False  # byte pieces of one character
        left, right = _last_char(text, prev_end), s + len(text[s:e]) - len(text[s:e].lstrip())
        return left >= 0 and right < e and "cjk" in (_kind(text, left), _kind(text, right))

    def _starts_word(self, text: str, token: str, prev_end: int, s: int) -> bool:
        """Whether `token`, from character s, starts a word when the last token kept ends at prev_end."""
        if s < prev_end:
            return False  # byte pieces of one character
        if any(c.isspace() for c in text[prev_end:s]) or text[s].isspace():
            return True
        if self.start_markers and token.startswith(self.start_markers):
            return True
        a, b = _kind(text, _last_char(text, prev_end)), _kind(text, s)  # text[s] is no space here
        return a != b or a == "cjk"

    @staticmethod
    def _span(text: str, offsets: list, group: list[int], shift: int) -> WordSpan | None:
        start = min(offsets[p][0] for p in group)
        end = max(offsets[p][1] for p in group)
        start, end = max(start, shift), min(end, len(text))
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if end <= start:
            return None
        return WordSpan(text[start:end], start - shift, end - shift, group)


def tokenize_words(tokenizer, aligner: Aligner, texts: list[str], max_length: int, add_bos: bool = False):
    """A padded batch of `texts` cut at `max_length` tokens and, per text, its words with their token
    positions; `add_bos` writes the BOS into each text (a decoder whose tokenizer adds none)."""
    texts = [t if t.strip() else " " for t in texts]
    if add_bos:
        texts = [tokenizer.bos_token + t for t in texts]
    enc = tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=max_length,
                    return_offsets_mapping=True)
    shift = len(tokenizer.bos_token) if add_bos else 0
    words = [aligner.words(enc, i, texts[i], shift) for i in range(len(texts))]
    enc.pop("offset_mapping")
    return enc, words


def alignment_ratio(tokenizer, texts: list[str], max_length: int, add_bos: bool = False, sample: int = 200,
                    seed: int = 0) -> float:
    """Aligned words per reference word over a seeded sample of `texts`, from the tokenizer alone
    (no model): about 1 when the words the tokenizer gives are the words of the text, far below 1
    when it merges them (a whole text taken as one word), above 1 when it splits them apart. A text
    cut by `max_length` is counted up to its last aligned word.

    CJK is left out of both counts. Its words are cut at every token boundary whatever the
    tokenizer does, so nothing there can merge, and neither reference fits it: by characters, a
    tokenizer with whole words as tokens (Gemma's "とても") looks like a failure (0.4 on a Japanese
    sentence), and by runs a whole clause counts as one word."""
    texts = list(texts)
    if not texts:
        return 1.0
    aligner = Aligner(tokenizer)
    rng = np.random.default_rng(seed)
    picked = sorted(rng.choice(len(texts), size=min(sample, len(texts)), replace=False).tolist())
    aligned = reference = 0
    for b in range(0, len(picked), 32):
        batch = [texts[i] for i in picked[b : b + 32]]
        enc, words = tokenize_words(tokenizer, aligner, batch, max_length, add_bos)
        full = enc["attention_mask"].sum(1) >= max_length  # truncated, or just fits
        for j, (text, ws) in enumerate(zip(batch, words)):
            end = ws[-1].end if full[j] and ws else len(text)
            aligned += sum(1 for w in ws if not _IS_CJK.search(w.word))
            reference += sum(1 for m in REFERENCE.finditer(text) if m.start() < end and not _IS_CJK.match(m[0]))
    return aligned / reference if reference else 1.0


def check_alignment(tokenizer, texts: list[str], name: str, max_length: int, add_bos: bool = False,
                    threshold: float = MIN_RATIO, ceiling: float = MAX_RATIO, sample: int = 200,
                    seed: int = 0) -> float:
    """`alignment_ratio` of model `name`'s tokenizer on `texts`, refused with one sentence outside
    [threshold, ceiling]. It reads the tokenizer alone, so a build checks it before converting,
    fine-tuning or running any weights."""
    ratio = alignment_ratio(tokenizer, texts, max_length, add_bos, sample=sample, seed=seed)
    family = tokenizer_family(tokenizer)
    if ratio < threshold or ratio > ceiling:
        what = "merges words" if ratio < threshold else "splits words apart"
        bound = f"at least {threshold:.2f}" if ratio < threshold else f"at most {ceiling:.2f}"
        raise RunError(f"Model '{name}' finds {ratio:.2f} words per word of the text ({bound} needed), so its "
                       f"{family} tokenizer {what} and every concept would be built on wrong words; pick another "
                       f"model, or report this tokenizer family to the vqlc maintainers.")
    log.info("word alignment of %s (%s tokenizer): %.3f words per reference word", name, family, ratio)
    return ratio
