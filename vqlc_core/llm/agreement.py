"""How the judges' ratings are summarised: each judge's mean rating per method with a seeded
bootstrap interval and the methods' rank, and, across judges, how far they agree (pairwise
Spearman, Kendall's W and Krippendorff's ordinal alpha, as the paper's authors report them).

Agreement is measured on items, an item being one concept shown for one sentence (a sentence,
a method and a role): a judge's three method means give too few points for a correlation. A
judge's unparseable answers are missing items, never a middle rating.

Two judges that both rate by the letter a concept was shown under agree because the letters were
the same for both, not because they read the concepts alike. So agreement is given beside each
judge's letter effect, and again after each judge's mean rating per letter is taken out of its
ratings (the residual agreement): what is left to agree on is how they read the concepts.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd

from vqlc_core.base.stats import N_BOOT, draws, interval

ITEM = ["text_id", "method", "role"]
BIAS_SHARE = 0.5  # a letter that explains more of a judge's variance than this: its ratings are mostly position


def _nan_to_none(x):
    return None if x is None or (isinstance(x, float) and np.isnan(x)) else x


def method_table(ratings: pd.DataFrame, seed: int = 0, n_boot: int = N_BOOT) -> pd.DataFrame:
    """One judge's table: per method and role, the sentences rated (n), the mean rating, its 95%
    bootstrap interval (sentences resampled, the same draws for every method, so intervals of one
    judge are paired) and the rank of the method's mean within its role (1 = best; ties share)."""
    from scipy.stats import rankdata

    ok = ratings[ratings["parsed"]]
    rows = []
    for role, by_role in ok.groupby("role", sort=True):
        wide = by_role.pivot_table(index="text_id", columns="method", values="rating", aggfunc="first")
        idx = draws(np.random.default_rng(seed), len(wide), n_boot)
        for method in wide.columns:
            v = wide[method].to_numpy(dtype=float)
            boots = np.nanmean(v[idx], axis=1) if len(v) else np.array([np.nan])
            lo, hi = interval(boots, ignore_nan=True)  # a draw with no rating of this method is left out
            rows.append({"role": role, "method": method, "n": int(np.isfinite(v).sum()),
                         "mean": float(np.nanmean(v)), "low": float(lo), "high": float(hi)})
    table = pd.DataFrame(rows, columns=["role", "method", "n", "mean", "low", "high"])
    if table.empty:
        return table.assign(rank=pd.Series(dtype=float))
    table["rank"] = table.groupby("role")["mean"].transform(lambda m: rankdata(-m.to_numpy(), method="average"))
    return table.sort_values(["role", "rank", "method"], ignore_index=True)


def position_effect(ratings: pd.DataFrame) -> dict | None:
    """How far one judge's ratings follow the letter a concept was shown under rather than the
    concept: the mean rating per letter, the share of the ratings' variance the letter explains
    (eta squared of a one-way analysis by letter) and, per method and role, the mean rating the
    letters alone would give it, keyed (role, method) (each of its ratings replaced by its letter's mean; letters are
    shuffled per sentence, so a judge that reads the concepts leaves this near the overall mean).
    None when no answer parsed."""
    ok = ratings[ratings["parsed"]]
    if ok.empty:
        return None
    by_letter = ok.groupby("letter")["rating"].mean()
    expected = ok["letter"].map(by_letter)
    total = float(((ok["rating"] - ok["rating"].mean()) ** 2).sum())
    between = float(((expected - ok["rating"].mean()) ** 2).sum())
    from_letters = ok.assign(expected=expected).groupby(["role", "method"])["expected"].mean()
    return {"by_letter": {str(k): float(v) for k, v in by_letter.sort_index().items()},
            "eta_squared": between / total if total > 0 else None,
            "from_letters": {(r, m): float(v) for (r, m), v in from_letters.items()}}


def item_matrix(ratings: pd.DataFrame) -> pd.DataFrame:
    """Judges (rows) by items (columns), the rating or NaN where a judge's answer did not parse."""
    ok = ratings[ratings["parsed"]]
    return ok.pivot_table(index="judge", columns=ITEM, values="rating", aggfunc="first")


def kendalls_w(matrix: np.ndarray) -> float:
    """Kendall's coefficient of concordance W of m raters (rows) over n items (columns), with the
    correction for ties; NaN for fewer than 2 raters or items, or when no rater separates items."""
    from scipy.stats import rankdata

    m, n = matrix.shape
    if m < 2 or n < 2:
        return float("nan")
    ranks = np.vstack([rankdata(row, method="average") for row in matrix])
    r = ranks.sum(0)
    s = float(((r - r.mean()) ** 2).sum())
    ties = sum(float((c ** 3 - c).sum()) for row in matrix for c in [np.unique(row, return_counts=True)[1]])
    denom = m ** 2 * (n ** 3 - n) - m * ties
    return float(12 * s / denom) if denom > 0 else float("nan")


def letter_residuals(ratings: pd.DataFrame) -> pd.DataFrame:
    """The parsed ratings, each less its judge's mean rating for the letter it was shown under: what
    is left of a judge's ratings once its position bias is taken out (0 throughout for a judge that
    rates by the letter alone)."""
    ok = ratings[ratings["parsed"]]
    letter_mean = ok.groupby(["judge", "letter"])["rating"].transform("mean")
    return ok.assign(rating=(ok["rating"] - letter_mean).round(9))  # exact zeros where a letter decides


def _concordance(mat: pd.DataFrame, level: str) -> dict:
    """Pairwise Spearman, each judge's disagreement, Kendall's W and Krippendorff's alpha at
    `level` ('ordinal' for ratings 1-3, 'interval' for residuals) of a judges-by-items matrix."""
    import krippendorff
    from scipy.stats import spearmanr

    judges = list(mat.index)
    pairs, rho_of = {}, {j: [] for j in judges}
    for a, b in itertools.combinations(judges, 2):
        both = mat.loc[[a, b]].dropna(axis=1)
        rho = float("nan")
        if both.shape[1] >= 3 and both.loc[a].nunique() > 1 and both.loc[b].nunique() > 1:
            rho = float(spearmanr(both.loc[a], both.loc[b]).statistic)
        pairs[f"{a} ~ {b}"] = {"spearman": _nan_to_none(rho), "items": int(both.shape[1])}
        for j in (a, b):
            if np.isfinite(rho):
                rho_of[j].append(rho)
    values = mat.to_numpy(dtype=float)
    alpha = float("nan")
    if np.isfinite(values).sum() >= 2 and len(np.unique(values[np.isfinite(values)])) > 1:
        domain = {"value_domain": [1, 2, 3]} if level == "ordinal" else {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            alpha = float(krippendorff.alpha(reliability_data=values, level_of_measurement=level, **domain))
    return {"pairwise": pairs,
            "disagreement": {j: _nan_to_none(1 - float(np.mean(v))) if v else None for j, v in rho_of.items()},
            "kendalls_w": _nan_to_none(kendalls_w(mat.dropna(axis=1).to_numpy(dtype=float))),
            "krippendorff_alpha": _nan_to_none(alpha)}


def agreement(ratings: pd.DataFrame) -> dict | None:
    """Agreement between judges over the items they rated: pairwise Spearman (items both rated),
    each judge's disagreement (1 minus its mean Spearman with the others), Kendall's W (items every
    judge rated) and Krippendorff's ordinal alpha (every item, missing ratings allowed); beside
    them each judge's letter effect (`position_effect`'s eta squared), the judges whose letter
    explains more than `BIAS_SHARE` of their variance, whether two or more do (then the agreement
    is largely their shared position bias), and the same statistics on `letter_residuals`
    (interval alpha), None where nothing is left to agree on. None with fewer than two judges."""
    mat = item_matrix(ratings)
    judges = list(mat.index)
    if len(judges) < 2:
        return None
    effect = {j: (position_effect(ratings[ratings["judge"] == j]) or {}).get("eta_squared") for j in judges}
    biased = [j for j in judges if effect[j] is not None and effect[j] > BIAS_SHARE]
    residual = item_matrix(letter_residuals(ratings)).reindex(index=judges, columns=mat.columns)
    return {"judges": judges, "items": int(mat.shape[1]), "items_all_judges": int(mat.dropna(axis=1).shape[1]),
            **_concordance(mat, "ordinal"),
            "letter_effect": effect, "position_biased": biased, "shared_position_bias": len(biased) >= 2,
            "residual": _concordance(residual, "interval")}
