"""What the Compare page and the concept views compute from tables rather than draw: the
faithfulness chart's error bars from the table's 95% intervals, the tables and charts as a reader
sees them (human names, display names, three significant digits), and the concepts with members
(`ConceptSet.used_ids`) that grids, maps and exports show."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.express as px
import pytest

from vqlc_core.methods.concepts import ConceptSet, summarize
from vqlc_core.methods.base import display_name
from vqlc_core.views.browse import cost_table
from vqlc_core.views.charts import (cost_figure, display_frame, error_bars, faithfulness_chart, faithfulness_figure,
                                    significant)
from vqlc_core.views.export_html import choose_concepts

FAITH = pd.DataFrame({
    "method": ["control", "kmeans", "vqlc"],
    "target": ["global mean", "prediction concept", "prediction concept"],
    "mean_conf_drop": [0.01, 0.20, 0.35],
    "conf_drop_low": [0.00, 0.15, 0.36],  # vqlc: a percentile interval that misses its mean
    "conf_drop_high": [0.03, 0.30, np.nan],  # and has no upper end
    "flip_rate": [0.0, 0.1, 0.2],
    "mean_energy": [0.02, 0.3, 0.4],
    "n": [100, 100, 100],
})


def test_error_bars_are_the_distances_to_the_interval_ends():
    plus, minus = error_bars(FAITH, "mean_conf_drop", "conf_drop_low", "conf_drop_high")
    np.testing.assert_allclose(plus[:2], [0.02, 0.10])
    np.testing.assert_allclose(minus, [0.01, 0.05, 0.0])  # never negative
    assert np.isnan(plus[2])  # no interval end, no bar
    assert all(len(a) == 0 for a in error_bars(FAITH.iloc[:0], "mean_conf_drop", "conf_drop_low",
                                                "conf_drop_high"))


def test_the_faithfulness_chart_has_error_bars_and_leaves_the_table_alone():
    before = FAITH.copy()
    args = faithfulness_chart(FAITH)
    pd.testing.assert_frame_equal(FAITH, before)
    assert (args["x"], args["y"], args["color"]) == ("target", "mean_conf_drop", "method")
    assert (args["error_y"], args["error_y_minus"]) == ("err_plus", "err_minus")
    np.testing.assert_allclose(args["data_frame"]["err_plus"].iloc[:2], [0.02, 0.10])
    assert list(args["hover_data"]) == ["flip_rate", "mean_energy", "n"]
    fig = px.bar(**args, barmode="group")
    kmeans = next(t for t in fig.data if t.name == "K-Means")
    assert kmeans.error_y.array[0] == pytest.approx(0.10) and kmeans.error_y.arrayminus[0] == pytest.approx(0.05)


def test_a_faithfulness_table_without_intervals_is_charted_without_error_bars():
    table = FAITH.drop(columns=["conf_drop_high", "flip_rate", "n"])
    args = faithfulness_chart(table)
    assert "error_y" not in args and "err_plus" not in args["data_frame"]
    assert list(args["hover_data"]) == ["mean_energy"]
    assert px.bar(**args).data[0].error_y.array is None


def test_significant_keeps_three_significant_digits_and_every_integer_digit():
    assert significant(0.0035501) == 0.00355 and significant(-0.0013012) == -0.0013
    assert significant(0.12456) == 0.125 and significant(21.24) == 21.2 and significant(1884.4) == 1884.0
    assert significant(0.123456, 2) == 0.12
    assert significant(0.0) == 0.0 and np.isnan(significant(np.nan)) and significant(None) is None
    assert significant("kmeans") == "kmeans" and significant(7) == 7  # counts and words as they are


def test_the_faithfulness_display_frame_has_human_names_and_rounds_only_what_is_shown(apptest_run):
    faith = apptest_run.faithfulness()
    before = faith.copy()
    shown = display_frame(faith)
    pd.testing.assert_frame_equal(faith, before)
    assert not [c for c in shown.columns if "_" in c], shown.columns  # no raw column name
    assert {"mean confidence drop", "drop, 95% CI low", "sentences", "seeds", "energy removed"} <= set(shown.columns)
    assert set(shown["method"]) == {"control", *(display_name(m) for m in apptest_run.methods_built())}
    assert {"K-Means", "LACOAT", "VQLC"} <= set(shown["method"])
    assert shown["sentences"].dtype == "Int64" and (shown["sentences"] == faith["n_sentences"]).all()
    for raw, col in [("mean_conf_drop", "mean confidence drop"), ("conf_drop_low", "drop, 95% CI low"),
                     ("mean_energy", "energy removed")]:
        np.testing.assert_allclose(shown[col], faith[raw], rtol=5e-3)  # the same numbers, rounded
        digits = [len(f"{abs(v):.6e}".split("e")[0].replace(".", "").rstrip("0")) for v in shown[col] if v]
        assert max(digits) <= 3, (col, shown[col].tolist())
    assert (faith["mean_conf_drop"].map(lambda v: len(repr(v))) > 8).any()  # the stored numbers were longer


def test_the_cost_display_frame_and_chart_name_measures_and_methods(apptest_run):
    cost = cost_table(apptest_run.measures())
    shown = display_frame(cost)
    assert list(shown.columns[:3]) == ["method", "fit time (s)", "peak memory (MB)"]
    assert not [c for c in shown.columns if "_" in c], shown.columns
    assert shown["method"].tolist() == [display_name(m) for m in cost["method"]]
    assert shown["fit rows"].tolist() == cost["n_fit_rows"].tolist()
    fig = cost_figure(cost)
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["fit time (s)", "peak memory (MB)"]  # not 'variable=fit_time_s'
    assert not any("=" in (t.hovertemplate or "") for t in fig.data)
    assert set(fig.data[0].x) == set(shown["method"])


def test_the_faithfulness_chart_names_methods_and_hover_labels_for_a_reader():
    fig = faithfulness_figure(FAITH)
    assert [t.name for t in fig.data] == ["control", "K-Means", "VQLC"]
    hover = fig.data[1].hovertemplate
    assert "flip rate: " in hover and "energy removed: " in hover and "mean confidence drop: " in hover
    assert "=" not in hover and "_" not in hover.replace("customdata", "")
    assert fig.layout.yaxis.title.text == "mean confidence drop" and fig.layout.yaxis.hoverformat == ".3~g"


def concepts_with_sizes(members: list[int], n_test: dict[int, int] | None = None) -> ConceptSet:
    """A concept set whose concept k has `members[k]` train words (and `n_test[k]` test words)."""
    n_test = n_test or {}
    a = np.array([k for k, m in enumerate(members) for _ in range(m)] + [k for k, m in n_test.items() for _ in range(m)],
                 dtype=np.int64)
    split = ["train"] * sum(members) + ["test"] * sum(n_test.values())
    tokens = pd.DataFrame({"text_id": np.arange(len(a)), "word_index": 0, "word": "w", "kind": "word",
                           "label": 0, "split": split})
    vectors = np.zeros((len(members), 4), dtype=np.float32)
    return ConceptSet("kmeans", a, vectors, summarize(tokens, a, len(members), ["neg", "pos"]), ["neg", "pos"])


def test_used_ids_are_the_concepts_with_train_members_in_order():
    cs = concepts_with_sizes([3, 0, 2, 0, 0, 1], n_test={3: 2})  # c3 has test rows only
    assert cs.used_ids() == [0, 2, 5]
    assert all(type(k) is int for k in cs.used_ids())
    assert cs.used_ids() == [int(k) for k in cs.summary.loc[cs.summary["size"] > 0, "concept"]]
    assert concepts_with_sizes([0, 0]).used_ids() == []


def test_the_export_shows_the_concepts_with_members_by_default():
    cs = concepts_with_sizes([0, 4, 1])
    assert choose_concepts(cs, "r") == [1, 2]
    assert choose_concepts(cs, "r", [2, 0, 2]) == [2, 0]
