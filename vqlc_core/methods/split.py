"""Prediction concepts of their own: one concept method fitted twice, on the word rows with K
concepts and on the prediction rows with `prediction_concepts` more, by the same method.

A prediction representation (the pooled state the classifier reads) is not a word: mean-pooled,
it lands among function-word states, and in one shared set of K concepts it shared a concept with
them ("., a, an") for almost every sentence (docs/design.md, "Prediction concepts"). `SplitConcepts`
keeps the method's own fit, predict and save, and only routes rows: word rows get ids 0..K-1 from
the word estimator, prediction rows ids K..K+Kp-1 from the prediction estimator. The rest of vqlc
sees one concept set of K + Kp concepts and asks any method, split or not, for the concepts of
prediction representations through `predict_predictions` / `predict_proba_predictions`.
`prediction_concepts = 0` keeps one set for every row, as the paper describes it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from vqlc_core.base.runio import RunError, read_json, write_json
from vqlc_core.methods.base import ConceptMethod
from vqlc_core.methods.registry import method_class
from vqlc_core.methods.metrics import perplexity_from_counts

SPLIT_FILE = "split.json"
PARTS = ("words", "predictions")
MIN_MEMBERS = 5  # prediction rows to fit per prediction concept, at the least


def prediction_mask(store, rows: np.ndarray) -> np.ndarray:
    """True where store row `rows[i]` is a prediction representation (kind 'pred')."""
    return store.tokens["kind"].to_numpy()[np.asarray(rows, dtype=np.int64)] == "pred"


class SplitConcepts:
    """Word concepts and prediction concepts of one method, as one estimator (see the module)."""

    encodes = False

    def __init__(self, words: ConceptMethod, predictions: ConceptMethod):
        self.words, self.predictions = words, predictions
        self.name, self.display_name = words.name, words.display_name
        self.encodes = words.encodes

    def __getattr__(self, name: str):
        """Anything else of the word estimator: what is not about concept ids (an SAE's `encode`,
        `k` and `reconstruct`, VQLC's `history_`) is the word concepts' own."""
        if name in PARTS or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.words, name)

    @property
    def n_concepts(self) -> int:
        return self.words.n_concepts + self.predictions.n_concepts

    @property
    def n_word_concepts(self) -> int:
        return self.words.n_concepts

    def fit(self, store, rows: np.ndarray | None = None) -> "SplitConcepts":
        rows = np.arange(store.n_rows) if rows is None else np.unique(np.asarray(rows, dtype=np.int64))
        pred = prediction_mask(store, rows)
        if not pred.any():
            raise RunError("There are no prediction rows to fit the prediction concepts on; build the store with "
                           "prediction rows or set --prediction-concepts 0.")
        self.words.fit(store, rows[~pred])
        self.predictions.fit(store, rows[pred])
        w, p = self.words.fit_info_, self.predictions.fit_info_
        self.fit_info_ = {**w, "fit_time_s": round(w["fit_time_s"] + p["fit_time_s"], 4),
                          "peak_rss_mb": max(w["peak_rss_mb"], p["peak_rss_mb"]),
                          "peak_rss_upper_mb": max(w.get("peak_rss_upper_mb", 0), p.get("peak_rss_upper_mb", 0)),
                          "n_fit_rows": int(len(rows)), "prediction_fit": p}
        return self

    # --- assignment -------------------------------------------------------------------------
    def predict(self, X) -> np.ndarray:
        """Word concept ids (0..K-1) of word vectors X."""
        return self.words.predict(X)

    def predict_proba(self, X) -> np.ndarray:
        """(N, K + Kp) word-concept probabilities of word vectors X (the prediction concepts get 0)."""
        p = np.asarray(self.words.predict_proba(X), dtype=np.float32)
        return np.hstack([p, np.zeros((len(p), self.predictions.n_concepts), np.float32)])

    def predict_predictions(self, X) -> np.ndarray:
        """Prediction concept ids (K..K+Kp-1) of pooled prediction representations X."""
        return np.asarray(self.predictions.predict(X), dtype=np.int64) + self.n_word_concepts

    def predict_proba_predictions(self, X) -> np.ndarray:
        """(N, K + Kp) prediction-concept probabilities of prediction representations X (word concepts 0)."""
        p = np.asarray(self.predictions.predict_proba(X), dtype=np.float32)
        return np.hstack([np.zeros((len(p), self.n_word_concepts), np.float32), p])

    def transform(self, X) -> np.ndarray:
        return self.words.transform(X)

    def predict_store(self, store, batch_size: int = 8192) -> np.ndarray:
        """Every store row's concept: word rows from the word estimator, prediction rows from the
        prediction estimator (offset by K)."""
        out = np.asarray(self.words.predict_store(store, batch_size), dtype=np.int64)
        pred = np.flatnonzero(prediction_mask(store, np.arange(store.n_rows)))
        if len(pred):
            out[pred] = np.asarray(self.predictions.predict_store(store, batch_size), dtype=np.int64)[pred] \
                + self.n_word_concepts
        return out

    def score_store(self, store, rows: np.ndarray | None = None, batch_size: int = 8192) -> dict:
        """Concept perplexity and dead concepts over store `rows`, each row scored by its own part;
        for a method that encodes (the SAE) its dictionary's own measures over all of them."""
        if self.words.encodes:
            return self.words.score_store(store, rows, batch_size)
        rows = np.arange(store.n_rows) if rows is None else np.unique(np.asarray(rows, dtype=np.int64))
        pred = prediction_mask(store, rows)
        counts = np.zeros(self.n_concepts, dtype=np.int64)
        for part, sel, offset in ((self.words, rows[~pred], 0), (self.predictions, rows[pred], self.n_word_concepts)):
            for x in store.iter_batches(batch_size, shuffle=False, rows=sel):
                counts[offset: offset + part.n_concepts] += np.bincount(
                    part.predict(x.numpy()), minlength=part.n_concepts)[: part.n_concepts]
        return {"perplexity": perplexity_from_counts(counts), "dead_codes": int((counts == 0).sum())}

    def concept_extra(self) -> dict[str, np.ndarray]:
        """The parts' per-concept arrays one after the other (word concepts first); an array that
        is not one row per concept (e.g. LACOAT's fit rows) is kept per part."""
        w, p = self.words.concept_extra(), self.predictions.concept_extra()
        out = {}
        for key in sorted(set(w) | set(p)):
            a, b = w.get(key), p.get(key)
            if (a is not None and b is not None and len(a) == self.words.n_concepts
                    and len(b) == self.predictions.n_concepts and np.shape(a)[1:] == np.shape(b)[1:]):
                out[key] = np.concatenate([np.asarray(a), np.asarray(b)])
            else:
                if a is not None:
                    out[key] = np.asarray(a)
                if b is not None:
                    out[f"predictions_{key}"] = np.asarray(b)
        return out

    def concept_centres(self, store, rows: np.ndarray) -> np.ndarray | None:
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        pred = prediction_mask(store, rows)
        a, b = self.words.concept_centres(store, rows[~pred]), self.predictions.concept_centres(store, rows[pred])
        return None if a is None or b is None else np.concatenate([np.asarray(a), np.asarray(b)]).astype(np.float32)

    def get_params(self) -> dict:
        return {part: getattr(self, part).get_params() for part in PARTS}

    # --- save and load: each part as the method saves itself, in its own folder ------------------
    def save(self, path: str | Path) -> None:
        path = Path(path)
        for part in PARTS:
            getattr(self, part).save(path / part)
        write_json(path / SPLIT_FILE, {"method": self.name, "n_word_concepts": self.words.n_concepts,
                                       "n_prediction_concepts": self.predictions.n_concepts})

    @classmethod
    def load(cls, path: str | Path, method: type[ConceptMethod]) -> "SplitConcepts":
        path = Path(path)
        return cls(method.load(path / "words"), method.load(path / "predictions"))


def prediction_concept_count(wanted: int, n_prediction_rows: int) -> int:
    """The prediction concepts a split fits: `wanted`, at most one per `MIN_MEMBERS` prediction
    rows to fit (a small corpus gets fewer), and at least 2; 0 stays 0 (no split)."""
    if wanted <= 0:
        return 0
    return max(2, min(int(wanted), int(n_prediction_rows) // MIN_MEMBERS))


def _placed(estimator, device: str | None):
    """`estimator` set to train on `device` when it is a torch method (one with a `device`
    parameter); scikit-learn's methods run on the CPU whatever it says."""
    if device is not None and "device" in estimator.get_params():
        estimator.device = device
    return estimator


def build_method(name: str, mcfg, seed: int, workdir: Path, store=None, rows: np.ndarray | None = None,
                 device: str | None = None):
    """A fresh estimator of method `name` for the build's settings: the method itself when
    `mcfg.prediction_concepts` is 0, else its `SplitConcepts` (words in workdir/words,
    predictions in workdir/predictions, for the methods that checkpoint), with as many prediction
    concepts as `prediction_concept_count` allows for the prediction rows among `rows` of `store`;
    the torch methods train on `device` (default: their own, the CPU)."""
    cls = method_class(name)
    kp = int(getattr(mcfg, "prediction_concepts", 0) or 0)
    if kp > 0 and store is not None:
        rows = np.arange(store.n_rows) if rows is None else np.asarray(rows, dtype=np.int64)
        kp = prediction_concept_count(kp, int(prediction_mask(store, rows).sum()))
    if kp <= 0:
        return _placed(cls.from_config(mcfg, seed, workdir), device)
    workdir = Path(workdir)
    words = _placed(cls.from_config(mcfg, seed, workdir / "words"), device)
    predictions = _placed(cls.for_predictions(replace(mcfg, n_concepts=kp), seed, workdir / "predictions"), device)
    return SplitConcepts(words, predictions)


def load_method(name: str, path: str | Path):
    """A fitted method of `name` from its model folder: a `SplitConcepts` where one was saved."""
    cls, path = method_class(name), Path(path)
    if (path / SPLIT_FILE).exists():
        meta = read_json(path / SPLIT_FILE)
        if meta.get("method") not in (cls.saved_names or (cls.name,)):
            raise RunError(f"The method saved in {path} is {meta.get('method')!r}, expected {name!r}; rebuild this "
                           "method's stage.")
        return SplitConcepts.load(path, cls)
    return cls.load(path)
