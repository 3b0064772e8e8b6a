"""How well a word concept's name picks its held-out members, as delphi's detection scorer judges a
label: on the test split's word rows (which shaped neither the concepts nor their names), a
concept's members are the positives, an equal seeded draw of the other test word rows the
negatives, and the name "says yes" to a row whose word is one of the name's words. The score is
the balanced accuracy (true-positive rate + true-negative rate) / 2: 0.5 is a name that tells
nothing, 1 one that picks every member and nothing else.

Two names per concept are compared (`name_words`): its most distinctive words by class-based
TF-IDF, the names the pages show, and its most frequent words.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

NAMES = ("c-TF-IDF", "frequency")  # the names compared: `ConceptSet.distinctive_words`, `ConceptSet.top_words`


def name_words(cs, ids, n: int = 3) -> dict[str, dict[int, set[str]]]:
    """Per name kind of `NAMES`, concept -> its n name words (lower case) for the concepts `ids`."""
    return {"c-TF-IDF": {int(k): {str(w).lower() for w, _ in cs.distinctive_words(int(k), n)} for k in ids},
            "frequency": {int(k): {str(w).lower() for w, _ in cs.top_words(int(k), n)} for k in ids}}


def detection_scores(assignments: np.ndarray, tokens: pd.DataFrame, names: dict[int, set[str]],
                     split: str = "test", seed: int = 0) -> pd.DataFrame:
    """One row per concept of `names` with at least one member among `split`'s word rows: its
    members there (n_members), the share of them whose word is a name word (tpr), the share of an
    equal seeded draw of the split's other word rows whose word is not (tnr), and their mean
    (balanced_accuracy)."""
    rows = np.flatnonzero(((tokens["kind"] == "word") & (tokens["split"] == split)).to_numpy())
    a = np.asarray(assignments)[rows]
    words = tokens["word"].to_numpy()[rows].astype(str)
    words = np.char.lower(words)
    rng = np.random.default_rng(seed)
    out = []
    for k, name in names.items():
        members = a == int(k)
        n = int(members.sum())
        if n == 0:
            continue
        others = np.flatnonzero(~members)
        neg = rng.choice(others, size=min(n, len(others)), replace=False) if len(others) else others
        says = np.isin(words, list(name))
        tpr = float(says[members].mean())
        tnr = float(1.0 - says[neg].mean()) if len(neg) else float("nan")
        out.append({"concept": int(k), "n_members": n, "tpr": tpr, "tnr": tnr,
                    "balanced_accuracy": (tpr + tnr) / 2})
    return pd.DataFrame(out, columns=["concept", "n_members", "tpr", "tnr", "balanced_accuracy"])
