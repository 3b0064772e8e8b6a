"""The Build page's line on the rows the methods were fitted on, from a manifest's stage records."""

from vqlc_core.pipeline.overview import fit_rows


def test_the_fit_rows_say_what_each_budget_kept_and_which_method_saw_other_rows():
    stages = {"fitset": {"n_rows": 13200, "n_prediction_rows": 3200, "n_word_rows": 10000,
                         "available": {"word_rows": 17925, "prediction_rows": 3200}},
              "kmeans": {"n_fit_rows": 13200}, "vqlc": {"n_fit_rows": 76000}}
    assert fit_rows(stages) == "10,000 of 17,925 word rows, 3,200 prediction rows (vqlc 76,000 rows)"
    assert fit_rows({}) == "–"
    old = {"fitset": {"n_rows": 10000, "n_prediction_rows": 3200}}  # a run built before the budgets
    assert fit_rows(old) == "6,800 word rows, 3,200 prediction rows"
