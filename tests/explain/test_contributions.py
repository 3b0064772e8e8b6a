"""The concept attribution on the real MiniLM with the explainer fixtures of
tests/explain/test_explainer.py: every present concept's score is its single ablation computed by
hand (the hook of `ablated_proba`), the ranking, the deletion curve, the interaction share, and
attribution patching against a hand computation."""

import json

import numpy as np
import pytest
import torch

from tests.explain.test_explainer import LAYER, SENTENCE, explainer, setup  # noqa: F401 (module fixtures)
from vqlc_core.explain.ablation import ablated_proba, from_layer, orthonormal_basis, project_out
from vqlc_core.explain.contributions import aopc, interaction_share, patching_scores, present_concepts
from vqlc_core.explain.explainer import Explainer
from vqlc_core.explain.records import ConceptContribution, MethodExplanation


def test_every_present_concept_scores_its_single_ablation_by_hand(explainer, setup):
    e = explainer.explain(SENTENCE)
    me = e.methods["kmeans"]
    _, cs = setup["methods"]["kmeans"]
    present = set(me.word_concepts) | {me.prediction_concepts[0].concept}
    assert {r.concept for r in me.contributions} == present  # each concept once
    for r in me.contributions:
        by_hand = ablated_proba(setup["clf"], SENTENCE, LAYER, cs.directions([r.concept]))[0][e.predicted_index]
        assert abs(r.score - (e.confidence - by_hand)) < 1e-4
        assert abs(r.ablated_proba - by_hand) < 1e-4
        assert r.words == [i for i, k in enumerate(me.word_concepts) if k == r.concept]
    top = me.prediction_concepts[0].concept
    kind = {r.concept: r.kind for r in me.contributions}[top]
    assert kind == ("word+prediction" if top in me.word_concepts else "prediction")


def test_contributions_are_ranked_and_the_deletion_curve_removes_them_in_that_order(explainer, setup):
    e = explainer.explain(SENTENCE)
    me = e.methods["kmeans"]
    _, cs = setup["methods"]["kmeans"]
    scores = [r.score for r in me.contributions]
    assert scores == sorted(scores, reverse=True) and len(me.deletion) == len(scores)
    assert me.deletion[0] == pytest.approx(me.contributions[0].ablated_proba, abs=1e-6)
    ids = [r.concept for r in me.contributions]
    for n in (2, len(ids)):
        by_hand = ablated_proba(setup["clf"], SENTENCE, LAYER, cs.directions(ids[:n]))[0][e.predicted_index]
        assert me.deletion[n - 1] == pytest.approx(by_hand, abs=1e-4)
    assert me.joint == pytest.approx(e.confidence - me.deletion[-1], abs=1e-6)
    assert me.interaction == pytest.approx(interaction_share(me.joint, scores))
    toggled = explainer.ablate(SENTENCE, "kmeans", [ids[0]])  # what the page's toggle shows
    assert -toggled.delta == pytest.approx(scores[0], abs=1e-5)


def test_the_interaction_share_is_zero_when_effects_add_up_and_one_when_they_cancel():
    assert interaction_share(0.3, [0.1, 0.2]) == pytest.approx(0.0)
    assert interaction_share(0.0, [0.2, 0.1]) == pytest.approx(1.0)
    assert interaction_share(0.5, [0.1, 0.1]) == pytest.approx(0.3 / 0.7)
    assert interaction_share(0.0, [0.0]) == 0.0
    assert aopc(0.9, [0.5, 0.3]) == pytest.approx(0.5)


def test_present_concepts_keep_word_order_and_mark_the_prediction_concept():
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
    assert one.methods["kmeans"].contributions == full.methods["kmeans"].contributions
    assert one.methods["kmeans"].deletion == full.methods["kmeans"].deletion
    others = [m for m in full.methods if m != "kmeans"]
    assert others and all(one.methods[m].contributions is None and full.methods[m].contributions for m in others)
    assert one.attributions == full.attributions and one.confidence == full.confidence
    with pytest.raises(Exception, match="Unknown concept method 'nope'"):
        explainer.explain(SENTENCE, attribute=["nope"])
