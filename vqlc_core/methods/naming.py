"""Names that say something: the words distinctive for a concept, by class-based TF-IDF.

A concept named by its most frequent words is named by whatever is frequent everywhere ("the",
"a", "film"). As BERTopic names topics, every concept is one document (the words of its train
members, or for a prediction concept the words of its members' sentences) and a word's weight is
its share of the concept's words times log(1 + A / f), where A is the mean number of words per
concept and f the word's count over all concepts: the whole corpus of those members. scikit-learn
counts (`CountVectorizer`) and normalises; the raw frequencies stay in the summary beside it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import sparse
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, CountVectorizer
from sklearn.preprocessing import normalize

# a content word of a sentence: two or more letters (no digits, punctuation or one-letter tokens)
CONTENT_TOKEN = r"(?u)\b[^\W\d_]{2,}\b"
# scikit-learn's English stop words and what tokenizers leave of contractions ("doesn't" -> doesn 't)
STOP_WORDS = ENGLISH_STOP_WORDS | {"doesn", "didn", "don", "isn", "wasn", "weren", "aren", "couldn", "wouldn",
                                   "shouldn", "hasn", "haven", "hadn", "won", "ain", "ll", "ve", "re"}
MIN_COUNT = 3  # times a concept's sentences hold a word for it to name them


def class_tfidf(counts, reduce_frequent_words: bool = False) -> sparse.csr_matrix:
    """(C, V) c-TF-IDF weights of a (C, V) count matrix, one row per concept: each row's counts
    as shares of the row (L1; their square roots with `reduce_frequent_words`, as BERTopic's
    option of that name), times log(1 + A / f) with A the mean row total and f each column's
    total (a column nobody uses weighs 0)."""
    X = _canonical(counts)
    f = np.asarray(X.sum(axis=0)).ravel()
    A = float(X.sum()) / max(X.shape[0], 1)
    idf = np.log1p(np.divide(A, f, out=np.zeros_like(f), where=f > 0))
    tf = normalize(X, norm="l1", axis=1)
    return sparse.csr_matrix((tf.sqrt() if reduce_frequent_words else tf) @ sparse.diags(idf))


def _canonical(counts) -> sparse.csr_matrix:
    """A CSR copy with sorted indices (CountVectorizer leaves them unsorted after it orders its
    vocabulary, and row slices of such a matrix are not to be trusted)."""
    out = sparse.csr_matrix(counts, dtype=np.float64, copy=True)
    out.sum_duplicates()
    out.sort_indices()
    return out


def _top(weights: sparse.csr_matrix, counts: sparse.csr_matrix, vocab: np.ndarray, n: int,
         min_count: int = 1) -> list[list]:
    """Per row, its n heaviest words as [word, weight] (ties: the more frequent, then
    alphabetical), among the words it holds at least `min_count` times (all of them when none does)."""
    out = []
    for i in range(weights.shape[0]):
        lo, hi = weights.indptr[i], weights.indptr[i + 1]
        cols, w = weights.indices[lo:hi], weights.data[lo:hi]
        c = np.asarray(counts[i].toarray()).ravel()[cols]
        if (c >= min_count).any():
            cols, w, c = cols[c >= min_count], w[c >= min_count], c[c >= min_count]
        order = np.lexsort((vocab[cols], -c, -w))[:n]
        out.append([[str(vocab[cols[j]]), round(float(w[j]), 6)] for j in order if w[j] > 0])
    return out


def distinctive_words(docs: list[list[str]], n: int = 30) -> list[list]:
    """Per document (a concept's member words, lower-cased, punctuation included), its n most
    distinctive words by `class_tfidf` against all the documents, as [word, weight] lists."""
    if not any(docs):
        return [[] for _ in docs]
    cv = CountVectorizer(analyzer=lambda words: words, lowercase=False)
    counts = cv.fit_transform(docs)
    return _top(class_tfidf(counts), _canonical(counts), cv.get_feature_names_out(), n)


def distinctive_content_words(docs: list[str], n: int = 30, exclude=(), min_count: int = MIN_COUNT) -> list[list]:
    """Per document (the sentences of a concept's prediction members, one string), its n most
    distinctive content words (`CONTENT_TOKEN`, no English stop word or contraction fragment, none
    of `exclude`, e.g. the class names) by `class_tfidf` against all the documents, frequent words
    reduced (a word in every sentence would otherwise name every concept: "film, movie"), among
    the words a document holds at least `min_count` times (a name it holds once names no group),
    as [word, weight] lists."""
    stop = sorted(STOP_WORDS | {str(w).lower() for w in exclude})
    cv = CountVectorizer(token_pattern=CONTENT_TOKEN, lowercase=True, stop_words=stop)
    try:
        counts = cv.fit_transform(docs)
    except ValueError:  # no content word in any document
        return [[] for _ in docs]
    return _top(class_tfidf(counts, reduce_frequent_words=True), _canonical(counts),
                cv.get_feature_names_out(), n, min_count)


def class_phrase(class_counts: dict, mostly: float = 0.6, what: str = "") -> str:
    """A prediction concept's classes in words: 'mostly positive (93%)', or 'mixed (55% positive)'
    when no class holds `mostly` of its members; `what` goes before the class ('predicted ')."""
    total = sum(class_counts.values())
    if not total:
        return "no members"
    top, count = max(class_counts.items(), key=lambda kv: (kv[1], kv[0]))
    share = f"{int(np.floor(100 * count / total + 1e-9))}%"
    return f"mostly {what}{top} ({share})" if count / total >= mostly else f"mixed ({share} {what}{top})"


def content_words(label: str, exclude=()) -> list[str]:
    """The content words in a concept's label (`ConceptSet.label`): after the ' · ' of a
    prediction concept's name (its class phrase is no content word), else the whole name, up to
    the ' — ' before an aligned tag; a
    content word has two or more letters and is no English stop word and none of `exclude` (e.g.
    the class names)."""
    import re

    body = label.split(": ", 1)[-1].split(" — ", 1)[0]  # an aligned tag after " — " is no word of the name
    body = body.split(" · ", 1)[1] if " · " in body else body
    stop = STOP_WORDS | {str(w).lower() for w in exclude}
    return [w for w in (t.strip().lower() for t in body.split(","))
            if re.fullmatch(CONTENT_TOKEN, w) and w not in stop]


def predicted_class_counts(assignments: np.ndarray, predicted, rows: np.ndarray) -> dict[int, dict[str, int]]:
    """concept -> {class: count} over the store rows `rows` that have a predicted class
    (`predicted`, one class name per store row, empty or None for a word row): what the model
    predicted for the texts of a concept's train prediction members."""
    rows = np.asarray(rows, dtype=np.int64)
    names = pd.Series(np.asarray(predicted, dtype=object)[rows])
    keep = names.notna().to_numpy() & (names.astype(str).str.len() > 0).to_numpy()
    if not keep.any():
        return {}
    table = pd.crosstab(np.asarray(assignments)[rows][keep], names[keep].astype(str).to_numpy())
    return {int(k): {str(c): int(v) for c, v in r.items() if v} for k, r in table.iterrows()}
