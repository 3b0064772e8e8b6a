"""Chart data: the error bars of a table with 95% intervals, and the Compare page's faithfulness bar chart.

Pages hand these to plotly express as they are; nothing here draws. An error bar is the distance
from a row's mean to each end of its interval, never negative (a percentile interval need not
hold its mean), and missing where the row has no interval.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# The faithfulness table's columns the chart reads: the mean drop and its 95% interval.
FAITH_MEAN, FAITH_LOW, FAITH_HIGH = "mean_conf_drop", "conf_drop_low", "conf_drop_high"
FAITH_HOVER = ("flip_rate", "mean_energy", "n")  # shown on hover where the table has them


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
    and the flip rate, energy removed and sentence count on hover. The table is not changed."""
    data = table.copy()
    bars = {}
    if {FAITH_MEAN, FAITH_LOW, FAITH_HIGH} <= set(data.columns):
        data["err_plus"], data["err_minus"] = error_bars(data, FAITH_MEAN, FAITH_LOW, FAITH_HIGH)
        bars = {"error_y": "err_plus", "error_y_minus": "err_minus"}
    return {"data_frame": data, "x": "target", "y": FAITH_MEAN, "color": "method", **bars,
            "hover_data": [c for c in FAITH_HOVER if c in data.columns],
            "labels": {FAITH_MEAN: "mean confidence drop"}}
