import numpy as np
import pytest

from vqlc_core.kmeans import KMeansConcepts
from vqlc_core.lacoat import LACOAT
from vqlc_core.methods import ConceptMethod, PeakMemory
from vqlc_core.runio import RunError
from vqlc_core.store import ArrayStore


class FirstSignMethod(ConceptMethod):
    """A two-concept method: concept 1 when the first coordinate is positive."""

    name = "first-sign"
    n_concepts = 2

    def predict(self, X):
        return (np.asarray(X)[:, 0] > 0).astype(np.int64)


def test_peak_memory_sees_an_allocation_inside_the_block():
    import mmap

    # Fresh anonymous pages: a numpy array could reuse heap memory that is already resident in
    # a long-lived process (pytest), and then RSS would not grow at all.
    with PeakMemory() as mem:
        block = mmap.mmap(-1, 100 * 2**20)
        for i in range(0, len(block), 4096):
            block[i] = 1  # touch every page
        block.close()
    assert 80 <= mem.peak_mb <= mem.upper_mb


def test_predict_store_streams_every_row_in_row_order():
    X = np.random.default_rng(0).normal(size=(103, 4)).astype(np.float32)
    out = FirstSignMethod().predict_store(ArrayStore(X, chunk_rows=7), batch_size=5)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, (X[:, 0] > 0).astype(np.int64))


def test_the_base_method_gives_no_probabilities_and_no_extra_arrays():
    with pytest.raises(NotImplementedError, match="first-sign method gives no concept probabilities"):
        FirstSignMethod().predict_proba(np.zeros((1, 4)))
    assert FirstSignMethod().concept_extra() == {}


@pytest.mark.parametrize("method", [KMeansConcepts(n_concepts=3), LACOAT(n_concepts=3)])
def test_an_unfitted_method_says_to_call_fit_first(method):
    with pytest.raises(RunError, match=f"^This {method.name} method is not fitted yet; call fit\\(store\\) first.$"):
        method.predict(np.zeros((2, 4), dtype=np.float32))


def test_fit_records_time_memory_and_row_count():
    X = np.random.default_rng(1).normal(size=(300, 8)).astype(np.float32)
    info = KMeansConcepts(n_concepts=4, seed=0).fit(ArrayStore(X)).fit_info_
    assert info["n_fit_rows"] == 300
    assert info["fit_time_s"] > 0 and info["peak_rss_upper_mb"] >= info["peak_rss_mb"] >= 0


def test_loading_another_methods_folder_is_refused(tmp_path):
    X = np.random.default_rng(2).normal(size=(60, 8)).astype(np.float32)
    KMeansConcepts(n_concepts=4, seed=0).fit(ArrayStore(X)).save(tmp_path / "m")
    with pytest.raises(RunError, match="is 'kmeans', expected 'lacoat'"):
        LACOAT.load(tmp_path / "m")
    with pytest.raises(RunError, match="No fitted lacoat method"):
        LACOAT.load(tmp_path / "missing")
