"""The corpus side of a run: where each word of the token table sits in its sentence, the
concepts that hold a word, and a concept's member words in their sentences."""

from __future__ import annotations

import numpy as np
import pandas as pd


def word_spans(text: str, words: list[str]) -> list[tuple[int, int] | None]:
    """Character span of each word of `text`, the words given in order (the store's token
    table). Each word is searched from the end of the previous one, so a repeated word or a
    word that is part of another gets its own occurrence; None where a word is not found."""
    spans, pos = [], 0
    for w in words:
        i = text.find(w, pos)
        if i < 0:
            spans.append(None)
            continue
        spans.append((i, i + len(w)))
        pos = i + len(w)
    return spans


def concepts_with_word(tokens: pd.DataFrame, assignments: np.ndarray, word: str) -> pd.DataFrame:
    """Concepts whose members include `word` (case-insensitive): concept, count, most first."""
    word = word.strip().lower()
    if not word:
        return pd.DataFrame({"concept": [], "count": []}, dtype=np.int64)
    hit = (tokens["kind"].to_numpy() == "word") & (tokens["word"].str.lower().to_numpy() == word)
    counts = np.bincount(np.asarray(assignments)[hit], minlength=1)
    ks = np.flatnonzero(counts)
    out = pd.DataFrame({"concept": ks, "count": counts[ks]})
    return out.sort_values(["count", "concept"], ascending=[False, True], ignore_index=True)


def sentence_words(tokens: pd.DataFrame, text_id: int) -> pd.DataFrame:
    """The word rows of one text in the token table, in word order (their index: store rows)."""
    return tokens[(tokens["text_id"] == text_id) & (tokens["kind"] == "word")].sort_values("word_index")


def member_contexts(texts: pd.DataFrame, tokens: pd.DataFrame, assignments: np.ndarray, k: int, n: int = 20,
                    seed: int = 0) -> pd.DataFrame:
    """Up to `n` member words of concept k (seeded sample) in their sentences: text_id,
    word_index, word, text, start, end (the word's span in the text; -1 when not found)."""
    return all_member_contexts(texts, tokens, assignments, [k], n=n, seed=seed)[int(k)]


def all_member_contexts(texts: pd.DataFrame, tokens: pd.DataFrame, assignments: np.ndarray, ks, n: int = 20,
                        seed: int = 0) -> dict[int, pd.DataFrame]:
    """`member_contexts` of every concept in `ks` (concept -> the same table) in one pass over the
    token table: the same seeded samples, each text's word spans found once, where one call per
    concept scans the whole table for each concept and each of its texts."""
    assignments = np.asarray(assignments)
    is_word = tokens["kind"].to_numpy() == "word"
    word_rows = np.flatnonzero(is_word)
    by_concept = word_rows[np.argsort(assignments[word_rows], kind="stable")]  # rows ascending within a concept
    concept_of = assignments[by_concept]
    picked = {}
    for k in dict.fromkeys(int(k) for k in ks):
        lo, hi = np.searchsorted(concept_of, [k, k + 1])
        rows = by_concept[lo:hi]
        if len(rows) > n:
            rows = np.sort(np.random.default_rng(seed).choice(rows, size=n, replace=False))
        picked[k] = rows
    tid, wi, word = (tokens[c].to_numpy() for c in ("text_id", "word_index", "word"))
    chosen = np.concatenate([np.zeros(0, dtype=np.int64), *picked.values()])
    needed = np.flatnonzero(is_word & np.isin(tid, tid[chosen]))
    needed = needed[np.lexsort((wi[needed], tid[needed]))]  # each text's words in word order
    starts = np.flatnonzero(np.r_[True, tid[needed][1:] != tid[needed][:-1]]) if len(needed) else needed
    text_of = texts.set_index("text_id")["text"]
    spans = {}
    for a, b in zip(starts, np.r_[starts[1:], len(needed)]):
        t = int(tid[needed[a]])
        spans[t] = word_spans(text_of[t], word[needed[a:b]].tolist())
    out = {}
    for k, rows in picked.items():
        recs = []
        for r in rows:
            t, i = int(tid[r]), int(wi[r])
            span = spans[t][i] if i < len(spans[t]) else None
            s, e = span if span else (-1, -1)
            recs.append({"text_id": t, "word_index": i, "word": word[r], "text": text_of[t], "start": s, "end": e})
        out[k] = pd.DataFrame(recs, columns=["text_id", "word_index", "word", "text", "start", "end"])
    return out
