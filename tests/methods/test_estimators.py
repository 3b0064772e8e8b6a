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


def test_the_concepts_of_an_array_fit_are_summarised_as_a_builds_are():
    X, y = blobs(n_per=80, k=4, dim=8)
    km = vq.KMeansConcepts(n_concepts=4, seed=0).fit(X)
    words = [f"blob{b}" for b in y]
    cs = vq.concepts_of(km, X, words, labels=y % 2, class_names=["even", "odd"])
    assert cs.n_concepts == 4 and (np.asarray(cs.assignments) == km.predict(X)).all()
    records = list(cs)
    assert sorted(r.size for r in records) == [80] * 4  # every row a train row, one blob per concept
    for r in records:
        (word, count), = r.top_words  # one word per blob, counted once per member
        assert count == 80 and r.label == f"c{r.id}: {word}" and r.purity == 1.0
        assert r.dominant_class == ["even", "odd"][int(word[-1]) % 2]
        assert np.allclose(r.vector, X[y == int(word[-1])].mean(0), atol=1e-5)
    with pytest.raises(RunError, match=re.escape("one word per row (320), got 3")):
        vq.concepts_of(km, X, ["a", "b", "c"])
    with pytest.raises(RunError, match="ids 0..1 of the 2 class names"):
        vq.concepts_of(km, X, words, labels=y, class_names=["even", "odd"])
