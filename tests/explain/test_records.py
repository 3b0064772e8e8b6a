"""The explanation and ablation records: a notebook reads them by attribute, and `to_dict()` is
the plain JSON the pages, the server's batches and the build's stored example read."""

from __future__ import annotations

import json

import pytest

from vqlc_core.explain.records import (Ablation, Explanation, MethodExplanation, PredictionConcept, SalientWord, Word,
                                       WordConcept)

# One explanation as the pages read it (and as the build stores its example).
PAGE_JSON = {
    "text": "a dull film", "layer": 5, "prediction": "negative", "predicted_index": 0, "confidence": 0.9,
    "probabilities": {"negative": 0.9, "positive": 0.1},
    "words": [{"word": "a", "start": 0, "end": 1}, {"word": "dull", "start": 2, "end": 6},
              {"word": "film", "start": 7, "end": 11}],
    "attributions": [0.1, 0.8, 0.1],
    "salient": [{"index": 1, "word": "dull", "attribution": 0.8,
                 "concepts": {"vqlc": {"concept": 3, "label": "c3: dull, bland"}}}],
    "methods": {"vqlc": {"word_concepts": [0, 3, 7],
                         "prediction_concepts": [{"concept": 12, "probability": 0.7, "label": "c12: mostly negative"}]}},
    "truncated": False, "info": {"ig_steps": 8, "completeness_error": 0.001},
}
SENTENCE = "the plot is thin but the actors seem to enjoy themselves"


def hand_made() -> Explanation:
    return Explanation(
        text="a dull film", layer=5, prediction="negative", predicted_index=0, confidence=0.9,
        probabilities={"negative": 0.9, "positive": 0.1},
        words=[Word("a", 0, 1), Word("dull", 2, 6), Word("film", 7, 11)], attributions=[0.1, 0.8, 0.1],
        salient=[SalientWord(1, "dull", 0.8, {"vqlc": WordConcept(3, "c3: dull, bland")})],
        methods={"vqlc": MethodExplanation([0, 3, 7], [PredictionConcept(12, 0.7, "c12: mostly negative")])},
        info={"ig_steps": 8, "completeness_error": 0.001})


def test_an_explanations_dict_is_the_json_the_pages_read():
    d = hand_made().to_dict()
    assert d == PAGE_JSON and json.loads(json.dumps(d)) == d
    assert list(d["methods"]["vqlc"]["prediction_concepts"][0]) == ["concept", "probability", "label"]  # table columns


def test_an_explanation_reads_by_attribute():
    ex = hand_made()
    assert ex.methods["vqlc"].prediction_concepts[0].concept == 12
    assert ex.methods["vqlc"].word_concepts[ex.salient[0].index] == ex.salient[0].concepts["vqlc"].concept == 3
    assert ex.words[1].word == ex.text[ex.words[1].start : ex.words[1].end] == "dull"
    assert ex.methods["vqlc"].to_dict() == PAGE_JSON["methods"]["vqlc"]


def test_an_ablations_dict_is_the_json_the_page_reads():
    after = Ablation(proba={"negative": 0.6, "positive": 0.4}, prediction="negative", confidence=0.6, delta=-0.3)
    assert after.to_dict() == {"proba": {"negative": 0.6, "positive": 0.4}, "prediction": "negative",
                               "confidence": 0.6, "delta": -0.3}
    assert json.loads(json.dumps(after.to_dict())) == after.to_dict()


@pytest.fixture(scope="module")
def explained(apptest_run):
    explainer = apptest_run.explainer(methods=("vqlc",))
    return explainer, explainer.explain(SENTENCE)


@pytest.mark.slow
def test_a_real_explanation_reads_by_attribute_and_its_dict_says_the_same(apptest_run, explained):
    _, ex = explained
    top = ex.methods["vqlc"].prediction_concepts[0]
    assert top.label == apptest_run.concepts("vqlc").label(top.concept) and 0 < top.probability <= 1
    s = ex.salient[0]
    assert s.word == ex.words[s.index].word and s.concepts["vqlc"].concept == ex.methods["vqlc"].word_concepts[s.index]
    d = ex.to_dict()
    assert d["methods"]["vqlc"]["prediction_concepts"][0] == {"concept": top.concept, "probability": top.probability,
                                                               "label": top.label}
    assert d["salient"][0]["concepts"]["vqlc"] == {"concept": s.concepts["vqlc"].concept, "label": s.concepts["vqlc"].label}
    assert json.loads(json.dumps(d)) == d


@pytest.mark.slow
def test_a_real_ablation_is_a_record_with_the_change_of_the_predicted_class(explained):
    explainer, ex = explained
    after = explainer.ablate(ex.text, "vqlc", [ex.methods["vqlc"].prediction_concepts[0].concept])
    assert isinstance(after, Ablation) and set(after.proba) == set(ex.probabilities)
    assert after.delta == pytest.approx(after.proba[ex.prediction] - ex.confidence, abs=1e-6)
    assert after.confidence == max(after.proba.values()) and after.proba[after.prediction] == after.confidence
    assert json.loads(json.dumps(after.to_dict())) == after.to_dict()
