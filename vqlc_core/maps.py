"""Concept maps: a 2-D UMAP of each method's concept vectors, computed at build time and stored
(UMAP's first call in a process compiles for 15-25 s, so pages never compute it)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd


def embed_2d(vectors: np.ndarray, seed: int = 0) -> np.ndarray:
    """(K, d) -> (K, 2): UMAP (cosine) when there are enough points, PCA otherwise."""
    n = len(vectors)
    if n < 2:
        return np.zeros((n, 2), dtype=np.float32)
    if n < 10:
        from sklearn.decomposition import PCA

        return PCA(n_components=2, random_state=seed).fit_transform(vectors).astype(np.float32)
    import umap

    reducer = umap.UMAP(n_components=2, n_neighbors=min(15, n - 1), metric="cosine", random_state=seed,
                        n_jobs=1, init="spectral" if n > 20 else "random")
    return reducer.fit_transform(vectors).astype(np.float32)


def marker_size(sizes) -> np.ndarray:
    """Marker sizes for concepts of these member counts. Sizes span four orders of magnitude: a
    square-root scale with a floor keeps every point visible and clickable (an empty or
    one-member concept gets 3) while the big concepts still stand out."""
    return np.sqrt(np.clip(np.asarray(sizes, dtype=np.float64), 1, None)) + 2


def concept_map(cs, seed: int = 0) -> pd.DataFrame:
    """One row per non-empty concept: x, y, size, dominant class, purity and top words."""
    s = cs.summary
    keep = s["size"].to_numpy() > 0
    xy = embed_2d(cs.vectors[keep], seed)
    out = s.loc[keep, ["concept", "size", "n_pred", "dominant_class", "purity"]].reset_index(drop=True)
    out["x"], out["y"] = xy[:, 0], xy[:, 1]
    out["top_words"] = [", ".join(w for w, _ in json.loads(t)[:8]) or "(prediction rows)"
                        for t in s.loc[keep, "top_words"]]
    return out
