"""The number beside a prediction concept, made to mean what it says.

A method's own concept probabilities (a softmax over distances, LACOAT's mapper, an SAE's
activation shares) are spread over hundreds of concepts: "p = 0.01" read as "barely used". What a
reader can check is the neighbourhood: of the train predictions nearest this one (the
`NEIGHBOURS` nearest in the model's space at layer l), which share sit in the concept? A
method's probabilities are tempered (p^(1/T), renormalised) with the T that makes them match those
shares on the dev split's prediction rows, by cross-entropy (temperature scaling), and the
reliability table says how well they match on dev: per bin of the shown top probability, its mean
against the mean share of neighbours in that concept. Nothing of the test split is used.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize_scalar
from sklearn.neighbors import NearestNeighbors

NEIGHBOURS = 10
BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
WHAT = (f"calibrated on dev: the expected share of this prediction's {NEIGHBOURS} nearest train predictions "
        "(layer l, Euclidean) that sit in the concept")


def tempered(proba: np.ndarray, temperature: float) -> np.ndarray:
    """Rows of `proba` raised to 1 / temperature and renormalised (1: unchanged)."""
    p = np.maximum(np.asarray(proba, dtype=np.float64), 0.0)
    if temperature == 1.0:
        return p.astype(np.float32)
    logp = np.where(p > 0, np.log(np.maximum(p, 1e-300)), -np.inf) / float(temperature)
    logp -= logp.max(1, keepdims=True)
    q = np.exp(logp)
    return (q / q.sum(1, keepdims=True)).astype(np.float32)


def neighbour_shares(train_x: np.ndarray, train_ids: np.ndarray, x: np.ndarray, n_concepts: int,
                     k: int = NEIGHBOURS) -> np.ndarray:
    """(N, n_concepts) for every row of x, the share of its k nearest train rows in each concept."""
    k = min(k, len(train_x))
    _, idx = NearestNeighbors(n_neighbors=k).fit(train_x).kneighbors(x)
    out = np.zeros((len(x), n_concepts))
    np.add.at(out, (np.repeat(np.arange(len(x)), k), np.asarray(train_ids)[idx].ravel()), 1.0 / k)
    return out


def fit_temperature(proba: np.ndarray, targets: np.ndarray) -> float:
    """The temperature T minimising the cross-entropy of tempered(proba, T) against `targets`."""
    def loss(log_t: float) -> float:
        q = tempered(proba, float(np.exp(log_t))).astype(np.float64)
        return float(-(targets * np.log(np.maximum(q, 1e-12))).sum(1).mean())

    return float(np.exp(minimize_scalar(loss, bounds=(-6.0, 6.0), method="bounded").x))


def reliability(p_top: np.ndarray, observed: np.ndarray, bins=BINS) -> list[dict]:
    """Per bin of the shown probability: rows, its mean, and the mean observed share (None: no row)."""
    edges = np.asarray(bins)
    which = np.clip(np.searchsorted(edges, p_top, side="right") - 1, 0, len(edges) - 2)
    return [{"low": float(edges[b]), "high": float(edges[b + 1]), "n": int((which == b).sum()),
             "mean_p": float(p_top[which == b].mean()) if (which == b).any() else None,
             "observed": float(observed[which == b].mean()) if (which == b).any() else None}
            for b in range(len(edges) - 1)]


def ece(table: list[dict]) -> float:
    """Expected calibration error of a reliability table: bins weighted by their rows."""
    n = sum(r["n"] for r in table)
    return float(sum(r["n"] * abs(r["mean_p"] - r["observed"]) for r in table if r["n"]) / max(n, 1))


def calibrate(store, method, assignments: np.ndarray, n_concepts: int) -> dict:
    """Fit the temperature of `method`'s prediction-concept probabilities on the store's dev
    prediction rows, against the concepts (`assignments`) of their nearest train prediction
    rows; its reliability before and after. Empty when the store has no dev or train predictions."""
    tok = store.tokens
    pred = (tok["kind"] == "pred").to_numpy()
    train = np.flatnonzero(pred & (tok["split"] == "train").to_numpy())
    dev = np.flatnonzero(pred & (tok["split"] == "dev").to_numpy())
    if len(train) == 0 or len(dev) == 0:
        return {}
    x_dev = store.read(dev).astype(np.float32)
    targets = neighbour_shares(store.read(train).astype(np.float32), np.asarray(assignments)[train], x_dev, n_concepts)
    raw = np.asarray(method.predict_proba_predictions(x_dev), dtype=np.float64)
    t = fit_temperature(raw, targets)
    out = {"temperature": t, "what": WHAT, "n_dev": int(len(dev)), "neighbours": NEIGHBOURS}
    for name, p in (("raw", raw), ("calibrated", tempered(raw, t))):
        top = p.argmax(1)
        table = reliability(p[np.arange(len(p)), top], targets[np.arange(len(p)), top])
        out[f"reliability_{name}"], out[f"ece_{name}"] = table, ece(table)
    return out
