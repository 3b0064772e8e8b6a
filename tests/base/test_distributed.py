"""Two processes under torchrun (gloo, CPU) give what one process gives: the same store row for
row, and the same codebook and assignments up to float summation order.

Tolerance: one process sums a global batch's gradients and EMA sums in one pass; two processes
each sum their half and the all-reduce adds the halves. Float32 addition is not associative, so
the two differ by about one ulp (~6e-8 relative) per step, which the Adam and EMA updates carry
on. Measured: max |codes difference| 4.8e-7 on codes of size ~2-5, encoder weights 1.2e-7, and
the same assignment for every row. The tests allow 1e-5 times a tensor's largest magnitude (at
least 1), about 20x the measured, far below what a wrong slice, weight or missed reduction
gives (differences of 1e-2 and more).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import CACHE, ROOT
from vqlc_core.base.runio import read_safetensors
from vqlc_core.data.store import ActivationStore

pytestmark = pytest.mark.slow

ATOL = 1e-5
CLI_ARGS = ["--limit", "120", "--chunk-texts", "16", "--n-concepts", "16", "--epochs", "3", "--fit-on", "all"]


def _env() -> dict:
    # One thread per process in both runs: the float results of a matmul may depend on the
    # thread count, and the comparison is exact for the store.
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}


def _run(cmd: list[str]) -> None:
    out = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """One `train` run in one process ('one') and one under torchrun with two ('two'), on real
    MiniLM states of 120 real MR sentences; models and data come from the project's cache."""
    cache = tmp_path_factory.mktemp("cache")
    for name in ("downloads", "datasets", "models"):
        (cache / name).symlink_to(CACHE / name)
    common = [*CLI_ARGS, "--cache-dir", str(cache)]
    _run([sys.executable, "-m", "vqlc_core", "train", *common, "--run-name", "one"])
    _run(_torchrun("-m", "vqlc_core", "train", *common, "--run-name", "two"))
    return cache / "runs"


@pytest.fixture(scope="module")
def fits(tmp_path_factory) -> tuple[Path, Path]:
    """The VQLC fit of tests/distributed_fit.py (dead codes replaced, an empty slice on rank 1)
    in one process and under torchrun with two."""
    out = tmp_path_factory.mktemp("fits")
    script = str(ROOT / "tests" / "base" / "distributed_fit.py")
    _run([sys.executable, script, str(out / "one")])
    _run(_torchrun(script, str(out / "two")))
    return out / "one", out / "two"


def test_two_processes_write_the_single_process_store_row_for_row(runs):
    one, two = ActivationStore(runs / "one" / "store"), ActivationStore(runs / "two" / "store")
    assert two.n_rows == one.n_rows > 2000
    np.testing.assert_array_equal(two.read_all(), one.read_all())
    assert two.tokens.equals(one.tokens)
    assert two.meta["shards"] == one.meta["shards"]


def test_rank_0_writes_the_manifest_and_no_extraction_part_is_left(runs):
    manifest = json.loads((runs / "two" / "manifest.json").read_text())
    assert [s for s in ("texts", "extract", "fitset", "vqlc") if manifest["stages"][s]["state"] == "complete"] == \
        ["texts", "extract", "fitset", "vqlc"]
    assert manifest["stages"]["vqlc"]["used_concepts"] > 0  # rank 0's record, not an empty one
    assert manifest["class_names"] == ["negative", "positive"]
    assert sorted(p.name for p in (runs / "two" / "store").iterdir()) == ["final.npy", "store.json", "tokens.parquet",
                                                                        "vectors_00000.npy"]
    assert not list((runs / "two").rglob("*.tmp"))


def test_two_processes_train_the_single_process_codebook_and_assignments(runs):
    files = sorted(p.relative_to(runs / "one") for p in (runs / "one").glob("methods/vqlc/model/**/method.safetensors"))
    assert len(files) == 2  # the word and the prediction codebooks (`split.py`)
    for weights in files:
        one, two = read_safetensors(runs / "one" / weights), read_safetensors(runs / "two" / weights)
        assert one.keys() == two.keys()
        for key in one:
            np.testing.assert_allclose(two[key].numpy(), one[key].numpy(), rtol=0,
                                       atol=ATOL * max(1.0, float(one[key].double().abs().max())),
                                       err_msg=f"{weights}: {key}")
    assigned = "methods/vqlc/assignments.npy"
    np.testing.assert_array_equal(np.load(runs / "two" / assigned), np.load(runs / "one" / assigned))


def test_dead_codes_are_replaced_alike_on_two_processes_and_on_one(fits):
    one, two = fits
    history = [json.loads((d / "history.json").read_text()) for d in (one, two)]
    assert [h["replaced"] for h in history[0]] == [h["replaced"] for h in history[1]]
    assert sum(h["replaced"] for h in history[0]) > 0
    np.testing.assert_allclose(np.load(two / "codes.npy"), np.load(one / "codes.npy"), rtol=0, atol=ATOL)
    np.testing.assert_allclose(np.load(two / "encoder.npy"), np.load(one / "encoder.npy"), rtol=0, atol=ATOL)
    np.testing.assert_array_equal(np.load(two / "assignments.npy"), np.load(one / "assignments.npy"))
