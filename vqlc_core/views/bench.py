"""The attribution benchmark's figures for one run, as Compare shows them below the waterfalls:
`bench/attribution.py` stores per run (bench/results/attribution_<run>.json) each method's figures
under the local and the global intervention, each a mean with its 95% interval; here they become
one table, a row per figure and a column per method and intervention.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from vqlc_core.methods.base import display_name

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"  # in a checkout of the repository
INTERVENTIONS = ("local", "global")
# What each stored figure is, in words (a figure not named here shows its key).
FIGURES = {
    "flip_share": "one concept alone flips the prediction (share of sentences)",
    "singles_over_joint_median": "sum of single scores / joint drop (median)",
    "interaction_median": "interaction share (median)",
    "aopc_local": "deletion AOPC, concepts in local-score order",
    "aopc_global": "deletion AOPC, concepts in global-score order",
    "aopc_random": "deletion AOPC, concepts in random order",
    "aopc_local_minus_global": "AOPC: local-score order minus global-score order",
    "aopc_minus_random": "AOPC: its own order minus random order",
    "lexicon_top3": "the agreeing lexicon word's concept in the top 3",
    "lexicon_opposite_supporting": "an opposite-sign lexicon word listed as supporting",
    "n_lexicon_sentences": "sentences with an agreeing lexicon word",
    "lexicon_top3_random": "the agreeing lexicon word's concept in the top 3 of a random order",
    "lexicon_top3_local_minus_global": "top-3 lexicon agreement: local minus global",
    "shapley_mae": "Shapley sampling's mean absolute error against exact Shapley",
    "shapley_same_top": "Shapley values and single scores agree on the top concept",
    "shapley_n": "sentences with exact Shapley values",
}


def load_result(run_name: str, results: Path | None = None) -> dict | None:
    """The stored attribution benchmark of run `run_name` (under `results`, default `RESULTS`),
    or None where there is none."""
    path = Path(results or RESULTS) / f"attribution_{run_name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _number(x: float) -> str:
    """Three decimals, or two significant digits below 0.01 (a Shapley error of 0.0007 is no 0.001)."""
    return (f"{x:.3f}" if x == 0 or abs(x) >= 0.01 else f"{x:.2g}").replace("-", "−")


def _shown(v) -> str:
    """A figure as text: '0.091 [0.052, 0.131]' for a mean with its interval, else the value."""
    if isinstance(v, (list, tuple)) and len(v) == 3 and all(isinstance(x, (int, float)) for x in v):
        return f"{_number(v[0])} [{_number(v[1])}, {_number(v[2])}]"
    return _number(v) if isinstance(v, float) else str(v)


def _frame(cells: dict[str, dict[str, str]], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame([{"figure": f, **{c: row.get(c, "–") for c in columns}} for f, row in cells.items()],
                        columns=["figure", *columns])


def attribution_frame(result: dict) -> pd.DataFrame:
    """The figures measured under each intervention: one row per figure (named by `FIGURES`),
    one column per method and intervention ('VQLC, local'), each cell a mean with its 95%
    interval; '–' where a column lacks the figure.

    Example:
        >>> attribution_frame(load_result("default")).columns[:3].tolist()
        ['figure', 'VQLC, local', 'VQLC, global']
    """
    cells: dict[str, dict[str, str]] = {}
    columns: list[str] = []
    for method, figures in result.get("methods", {}).items():
        for how in INTERVENTIONS:
            column = f"{display_name(method)}, {how}"
            for key, value in (figures.get(how) or {}).items():
                cells.setdefault(FIGURES.get(key, key.replace("_", " ")), {})[column] = _shown(value)
                columns += [column] if column not in columns else []
    return _frame(cells, columns)


def method_frame(result: dict) -> pd.DataFrame:
    """The figures of a method that belong to neither intervention alone (a random order's
    lexicon agreement, local minus global, Shapley sampling's error; and every figure of a result
    stored before the benchmark set the interventions apart): one row per figure, one column per
    method."""
    cells: dict[str, dict[str, str]] = {}
    columns: list[str] = []
    for method, figures in result.get("methods", {}).items():
        column = display_name(method)
        for key, value in figures.items():
            if key in INTERVENTIONS:
                continue
            for sub, v in (value.items() if isinstance(value, dict) else [("", value)]):  # "shapley": {"mae", "n"}
                name = f"{key}_{sub}" if sub else key
                cells.setdefault(FIGURES.get(name, name.replace("_", " ")), {})[column] = _shown(v)
                columns += [column] if column not in columns else []
    return _frame(cells, columns)
