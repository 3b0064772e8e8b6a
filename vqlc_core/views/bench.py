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


def _shown(v) -> str:
    """A figure as text: '0.091 [0.052, 0.131]' for a mean with its interval, else the value."""
    if isinstance(v, (list, tuple)) and len(v) == 3 and all(isinstance(x, (int, float)) for x in v):
        return f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]".replace("-", "−")
    return f"{v:.3f}".replace("-", "−") if isinstance(v, float) else str(v)


def attribution_frame(result: dict) -> pd.DataFrame:
    """One row per figure (named by `FIGURES`), one column per method and intervention ('VQLC,
    local'; a figure of both interventions, such as the random-order lexicon agreement, under
    the method alone), each cell a mean with its 95% interval; '–' where a column lacks the figure.

    Example:
        >>> attribution_frame(load_result("default")).columns[:3].tolist()
        ['figure', 'VQLC, local', 'VQLC, global']
    """
    cells: dict[str, dict[str, str]] = {}
    columns: list[str] = []

    def put(key: str, column: str, value) -> None:
        cells.setdefault(FIGURES.get(key, key.replace("_", " ")), {})[column] = _shown(value)
        if column not in columns:
            columns.append(column)

    for method, figures in result.get("methods", {}).items():
        name = display_name(method)
        for how in INTERVENTIONS:
            for key, value in (figures.get(how) or {}).items():
                put(key, f"{name}, {how}", value)
        for key, value in figures.items():
            if key in INTERVENTIONS:
                continue
            if isinstance(value, dict):  # e.g. "shapley": {"mae", "same_top", "n"}
                for sub, v in value.items():
                    put(f"{key}_{sub}", name, v)
            else:
                put(key, name, value)
    frame = pd.DataFrame([{"figure": f, **{c: row.get(c, "–") for c in columns}} for f, row in cells.items()],
                         columns=["figure", *columns])
    return frame
