import numpy as np
import pytest

from vqlc_core.methods.kmeans import KMeansConcepts
from vqlc_core.methods.lacoat import LACOAT
from vqlc_core.pipeline.config import MethodsConfig
from vqlc_core.methods.base import ConceptMethod, PeakMemory, softmax_neg_distances
from vqlc_core.methods.registry import DEFAULT_METHODS, OPTIONS, REGISTRY, method_class, method_names, method_options
from vqlc_core.base.runio import RunError
from vqlc_core.data.store import ArrayStore


class FirstSignMethod(ConceptMethod):
    """A two-concept method written as a new method would be: concept 1 when the chosen
    coordinate is above its fitted median."""

    name = "first-sign"

    def __init__(self, n_concepts: int = 2, column: int = 0, seed: int = 0):
        self.n_concepts, self.column, self.seed = n_concepts, column, seed

    def _fit(self, store, rows):
        self.threshold_ = float(np.median(store.read(rows)[:, self.column]))
        return {"threshold": self.threshold_}

    def predict(self, X):
        return (np.asarray(X)[:, self.column] > getattr(self, "threshold_", 0.0)).astype(np.int64)

    def predict_proba(self, X):
        return np.eye(2, dtype=np.float32)[self.predict(X)]

    def _tensors(self):
        return {"threshold": np.asarray([self.threshold_], dtype=np.float32)}

    def _restore(self, tensors, state):
        self.threshold_ = float(tensors["threshold"][0])


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
    out = FirstSignMethod().predict_store(ArrayStore(X, chunk_rows=7), batch_size=5)  # unfitted: threshold 0
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, (X[:, 0] > 0).astype(np.int64))


def test_a_new_method_fits_saves_and_loads_through_the_base_class_alone(tmp_path):
    X = np.random.default_rng(3).normal(size=(200, 4)).astype(np.float32)
    m = FirstSignMethod(column=2).fit(ArrayStore(X))
    assert m.get_params() == {"n_concepts": 2, "column": 2, "seed": 0}
    assert m.fit_info_["threshold"] == m.threshold_ and m.fit_info_["n_fit_rows"] == 200
    m.save(tmp_path / "m")
    back = FirstSignMethod.load(tmp_path / "m")
    assert back.column == 2 and back.threshold_ == pytest.approx(m.threshold_)
    np.testing.assert_array_equal(back.predict(X), m.predict(X))
    assert back.fit_info_["n_fit_rows"] == 200
    assert back.concept_extra() == {}


def test_the_registry_names_each_method_class_once():
    assert method_names() == tuple(REGISTRY) == ("vqlc", "kmeans", "lacoat", "sae")
    assert DEFAULT_METHODS == ("vqlc", "kmeans", "lacoat") == MethodsConfig().methods  # the SAE is an option
    for name in method_names():
        cls = method_class(name)
        assert issubclass(cls, ConceptMethod) and cls(n_concepts=3).name == name
        assert method_options(name) is cls.Options is OPTIONS[REGISTRY[name]]  # the light table is the classes' own
    with pytest.raises(RunError, match="Unknown concept method 'pca'; choose one of vqlc, kmeans, lacoat, sae."):
        method_class("pca")


def test_softmax_of_negative_distances_is_a_distribution_peaked_at_the_nearest_code():
    C = np.asarray([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    X = np.asarray([[1.0, 0.0], [9.0, 1.0], [0.5, 8.0]])
    p = softmax_neg_distances(X, C)
    assert np.allclose(p.sum(1), 1.0) and p.argmax(1).tolist() == [0, 1, 2]
    assert (softmax_neg_distances(X, C, temperature=1e6).max(1) < p.max(1)).all()  # hotter is flatter


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
