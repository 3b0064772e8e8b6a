"""Why a word of the input sits in its concept: the train members of that concept whose store
vectors lie nearest the word's own layer-l vector, in their sentences (keyword in context). A
concept's members can be many different words; the nearest ones say which of them this
occurrence resembles. The cost is bounded: at most `MAX_ROWS` members (a seeded sample) are read.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from vqlc_core.data.corpus import word_spans
from vqlc_core.methods.concepts import train_mask

MAX_ROWS = 2000  # members read from the store at most (a seeded sample of a larger concept)
COLUMNS = ["row", "text_id", "word_index", "word", "text", "start", "end", "distance"]


def input_word_vectors(explainer, text: str) -> np.ndarray:
    """(W, d) the layer-l vector of every word of `text` as the explainer assigns it a concept
    (`Explainer.word_vectors` of its pass, cached per text)."""
    with explainer.backbone.lock:
        p = explainer._passes([text])[0]
    return explainer.word_vectors(p.states[0], p.words)


def member_rows(tokens: pd.DataFrame, assignments: np.ndarray, k: int, max_rows: int = MAX_ROWS,
                seed: int = 0) -> np.ndarray:
    """Concept k's train word rows of the store, ascending: all of them, or a seeded sample of
    `max_rows` of a larger concept."""
    rows = np.flatnonzero((np.asarray(assignments) == int(k)) & (tokens["kind"].to_numpy() == "word")
                          & train_mask(tokens, len(tokens)))
    if len(rows) > max_rows:
        rows = np.sort(np.random.default_rng(seed).choice(rows, size=max_rows, replace=False))
    return rows


def nearest_contexts(texts: pd.DataFrame, tokens: pd.DataFrame, store, assignments: np.ndarray, k: int, vector,
                     n: int = 3, max_rows: int = MAX_ROWS, seed: int = 0) -> pd.DataFrame:
    """The `n` train members of concept k (among `member_rows`) whose store vector is nearest
    (Euclidean) to `vector` (d,), nearest first: their store row, text_id, word_index, word,
    sentence (`text`), the word's character span in it (`start`, `end`; -1 where not found) and
    the distance. Dev and test rows are never shown. Empty when the concept has no train word.

    Example:
        >>> near = nearest_contexts(run.texts, run.store.tokens, run.store, cs.assignments, 181, v)
        >>> near.iloc[0][["word", "text"]]
    """
    rows = member_rows(tokens, assignments, k, max_rows, seed)
    if not len(rows):
        return pd.DataFrame(columns=COLUMNS)
    X = store.read(rows)  # (R, d) float32
    dist = np.linalg.norm(X - np.asarray(vector, dtype=np.float32)[None, :], axis=1)
    near = np.argsort(dist, kind="stable")[:n]  # ties: the earlier row first
    text_of = texts.set_index("text_id")["text"]
    tid, wi, word = (tokens[c].to_numpy() for c in ("text_id", "word_index", "word"))
    out = []
    for j in near:
        r = int(rows[j])
        t, i = int(tid[r]), int(wi[r])
        sentence = tokens[(tid == t) & (tokens["kind"].to_numpy() == "word")].sort_values("word_index")
        spans = word_spans(str(text_of[t]), sentence["word"].tolist())
        at = int(np.flatnonzero(sentence["word_index"].to_numpy() == i)[0])
        s, e = spans[at] or (-1, -1)
        out.append({"row": r, "text_id": t, "word_index": i, "word": str(word[r]), "text": str(text_of[t]),
                    "start": s, "end": e, "distance": float(dist[j])})
    return pd.DataFrame(out, columns=COLUMNS)


def nearest_contexts_of(run, method: str, k: int, vector, n: int = 3, max_rows: int = MAX_ROWS) -> pd.DataFrame:
    """`nearest_contexts` of concept k of `method` in `run` (its texts, store and assignments),
    sampled with the run's seed."""
    cs = run.concept_set(method)
    return nearest_contexts(run.texts, run.store.tokens, run.store, cs.assignments, k, vector, n, max_rows,
                            int(run.cfg.seed))
