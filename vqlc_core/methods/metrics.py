"""Measures of a concept method's fit: reconstruction R² (of a method's own reconstruction, or
of each row by its concept vector), codebook usage (perplexity, dead codes) and agreement
between two assignments (adjusted mutual information). R² has a streaming accumulator so it can
be computed over a store batch by batch.
"""

from __future__ import annotations

import numpy as np
import torch
from vqlc_core.base.runio import RunError


def _as_numpy(a) -> np.ndarray:
    return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


class R2Accumulator:
    """Streaming R² = 1 - SSE/SST over all dimensions, SST about the per-dimension mean.

    Sums are kept in float64, so the result equals `r2_score` on the concatenated batches
    up to rounding.
    """

    def __init__(self):
        self.n = 0
        self.sse = 0.0
        self.sum: np.ndarray | None = None  # (d,)
        self.sumsq: np.ndarray | None = None  # (d,)

    def update(self, x, recon) -> None:
        """Add a batch of targets x (N, d) and reconstructions recon (N, d)."""
        x = _as_numpy(x).astype(np.float64)
        recon = _as_numpy(recon).astype(np.float64)
        if x.shape != recon.shape:
            raise RunError(f"R² needs x and recon of one shape, got {x.shape} and {recon.shape}.")
        if self.sum is None:
            self.sum, self.sumsq = np.zeros(x.shape[1]), np.zeros(x.shape[1])
        self.n += len(x)
        self.sse += float(((x - recon) ** 2).sum())
        self.sum += x.sum(0)
        self.sumsq += (x**2).sum(0)

    def value(self) -> float:
        if self.n == 0:
            raise RunError("R² needs at least one row; no batch was added.")
        sst = float((self.sumsq - self.sum**2 / self.n).sum())
        return 1.0 - self.sse / sst if sst > 0 else float("nan")


def r2_score(x, recon) -> float:
    """Fraction of the variance of x (N, d) explained by recon (N, d), pooled over all dims."""
    acc = R2Accumulator()
    acc.update(x, recon)
    return acc.value()


def centroid_r2(store, rows, assignments, vectors, batch_size: int = 8192) -> float:
    """R² of store `rows` (all rows when None) reconstructed by their concept's vector
    (`vectors[assignments[row]]`), streamed over the store: the reconstruction every method
    has (a centroid for K-Means and LACOAT, the concept mean for VQLC)."""
    rows = np.arange(store.n_rows) if rows is None else np.unique(np.asarray(rows, dtype=np.int64))
    a = np.asarray(assignments, dtype=np.int64)[rows]
    vectors = np.asarray(vectors, dtype=np.float32)
    acc, start = R2Accumulator(), 0
    for x in store.iter_batches(batch_size, shuffle=False, rows=rows):  # selected rows, ascending
        acc.update(x, vectors[a[start : start + len(x)]])
        start += len(x)
    return acc.value()


def code_counts(indices, n_codes: int) -> np.ndarray:
    """How many rows each of the n_codes codes received: (K,) int64."""
    idx = _as_numpy(indices).astype(np.int64).ravel()
    if len(idx) and (idx.min() < 0 or idx.max() >= n_codes):
        raise RunError(f"Code indices must lie in [0, {n_codes}), got [{idx.min()}, {idx.max()}].")
    return np.bincount(idx, minlength=n_codes)


def perplexity_from_counts(counts) -> float:
    """exp(entropy) of a usage histogram: K for uniform use of K codes, 1 for a single code."""
    counts = _as_numpy(counts).astype(np.float64)
    total = counts.sum()
    if total <= 0:
        return 0.0
    p = counts[counts > 0] / total
    return float(np.exp(-(p * np.log(p)).sum()))


def codebook_perplexity(indices, n_codes: int) -> float:
    """exp of the entropy of code usage over the given assignments."""
    return perplexity_from_counts(code_counts(indices, n_codes))


def dead_codes(indices, n_codes: int) -> int:
    """Number of codes that no row was assigned to."""
    return int((code_counts(indices, n_codes) == 0).sum())


def codebook_use(indices, n_codes: int) -> dict:
    """Perplexity, dead codes and used codes of one assignment (e.g. of the fit set, or of all rows)."""
    counts = code_counts(indices, n_codes)
    return {"perplexity": perplexity_from_counts(counts), "dead_codes": int((counts == 0).sum()),
            "used_codes": int((counts > 0).sum())}


def assignment_ami(a, b) -> float:
    """Adjusted mutual information between two assignments of the same rows (1 = same partition)."""
    from sklearn.metrics import adjusted_mutual_info_score

    a, b = _as_numpy(a).ravel(), _as_numpy(b).ravel()
    if a.shape != b.shape:
        raise RunError(f"AMI needs two assignments of the same rows, got {len(a)} and {len(b)} rows.")
    return float(adjusted_mutual_info_score(a, b))


def vqlc_measures(model, store, rows=None, batch_size: int = 8192) -> dict:
    """R², perplexity and dead codes of a fitted VQLC over store rows, streamed."""
    return model.score_store(store, rows=rows, batch_size=batch_size)
