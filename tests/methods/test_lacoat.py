from functools import partial

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import adjusted_mutual_info_score

from tests import conftest
from vqlc_core.methods.lacoat import LACOAT, ConceptMapper, MemoryBudgetError, estimate_memory, max_rows_within
from vqlc_core.base.runio import RunError
from vqlc_core.data.store import ArrayStore, fit_set_rows


blobs = partial(conftest.blobs, k=8, dim=24)  # Gaussian blobs: (k*n_per, dim) float32 vectors, blob ids


def test_estimate_memory_of_200k_rows_is_about_320_gb():
    assert estimate_memory(200_000, 384) == pytest.approx(320e9, rel=0.01)


@pytest.mark.parametrize("budget", [0, 1e3, 1e6, 12e9, 64e9, 123_456_789])
@pytest.mark.parametrize("dim", [1, 16, 384, 4096])
def test_max_rows_within_inverts_estimate_memory(budget, dim):
    n = max_rows_within(budget, dim)
    assert estimate_memory(n, dim) <= budget or n == 0
    assert estimate_memory(n + 1, dim) > budget


def test_lacoat_refuses_with_one_sentence_naming_the_rows_that_fit():
    X, _ = blobs()
    fits = max_rows_within(1e6, X.shape[1])
    with pytest.raises(MemoryBudgetError) as e:
        LACOAT(n_concepts=8, memory_budget_bytes=1e6).fit(ArrayStore(X))
    msg = str(e.value)
    assert msg.startswith("LACOAT needs about 5.3 MB for 800 rows") and msg.endswith(".")
    assert f"at most {fits:,} rows fit" in msg and "budget is 1.0 MB" in msg
    assert "\n" not in msg and isinstance(e.value, RunError)


def test_lacoat_clusters_blobs_and_its_mapper_beats_chance():
    X, y = blobs()
    lac = LACOAT(n_concepts=8, seed=0).fit(ArrayStore(X))
    assert adjusted_mutual_info_score(y, lac.labels_) > 0.99
    acc = lac.mapper_.accuracy_
    assert set(acc) == {"top1", "top2", "top5"}
    assert acc["top1"] > 0.9 and acc["top1"] <= acc["top2"] <= acc["top5"]
    assert lac.fit_info_["mapper_accuracy"] == acc and lac.fit_info_["n_fit_rows"] == len(X)


def test_concept_mapper_top5_is_well_above_chance_on_overlapping_clusters():
    X, y = blobs(n_per=60, k=20, dim=16, spread=8.0, seed=1)
    mapper = ConceptMapper(n_concepts=20, seed=0).fit(X, y)
    assert mapper.accuracy_["top5"] > 2 * 5 / 20  # chance is 5/20
    assert mapper.accuracy_["top1"] > 4 * 1 / 20
    p = mapper.predict_proba(X)
    assert p.shape == (len(X), 20)
    np.testing.assert_allclose(p.sum(1), 1.0, rtol=1e-5)


def test_concept_mapper_predicts_the_argmax_of_its_probabilities_also_on_near_ties():
    X, y = blobs(n_per=60, k=20, dim=16, spread=8.0, seed=1)
    mapper = ConceptMapper(n_concepts=24, seed=0).fit(X, y)  # clusters 20-23 never seen: probability 0
    rng = np.random.default_rng(0)
    a, b = X[rng.integers(len(X), size=400)], X[rng.integers(len(X), size=400)]
    mixes = np.concatenate([a + (b - a) * t for t in np.linspace(0, 1, 101)]).astype(np.float32)  # across boundaries
    np.testing.assert_array_equal(mapper.predict(mixes), mapper.predict_proba(mixes).argmax(1))
    # clusters 0 and 1 made to score alike: on an exact tie the lower id wins, as under argmax
    mapper.coef_ = np.concatenate([mapper.coef_[:1], mapper.coef_[:1], mapper.coef_[2:]])
    mapper.intercept_ = np.concatenate([mapper.intercept_[:1], mapper.intercept_[:1], mapper.intercept_[2:]])
    np.testing.assert_array_equal(mapper.predict(X), mapper.predict_proba(X).argmax(1))
    assert 0 in mapper.predict(X) and 1 not in mapper.predict(X)


def test_concept_mapper_caps_its_training_rows():
    X, y = blobs(n_per=50, seed=2)
    mapper = ConceptMapper(n_concepts=8, max_rows=100, seed=0).fit(X, y)
    assert mapper.train_info_["n_train"] + mapper.train_info_["n_test"] == 100


def test_predict_store_keeps_fit_set_labels_for_fit_rows():
    X, _ = blobs(n_per=60, spread=1.5, seed=3)
    store = ArrayStore(X, chunk_rows=100)
    rows = np.arange(0, len(X), 3)
    lac = LACOAT(n_concepts=8, seed=0).fit(store, rows=rows)
    out = lac.predict_store(store, batch_size=64)
    assert out.shape == (len(X),) and out.dtype == np.int64
    np.testing.assert_array_equal(out[rows], lac.labels_)
    others = np.setdiff1d(np.arange(len(X)), rows)
    np.testing.assert_array_equal(out[others], lac.predict(X[others]))
    np.testing.assert_array_equal(lac.concept_extra()["fit_rows"], rows)


def test_save_and_load_roundtrip_predicts_identically(tmp_path):
    X, _ = blobs(n_per=40, spread=1.5, seed=4)
    store = ArrayStore(X)
    rows = np.arange(0, len(X), 2)
    lac = LACOAT(n_concepts=8, seed=0).fit(store, rows=rows)
    lac.save(tmp_path / "lacoat")
    loaded = LACOAT.load(tmp_path / "lacoat")
    np.testing.assert_array_equal(loaded.predict_store(store), lac.predict_store(store))
    np.testing.assert_array_equal(loaded.predict_proba(X), lac.predict_proba(X))
    assert loaded.mapper_.accuracy_ == lac.mapper_.accuracy_
    assert {p.suffix for p in (tmp_path / "lacoat").iterdir()} == {".json", ".safetensors"}


def test_predict_store_refuses_a_smaller_store_than_it_was_fitted_on():
    X, _ = blobs(n_per=20, seed=5)
    lac = LACOAT(n_concepts=8, seed=0).fit(ArrayStore(X))
    with pytest.raises(RunError, match="refit it on this store"):
        lac.predict_store(ArrayStore(X[:50]))


def test_fit_set_keeps_every_prediction_row_and_at_most_20_per_word_type():
    rng = np.random.default_rng(0)
    words = ["the"] * 50 + ["film"] * 25 + ["dull"] * 7 + ["superb"]
    words = [words[i] for i in rng.permutation(len(words))]
    rows = []
    for t in range(12):  # 12 texts; words spread over them, then one prediction row each
        for j, w in enumerate(words[t::12]):
            rows.append({"text_id": t, "split": "train", "word_index": j, "word": w, "kind": "word", "label": t % 2})
        rows.append({"text_id": t, "split": "train", "word_index": -1, "word": "[CLS]", "kind": "pred", "label": t % 2})
    tokens = pd.DataFrame(rows)
    keep = fit_set_rows(tokens, max_per_word=20, seed=0)
    kept = tokens.iloc[keep]
    assert (kept["kind"] == "pred").sum() == 12
    counts = kept.loc[kept["kind"] == "word", "word"].value_counts()
    assert counts.to_dict() == {"the": 20, "film": 20, "dull": 7, "superb": 1}
    assert np.all(np.diff(keep) > 0)
