"""Smoke test of bench/time_to_quality.py: its core function on a tiny synthetic store."""

import pytest

from tests.conftest import blobs
from vqlc_core.data.store import ArrayStore


@pytest.mark.slow
def test_every_method_gives_a_curve_forward_in_time_with_r2_in_range():
    from time_to_quality import METHODS, time_to_quality

    X, _ = blobs(n_per=500, k=8, dim=16, spread=0.5, seed=0)  # 4,000 rows
    fit, dev = ArrayStore(X[:3000]), X[3000:]
    res = time_to_quality(fit, dev, METHODS, k=8, repeats=1, log=lambda s: None)
    assert set(res["curves"]) | set(res["notes"]) == set(METHODS)  # faiss is skipped, with a note, when missing
    for m, curve in res["curves"].items():
        seconds = [p["seconds"] for p in curve]
        assert len(curve) >= 2 and seconds == sorted(seconds), (m, seconds)
        assert all(-1.0 <= p["r2"] <= 1.0 for p in curve), (m, curve)
        assert all(0 <= p["dead_codes"] <= 8 and 1.0 <= p["perplexity"] <= 8.0 for p in curve), (m, curve)
    assert res["best_r2"] > 0.9  # eight well-separated blobs
    for m, s in res["methods"].items():
        assert s["time_to_final_s"] <= s["fit_s"], (m, s)
        assert s["time_to_95pct_best_s"] is None or s["time_to_95pct_best_s"] <= s["fit_s"], (m, s)
