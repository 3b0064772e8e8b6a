"""Shared fixtures and helpers: the real MiniLM backbone and real MR sentences (downloaded once
into cache/), the small apptest run, Gaussian blobs, and the command line run as a user runs it."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
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
# The shared downloads, parsed datasets and converted models that tests link into their own
# caches: there from the start, so a link made before the first download is not left dangling.
for _sub in ("downloads", "datasets", "models"):
    (CACHE / _sub).mkdir(parents=True, exist_ok=True)


def blobs(n_per: int = 100, k: int = 6, dim: int = 32, spread: float = 0.3, seed: int = 0):
    """Well-separated Gaussian blobs: (k*n_per, dim) float32 vectors and their blob ids, shuffled."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(k, dim)) * 4.0
    y = np.repeat(np.arange(k), n_per)
    X = centers[y] + rng.normal(size=(len(y), dim)) * spread
    perm = rng.permutation(len(y))
    return X[perm].astype(np.float32), y[perm]


def write_vocab_gguf(path: Path, pieces: list[str], scores: list[float], types: list[int], **meta) -> Path:
    """A GGUF file as llama.cpp writes a llama-architecture model's SentencePiece vocabulary
    (<unk> 0, <s> 1, </s> 2), with no weights; `meta` adds e.g. name= or block_count=."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in meta.items():
        getattr(writer, f"add_{key}")(value)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(pieces)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def run_cli(*args: str, cwd: Path = ROOT) -> tuple[int, str, str]:
    """`vqlc *args` in this process (`cli.main`), as a user's shell runs it from `cwd`: (exit
    status, stdout, stderr). A traceback is not caught: it fails the test. Tests of what only a
    fresh process shows (imports, kills, hangs) use `run_cli_process`."""
    from vqlc_core.pipeline.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:  # argparse: a bad option, or --help
            code = e.code if isinstance(e.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def run_cli_process(*args: str, cwd: Path = ROOT, timeout: float = 300) -> tuple[int, str, str]:
    """`python -m vqlc_core *args` offline in a fresh process: (exit status, stdout, stderr)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "vqlc_core", *args], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=timeout)
    return out.returncode, out.stdout, out.stderr


# The files whose tests take longest, longest first (measured beside a busy loop on a 2-core
# machine): `./test.sh` hands each file whole to one of its pytest processes, in collection order,
# so these start first and the many short files fill in around them instead of one long file
# starting last. Every other file keeps its place after them.
LONGEST_FIRST = [
    "pipeline/test_interrupt.py", "base/test_distributed.py", "base/test_hardware.py", "llm/test_judge.py",
    "data/test_classifier.py", "bench/test_many_users.py", "data/test_finetune.py", "methods/test_new_method.py",
    "methods/test_sae.py", "test_bad_input.py", "base/test_integrity.py", "data/test_backbone.py",
]


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def place(item) -> int:
        path = Path(str(item.fspath))
        rel = path.relative_to(ROOT / "tests").as_posix() if path.is_relative_to(ROOT / "tests") else ""
        return rank.get(rel, len(rank))

    items.sort(key=place)  # stable: the order within a file, and of the other files, is kept


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    np.random.seed(0)


@pytest.fixture(scope="session")
def minilm():
    from vqlc_core.data.backbone import Backbone
    from vqlc_core.data.models import resolve_model

    return Backbone.from_source(resolve_model("minilm", cache_dir=CACHE), max_length=128)


@pytest.fixture(scope="session")
def mr_texts() -> pd.DataFrame:
    """300 real MR sentences with labels and a seeded split (text_id, text, label, split)."""
    from vqlc_core.data.datasets import load_dataset, split_dataset

    ds = load_dataset("mr", cache_dir=CACHE, limit=300, seed=0)
    split = split_dataset(ds.labels, seed=0)
    return pd.DataFrame({"text_id": np.arange(len(ds.texts)), "text": ds.texts, "label": ds.labels, "split": split})


@pytest.fixture(scope="session")
def apptest_run():
    """The small real run (MiniLM, 300 MR sentences, K = 20) in cache/runs/apptest that the
    dashboard tests read; built on first use (about two minutes), then reused."""
    from vqlc_core.pipeline.config import preset
    from vqlc_core.pipeline.build import build
    from vqlc_core.pipeline.run import Run, is_built
    from vqlc_core.base.lock import waiting_lock

    cfg = preset("default", run="apptest", limit=300, n_concepts=20, faithfulness_texts=20, cache_dir=CACHE)
    # `./test.sh` runs the tests in several processes (pytest-xdist): one builds, the others wait
    with waiting_lock(CACHE / ".tests-apptest.lock"):
        if not (cfg.run_dir / "manifest.json").exists() or not is_built(cfg.run_dir):
            build(cfg, force=True)  # a half-built or older-format run is built afresh
    return Run(cfg.run_dir)


@pytest.fixture
def cache_env(apptest_run, monkeypatch):
    """$VQLC_CACHE_DIR set to the cache that holds the apptest run, as the dashboard reads it."""
    monkeypatch.setenv("VQLC_CACHE_DIR", str(CACHE))
    return apptest_run
