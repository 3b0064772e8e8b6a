"""Shared fixtures: the real MiniLM backbone and real MR sentences (downloaded once into cache/)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "cache"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    np.random.seed(0)


@pytest.fixture(scope="session")
def minilm():
    from vqlc_core.backbone import Backbone
    from vqlc_core.sources import resolve_model

    return Backbone.from_source(resolve_model("minilm", cache_dir=CACHE), max_length=128)


@pytest.fixture(scope="session")
def mr_texts() -> pd.DataFrame:
    """300 real MR sentences with labels and a seeded split (text_id, text, label, split)."""
    from vqlc_core.sources import load_dataset, split_dataset

    ds = load_dataset("mr", cache_dir=CACHE, limit=300, seed=0)
    split = split_dataset(ds.labels, seed=0)
    return pd.DataFrame({"text_id": np.arange(len(ds.texts)), "text": ds.texts, "label": ds.labels, "split": split})


@pytest.fixture(scope="session")
def apptest_run():
    """The small real run (MiniLM, 300 MR sentences, K = 20) in cache/runs/apptest that the
    dashboard tests read; built on first use (about two minutes), then reused."""
    from vqlc_core.config import preset
    from vqlc_core.pipeline import Run, build

    cfg = preset("default", run="apptest", limit=300, n_concepts=20, faithfulness_texts=20, cache_dir=CACHE)
    run = Run(cfg.run_dir, cfg)
    if not run.manifest.is_complete("maps"):
        build(cfg, log=lambda msg: None)
    return Run(cfg.run_dir)
