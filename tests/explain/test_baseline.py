"""Integrated Gradients' neutral baseline on the real apptest run (fine-tuned MiniLM on MR): the
classifier run on from it predicts both classes about equally, where the train mean state it
replaced leans to one class; attributions from it stay complete."""

from __future__ import annotations

import numpy as np
import pytest

from vqlc_core.explain.baseline import class_means


@pytest.fixture(scope="module")
def test_texts(apptest_run):
    texts = apptest_run.texts
    return texts[texts["split"] == "test"]["text"].tolist()[:24]


def _baseline_proba(explainer, texts) -> np.ndarray:
    enc, _ = explainer.backbone.tokenize(texts)
    enc = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    states, _ = explainer.forward(enc)
    return explainer.proba_from_states(enc, explainer.baseline_states(enc, states))


def test_the_neutral_baseline_predicts_close_to_uniform_on_the_apptest_run(apptest_run, test_texts):
    explainer = apptest_run.explainer({})
    assert explainer.ig_baseline_name == "neutral"
    proba = _baseline_proba(explainer, test_texts)  # (n, 2)
    assert np.abs(proba.mean(0) - 0.5).max() < 0.05
    assert np.median(np.abs(proba[:, 1] - 0.5)) < 0.1  # sentence by sentence too, not only on average
    facts = apptest_run.classifier_metrics["ig_baseline"]
    assert np.abs(np.asarray(facts["calibration_probabilities"]) - 0.5).max() < 0.05


def test_the_baseline_lies_on_the_line_through_the_class_means(apptest_run):
    from vqlc_core.base.runio import read_npy

    base = read_npy(apptest_run.dir / "classifier" / "ig_baseline.npy").astype(np.float64)
    means = class_means(apptest_run.store).astype(np.float64)  # (2, d)
    centre, axis = means.mean(0), means[1] - means[0]
    t = (base - centre) @ axis / (axis @ axis)
    assert np.allclose(base, centre + t * axis, atol=1e-3 * np.linalg.norm(centre))


def test_attributions_from_the_neutral_baseline_are_complete(apptest_run, test_texts):
    explainer = apptest_run.explainer({})
    enc, words = explainer.backbone.tokenize(test_texts)
    enc = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    states, proba = explainer.forward(enc)
    attr = explainer.attributions(enc, states, proba.argmax(1))
    assert attr.completeness_error.mean() < 0.05
    assert attr.baseline_proba.shape == (len(test_texts), 2)
