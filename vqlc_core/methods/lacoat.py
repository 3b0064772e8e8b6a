"""LACOAT, the paper's second baseline: Ward agglomerative clustering of the fit set, and a
ConceptMapper (logistic regression) that assigns every other token to those clusters.
Its memory need (about 8·N² bytes of pairwise distances) is checked against a budget first.
"""

from __future__ import annotations

import inspect
import math
import time

import numpy as np
import psutil
from sklearn.cluster import AgglomerativeClustering
from sklearn.linear_model import LogisticRegression

from vqlc_core.methods.base import ConceptMethod
from vqlc_core.data.store import as_store
from vqlc_core.methods.registry import N_CONCEPTS
from vqlc_core.base.runio import RunError


# A score gap the float32 probabilities cannot erase: exp(-gap) < 1 - 1e-5, far above their
# rounding (6e-8), so the top score's cluster is the most probable one (`ConceptMapper.predict`).
SURE_GAP = 1e-5


class MemoryBudgetError(RunError):
    """LACOAT's pairwise distances would not fit in the memory budget."""


def estimate_memory(n_rows: int, dim: int) -> int:
    """Bytes Ward clustering of `n_rows` rows needs: the float64 condensed distance matrix
    (N(N-1)/2 entries) copied once, about 8·N², plus the rows themselves in float64."""
    n = int(n_rows)
    return 8 * n * (n - 1) + 8 * n * int(dim)


def max_rows_within(budget_bytes: float, dim: int) -> int:
    """The largest number of rows whose `estimate_memory` stays within `budget_bytes`."""
    # 8n² + 8(d-1)n <= B  <=>  n <= (-(d-1) + sqrt((d-1)² + B/2)) / 2
    b = dim - 1
    n = max(int((-b + math.sqrt(b * b + max(budget_bytes, 0) / 2)) / 2), 0)
    while n > 0 and estimate_memory(n, dim) > budget_bytes:  # guard against float rounding
        n -= 1
    while estimate_memory(n + 1, dim) <= budget_bytes:
        n += 1
    return n


def _human_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} bytes"


def _softmax(logits: np.ndarray) -> np.ndarray:
    logits = logits - logits.max(1, keepdims=True)
    p = np.exp(logits)
    return p / p.sum(1, keepdims=True)


def top_k_accuracy(proba: np.ndarray, labels: np.ndarray, k: int) -> float:
    """Share of rows whose true label is among the k most probable columns of `proba`."""
    k = min(k, proba.shape[1])
    top = np.argpartition(-proba, k - 1, axis=1)[:, :k]
    return float((top == np.asarray(labels)[:, None]).any(1).mean())


class ConceptMapper:
    """LACOAT's ConceptMapper: a multinomial logistic regression from a standardised token
    vector to its cluster id, trained on 90% of the clustered rows; `accuracy_` holds top-1,
    top-2 and top-5 accuracy on the other 10%.

    max_rows: at most this many clustered rows (a seeded random subset) train the mapper, so
    training stays well under a minute on two cores for 384-d vectors and 400 clusters.
    """

    def __init__(self, n_concepts: int, max_rows: int = 20000, max_iter: int = 200, tol: float = 1e-3,
                 test_size: float = 0.1, seed: int = 0):
        self.n_concepts = n_concepts
        self.max_rows = max_rows
        self.max_iter = max_iter
        self.tol = tol
        self.test_size = test_size
        self.seed = seed

    def fit(self, X: np.ndarray, labels: np.ndarray) -> "ConceptMapper":
        """Train on rows X (N, d) with cluster ids `labels` (N,)."""
        rng = np.random.default_rng(self.seed)
        order = rng.permutation(len(X))[: self.max_rows]
        n_test = max(int(round(self.test_size * len(order))), 1)
        test, train = order[:n_test], order[n_test:]
        X = np.asarray(X, dtype=np.float32)
        labels = np.asarray(labels, dtype=np.int64)
        self.mean_ = X[train].mean(0)
        scale = X[train].std(0)
        self.scale_ = np.where(scale > 0, scale, 1.0).astype(np.float32)
        lr = LogisticRegression(solver="lbfgs", max_iter=self.max_iter, tol=self.tol, random_state=self.seed)
        t0 = time.perf_counter()
        lr.fit(self._standardise(X[train]), labels[train])
        self.coef_ = lr.coef_.astype(np.float32)
        self.intercept_ = lr.intercept_.astype(np.float32)
        self.classes_ = lr.classes_.astype(np.int64)  # clusters seen in training; others get p = 0
        proba = self.predict_proba(X[test])
        self.accuracy_ = {f"top{k}": top_k_accuracy(proba, labels[test], k) for k in (1, 2, 5)}
        self.train_info_ = {"n_train": int(len(train)), "n_test": int(len(test)), "n_iter": int(np.max(lr.n_iter_)),
                            "train_time_s": round(time.perf_counter() - t0, 4)}
        return self

    def _standardise(self, X: np.ndarray) -> np.ndarray:
        return (np.asarray(X, dtype=np.float32) - self.mean_) / self.scale_

    def _scores(self, X: np.ndarray) -> np.ndarray:
        scores = self._standardise(X) @ self.coef_.T + self.intercept_
        if len(self.classes_) == 2:  # binary: one score s, P = softmax([0, s])
            scores = np.concatenate([np.zeros_like(scores), scores], axis=1)
        return scores

    def _proba(self, scores: np.ndarray) -> np.ndarray:
        out = np.zeros((len(scores), self.n_concepts), dtype=np.float32)
        out[:, self.classes_] = _softmax(scores.astype(np.float64))
        return out

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """(N, n_concepts) probability of each cluster for every row of X."""
        return self._proba(self._scores(X))

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Most probable cluster id of every row of X: `predict_proba`'s argmax, read off the
        scores where the top two are at least `SURE_GAP` apart (their float32 probabilities
        then differ, so the softmax cannot change the winner); the softmax decides the rest."""
        scores = self._scores(X).astype(np.float64)
        if scores.shape[1] < 2:
            return self._proba(scores).argmax(1).astype(np.int64)
        top2 = np.partition(scores, -2, axis=1)[:, -2:]
        out = self.classes_[scores.argmax(1)].astype(np.int64)
        unsure = ~(top2[:, 1] - top2[:, 0] >= SURE_GAP)  # NaN too
        if unsure.any():
            out[unsure] = self._proba(scores)[unsure].argmax(1)
        return out

    def arrays(self) -> dict[str, np.ndarray]:
        return {"mapper_coef": self.coef_, "mapper_intercept": self.intercept_, "mapper_classes": self.classes_,
                "scaler_mean": self.mean_, "scaler_scale": self.scale_}

    def params(self) -> dict:
        return {k: getattr(self, k) for k in inspect.signature(type(self).__init__).parameters if k != "self"}

    @classmethod
    def from_arrays(cls, params: dict, arrays: dict[str, np.ndarray], accuracy: dict) -> "ConceptMapper":
        self = cls(**params)
        self.coef_, self.intercept_ = arrays["mapper_coef"], arrays["mapper_intercept"]
        self.classes_ = arrays["mapper_classes"].astype(np.int64)
        self.mean_, self.scale_ = arrays["scaler_mean"], arrays["scaler_scale"]
        self.accuracy_ = dict(accuracy)
        return self


class LACOAT(ConceptMethod):
    """LACOAT concepts: Ward agglomerative clusters of the fit set (`labels_` for the rows
    `fit_rows_`); every other vector goes to a cluster through the ConceptMapper (`mapper_`).

    Args:
        n_concepts: K, the number of clusters.
        memory_budget_bytes: refuse to cluster when `estimate_memory` exceeds it (default: half
            of the memory available when `fit` starts); Ward needs 8·N² bytes for N rows.
        mapper_max_rows: cap on the mapper's training rows.
        mapper_max_iter: iterations of the mapper's logistic regression at most.
        seed: the seed of the mapper and of any sampling.

    Raises:
        MemoryBudgetError: from `fit`, when clustering the fit rows would exceed the budget.

    Examples:
        >>> X = np.random.default_rng(0).normal(size=(300, 16)).astype("float32")
        >>> vq.LACOAT(n_concepts=8).fit(X).predict(X).shape
        (300,)
    """

    name = "lacoat"
    display_name = "LACOAT"

    def __init__(self, n_concepts: int = N_CONCEPTS, memory_budget_bytes: float | None = None,
                 mapper_max_rows: int = 20000, mapper_max_iter: int = 200, seed: int = 0):
        self.n_concepts = n_concepts
        self.memory_budget_bytes = memory_budget_bytes
        self.mapper_max_rows = mapper_max_rows
        self.mapper_max_iter = mapper_max_iter
        self.seed = seed

    def check_budget(self, n_rows: int, dim: int) -> None:
        """Raise MemoryBudgetError when clustering `n_rows` rows would exceed the budget."""
        budget = self.memory_budget_bytes
        if budget is None:
            budget = 0.5 * psutil.virtual_memory().available
        need = estimate_memory(n_rows, dim)
        if need > budget:
            raise MemoryBudgetError(
                f"LACOAT needs about {_human_bytes(need)} for {n_rows:,} rows (8·N² bytes of pairwise distances) "
                f"but the budget is {_human_bytes(budget)}; at most {max_rows_within(budget, dim):,} rows fit "
                "— lower max_per_word or raise the memory budget."
            )

    def fit(self, store, rows: np.ndarray | None = None) -> "LACOAT":
        """Cluster the store's `rows` (LACOAT's fit set; all rows when None), then train the
        mapper; refuses first when the pairwise distances would not fit in memory. Takes an
        (N, d) array or tensor as well, as every method does."""
        if self.n_concepts < 2:
            raise RunError("LACOAT needs --n-concepts of at least 2.")
        store = as_store(store)
        n = store.n_rows if rows is None else len(np.unique(np.asarray(rows, dtype=np.int64)))
        self.check_budget(n, store.dim)
        return super().fit(store, rows)

    def _fit(self, store, rows: np.ndarray) -> dict:
        X = store.read(rows)
        t0 = time.perf_counter()
        ward = AgglomerativeClustering(n_clusters=self.n_concepts, linkage="ward").fit(X)
        info = {"cluster_time_s": round(time.perf_counter() - t0, 4)}
        self.fit_rows_ = rows
        self.labels_ = ward.labels_.astype(np.int64)
        self.mapper_ = ConceptMapper(self.n_concepts, max_rows=self.mapper_max_rows,
                                     max_iter=self.mapper_max_iter, seed=self.seed).fit(X, self.labels_)
        return {**info, "mapper_accuracy": self.mapper_.accuracy_, "mapper": self.mapper_.train_info_}

    def predict(self, X) -> np.ndarray:
        """Cluster id of every row of X (N, d), given by the ConceptMapper."""
        self.check_fitted("mapper_")
        return self.mapper_.predict(np.asarray(X))

    def predict_proba(self, X) -> np.ndarray:
        """(N, K) ConceptMapper probabilities of each cluster for every row of X."""
        self.check_fitted("mapper_")
        return self.mapper_.predict_proba(np.asarray(X))

    def predict_store(self, store, batch_size: int = 8192) -> np.ndarray:
        """Every store row's cluster: its Ward label for fit-set rows, the mapper's for the rest."""
        self.check_fitted("labels_")
        if len(self.fit_rows_) and self.fit_rows_[-1] >= store.n_rows:
            raise RunError(f"This LACOAT method was fitted on row {self.fit_rows_[-1]} but the store has "
                           f"{store.n_rows} rows; refit it on this store.")
        out = super().predict_store(store, batch_size)
        out[self.fit_rows_] = self.labels_
        return out

    def concept_extra(self) -> dict[str, np.ndarray]:
        self.check_fitted("labels_")
        return {"fit_rows": self.fit_rows_}

    def _tensors(self) -> dict:
        self.check_fitted("labels_")
        return {"fit_rows": self.fit_rows_, "labels": self.labels_, **self.mapper_.arrays()}

    def _state(self) -> dict:
        return {"mapper": self.mapper_.params(), "mapper_accuracy": self.mapper_.accuracy_}

    def _restore(self, tensors: dict, state: dict) -> None:
        arrays = {k: v.numpy() for k, v in tensors.items()}
        self.fit_rows_ = arrays["fit_rows"].astype(np.int64)
        self.labels_ = arrays["labels"].astype(np.int64)
        self.mapper_ = ConceptMapper.from_arrays(state["mapper"], arrays, state["mapper_accuracy"])
