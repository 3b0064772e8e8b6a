"""The contexts a concept is labelled from and scored on: seeded samples of its train rows (shown
members, held-out members and as many non-members), each shown as its sentence with the word
marked «like this», or, for a prediction row, as its text.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from vqlc_core.data.corpus import word_spans

CONTEXT_CHARS = 120  # a word's context: this many characters either side, cut at spaces
SENTENCE_WORDS = 60  # a prediction row's context: its text, cut to this many words


def mark(text: str, start: int, end: int, chars: int = CONTEXT_CHARS) -> str:
    """The word at text[start:end] marked «like this», with up to `chars` characters of context
    either side, cut at a space."""
    left, right = text[max(0, start - chars) : start], text[end : end + chars]
    if start - chars > 0 and " " in left:
        left = "…" + left[left.index(" ") + 1 :]
    if end + chars < len(text) and " " in right:
        right = right[: right.rindex(" ")] + " …"
    return f"{left}«{text[start:end]}»{right}".strip()


def contexts(texts: pd.DataFrame, tokens: pd.DataFrame, rows: np.ndarray) -> list[str]:
    """The context of each store row: a word row's sentence with the word marked, a prediction
    row's text (the whole text is what the prediction representation stands for)."""

    rows = np.asarray(rows, dtype=np.int64)
    text_of = texts.set_index("text_id")["text"]
    sub = tokens.iloc[rows]
    needed = set(sub["text_id"].tolist())
    words = tokens[(tokens["kind"] == "word") & tokens["text_id"].isin(needed)].sort_values(["text_id", "word_index"])
    words_of = {int(t): g["word"].tolist() for t, g in words.groupby("text_id", sort=False)}
    out = []
    for tid, wi, kind, word in zip(sub["text_id"], sub["word_index"], sub["kind"], sub["word"]):
        text = text_of[int(tid)]
        if kind != "word":
            t = text.split()
            out.append(" ".join(t[:SENTENCE_WORDS]) + (" …" if len(t) > SENTENCE_WORDS else ""))
            continue
        ws = words_of.get(int(tid), [])
        span = word_spans(text, ws)[int(wi)] if int(wi) < len(ws) else None
        out.append(mark(text, *span) if span else f"«{word}»")
    return out


@dataclass
class Sample:
    """The store rows a concept is labelled from and scored on (seeded, train rows only)."""

    kind: str  # 'word', or 'pred' for a concept made mostly of prediction rows
    shown: np.ndarray
    members: np.ndarray  # held out
    others: np.ndarray  # non-members, as many as `members`


def sample_rows(assignments: np.ndarray, tokens: pd.DataFrame, k: int, kind: str, n_contexts: int, n_held_out: int,
                seed: int) -> Sample:
    """Up to `n_contexts` member rows of concept k to show, up to `n_held_out` other members and
    as many non-members to score with, all train rows of one kind."""
    rng = np.random.default_rng([seed, int(k)])
    pool = (tokens["split"].to_numpy() == "train") & (tokens["kind"].to_numpy() == kind)
    a = np.asarray(assignments)
    members = rng.permutation(np.flatnonzero(pool & (a == k)))
    shown = np.sort(members[:n_contexts])
    held = np.sort(members[n_contexts : n_contexts + n_held_out])
    others = np.flatnonzero(pool & (a != k))
    others = np.sort(rng.choice(others, size=min(len(held), len(others)), replace=False)) if len(others) else others
    return Sample(kind, shown, held[: len(others)], others)
