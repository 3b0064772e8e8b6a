"""Shapley values of the input's concepts for one prediction: the players are the concepts present
in the input, the value of a coalition S is the drop in p(predicted class) when the concepts of S
are removed together, v(S) = p(x) - p(x without S). The values add up exactly to v(all), the
joint drop, so a waterfall of them needs no interaction bar.

Exact up to `EXACT_MAX` players (every coalition, 2^n of them, in one batch); beyond it,
antithetic permutation sampling: each sampled order and its reverse, a player's value the mean of
its marginal contributions, with the standard error over the pairs.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np

EXACT_MAX = 10  # players up to which every coalition is evaluated (1,024 forwards at 10)
PERMUTATIONS = 32  # sampled orders beyond it, as 16 antithetic pairs


def all_coalitions(n: int) -> list[tuple[int, ...]]:
    """Every subset of range(n), as sorted tuples, smallest first."""
    return [c for r in range(n + 1) for c in combinations(range(n), r)]


def exact_shapley(n: int, value: dict[tuple[int, ...], float]) -> np.ndarray:
    """(n,) Shapley values from `value` of every coalition (sorted tuples): the weighted mean of
    each player's marginal contribution over the coalitions without it."""
    phi = np.zeros(n)
    weights = [math.factorial(s) * math.factorial(n - s - 1) / math.factorial(n) for s in range(n)]
    for c, v in value.items():
        members = set(c)
        for i in range(n):
            if i not in members:
                phi[i] += weights[len(c)] * (value[tuple(sorted(members | {i}))] - v)
    return phi


def antithetic_orders(n: int, n_orders: int = PERMUTATIONS, seed: int = 0) -> list[list[int]]:
    """`n_orders` orders of range(n) (rounded up to even): seeded random ones, each followed by its
    reverse."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range((n_orders + 1) // 2):
        p = rng.permutation(n).tolist()
        out += [p, p[::-1]]
    return out


def order_coalitions(orders: list[list[int]]) -> list[tuple[int, ...]]:
    """The distinct coalitions the orders pass through (every prefix of every order), sorted."""
    return sorted({tuple(sorted(o[:j])) for o in orders for j in range(len(o) + 1)}, key=lambda c: (len(c), c))


def sampled_shapley(n: int, orders: list[list[int]], value: dict[tuple[int, ...], float]) -> tuple[np.ndarray, np.ndarray]:
    """(n,) Shapley values estimated from antithetic `orders` (pairs: an order, then its reverse)
    and (n,) their standard errors over the pairs."""
    marg = np.zeros((len(orders), n))
    for r, o in enumerate(orders):
        prev = value[()]
        for j, i in enumerate(o):
            cur = value[tuple(sorted(o[: j + 1]))]
            marg[r, i] = cur - prev
            prev = cur
    pairs = marg.reshape(-1, 2, n).mean(1)  # an order and its reverse are one sample
    se = pairs.std(0, ddof=1) / math.sqrt(len(pairs)) if len(pairs) > 1 else np.zeros(n)
    return pairs.mean(0), se


def coalitions_for(n: int, seed: int = 0) -> tuple[list[tuple[int, ...]], list[list[int]] | None]:
    """The coalitions to evaluate for n players, and the sampled orders (None when exact)."""
    if n <= EXACT_MAX:
        return all_coalitions(n), None
    orders = antithetic_orders(n, PERMUTATIONS, seed)
    return order_coalitions(orders), orders


def shapley(n: int, value: dict[tuple[int, ...], float], orders: list[list[int]] | None) -> tuple[np.ndarray, np.ndarray]:
    """Shapley values and standard errors (zeros when exact) from the values of `coalitions_for`."""
    if orders is None:
        return exact_shapley(n, value), np.zeros(n)
    return sampled_shapley(n, orders, value)
