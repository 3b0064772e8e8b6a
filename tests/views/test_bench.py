"""The attribution benchmark's stored figures as Compare's table: a row per figure, a column per
method and intervention, each a mean with its interval."""

import json

from vqlc_core.views.bench import attribution_frame, load_result, method_frame

RESULT = {"run": "default", "n": 200, "methods": {
    "vqlc": {"local": {"flip_share": [0.09, 0.05, 0.13], "n_lexicon_sentences": 61},
             "global": {"flip_share": [0.41, 0.34, 0.48]},
             "lexicon_top3_random": [0.33, 0.27, 0.4], "shapley": {"mae": [0.0007, 0.0005, 0.001], "n": 40}},
    "kmeans": {"local": {"flip_share": [0.09, 0.05, 0.14]}, "global": {"flip_share": [-0.5, -0.6, -0.4]}}}}


def test_each_figure_is_a_row_and_each_method_and_intervention_a_column():
    frame = attribution_frame(RESULT)
    assert list(frame.columns) == ["figure", "VQLC, local", "VQLC, global", "K-Means, local", "K-Means, global"]
    flips = frame.set_index("figure").loc["one concept alone flips the prediction (share of sentences)"]
    assert flips["VQLC, local"] == "0.090 [0.050, 0.130]" and flips["K-Means, global"] == "−0.500 [−0.600, −0.400]"
    lexicon = frame.set_index("figure").loc["sentences with an agreeing lexicon word"]
    assert lexicon["VQLC, local"] == "61" and lexicon["VQLC, global"] == "–"


def test_a_methods_figures_of_neither_intervention_have_their_own_table():
    frame = method_frame(RESULT).set_index("figure")
    assert list(frame.columns) == ["VQLC"]  # K-Means measured none
    assert frame.at["Shapley sampling's mean absolute error against exact Shapley", "VQLC"] == "0.0007 [0.0005, 0.001]"
    assert frame.at["sentences with exact Shapley values", "VQLC"] == "40"
    assert frame.at["the agreeing lexicon word's concept in the top 3 of a random order", "VQLC"] == \
        "0.330 [0.270, 0.400]"


def test_a_run_without_a_stored_benchmark_has_none(tmp_path):
    assert load_result("nope", tmp_path) is None
    (tmp_path / "attribution_x.json").write_text(json.dumps(RESULT))
    assert load_result("x", tmp_path) == RESULT
