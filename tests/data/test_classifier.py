"""The classifier on real MR sentences, and LACOAT's ConceptMapper on real MiniLM states."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import CACHE


@pytest.mark.slow
def test_the_minilm_classifier_scores_at_least_070_on_mr_test(minilm):
    from vqlc_core.data.classifier import Classifier, pooled_features
    from vqlc_core.data.datasets import load_dataset, split_dataset

    ds = load_dataset("mr", cache_dir=CACHE)
    split = split_dataset(ds.labels, seed=0)
    feats = pooled_features(minilm, ds.texts, batch_size=64, progress=False)
    train, test = split == "train", split == "test"
    clf = Classifier.train(minilm, feats[train], ds.labels[train], ds.class_names, seed=0)
    acc = (clf.head_proba(feats[test]).argmax(1) == ds.labels[test]).mean()
    print(f"MR test accuracy: {acc:.3f}")
    assert acc >= 0.70
    # the folded head gives the same probabilities as running the text through the model
    some = [ds.texts[i] for i in np.flatnonzero(test)[:4]]
    np.testing.assert_allclose(clf.predict_proba(some), clf.head_proba(feats[np.flatnonzero(test)[:4]]), atol=1e-4)


def test_the_concept_mapper_beats_chance_on_real_states(minilm, mr_texts, tmp_path):
    from vqlc_core.data.settings import ExtractConfig
    from vqlc_core.data.extract import build_store
    from vqlc_core.methods.lacoat import LACOAT

    store = build_store(minilm, mr_texts, ExtractConfig(layer=5), tmp_path / "s", progress=False)
    k = 20
    lacoat = LACOAT(n_concepts=k, seed=0).fit(store, rows=np.arange(0, store.n_rows, 2))
    acc = lacoat.mapper_.accuracy_
    print(f"ConceptMapper accuracy: {acc}")
    assert acc["top5"] > 5 / k and acc["top1"] <= acc["top2"] <= acc["top5"]
