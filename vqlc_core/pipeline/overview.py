"""The runs of a cache folder at a glance, for the Build page: one row per run, read from
manifests only."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from vqlc_core.base.runio import read_json
from vqlc_core.pipeline.run import list_runs
from vqlc_core.pipeline.stages import stage_names


def runs_overview(cache_dir: str | Path | None = None):
    """One row per run (from manifests only, cheap): model, dataset, fine-tuning, test accuracy,
    the words aligned per reference word of the text, how many stages are finished, and a
    sentence where its concepts average few fit rows (`methods.sizing`)."""
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
                     "concept sizes": " ".join(stages.get("fitset", {}).get("size_notes") or [])})
    return pd.DataFrame(rows, columns=["run", "model", "dataset", "fine-tuning", "test accuracy", "word alignment",
                                       "stages done", "concept sizes"])
