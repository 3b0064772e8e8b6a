"""Energy-matched controls for the faithfulness table: what share of a representation's energy a
cut removes, and the cuts of the same size to compare a concept's with.

Per method and sentence, for the prediction concept and for the salient-word concepts: the other
concept(s) of the same method whose ablation removes the energy closest to the target's (as many
directions as the target's span), and random directions drawn from the train states'
distribution N(0, Σ_train) chosen the same way. A drop is then compared with a drop of the same
size of cut: a target that removes 10% of the energy says nothing against a control that removes
1%. The prediction concept's other concepts are those that hold train predictions
(`prediction_pool`); its class direction (`class_directions`) is not matched in energy.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

from vqlc_core.explain.ablation import orthonormal_basis, project_out

N_BANK = 16384  # random directions drawn from N(0, Σ_train) per call, the pool the matched directions come from
# (on `default` the most energy any of 16,384 removes from a test sentence is 0.15 at the median, against
# 0.13 for 4,096: a prediction concept that removes more than that has no random match of its size)
N_SUBSETS = 32  # candidate sets tried per sentence when a span of several directions is matched


def removed_energy(pooled: torch.Tensor, basis: torch.Tensor) -> np.ndarray:
    """(B,) share of ||h||² that projecting out the span of `basis` (B, r, d) removes from the
    pooled representations `pooled` (B, d): (||h||² - ||h'||²) / ||h||². Pooling is linear in
    the states, so projecting the pooled vector equals pooling the projected states."""
    h = pooled.double()
    kept = project_out(h[:, None, :], basis.double())[:, 0]
    return (1.0 - (kept * kept).sum(1) / (h * h).sum(1).clamp(min=1e-30)).numpy()


def direction_bank(cov: np.ndarray, n: int = N_BANK, seed: int = 0) -> np.ndarray:
    """(n, d) unit directions drawn from N(0, cov) with `seed`: random directions shaped like the
    train states' own spread (a direction of high variance is drawn more often)."""
    cov = np.asarray(cov, dtype=np.float64)
    jitter = 1e-6 * max(float(np.trace(cov)) / len(cov), 1e-12)
    L = np.linalg.cholesky(cov + jitter * np.eye(len(cov)))
    u = np.random.default_rng([int(seed), zlib.crc32(b"bank")]).standard_normal((n, len(cov))) @ L.T
    return (u / np.linalg.norm(u, axis=1, keepdims=True)).astype(np.float64)


def span_energy(h: np.ndarray, vectors: np.ndarray) -> float:
    """Share of ||h||² (h: (d,)) in the span of `vectors` (r, d): what projecting it out removes."""
    q, _ = np.linalg.qr(np.asarray(vectors, dtype=np.float64).T)  # (d, r) orthonormal columns
    return float(((q.T @ h) ** 2).sum() / max(float(h @ h), 1e-30))


def match_energy(h: np.ndarray, unit: np.ndarray, single: np.ndarray, allowed: np.ndarray, target: float, r: int,
                 rng: np.random.Generator) -> np.ndarray | None:
    """Indices of `r` rows of `unit` (n, d) whose span removes from h (d,) the energy closest to
    `target`, among the `allowed` rows (bool (n,)). `single` (n,) is each row's own energy. For
    r = 1 the best row; else the best of `N_SUBSETS` random r-subsets of the 4r allowed rows whose
    own energy is closest to target / r (the first best on a tie). None when fewer than r rows
    are allowed."""
    ids = np.flatnonzero(allowed)
    if len(ids) < r or r < 1:
        return None
    if r == 1:
        return ids[[int(np.argmin(np.abs(single[ids] - target)))]]
    pool = ids[np.argsort(np.abs(single[ids] - target / r), kind="stable")[: 4 * r]]
    picks = np.stack([np.sort(rng.choice(pool, size=r, replace=False)) for _ in range(N_SUBSETS)])
    gaps = np.abs(span_energies(h, unit[picks]) - target)
    gaps[~(gaps < np.inf)] = np.inf  # as a strict `<` scan would: a NaN gap is never the best
    best = int(np.argmin(gaps))
    return picks[best] if gaps[best] < np.inf else None


def span_energies(h: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """`span_energy` of each set of `vectors` (s, r, d): one batched QR for all of them (numpy
    factors each matrix of a stack with the same LAPACK call as a single one, so every value
    equals `span_energy`'s)."""
    q, _ = np.linalg.qr(np.asarray(vectors, dtype=np.float64).transpose(0, 2, 1))  # (s, d, r)
    hh = max(float(h @ h), 1e-30)
    return np.array([float(((qi.T @ h) ** 2).sum() / hh) for qi in q])


def unit_energy(h: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """(n,) share of ||h||² (h: (d,)) along each row of `unit` (n, d): `match_energy`'s `single`."""
    return (unit @ h) ** 2 / max(float(h @ h), 1e-30)


def matched_basis(h: np.ndarray, unit: np.ndarray, allowed: np.ndarray, target_vectors: np.ndarray,
                  rng: np.random.Generator, single: np.ndarray | None = None,
                  target: torch.Tensor | None = None) -> torch.Tensor | None:
    """The orthonormal basis of the rows of `unit` (n, d) matched in energy on h (d,) to the span
    of `target_vectors` (r, d), among the `allowed` rows (see `match_energy`). A caller that
    matches several targets on the same h passes `single` (`unit_energy(h, unit)`) and `target`
    (`orthonormal_basis(target_vectors)`) computed once."""
    target = orthonormal_basis(target_vectors) if target is None else target
    if len(target) == 0:
        return None
    single = unit_energy(h, unit) if single is None else single
    pick = match_energy(h, unit, single, allowed, span_energy(h, target.double().numpy()), len(target), rng)
    return None if pick is None else orthonormal_basis(unit[pick])


def prediction_pool(c: dict, k: int) -> np.ndarray:
    """(K,) bool: the concepts a prediction concept k's energy-matched concept is drawn from, the
    method's other usable concepts that hold train predictions (`faithfulness.concept_arrays`):
    with prediction concepts of their own (`methods.split`) exactly the other prediction concepts,
    in one shared set the concepts some train prediction falls into. None allowed: no control."""
    return c["usable"] & c["prediction"] & (c["ids"] != k)


def class_directions(class_means: np.ndarray | None, mean: np.ndarray) -> list[torch.Tensor | None] | None:
    """Per class, the orthonormal basis of its train predictions' mean state centred on the train
    mean `mean` (None for a class the model never predicted on train); None without class means."""
    if class_means is None:
        return None
    return [orthonormal_basis(np.asarray(v, dtype=np.float32) - mean) if np.isfinite(v).all() else None
            for v in np.asarray(class_means, dtype=np.float64)]

