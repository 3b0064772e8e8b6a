"""What the Compare page shows of the evaluation: its tables as display frames (human column
names, methods by their display names, three significant digits), the error bars of a table with
95% intervals, the faithfulness bar chart and the cost chart.

An error bar is the distance from a row's mean to each end of its interval, never negative (a
percentile interval need not hold its mean), and missing where the row has no interval. The
stored tables keep their raw columns and full precision; only what is shown is rounded.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import plotly.express as px

from vqlc_core.methods.base import display_name

# The faithfulness table's columns the chart reads: the mean drop and its 95% interval.
FAITH_MEAN, FAITH_LOW, FAITH_HIGH = "mean_conf_drop", "conf_drop_low", "conf_drop_high"
FAITH_HOVER = ("flip_rate", "mean_energy", "n")  # shown on hover where the table has them
COST_CHART = ("fit_time_s", "peak_rss_mb")  # the cost measures charted side by side

# How the evaluation's columns are named on screen (faithfulness, then cost and codebook use).
NAMES = {
    "method": "method", "target": "target", "n_sentences": "sentences", "n_seeds": "seeds",
    "n": "sentences × seeds", "mean_conf_drop": "mean confidence drop", "conf_drop_low": "drop, 95% CI low",
    "conf_drop_high": "drop, 95% CI high", "flip_rate": "flip rate", "flip_rate_low": "flip rate, 95% CI low",
    "flip_rate_high": "flip rate, 95% CI high", "mean_energy": "energy removed",
    "mean_directions": "directions ablated",
    "fit_time_s": "fit time (s)", "peak_rss_mb": "peak memory (MB)", "n_fit_rows": "fit rows",
    "perplexity": "perplexity", "dead_codes": "dead codes", "mean_purity": "mean purity",
    "test_prediction_distinct": "test prediction concepts", "test_prediction_purity": "their purity",
    "test_prediction_largest_share": "largest share",
}
# The printf format that shows a number of `display_frame` as it was rounded there (Streamlit's
# tables otherwise cut every number at four decimals: -0.000947 would read -0.0009).
AS_ROUNDED = "%g"
HIDDEN = ("n",)  # sentences × seeds, already given by its two factors
COUNTS = ("n_sentences", "n_seeds", "n", "n_fit_rows", "dead_codes", "test_prediction_distinct")


def significant(x, digits: int = 3):
    """`x` rounded to `digits` significant digits (0.0035501 -> 0.00355, 0.1245 -> 0.125), never
    dropping an integer digit (1884.4 -> 1884); NaN, None and non-numbers as they are."""
    if not isinstance(x, (float, np.floating)) or not math.isfinite(x) or x == 0:
        return x
    if abs(x) >= 10 ** (digits - 1):
        return float(round(x))
    return float(f"{x:.{digits}g}")


def display_frame(table: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """`table` (the faithfulness table or `browse.cost_table`) as the page shows it: its columns by
    their `NAMES`, methods by their display names (kmeans -> K-Means), fractional numbers to
    `digits` significant digits, counts as whole numbers. The table is not changed."""
    out = table.drop(columns=[c for c in HIDDEN if c in table.columns])
    if "method" in out.columns:
        out["method"] = out["method"].map(display_name)
    for col in out.columns:
        if col in COUNTS:
            out[col] = pd.to_numeric(out[col]).round().astype("Int64")  # a missing measure leaves a gap
        elif pd.api.types.is_float_dtype(out[col]):
            out[col] = out[col].map(lambda v: significant(v, digits))
    return out.rename(columns=NAMES)


def error_bars(table: pd.DataFrame, mean: str, low: str, high: str) -> tuple[np.ndarray, np.ndarray]:
    """(plus, minus): for each row of `table`, the distance from its `mean` up to `high` and down
    to `low`, clipped at zero; NaN where either is missing."""
    m = pd.to_numeric(table[mean], errors="coerce").to_numpy(dtype=np.float64)
    lo = pd.to_numeric(table[low], errors="coerce").to_numpy(dtype=np.float64)
    hi = pd.to_numeric(table[high], errors="coerce").to_numpy(dtype=np.float64)
    return np.maximum(hi - m, 0.0), np.maximum(m - lo, 0.0)  # maximum keeps NaN


def faithfulness_chart(table: pd.DataFrame) -> dict:
    """The keyword arguments of `plotly.express.bar` for the faithfulness table (one row per
    method and target): the mean confidence drop per target, grouped by method, with its 95%
    interval as error bars (`err_plus`, `err_minus`) when the table has the interval columns,
    and the flip rate, energy removed and sentence count on hover (three significant digits),
    methods by their display names and every axis and hover label by its `NAMES`. The table is
    not changed."""
    data = table.copy()
    data["method"] = data["method"].map(display_name)
    bars = {}
    if {FAITH_MEAN, FAITH_LOW, FAITH_HIGH} <= set(data.columns):
        data["err_plus"], data["err_minus"] = error_bars(data, FAITH_MEAN, FAITH_LOW, FAITH_HIGH)
        bars = {"error_y": "err_plus", "error_y_minus": "err_minus"}
    return {"data_frame": data, "x": "target", "y": FAITH_MEAN, "color": "method", **bars,
            "hover_data": {c: ":.3~g" if c != "n" else True for c in FAITH_HOVER if c in data.columns},
            "labels": NAMES}


def readable_hover(fig):
    """`fig` with its hover labels written 'name: value' where plotly express writes 'name=value'."""
    for t in fig.data:
        if t.hovertemplate:
            t.hovertemplate = re.sub(r"(^|<br>)([^=<]+)=", r"\1\2: ", t.hovertemplate)
    return fig


def faithfulness_figure(table: pd.DataFrame, height: int = 340):
    """The faithfulness bar chart (`faithfulness_chart`) grouped by method, hover labels readable."""
    fig = px.bar(**faithfulness_chart(table), barmode="group", height=height)
    return readable_hover(fig).update_yaxes(hoverformat=".3~g")


def cost_figure(cost: pd.DataFrame, height: int = 280):
    """The cost chart of `browse.cost_table`: fit time and peak memory per method, one panel each
    titled by the measure's name alone (plotly express titles a facet 'variable=value')."""
    data = cost.assign(method=cost["method"].map(display_name)).melt("method", list(COST_CHART), var_name="measure")
    data["measure"] = data["measure"].map(NAMES)
    fig = px.bar(data, x="method", y="value", facet_col="measure", height=height,
                 labels={"value": "", "method": ""}, hover_data={"value": ":.3~g", "measure": False})
    fig.for_each_annotation(lambda a: a.update(text=a.text.split("=", 1)[-1]))
    fig.update_traces(hovertemplate="%{x}: %{y:.3~g}<extra></extra>")
    return fig.update_yaxes(matches=None, showticklabels=True)


def dose_figure(curves: pd.DataFrame, height: int = 300):
    """Dose–response (`instrument.dose_curves`): the mean confidence drop against the mean energy
    removed from the pooled representation as α grows, one panel per method, one line per target
    (the prediction concept and its matched cuts)."""
    data = curves.assign(method=curves["method"].map(display_name))
    fig = px.line(data, x="energy", y="conf_drop", color="target", facet_col="method", markers=True,
                  hover_data={"alpha": True, "n": True}, height=height,
                  labels={"energy": "energy removed", "conf_drop": "mean confidence drop", "target": "",
                          "alpha": "α", "n": "sentences × seeds"})
    fig.for_each_annotation(lambda a: a.update(text=a.text.split("=", 1)[-1]))
    return readable_hover(fig).update_yaxes(hoverformat=".3~g")
