"""The waterfall and the text plot of one method's explanation: the bars add up to the prediction,
the largest concepts get a bar of their own, Shapley errors are written on their bars, and the
coloured sentence escapes what the user typed."""

import dataclasses

import numpy as np
import pytest

from vqlc_core.explain.records import ConceptContribution, MethodExplanation, PredictionConcept
from vqlc_core.views.waterfall import (OPPOSES, SUPPORTS, bars_total, score_color, score_sentence_html,
                                       waterfall_bars, waterfall_figure)


def fig_names(m, p) -> list[str]:
    return list(waterfall_figure(m, p, "positive").data[0].y)


def synthetic(seed: int, n: int | None = None, shapley: bool = False) -> tuple[dict, float]:
    """A method's explanation as the pages hold it: p(x), a base, n word concepts with scores."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 15)) if n is None else n
    confidence = float(rng.uniform(0.5, 1.0))
    base = float(rng.uniform(0.0, 1.0))
    scores = rng.normal(scale=0.2, size=n)
    contribs = [{"concept": int(k), "label": f"c{k}: w{k}", "score": float(s), "ablated_proba": confidence - float(s),
                 "ablated_prediction": "positive", "words": [i], "kind": "word",
                 "stderr": float(rng.uniform(0, 0.01)) if shapley else 0.0}
                for i, (k, s) in enumerate(zip(rng.choice(500, size=n, replace=False), scores))]
    contribs.sort(key=lambda c: -c["score"])
    m = {"word_concepts": [c["concept"] for c in contribs], "prediction_concepts": [], "contributions": contribs,
         "deletion": [], "joint": confidence - base, "interaction": 0.3, "base": base, "intervention": "local",
         "shapley": shapley}
    return m, confidence


@pytest.mark.parametrize("seed", range(50))
def test_the_waterfalls_bars_add_up_to_the_prediction(seed):
    m, p = synthetic(seed)
    fig = waterfall_figure(m, p, "positive", top=5)
    assert bars_total(fig) == pytest.approx(p, abs=1e-6)
    assert fig.data[0].measure[0] == "absolute" and fig.data[0].measure[-1] == "total"
    assert fig.data[0].x[0] == pytest.approx(m["base"])


def test_a_record_adds_up_as_its_dict_does():
    m, p = synthetic(3, n=6)
    fields = {f.name for f in dataclasses.fields(MethodExplanation)}
    contribs = [ConceptContribution(**{k: v for k, v in c.items()
                                       if k in {f.name for f in dataclasses.fields(ConceptContribution)}})
                for c in m["contributions"]]
    record = MethodExplanation(**{k: v for k, v in {**m, "contributions": contribs,
                                                    "prediction_concepts": [PredictionConcept(402, 0.9, "c402")]
                                                    }.items() if k in fields})
    assert bars_total(waterfall_figure(record, p, "positive")) == pytest.approx(p, abs=1e-6)


def test_a_record_without_a_base_starts_where_its_joint_drop_says():
    m, p = synthetic(4, n=4)
    del m["base"]
    bars = waterfall_bars(m, p)
    assert bars[0]["value"] == pytest.approx(p - m["joint"])
    assert sum(b["value"] for b in bars[:-1]) == pytest.approx(p, abs=1e-9)


def test_the_largest_concepts_by_magnitude_get_their_own_bars_and_the_rest_one():
    m, p = synthetic(5, n=12)
    bars = waterfall_bars(m, p, top=4)
    own = [b for b in bars if b["concept"] is not None]
    biggest = sorted(m["contributions"], key=lambda c: -abs(c["score"]))[:4]
    assert [b["concept"] for b in own] == [c["concept"] for c in biggest]
    assert [b["name"] for b in bars[-3:]] == ["8 other concepts", "interaction", "prediction"]
    interaction = bars[-2]["value"]
    assert interaction == pytest.approx(m["joint"] - sum(c["score"] for c in m["contributions"]))


def test_an_older_records_prediction_concept_is_no_bar():
    m, p = synthetic(6, n=3)
    m["contributions"].append({**m["contributions"][0], "concept": 402, "kind": "prediction", "score": 0.4})
    bars = waterfall_bars(m, p)
    assert 402 not in [b["concept"] for b in bars]
    assert sum(b["value"] for b in bars[:-1]) == pytest.approx(p, abs=1e-9)


def test_sampled_shapley_values_carry_their_standard_error_on_the_bar():
    m, p = synthetic(7, n=3, shapley=True)
    text = waterfall_figure(m, p, "positive").data[0].text
    assert all("±" in t for t in text[1:4]) and text[0] == text[-1] == ""  # the base and p(x) read on the axis
    assert fig_names(m, p)[0] == f"all concepts removed {m['base']:.3f}" and fig_names(m, p)[-1] == f"p(positive) {p:.3f}"
    exact, _ = synthetic(7, n=3)
    assert not any("±" in t for t in waterfall_figure(exact, p, "positive").data[0].text)


def test_supporting_concepts_are_red_and_opposing_ones_blue():
    fig = waterfall_figure(*synthetic(8), "positive")
    assert fig.data[0].increasing.marker.color == SUPPORTS and fig.data[0].decreasing.marker.color == OPPOSES
    assert score_color(0.2, 0.4).startswith("rgba(255,0,81,") and score_color(-0.2, 0.4).startswith("rgba(0,139,251,")
    assert score_color(0.0, 0.4).endswith(",0.000)") and score_color(1.0, 0.4).endswith(",0.850)")


def test_the_text_plot_colours_each_word_by_its_concepts_score_and_escapes_the_input():
    text = "<b>good</b> & bad"
    words = [{"start": 3, "end": 7}, {"start": 14, "end": 17}]
    body = score_sentence_html(text, words, [1, 2], [{"concept": 1, "score": 0.3}, {"concept": 2, "score": -0.1}],
                               {1: 'VQLC 1: "good"'})
    assert "<b>" not in body and "&lt;b&gt;" in body and "&amp;" in body
    assert body.count("<span") == 2 and "rgba(255,0,81,0.850)" in body and "rgba(0,139,251," in body
    assert 'title="VQLC 1: &quot;good&quot;: +0.300"' in body and ">+0.30</sub>" in body


def test_the_axis_spans_the_running_total_so_small_bars_stay_readable():
    m, p = synthetic(9, n=5)
    lo, hi = waterfall_figure(m, p, "positive").layout.xaxis.range
    bars = waterfall_bars(m, p)
    path = np.cumsum([b["value"] for b in bars[:-1]])
    assert lo <= min(path.min(), p) and hi >= max(path.max(), p)
    assert hi - lo <= 1.3 * max(path.max() - path.min(), p - path.min(), 0.02) + 1e-9


@pytest.mark.slow
def test_on_fifty_real_sentences_every_methods_waterfall_adds_up_to_the_prediction(apptest_run):
    texts = apptest_run.texts
    sentences = texts.loc[texts["split"] != "train", "text"].head(50).tolist()  # held-out sentences
    assert len(sentences) == 50
    explanations = apptest_run.explainer().explain_many(sentences)
    for ex in explanations:
        for name, m in ex.methods.items():
            assert bars_total(waterfall_figure(m, ex.confidence, ex.prediction)) == pytest.approx(ex.confidence,
                                                                                                  abs=1e-6), name
