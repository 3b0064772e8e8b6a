"""The concept methods as estimators on arrays, in scikit-learn's manner: `fit(X)` on an (N, d)
NumPy array or tensor returns the estimator, `predict(X)` gives code indices, and what is no
array of vectors is refused in one sentence."""

import re

import numpy as np
import pytest
import torch

import vqlc_core as vq
from tests.conftest import blobs
from vqlc_core.base.runio import RunError


@pytest.mark.parametrize("make", [lambda: vq.VQLC(n_concepts=6, epochs=3, min_steps=50, progress=False, seed=0),
                                  lambda: vq.KMeansConcepts(n_concepts=6, seed=0)], ids=["vqlc", "kmeans"])
def test_an_estimator_fits_an_array_and_finds_the_blobs(make):
    X, y = blobs(n_per=150, k=6, dim=16)
    est = make()
    assert est.fit(X) is est and est.fit_info_["n_fit_rows"] == len(X)
    codes = est.predict(X)
    assert codes.shape == (len(X),) and codes.dtype == np.int64
    # each blob lies mostly in one concept (purity over the blobs)
    purity = sum(np.bincount(codes[y == b]).max() for b in range(6)) / len(X)
    assert purity > 0.9
    again = make().fit(torch.from_numpy(X))  # a tensor fits as its array does
    assert (again.predict(X) == codes).mean() > 0.99


@pytest.mark.parametrize("bad, says", [(np.zeros(10, np.float32), "shape (10,)"), ("vectors", "array of vectors"),
                                       (np.full((5, 3), np.nan, np.float32), "NaN")])
def test_what_is_no_array_of_vectors_is_refused_in_one_sentence(bad, says):
    with pytest.raises(RunError, match=re.escape(says)):
        vq.KMeansConcepts(n_concepts=2).fit(bad)
