"""The runs of a cache folder at a glance, for the Build page: one row per run, read from
manifests only."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from vqlc_core.base.runio import read_json
from vqlc_core.pipeline.run import list_runs
from vqlc_core.pipeline.stages import stage_names


def fit_rows(stages: dict) -> str:
    """The rows the methods were fitted on, from the fitset stage's record: "10,000 of 17,925 word
    rows, 3,200 prediction rows" (and a method fitted on other rows, e.g. VQLC on every train
    row, by name); "–" before the stage has run."""
    fs = stages.get("fitset", {})
    if "n_rows" not in fs:
        return "–"
    avail = fs.get("available") or {}
    n_pred = int(fs.get("n_prediction_rows", 0))
    n_word = int(fs.get("n_word_rows", fs["n_rows"] - n_pred))

    def part(n, total, kind):
        return f"{n:,} of {total:,} {kind}" if total and total > n else f"{n:,} {kind}"

    out = f"{part(n_word, avail.get('word_rows'), 'word rows')}, {part(n_pred, avail.get('prediction_rows'), 'prediction rows')}"
    other = [f"{name} {int(st['n_fit_rows']):,} rows" for name, st in stages.items()
             if isinstance(st, dict) and "n_fit_rows" in st and int(st["n_fit_rows"]) != int(fs["n_rows"])]
    return out + (f" ({'; '.join(other)})" if other else "")


def runs_overview(cache_dir: str | Path | None = None):
    """One row per run (from manifests only, cheap): model, dataset, fine-tuning, test accuracy,
    the words aligned per reference word of the text, how many stages are finished, the rows the
    methods were fitted on (`fit_rows`), and a sentence where its concepts average few fit rows
    (`methods.sizing`)."""
    rows = []
    for p in list_runs(cache_dir):
        m = read_json(p / "manifest.json")
        cfg, stages = m.get("config", {}), m.get("stages", {})
        methods = cfg.get("methods", {}).get("methods", []) if isinstance(cfg.get("methods"), dict) else []
        order = stage_names(methods) if methods else []
        acc = stages.get("classifier", {}).get("accuracy", {})
        rows.append({"run": p.name, "model": cfg.get("extract", {}).get("model"),
                     "dataset": cfg.get("data", {}).get("dataset"),
                     "fine-tuning": stages.get("finetune", {}).get("mode", "–"),
                     "test accuracy": acc.get("test"),
                     "word alignment": (m.get("alignment") or {}).get("ratio"),
                     "stages done": f"{sum(stages.get(s, {}).get('state') == 'complete' for s in order)} / {len(order)}",
                     "fit rows": fit_rows(stages),
                     "concept sizes": " ".join(stages.get("fitset", {}).get("size_notes") or [])})
    return pd.DataFrame(rows, columns=["run", "model", "dataset", "fine-tuning", "test accuracy", "word alignment",
                                       "stages done", "fit rows", "concept sizes"])
