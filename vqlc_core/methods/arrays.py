"""Concepts of an estimator fitted on a bare array, with no run: the rows' words (and, when
known, their class labels) make the summary a run's token table makes, so a notebook gets the
same `ConceptSet` (records, names, clouds, maps) as a build.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from vqlc_core.base.runio import RunError
from vqlc_core.data.store import ArrayStore, as_store
from vqlc_core.methods.concepts import ConceptSet


def concepts_of(method, X, words, labels=None, class_names=None, texts=None) -> ConceptSet:
    """The concepts a fitted estimator finds in an array of your own, with their words and
    classes, as `Run.concepts` gives them for a run. Every row is a train row, so every row
    shapes its concept.

    Args:
        method: a fitted `ConceptMethod` (`vq.VQLC(...).fit(X)`).
        X: ndarray or tensor of shape (N, d), the rows `fit` takes.
        words: N strings, the word of each row.
        labels: N class ids into `class_names`; None: one class "all".
        class_names: the class names; None: "0", "1", ... as the labels need.
        texts: N text ids, the text of each row; None: one text per row.

    Returns:
        The `ConceptSet` of the rows.

    Examples:
        >>> km = vq.KMeansConcepts(n_concepts=8).fit(X)
        >>> vq.concepts_of(km, X, words).summary[["size", "top_words"]].head()
    """
    store = as_store(X)
    n = store.n_rows
    arr = store.vectors if isinstance(store, ArrayStore) else store.read(np.arange(n)).astype(np.float32)
    words = [str(w) for w in words]
    if len(words) != n:
        raise RunError(f"Expected one word per row ({n}), got {len(words)}.")
    labels = np.zeros(n, dtype=np.int64) if labels is None else np.asarray(labels, dtype=np.int64)
    if labels.shape != (n,):
        raise RunError(f"Expected one label per row ({n}), got shape {labels.shape}.")
    class_names = list(class_names) if class_names is not None else (
        ["all"] if not labels.any() else [str(c) for c in range(int(labels.max()) + 1)])
    if labels.min() < 0 or labels.max() >= len(class_names):
        raise RunError(f"Labels must be ids 0..{len(class_names) - 1} of the {len(class_names)} class names.")
    text_ids = np.arange(n) if texts is None else np.asarray(texts, dtype=np.int64)
    tokens = pd.DataFrame({"word": words, "kind": "word", "label": labels, "text_id": text_ids,
                           "word_index": np.zeros(n, dtype=np.int64), "split": "train"})
    return ConceptSet.from_assignments(method.name, ArrayStore(arr, tokens=tokens), method.predict(arr),
                                       method.n_concepts, class_names)
