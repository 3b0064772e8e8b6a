"""What the Compare page and the concept views compute from tables rather than draw: the
faithfulness chart's error bars from the table's 95% intervals, and the concepts with members
(`ConceptSet.used_ids`) that grids, maps and exports show."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.express as px
import pytest

from vqlc_core.methods.concepts import ConceptSet, summarize
from vqlc_core.views.charts import error_bars, faithfulness_chart
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
    assert args["hover_data"] == ["flip_rate", "mean_energy", "n"]
    fig = px.bar(**args, barmode="group")  # as the page draws it
    kmeans = next(t for t in fig.data if t.name == "kmeans")
    assert kmeans.error_y.array[0] == pytest.approx(0.10) and kmeans.error_y.arrayminus[0] == pytest.approx(0.05)


def test_a_faithfulness_table_without_intervals_is_charted_without_error_bars():
    table = FAITH.drop(columns=["conf_drop_high", "flip_rate", "n"])
    args = faithfulness_chart(table)
    assert "error_y" not in args and "err_plus" not in args["data_frame"]
    assert args["hover_data"] == ["mean_energy"]
    assert px.bar(**args).data[0].error_y.array is None


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
