"""The concept set: one format for every concept method (VQLC, K-Means, LACOAT, SAE).

A concept set holds an assignment for every row of the store, a concept vector per concept in
the model's hidden space (by one of `CONCEPT_VECTORS`'s definitions), the train rows' mean state,
method-specific arrays (VQLC's code vectors and aggregated encodings, the SAE's decoder
directions), and a per-concept summary: size, top words with counts, class distribution,
dominant class, purity and example contexts. Only train rows shape a concept: dev and test
rows are assigned (for display and evaluation) but never move a concept vector or its summary.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from vqlc_core.base.runio import RunError, read_json, read_npy, read_parquet, write_json, write_npy, write_parquet
from vqlc_core.methods.naming import class_phrase, distinctive_content_words, distinctive_words
from vqlc_core.methods.records import CONCEPT_VECTORS, Concept




def train_mask(tokens: pd.DataFrame | None, n_rows: int) -> np.ndarray:
    """The store rows that may shape a concept: those of the train split (every row when the
    token table has no `split` column, as in a store made from a bare array)."""
    if tokens is None or "split" not in tokens.columns:
        return np.ones(n_rows, dtype=bool)
    return (tokens["split"] == "train").to_numpy()


def concept_means(store, assignments: np.ndarray, n_concepts: int, rows: np.ndarray | None = None,
                  batch_size: int = 8192) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean store vector and member count per concept over store `rows` (all rows when None),
    and the mean of those rows (d,), streamed over the store in row order. A concept with no
    member among the rows gets a zero vector."""
    import torch

    rows = np.arange(store.n_rows) if rows is None else np.unique(np.asarray(rows, dtype=np.int64))
    a = np.asarray(assignments, dtype=np.int64)[rows]
    sums = torch.zeros(n_concepts, store.dim, dtype=torch.float64)
    counts = np.bincount(a, minlength=n_concepts)[:n_concepts]
    start, at = 0, torch.as_tensor(a)
    for x in store.iter_batches(batch_size, shuffle=False, rows=rows):  # selected rows, ascending
        sums.index_add_(0, at[start : start + len(x)], x.double())
        start += len(x)
    means = sums / torch.as_tensor(np.maximum(counts, 1), dtype=torch.float64)[:, None]
    mean = sums.sum(0) / max(len(rows), 1)
    return means.float().numpy(), counts, mean.float().numpy()


def summarize(tokens: pd.DataFrame, assignments: np.ndarray, n_concepts: int, class_names: list[str],
              top_k: int = 30, n_examples: int = 12, seed: int = 0, train: np.ndarray | None = None) -> pd.DataFrame:
    """Per-concept summary table from the token table and the assignment of every row.

    Everything but `size_all` (members among all rows) counts the rows in the boolean mask
    `train` only (by default the token table's train split, see `train_mask`)."""
    rng = np.random.default_rng(seed)
    assignments = np.asarray(assignments)
    train = train_mask(tokens, len(assignments)) if train is None else np.asarray(train, dtype=bool)
    size_all = np.bincount(assignments, minlength=n_concepts)[:n_concepts]
    df = pd.DataFrame({
        "concept": assignments,
        "word": tokens["word"].to_numpy(),
        "kind": tokens["kind"].to_numpy(),
        "label": tokens["label"].to_numpy(),
        "text_id": tokens["text_id"].to_numpy(),
        "word_index": tokens["word_index"].to_numpy(),
    })[train]
    rows = []
    groups = dict(tuple(df.groupby("concept", sort=True)))
    for k in range(n_concepts):
        g = groups.get(k)
        if g is None or len(g) == 0:
            rows.append({"concept": k, "size": 0, "size_all": int(size_all[k]), "n_pred": 0, "top_words": "[]",
                         "class_counts": "{}", "dominant_class": "", "purity": 0.0, "examples": "[]"})
            continue
        words = Counter(w.lower() for w in g.loc[g["kind"] == "word", "word"])
        classes = Counter(class_names[int(c)] if 0 <= int(c) < len(class_names) else str(c) for c in g["label"])
        dominant, top = classes.most_common(1)[0]
        pick = rng.choice(len(g), size=min(n_examples, len(g)), replace=False)
        ex = g.iloc[np.sort(pick)][["text_id", "word_index"]].to_numpy().tolist()
        rows.append({
            "concept": k,
            "size": int(len(g)),
            "size_all": int(size_all[k]),
            "n_pred": int((g["kind"] == "pred").sum()),
            "top_words": json.dumps(words.most_common(top_k)),
            "class_counts": json.dumps(dict(classes)),
            "dominant_class": dominant,
            "purity": float(top / len(g)),
            "examples": json.dumps(ex),
        })
    out = pd.DataFrame(rows)
    out["distinctive_words"], out["sentence_words"] = _distinctive_columns(df, groups, n_concepts, class_names, top_k)
    return out


def _distinctive_columns(df: pd.DataFrame, groups: dict, n_concepts: int, class_names, top_k: int):
    """Per concept, as JSON: its member words' distinctive words and, for its prediction members,
    the distinctive content words of their sentences (`naming`), both against all concepts."""
    empty = pd.DataFrame(columns=df.columns)
    word_docs = [[w.lower() for w in g.loc[g["kind"] == "word", "word"]] for g in
                 (groups.get(k, empty) for k in range(n_concepts))]
    words = distinctive_words(word_docs, top_k)
    sentence_of = df[df["kind"] == "word"].groupby("text_id", sort=False)["word"].agg(" ".join)
    docs = [" ".join(sentence_of.reindex(g.loc[g["kind"] == "pred", "text_id"]).dropna())
            for g in (groups.get(k, empty) for k in range(n_concepts))]
    with_pred = [k for k, d in enumerate(docs) if d]
    sentences = [[] for _ in range(n_concepts)]
    for k, w in zip(with_pred, distinctive_content_words([docs[k] for k in with_pred], top_k, class_names)):
        sentences[k] = w
    return [json.dumps(w) for w in words], [json.dumps(w) for w in sentences]


@dataclass
class ConceptSet:
    """The concepts of one method over one run's store: which concept every row belongs to,
    each concept's vector in the model's hidden space, and a summary table. `Run.concepts` gives
    one; iterating over it gives a `Concept` record per concept with train members.

    Attributes:
        method (str): the method's name ('vqlc').
        assignments (ndarray of shape (n_rows,)): the concept id of every store row, dev and
            test rows included.
        vectors (ndarray of shape (K, d)): each concept's vector, the mean hidden state of its
            train members (the definition the build chose, `--concept-vectors`).
        summary (DataFrame): one row per concept: `size`, `top_words`, `distinctive_words`,
            `purity` and the class counts of its members.
        class_names (list of str): the class names, in label order.
        extra (dict of str to ndarray): what a method keeps besides (VQLC's `codes` and
            `encodings`, the SAE's decoder `directions`).
        info (dict): the fit's time, peak memory and measures.
        mean (ndarray of shape (d,) or None): the mean state of the train rows, which concept
            directions are centred on.
        labels (LabelBook or None): the concepts' names written by hand or by `vqlc label`.
        tag_names (dict of int to str): a concept's aligned linguistic tag, for its name.
        predicted_counts (dict): a prediction concept's train members by the model's predicted
            class.

    Examples:
        >>> cs = vq.open_run("default").concepts("vqlc")
        >>> [(c.id, c.top_words[:3]) for c in list(cs)[:2]]
    """

    method: str
    assignments: np.ndarray  # (n_rows,) concept id of every store row, dev and test rows included
    vectors: np.ndarray  # (K, d) mean hidden state of each concept's train members
    summary: pd.DataFrame  # one row per concept, see `summarize`
    class_names: list[str]
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # e.g. VQLC "codes", "encodings"; SAE "directions"
    info: dict = field(default_factory=dict)  # fit time, peak memory, measures
    mean: np.ndarray | None = None  # (d,) mean state of the train rows; None in sets saved before it existed
    labels: object = field(default=None, repr=False, compare=False)  # a labels.LabelBook, see Run.concept_set
    tag_names: dict = field(default_factory=dict, repr=False, compare=False)  # concept -> aligned tag, see Run
    # concept -> {class: count} of its train prediction members by the model's predicted class (see Run)
    predicted_counts: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_concepts(self) -> int:
        """K, the number of concepts (prediction concepts included)."""
        return len(self.vectors)

    @property
    def sizes(self) -> np.ndarray:
        """(K,) train members of each concept."""
        return self.summary["size"].to_numpy()

    def used_ids(self) -> list[int]:
        """The ids of the concepts with at least one train member, in order: the concepts a grid,
        a map or an export shows (an empty concept has no words, vector or contexts to show)."""
        return [int(k) for k in np.flatnonzero(self.sizes > 0)]

    def directions(self, ids, centred: bool = True) -> np.ndarray:
        """(n, d) hidden-space directions of concepts `ids` for ablation: the concept vector minus
        the train rows' mean (centred, the default) or the concept vector itself. Uncentred
        vectors point mostly along the mean that every state shares, so removing one mostly
        removes that mean. A concept without train members has a zero
        direction: it removes nothing. A method that has its own direction per concept (the
        SAE's unit decoder rows, `extra["directions"]`) gives it as the centred direction: a
        decoder row is already a direction about the mean (the SAE centres its input)."""
        ids = np.atleast_1d(np.asarray(ids, dtype=np.int64))
        if centred and "directions" in self.extra:
            return np.asarray(self.extra["directions"], dtype=np.float32)[ids]
        v = self.vectors[ids].astype(np.float32)
        if centred:
            if self.mean is None:
                raise RunError(f"The concept set of {self.method} has no train mean (it predates centred "
                               "directions); rebuild this method's stage.")
            v = v - self.mean[None, :]
        return np.where(self.sizes[ids][:, None] > 0, v, 0.0).astype(np.float32)

    def with_vectors(self, definition: str) -> "ConceptSet":
        """A copy whose concept vectors follow `definition` (a key of `CONCEPT_VECTORS`), from the
        definitions kept with the set."""
        if definition not in CONCEPT_VECTORS:
            raise RunError(f"Unknown concept-vector definition {definition!r}; choose one of "
                           f"{', '.join(CONCEPT_VECTORS)}.")
        key = f"vectors_{definition}"
        if key not in self.extra:
            raise RunError(f"The concept set of {self.method} keeps no '{definition}' vectors (built before they "
                           "existed); rebuild this method's stage.")
        info = {**self.info, "concept_vectors": definition}
        return ConceptSet(self.method, self.assignments, np.asarray(self.extra[key], dtype=np.float32), self.summary,
                          self.class_names, self.extra, info, self.mean, self.labels)

    @classmethod
    def from_assignments(cls, method: str, store, assignments: np.ndarray, n_concepts: int,
                         class_names: list[str], extra: dict | None = None, info: dict | None = None,
                         seed: int = 0, train: np.ndarray | None = None, fit_rows: np.ndarray | None = None,
                         centres: np.ndarray | None = None, vectors: str = "train") -> "ConceptSet":
        """The concept set of `assignments` (one per store row). The mean and the summary come
        from the rows in the boolean mask `train` (by default the store token table's train
        split, see `train_mask`); every row keeps its assignment. The concept vectors follow
        `vectors` (see `CONCEPT_VECTORS`): 'train' over the train rows, 'fitset' over the train
        rows among `fit_rows`, 'centre' the method's `centres` (K, d); a concept with no member
        among the fit rows takes its train mean, and without `fit_rows` or `centres` those
        definitions fall back to 'train' and 'fitset'. Every definition is kept in `extra`."""
        assignments = np.asarray(assignments, dtype=np.int32)
        if len(assignments) != store.n_rows:
            raise RunError(f"expected {store.n_rows} assignments, got {len(assignments)}")
        train = train_mask(store.tokens, store.n_rows) if train is None else np.asarray(train, dtype=bool)
        if train.shape != (store.n_rows,):
            raise RunError(f"The train mask must have one entry per store row ({store.n_rows}), got {train.shape}.")
        if not train.any():
            raise RunError("No train rows in the store: concepts are shaped by train rows only; "
                             "build the store with a train split.")
        if vectors not in CONCEPT_VECTORS:
            raise RunError(f"Unknown concept-vector definition {vectors!r}; choose one of {', '.join(CONCEPT_VECTORS)}.")
        by_train, _, mean = concept_means(store, assignments, n_concepts, rows=np.flatnonzero(train))
        by_fit = by_train
        if fit_rows is not None:
            fit = np.asarray(fit_rows, dtype=np.int64)
            fit = fit[train[fit]]  # concepts are shaped by train rows only
            means, counts, _ = concept_means(store, assignments, n_concepts, rows=fit)
            by_fit = np.where(counts[:, None] > 0, means, by_train)
        by_centre = by_fit if centres is None else np.asarray(centres, dtype=np.float32)
        defs = {"train": by_train, "fitset": by_fit, "centre": by_centre}
        summary = summarize(store.tokens, assignments, n_concepts, class_names, seed=seed, train=train)
        info = {**(info or {}), "n_concept_rows": int(train.sum()), "concept_vectors": vectors}
        extra = {**dict(extra or {}), **{f"vectors_{k}": v.astype(np.float32) for k, v in defs.items()}}
        return cls(method, assignments, defs[vectors].astype(np.float32), summary, list(class_names), extra, info,
                   mean)

    def concept(self, k: int) -> Concept:
        """Concept k as a record (`records.Concept`)."""
        row = self.summary.loc[int(k)]
        return Concept(int(k), self.method, self.label(k), int(row["size"]), int(row["size_all"]),
                       bool(int(row["size"]) and is_prediction_concept(row)), self.top_words(k, 30),
                       self.distinctive_words(k, 30), json.loads(row["class_counts"]), str(row["dominant_class"]),
                       float(row["purity"]), self.vectors[int(k)], [tuple(e) for e in json.loads(row["examples"])])

    def __iter__(self) -> Iterator[Concept]:
        """The records of the concepts with train members (`used_ids`), in id order."""
        return (self.concept(k) for k in self.used_ids())

    def top_words(self, k: int, n: int = 10) -> list[tuple[str, int]]:
        """Concept k's `n` most frequent member words, with their counts among its train members."""
        return [tuple(x) for x in json.loads(self.summary.at[k, "top_words"])[:n]]

    def distinctive_words(self, k: int, n: int = 10) -> list[tuple[str, float]]:
        """Concept k's n most distinctive member words by class-based TF-IDF (`naming`); its top
        words by frequency for a set summarised before they existed."""
        if "distinctive_words" not in self.summary.columns:
            return [(w, float(c)) for w, c in self.top_words(k, n)]
        return [tuple(x) for x in json.loads(self.summary.at[k, "distinctive_words"])[:n]]

    def sentence_words(self, k: int, n: int = 10) -> list[tuple[str, float]]:
        """The n most distinctive content words of the sentences of concept k's prediction members."""
        if "sentence_words" not in self.summary.columns:
            return []
        return [tuple(x) for x in json.loads(self.summary.at[k, "sentence_words"])[:n]]

    def cloud_words(self, k: int) -> str:
        """JSON [[word, weight], ...] a word cloud of concept k is drawn from: for a prediction
        concept the distinctive words of its members' sentences, else its distinctive words (its
        top words by frequency in a set summarised before they existed)."""
        row = self.summary.loc[int(k)]
        if "sentence_words" in self.summary.columns and int(row["size"]) and is_prediction_concept(row):
            return str(row["sentence_words"])
        return str(row["distinctive_words"] if "distinctive_words" in self.summary.columns else row["top_words"])

    def name(self, k: int, n: int = 3) -> str:
        """Concept k's name from its members, with no label or tag: a prediction concept (mostly
        prediction rows) by its members' classes and their sentences' distinctive words ("mostly
        positive (93%) · gorgeous, witty, moving"), any other by its distinctive words."""
        row = self.summary.loc[k]
        if int(row["size"]) and is_prediction_concept(row):
            words = [w for w, _ in self.sentence_words(k, n)]
            # what the model predicted for its train members where known, else their true labels
            counts = self.predicted_counts.get(int(k))
            phrase = (class_phrase(counts, what="predicted ") if counts
                      else class_phrase(json.loads(row["class_counts"]), what="labelled "))
            return phrase + (" · " + ", ".join(words) if words else "")
        words = [w for w, _ in self.distinctive_words(k, n)]
        return ", ".join(words) if words else "(no train members)"

    def label(self, k: int, n: int = 3) -> str:
        """A short human name for concept k: its label (`vqlc label`, or one the user wrote, marked
        '(edited)') when it has one; else its `name` (for a prediction concept its members' classes
        and sentences, for any other its `n` most distinctive words), followed for a word concept
        aligned with a linguistic tag by that tag, marked 'from tags' (`tag_alignment`), after
        `TAG_BADGE`: "c7: intriguing, quirky, interesting — JJ (Penn tag, from tags)"."""
        k = int(k)
        name = self.labels.name(k) if self.labels is not None else None
        if name:
            return f"c{k}: {name}"
        if k in self.tag_names and not is_prediction_concept(self.summary.loc[k]):
            return f"c{k}: {self.name(k, n)}{TAG_BADGE}{self.tag_names[k]}"  # the words, the tag beside them
        return f"c{k}: {self.name(k, n)}"

    def save(self, path: str | Path) -> None:
        """Write the set into the folder `path` (NumPy arrays, parquet and JSON; never pickled)."""
        path = Path(path)
        write_npy(path / "assignments.npy", self.assignments)
        write_npy(path / "vectors.npy", self.vectors.astype(np.float32))
        if self.mean is not None:
            write_npy(path / "mean.npy", np.asarray(self.mean, dtype=np.float32))
        for name, arr in self.extra.items():
            write_npy(path / f"extra_{name}.npy", np.asarray(arr))
        write_parquet(path / "summary.parquet", self.summary)
        write_json(path / "concepts.json", {"method": self.method, "n_concepts": self.n_concepts,
                                            "n_rows": int(len(self.assignments)), "dim": int(self.vectors.shape[1]),
                                            "class_names": self.class_names, "extra": sorted(self.extra),
                                            "info": self.info})

    @classmethod
    def load(cls, path: str | Path, n_rows: int | None = None, dim: int | None = None) -> "ConceptSet":
        """Read a set that `save` wrote.

        Args:
            path: the folder `save` wrote.
            n_rows: the store's rows, to check the assignments against (None: not checked).
            dim: the store's width, to check the vectors against (None: not checked).

        Raises:
            RunError: `path` holds no concept set, or one whose rows or width differ from the
                store's.
        """
        path = Path(path)
        if not (path / "concepts.json").exists():
            raise RunError(f"No concept set in {path}; rebuild this method's stage.")
        meta = read_json(path / "concepts.json")
        assignments = read_npy(path / "assignments.npy")
        vectors = read_npy(path / "vectors.npy")
        if n_rows is not None and len(assignments) != n_rows:
            raise RunError(f"Concept set {meta['method']} covers {len(assignments)} rows, expected {n_rows}; "
                           "rebuild this method's stage.")
        if dim is not None and vectors.shape[1] != dim:
            raise RunError(f"Concept vectors of {meta['method']} have dimension {vectors.shape[1]}, expected {dim}; "
                           "rebuild this method's stage.")
        extra = {name: read_npy(path / f"extra_{name}.npy") for name in meta.get("extra", [])}
        mean = read_npy(path / "mean.npy") if (path / "mean.npy").exists() else None  # absent before centring
        return cls(meta["method"], assignments, vectors, read_parquet(path / "summary.parquet"),
                   meta["class_names"], extra, meta.get("info", {}), mean)


# --- one concept's summary row ------------------------------------------------------------

def prediction_examples(texts: pd.DataFrame, summary_row, n: int = 6) -> list[str]:
    """Sentences whose prediction representation belongs to the concept (from its examples)."""
    ids = [int(t) for t, wi in json.loads(summary_row["examples"]) if int(wi) < 0][:n]
    text_of = texts.set_index("text_id")["text"]
    return [text_of[t] for t in ids if t in text_of.index]


TAG_BADGE = " — "  # between a word concept's words and the tag it is aligned with (`ConceptSet.label`)


def is_prediction_concept(summary_row) -> bool:
    """A concept whose members are mostly prediction rows (shown by sentences, not words)."""
    return int(summary_row["n_pred"]) * 2 > int(summary_row["size"])


def word_share(summary_row) -> float:
    """The share of word rows among a concept's train members (1 - n_pred / size); NaN for a
    concept without train members."""
    size = int(summary_row["size"])
    return 1.0 - int(summary_row["n_pred"]) / size if size else float("nan")
