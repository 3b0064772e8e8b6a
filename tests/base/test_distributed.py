"""Two processes under torchrun (gloo, CPU) give what one process gives, on two torchrun nodes of
one process each, joined by the c10d rendezvous on 127.0.0.1 as two machines would be:

- a whole `vqlc build` of the frozen model on 120 MR sentences against the same build in one
  process: the store row for row, the codebooks up to float summation order, every row assigned
  alike, and the evaluation (each rank a share of the sentences, gathered on rank 0) the same rows;
- a whole build of the apptest run's settings (MiniLM fully fine-tuned, its dropout on): the same
  fine-tuning (chosen epoch, dev accuracies, weights up to float rounding), a store equal up to
  that rounding, and the evaluation's tables within their intervals;
- a VQLC fit on its own (tests/base/distributed_fit.py), compared exactly.

Tolerance: one process sums a global batch's gradients and EMA sums in one pass; two processes
each sum their half and the all-reduce adds the halves. Float32 addition is not associative, so
the two differ by about one ulp (~6e-8 relative) per step, which the Adam and EMA updates carry
on. On the frozen build (measured): max |codes difference| 4.8e-7 on codes of size ~2-5, word
encoder weights 1.2e-7, the prediction encoder's 1.7e-5 (Adam's steps on near-zero gradients
carry rounding further), and the same assignment for every row; the tests allow 1e-4 times a
tensor's largest magnitude (at least 1), far below what a wrong slice, weight or missed
reduction gives (differences of 1e-2 and more). The fine-tuned build carries its fine-tuning's
rounding (weights 3.4e-7 apart, measured) into every later stage: the store's entries differ by
up to 5.9e-4 of its largest, K-Means and LACOAT assign every row alike, and VQLC, trained on
those inputs, assigns 219 of 7,337 rows elsewhere (on one and the same store, two ranks and one
process assign every row alike: the frozen build's test).
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

ATOL = 1e-4
FROZEN_ARGS = ["--limit", "120", "--chunk-texts", "16", "--n-concepts", "16", "--epochs", "3", "--fit-on", "all",
               "--finetune", "none", "--faithfulness-texts", "12", "--instrument-texts", "4", "--methods", "vqlc",
               "kmeans"]
# The apptest run's settings (tests/conftest.py `apptest_run`): MiniLM fully fine-tuned with its
# dropout on, 300 MR sentences, K = 20, 20 faithfulness sentences; extraction in chunks of 64
# texts so that both ranks extract some. Fine-tuning in float32: under bf16 autocast (what
# "auto" picks on a CPU with native bf16) a matmul's rounding depends on the batch's shape, and
# the runs differ by bf16 rounding (measured: the same epoch and dev accuracies, weights 2.8e-4
# apart). The one process runs each batch in the two parts the two ranks run (--finetune-parts 2).
APPTEST_ARGS = ["--preset", "default", "--limit", "300", "--n-concepts", "20", "--faithfulness-texts", "20",
                "--chunk-texts", "64", "--finetune-dtype", "float32"]


def _env() -> dict:
    # One thread per process in both runs: the float results of a matmul may depend on the
    # thread count, and the comparison is exact for the store.
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}


def _run(cmd: list[str]) -> None:
    out = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args]


def two_nodes(caches: list[Path], run: str, args: list[str],
              timeout: float = 1200) -> list[subprocess.CompletedProcess]:
    """`vqlc build *args` on two torchrun nodes of one process each (node i reads caches[i]), the
    rendezvous on 127.0.0.1 as on two machines: `--nnodes 2 --rdzv-backend c10d`."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{s.getsockname()[1]}"
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
                               "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", run,
                               "-m", "vqlc_core", "build", *args, "--run-name", run, "--cache-dir", str(cache)],
                              cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for cache in caches]
    out = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return out


def linked_cache(root: Path) -> Path:
    """A cache folder whose downloads, datasets and models are the project's."""
    root.mkdir(parents=True)
    for name in ("downloads", "datasets", "models"):
        (root / name).symlink_to(CACHE / name)
    return root


def one_and_two(cache: Path, args: list[str], one_args: tuple[str, ...] = ()) -> Path:
    """`vqlc build *args` in one process ('one') and on two c10d nodes ('two'); their runs folder."""
    _run([sys.executable, "-m", "vqlc_core", "build", *args, *one_args, "--cache-dir", str(cache), "--run-name", "one"])
    for p in two_nodes([cache, cache], "two", args):
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    return cache / "runs"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """The frozen build (FROZEN_ARGS) in one process and on two nodes; models and data come from
    the project's cache."""
    return one_and_two(linked_cache(tmp_path_factory.mktemp("runs") / "cache"), FROZEN_ARGS)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    """The apptest settings (APPTEST_ARGS) in one process, each fine-tuning batch in the two parts
    the ranks run (`--finetune-parts 2`), and on two nodes."""
    return one_and_two(linked_cache(tmp_path_factory.mktemp("tuned") / "cache"), APPTEST_ARGS,
                       ("--finetune-parts", "2"))


@pytest.fixture(scope="module")
def fits(tmp_path_factory) -> tuple[Path, Path]:
    """The VQLC fit of tests/distributed_fit.py (dead codes replaced, an empty slice on rank 1)
    in one process and under torchrun with two."""
    out = tmp_path_factory.mktemp("fits")
    script = str(ROOT / "tests" / "base" / "distributed_fit.py")
    _run([sys.executable, script, str(out / "one")])
    _run(_torchrun(script, str(out / "two")))
    return out / "one", out / "two"


def test_dead_codes_are_replaced_alike_on_two_processes_and_on_one(fits):
    one, two = fits
    history = [json.loads((d / "history.json").read_text()) for d in (one, two)]
    assert [h["replaced"] for h in history[0]] == [h["replaced"] for h in history[1]]
    assert sum(h["replaced"] for h in history[0]) > 0
    np.testing.assert_allclose(np.load(two / "codes.npy"), np.load(one / "codes.npy"), rtol=0, atol=ATOL)
    np.testing.assert_allclose(np.load(two / "encoder.npy"), np.load(one / "encoder.npy"), rtol=0, atol=ATOL)
    np.testing.assert_array_equal(np.load(two / "assignments.npy"), np.load(one / "assignments.npy"))


def test_two_nodes_evaluate_every_sentence_once_with_the_one_process_figures(runs):
    import pandas as pd

    one, two = runs / "one" / "eval", runs / "two" / "eval"
    rows = [pd.read_parquet(d / "faithfulness_rows.parquet") for d in (one, two)]
    keys = ["seed", "method", "target", "text_index", "predicted", "n_directions"]
    assert rows[1][keys].equals(rows[0][keys]) and rows[0]["text_index"].nunique() == 12  # each sentence once
    np.testing.assert_allclose(rows[1]["conf_drop"], rows[0]["conf_drop"], atol=1e-4)  # other batch shapes only
    assert len(rows[1].attrs["ig_completeness"]) == 12
    ins = [pd.read_parquet(d / "instrument_rows.parquet") for d in (one, two)]
    assert len(ins[1]) == len(ins[0]) > 0 and sorted(set(ins[1]["text_index"])) == sorted(set(ins[0]["text_index"]))
    tables = [pd.read_parquet(d / "faithfulness.parquet").set_index(["method", "target"]) for d in (one, two)]
    np.testing.assert_allclose(tables[1].loc[tables[0].index, "mean_conf_drop"], tables[0]["mean_conf_drop"], atol=1e-4)
    assert not (two / "parts").exists()


def test_two_processes_write_the_single_process_store_row_for_row(runs):
    one, two = ActivationStore(runs / "one" / "store"), ActivationStore(runs / "two" / "store")
    assert two.n_rows == one.n_rows > 2000
    np.testing.assert_array_equal(two.read_all(), one.read_all())
    assert two.tokens.equals(one.tokens)
    assert two.meta["shards"] == one.meta["shards"]


def test_rank_0_writes_the_manifest_and_no_extraction_part_is_left(runs):
    manifest = json.loads((runs / "two" / "manifest.json").read_text())
    stages = ["texts", "finetune", "extract", "classifier", "annotate", "fitset", "vqlc", "kmeans", "evaluate", "maps"]
    assert [s for s in stages if manifest["stages"][s]["state"] == "complete"] == stages
    assert manifest["stages"]["vqlc"]["used_concepts"] > 0  # rank 0's record, not an empty one
    assert manifest["class_names"] == ["negative", "positive"]
    assert sorted(p.name for p in (runs / "two" / "store").iterdir()) == ["final.npy", "store.json", "tags.parquet",
                                                                        "tokens.parquet", "vectors_00000.npy"]
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


def test_two_nodes_fine_tune_the_one_process_model(tuned):
    one, two = (json.loads((tuned / r / "finetune" / "finetune.json").read_text()) for r in ("one", "two"))
    assert (one["ranks"], two["ranks"]) == (1, 2) and one["config"]["mode"] == "full"
    assert two["chosen_epoch"] == one["chosen_epoch"]
    for a, b in zip(one["history"], two["history"], strict=True):
        assert abs(a["dev_accuracy"] - b["dev_accuracy"]) <= 0.01
        assert abs(a["loss"] - b["loss"]) <= 1e-3 * abs(a["loss"])
    a, b = (read_safetensors(tuned / r / "finetune" / "model.safetensors") for r in ("one", "two"))
    worst = max(float((a[k].double() - b[k].double()).abs().max()) for k in a)
    print(f"fine-tuned weights: max |one - two| = {worst:.2e}")
    assert worst < 1e-5


def test_two_nodes_write_the_one_process_store_up_to_the_fine_tunings_rounding(tuned):
    one, two = ActivationStore(tuned / "one" / "store"), ActivationStore(tuned / "two" / "store")
    assert two.n_rows == one.n_rows > 5000
    assert two.tokens.equals(one.tokens)
    assert two.meta["shards"] == one.meta["shards"]
    x, y = one.read_all(), two.read_all()
    worst = float(np.abs(x - y).max() / np.abs(x).max())
    print(f"store: max |one - two| / max |one| = {worst:.2e}")
    assert worst < 5e-3


def test_two_nodes_build_every_stage_of_the_apptest_run(tuned):
    manifest = json.loads((tuned / "two" / "manifest.json").read_text())
    stages = ["texts", "finetune", "extract", "classifier", "annotate", "fitset", "vqlc", "kmeans", "lacoat",
              "evaluate", "maps"]
    assert [s for s in stages if manifest["stages"][s]["state"] == "complete"] == stages
    assert manifest["stages"]["vqlc"]["used_concepts"] > 0  # rank 0's record, not an empty one
    assert manifest["class_names"] == ["negative", "positive"]
    store = sorted(p.name for p in (tuned / "two" / "store").iterdir())
    assert "final.npy" in store and "store.json" in store and not [n for n in store if "part" in n]
    assert not list((tuned / "two").rglob("*.tmp"))


@pytest.mark.parametrize("method, alike", [("kmeans", 1.0), ("lacoat", 1.0), ("vqlc", 0.9)])
def test_two_nodes_assign_the_rows_as_one_process_does(tuned, method, alike):
    """On stores a float rounding apart: K-Means and LACOAT every row alike, VQLC most (see the
    module's docstring; on one and the same store it assigns every row alike)."""
    assigned = f"methods/{method}/assignments.npy"
    one, two = np.load(tuned / "one" / assigned), np.load(tuned / "two" / assigned)
    print(f"{method}: {int((one != two).sum())} of {one.size} assignments differ")
    assert float((one == two).mean()) >= alike


def test_two_nodes_evaluate_the_apptest_run_within_the_one_process_intervals(tuned):
    import pandas as pd

    one, two = tuned / "one" / "eval", tuned / "two" / "eval"
    rows = [pd.read_parquet(d / "faithfulness_rows.parquet") for d in (one, two)]
    keys = ["seed", "method", "target", "text_index", "predicted"]
    assert rows[1][keys].equals(rows[0][keys]) and rows[0]["text_index"].nunique() == 20  # each sentence once
    ins = [pd.read_parquet(d / "instrument_rows.parquet") for d in (one, two)]
    assert len(ins[1]) == len(ins[0]) > 0 and sorted(set(ins[1]["text_index"])) == sorted(set(ins[0]["text_index"]))
    tables = [pd.read_parquet(d / "faithfulness.parquet").set_index(["method", "target"]) for d in (one, two)]
    mean, lo, hi = (tables[1].loc[tables[0].index, c].to_numpy() for c in ("mean_conf_drop", "conf_drop_low",
                                                                             "conf_drop_high"))
    inside = (tables[0]["mean_conf_drop"].to_numpy() >= lo) & (tables[0]["mean_conf_drop"].to_numpy() <= hi)
    assert inside.all(), tables[0].index[~inside].tolist()
    print(f"faithfulness means: max |one - two| = {np.abs(mean - tables[0]['mean_conf_drop'].to_numpy()).max():.2e}")
    assert not (two / "parts").exists()
