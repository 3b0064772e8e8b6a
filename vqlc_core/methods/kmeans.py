"""K-Means, the paper's first baseline: a thin wrapper around scikit-learn whose centroids are
the concepts. `KMeans` holds all of its fit rows in memory (the point of the comparison);
`minibatch=True` streams them through `MiniBatchKMeans.partial_fit` instead.
"""

from __future__ import annotations

import numpy as np
from sklearn.cluster import KMeans, MiniBatchKMeans

from vqlc_core.methods.base import ConceptMethod, softmax_neg_distances
from vqlc_core.methods.registry import N_CONCEPTS

_CHUNK = 65536  # rows per distance block, so predicting a large X stays bounded in memory


def squared_distances(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """(N, K) squared Euclidean distances between the rows of X and of C, clipped at 0."""
    X = np.asarray(X, dtype=np.float32)
    d2 = (X * X).sum(1)[:, None] - 2.0 * (X @ C.T) + (C * C).sum(1)[None, :]
    return np.maximum(d2, 0.0)


def nearest_centroid(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index of the closest centroid for every row of X, and its squared distance."""
    X = np.asarray(X, dtype=np.float32)
    ids = np.empty(len(X), dtype=np.int64)
    d2 = np.empty(len(X), dtype=np.float32)
    for s in range(0, len(X), _CHUNK):
        block = squared_distances(X[s : s + _CHUNK], C)
        ids[s : s + _CHUNK] = block.argmin(1)
        d2[s : s + _CHUNK] = block[np.arange(len(block)), ids[s : s + _CHUNK]]
    return ids, d2


class KMeansConcepts(ConceptMethod):
    """K-Means concepts: `cluster_centers_` is the code book and `predict` returns the index of
    the closest centroid. `predict_proba` is a softmax of negative squared distances whose
    temperature (`temperature_`) is the median squared distance of fit rows to their centroid.

    Args:
        n_concepts: K, the number of centroids.
        minibatch: stream the fit rows through MiniBatchKMeans (`n_epochs` passes of
            `batch_size` rows, at least `n_concepts` per batch) instead of holding them all in
            memory.
        batch_size: rows per MiniBatchKMeans batch.
        n_epochs: passes of MiniBatchKMeans over the fit rows.
        max_iter: Lloyd iterations of the full K-Means at most.
        seed: the seed of the initialisation and of any sampling.

    Attributes:
        cluster_centers_ (ndarray of shape (n_concepts, d)): the code book, after `fit`.
        temperature_ (float): the softmax temperature of `predict_proba`, after `fit`.

    Examples:
        >>> X = np.random.default_rng(0).normal(size=(500, 16)).astype("float32")
        >>> vq.KMeansConcepts(n_concepts=8).fit(X).predict(X).shape
        (500,)
    """

    display_name = "K-Means"
    saved_names = ("kmeans", "minibatch-kmeans")

    def __init__(self, n_concepts: int = N_CONCEPTS, minibatch: bool = False, batch_size: int = 4096,
                 n_epochs: int = 1, max_iter: int = 300, seed: int = 0):
        self.n_concepts = n_concepts
        self.minibatch = minibatch
        self.batch_size = batch_size
        self.n_epochs = n_epochs
        self.max_iter = max_iter
        self.seed = seed

    @property
    def name(self) -> str:
        """'minibatch-kmeans' when `minibatch`, else 'kmeans'."""
        return "minibatch-kmeans" if self.minibatch else "kmeans"

    def _fit(self, store, rows: np.ndarray) -> dict:
        info = {}
        if self.minibatch:
            centers = self._fit_streamed(store, rows)
            # The temperature comes from a bounded sample, so memory stays flat.
            sample = np.random.default_rng(self.seed).choice(rows, size=min(len(rows), 20000), replace=False)
            X = store.read(np.sort(sample))
        else:
            X = store.read(rows)  # (N, d): K-Means holds all of its fit rows
            km = KMeans(n_clusters=self.n_concepts, init="k-means++", n_init=1, max_iter=self.max_iter,
                        random_state=self.seed).fit(X)
            centers = km.cluster_centers_
            info["n_iter"] = int(km.n_iter_)
        self.cluster_centers_ = np.asarray(centers, dtype=np.float32)
        _, d2 = nearest_centroid(X, self.cluster_centers_)
        self.temperature_ = float(max(np.median(d2), 1e-12))
        return info

    def _fit_streamed(self, store, rows: np.ndarray) -> np.ndarray:
        batch_size = max(self.batch_size, self.n_concepts)  # the first batch seeds all K centroids
        km = MiniBatchKMeans(n_clusters=self.n_concepts, init="k-means++", n_init=1, batch_size=batch_size,
                             random_state=self.seed)
        for epoch in range(self.n_epochs):
            for x in store.iter_batches(batch_size, shuffle=True, seed=self.seed + epoch, rows=rows):
                km.partial_fit(x.numpy())
        return km.cluster_centers_

    def predict(self, X) -> np.ndarray:
        """Index of the closest centroid for every row of X (N, d)."""
        self.check_fitted("cluster_centers_")
        return nearest_centroid(np.asarray(X), self.cluster_centers_)[0]

    def predict_proba(self, X) -> np.ndarray:
        """(N, K) softmax of -||x - c_k||² / temperature_ (median squared distance of fit rows to
        their centroid), so a row at a typical distance weighs its neighbours sensibly."""
        self.check_fitted("cluster_centers_")
        return softmax_neg_distances(np.asarray(X), self.cluster_centers_, self.temperature_)

    def concept_centres(self, store, rows: np.ndarray) -> np.ndarray:
        """The centroids: K-Means' own centre of each concept."""
        self.check_fitted("cluster_centers_")
        return self.cluster_centers_

    def concept_extra(self) -> dict[str, np.ndarray]:
        self.check_fitted("cluster_centers_")
        return {"centroids": self.cluster_centers_}

    def _tensors(self) -> dict:
        self.check_fitted("cluster_centers_")
        return {"centroids": self.cluster_centers_}

    def _state(self) -> dict:
        return {"temperature": self.temperature_}

    def _restore(self, tensors: dict, state: dict) -> None:
        self.cluster_centers_ = tensors["centroids"].numpy().astype(np.float32)
        self.temperature_ = float(state["temperature"])
