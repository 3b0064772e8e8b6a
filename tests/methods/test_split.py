"""Prediction concepts of their own (`methods/split.py`) and the calibrated number shown beside
them (`methods/calibration.py`), on stores made from arrays and on the apptest run."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.conftest import blobs
from vqlc_core.data.store import ArrayStore
from vqlc_core.methods.calibration import calibrate, ece, reliability, tempered
from vqlc_core.methods.kmeans import KMeansConcepts
from vqlc_core.methods.split import SplitConcepts, load_method, prediction_concept_count


def store_of(x: np.ndarray, kinds: np.ndarray, splits: np.ndarray) -> ArrayStore:
    tokens = pd.DataFrame({"text_id": np.arange(len(x)), "word_index": np.where(kinds == "pred", -1, 0),
                           "word": np.where(kinds == "pred", "[PRED]", "w"), "kind": kinds, "label": 0,
                           "split": splits})
    return ArrayStore(x.astype(np.float32), tokens, chunk_rows=50)


@pytest.fixture
def store():
    words, _ = blobs(n_per=60, k=6, dim=16, seed=0)
    preds, _ = blobs(n_per=40, k=4, dim=16, seed=1)
    preds = preds + 20.0  # prediction rows far from every word row
    x = np.vstack([words, preds])
    kinds = np.array(["word"] * len(words) + ["pred"] * len(preds))
    splits = np.random.default_rng(0).choice(["train", "dev", "test"], size=len(x), p=[0.6, 0.2, 0.2])
    return store_of(x, kinds, splits)


def fitted(store, kp=4):
    train = np.flatnonzero(store.tokens["split"].to_numpy() == "train")
    return SplitConcepts(KMeansConcepts(n_concepts=6, seed=0), KMeansConcepts(n_concepts=kp, seed=0)).fit(store, train)


def test_prediction_rows_get_concepts_of_their_own_and_word_rows_the_word_concepts(store):
    m = fitted(store)
    a = m.predict_store(store)
    pred = store.tokens["kind"].to_numpy() == "pred"
    assert m.n_concepts == 10
    assert (a[~pred] < 6).all() and (a[pred] >= 6).all() and len(np.unique(a[pred])) == 4
    x = store.read(np.flatnonzero(pred))
    assert np.array_equal(m.predict_predictions(x), a[pred])
    p = m.predict_proba_predictions(x)
    assert p.shape == (len(x), 10) and np.allclose(p[:, :6], 0) and np.allclose(p.sum(1), 1, atol=1e-5)
    # the fit: words on word rows only, predictions on prediction rows only
    train = store.tokens["split"].to_numpy() == "train"
    assert m.words.fit_info_["n_fit_rows"] == int((train & ~pred).sum())
    assert m.predictions.fit_info_["n_fit_rows"] == int((train & pred).sum())


def test_a_saved_split_loads_with_the_same_assignments(store, tmp_path):
    m = fitted(store)
    m.save(tmp_path / "model")
    back = load_method("kmeans", tmp_path / "model")
    assert isinstance(back, SplitConcepts)
    assert np.array_equal(back.predict_store(store), m.predict_store(store))


def test_a_small_corpus_gets_fewer_prediction_concepts_and_zero_keeps_one_set():
    assert prediction_concept_count(40, 10_000) == 40
    assert prediction_concept_count(40, 100) == 20  # one per 5 prediction rows
    assert prediction_concept_count(40, 3) == 2
    assert prediction_concept_count(0, 10_000) == 0


def test_tempering_keeps_a_distribution_and_sharpens_below_one():
    p = np.array([[0.5, 0.3, 0.2, 0.0]])
    for t in (0.2, 1.0, 3.0):
        q = tempered(p, t)
        assert np.all((q >= 0) & (q <= 1)) and np.isclose(q.sum(), 1) and q[0, 3] == 0
    assert tempered(p, 0.2)[0, 0] > 0.5 > tempered(p, 3.0)[0, 0]


def test_reliability_bins_and_ece_equal_a_hand_computation():
    table = reliability(np.array([0.1, 0.15, 0.9]), np.array([0.0, 0.2, 1.0]), bins=(0.0, 0.5, 1.0))
    assert [r["n"] for r in table] == [2, 1]
    assert np.isclose(table[0]["mean_p"], 0.125) and np.isclose(table[0]["observed"], 0.1)
    assert np.isclose(ece(table), (2 * 0.025 + 1 * 0.1) / 3)


def test_the_calibration_is_computed_on_dev_rows_only(store):
    m = fitted(store)
    a = m.predict_store(store)
    got = calibrate(store, m, a, m.n_concepts)
    tok = store.tokens
    assert got["n_dev"] == int(((tok["kind"] == "pred") & (tok["split"] == "dev")).sum())
    assert 0 < got["temperature"] and 0 <= got["ece_calibrated"] <= 1
    for r in got["reliability_calibrated"]:
        assert r["n"] == 0 or 0 <= r["mean_p"] <= 1
    # moving every test row far away changes nothing of it
    x = store.read(np.arange(store.n_rows)).copy()
    x[(tok["split"] == "test").to_numpy()] += 50.0
    moved = store_of(x, tok["kind"].to_numpy(), tok["split"].to_numpy())
    again = calibrate(moved, m, a, m.n_concepts)
    assert again["temperature"] == pytest.approx(got["temperature"])
    assert again["reliability_calibrated"] == got["reliability_calibrated"]


@pytest.mark.slow
def test_the_number_shown_on_the_apptest_run_is_a_probability_calibrated_on_dev(apptest_run):
    ex = apptest_run.explainer().explain("a dull , lifeless film .")
    for m, body in ex.methods.items():
        ps = [c.probability for c in body.prediction_concepts]
        assert all(0.0 <= p <= 1.0 for p in ps) and ps == sorted(ps, reverse=True)
        cal = apptest_run.concepts(m).info["calibration"]
        assert cal["n_dev"] == int(((apptest_run.store.tokens["kind"] == "pred")
                                    & (apptest_run.store.tokens["split"] == "dev")).sum())
        assert cal["ece_calibrated"] <= cal["ece_raw"] + 1e-9


def test_every_method_builds_its_prediction_set_with_the_prediction_concepts_asked(tmp_path):
    from vqlc_core.pipeline.config import MethodsConfig
    from vqlc_core.methods.split import build_method

    mcfg = MethodsConfig.of(n_concepts=30, prediction_concepts=8, sae_latents=64, sae_k=16)
    for name in ("vqlc", "kmeans", "lacoat", "sae"):
        m = build_method(name, mcfg, 0, tmp_path / name)
        assert isinstance(m, SplitConcepts) and m.predictions.n_concepts == 8, name
        assert m.words.n_concepts == (64 if name == "sae" else 30)
    assert build_method("sae", mcfg, 0, tmp_path).predictions.k == 7  # TopK stays below the latents
    assert not isinstance(build_method("kmeans", MethodsConfig.of(prediction_concepts=0), 0, tmp_path), SplitConcepts)


def test_a_split_gives_what_else_the_word_estimator_has(store):
    m = fitted(store)
    assert m.seed == m.words.seed == 0 and m.minibatch is False  # read from the word estimator
    with pytest.raises(AttributeError):
        m.no_such_thing
