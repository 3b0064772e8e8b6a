import numpy as np
import pytest
from sklearn.metrics import adjusted_mutual_info_score

from tests.conftest import blobs
from vqlc_core.methods.kmeans import KMeansConcepts
from vqlc_core.base.runio import RunError
from vqlc_core.data.store import ArrayStore


class CountingStore(ArrayStore):
    """An ArrayStore that records how it was read."""

    def __init__(self, vectors, **kw):
        super().__init__(vectors, **kw)
        self.batches_served = 0
        self.rows_read = 0

    def iter_batches(self, *args, **kw):
        for x in super().iter_batches(*args, **kw):
            self.batches_served += 1
            yield x

    def read(self, rows):
        self.rows_read += len(rows)
        return super().read(rows)


def test_kmeans_recovers_well_separated_blobs():
    X, y = blobs()
    km = KMeansConcepts(n_concepts=6, seed=0).fit(ArrayStore(X))
    assert km.name == "kmeans"
    assert km.cluster_centers_.shape == (6, 32)
    assert adjusted_mutual_info_score(y, km.predict(X)) > 0.99


def test_predict_is_the_nearest_centroid():
    X, _ = blobs(seed=1)
    km = KMeansConcepts(n_concepts=10, seed=0).fit(ArrayStore(X))
    brute = np.linalg.norm(X[:, None, :] - km.cluster_centers_[None], axis=2).argmin(1)
    pred = km.predict(X)
    assert pred.dtype == np.int64
    np.testing.assert_array_equal(pred, brute)


def test_predict_proba_sums_to_one_and_peaks_at_the_nearest_centroid():
    X, _ = blobs(seed=2)
    km = KMeansConcepts(n_concepts=6, seed=0).fit(ArrayStore(X))
    p = km.predict_proba(X)
    assert p.shape == (len(X), 6)
    np.testing.assert_allclose(p.sum(1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(p.argmax(1), km.predict(X))
    assert km.temperature_ > 0


def test_save_and_load_roundtrip_predicts_identically(tmp_path):
    X, _ = blobs(seed=3)
    km = KMeansConcepts(n_concepts=6, seed=0).fit(ArrayStore(X))
    km.save(tmp_path / "kmeans")
    loaded = KMeansConcepts.load(tmp_path / "kmeans")
    np.testing.assert_array_equal(loaded.predict(X), km.predict(X))
    np.testing.assert_array_equal(loaded.predict_proba(X), km.predict_proba(X))
    assert loaded.fit_info_["n_fit_rows"] == len(X)
    assert sorted(p.suffix for p in (tmp_path / "kmeans").iterdir()) == [".json", ".safetensors"]


def test_fit_on_a_subset_of_rows_reads_only_those_rows():
    X, _ = blobs(seed=4)
    store = CountingStore(X)
    rows = np.arange(0, len(X), 2)
    km = KMeansConcepts(n_concepts=6, seed=0).fit(store, rows=rows)
    assert km.fit_info_["n_fit_rows"] == len(rows)
    assert store.rows_read == len(rows)


def test_minibatch_kmeans_streams_its_fit_rows_from_iter_batches():
    X, y = blobs(n_per=200, seed=5)
    store = CountingStore(X, chunk_rows=256)
    km = KMeansConcepts(n_concepts=6, minibatch=True, batch_size=128, n_epochs=3, seed=0).fit(store)
    assert km.name == "minibatch-kmeans"
    assert store.batches_served >= 3 * len(X) // 128
    assert adjusted_mutual_info_score(y, km.predict(X)) > 0.95


def test_minibatch_kmeans_roundtrips_under_its_own_name(tmp_path):
    X, _ = blobs(seed=6)
    km = KMeansConcepts(n_concepts=6, minibatch=True, batch_size=128, seed=0).fit(ArrayStore(X))
    km.save(tmp_path / "mb")
    loaded = KMeansConcepts.load(tmp_path / "mb")
    assert loaded.minibatch and loaded.name == "minibatch-kmeans"
    np.testing.assert_array_equal(loaded.predict(X), km.predict(X))


def test_fitting_more_concepts_than_rows_is_refused_with_a_sentence():
    X, _ = blobs(n_per=2, k=3)
    with pytest.raises(RunError, match="cannot find 10 concepts in 6 rows"):
        KMeansConcepts(n_concepts=10).fit(ArrayStore(X))
