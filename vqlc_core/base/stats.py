"""The one bootstrap: seeded resampling and 95% percentile intervals, used by the faithfulness
tables (seeds and sentences resampled crosswise), the judges' tables and the labels' detection
scores (each a plain resampling of its units)."""

from __future__ import annotations

import warnings

import numpy as np

N_BOOT = 1000  # bootstrap replicates, everywhere an interval is drawn
LEVEL = 95  # percent: every interval in vqlc is a 95% interval


def draws(rng: np.random.Generator, n: int, n_boot: int = N_BOOT) -> np.ndarray:
    """(n_boot, n) indices of n units drawn with replacement, once per replicate."""
    return rng.integers(0, n, size=(n_boot, n))


def crossed_means(seed_idx: np.ndarray, sent_idx: np.ndarray, values: np.ndarray, n_boot: int,
                  rng: np.random.Generator) -> np.ndarray:
    """(n_boot, q) bootstrap means of the rows' `values` (n, q): each replicate draws the seeds
    and the sentences with replacement, independently, and weights a row by how often its seed
    times how often its sentence was drawn (one seed: a plain bootstrap over sentences)."""
    n_seeds, n_sent = int(seed_idx.max()) + 1, int(sent_idx.max()) + 1
    ws = rng.multinomial(n_seeds, np.full(n_seeds, 1 / n_seeds), size=n_boot) if n_seeds > 1 else np.ones((n_boot, 1))
    wt = rng.multinomial(n_sent, np.full(n_sent, 1 / n_sent), size=n_boot)
    w = (ws[:, seed_idx] * wt[:, sent_idx]).astype(np.float64)  # (n_boot, n)
    total = w.sum(1)
    w, total = w[total > 0], total[total > 0]  # a draw whose seeds and sentences share no row says nothing
    return (w @ values) / total[:, None]


def interval(reps: np.ndarray, axis: int = 0, ignore_nan: bool = False):
    """The 95% percentile interval (low, high) of bootstrap replicates along `axis`; with
    `ignore_nan`, replicates that are NaN are left out (NaN bounds when all are)."""
    q = [(100 - LEVEL) / 2, 100 - (100 - LEVEL) / 2]
    if not ignore_nan:
        low, high = np.percentile(reps, q[0], axis=axis), np.percentile(reps, q[1], axis=axis)
        return low, high
    if not np.isfinite(reps).any():
        return np.nan, np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return tuple(np.nanpercentile(reps, q, axis=axis))
