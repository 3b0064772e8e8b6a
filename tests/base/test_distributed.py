"""Two processes under torchrun (gloo, CPU) give what one process gives, on two torchrun nodes of
one process each, joined by the c10d rendezvous on 127.0.0.1 as two machines would be:

- a whole `vqlc build` of the apptest run's settings (MiniLM fully fine-tuned with its dropout
  on) on 120 MR sentences, K = 10, against the same build in one process that runs each
  fine-tuning batch in the two parts the ranks run (`--finetune-parts 2`): the same fine-tuned
  weights bit for bit, the store row for row, the codebooks up to float summation order, every
  row assigned alike, and the evaluation (each rank a share of the sentences, gathered on rank 0)
  the same rows;
- a VQLC fit on its own (tests/base/distributed_fit.py), compared exactly.

Tolerance: one process sums a global batch's gradients and EMA sums in one pass; two processes
each sum their half and the all-reduce adds the halves. Float32 addition is not associative, so
the two differ by about one ulp (~6e-8 relative) per step, which the Adam and EMA updates carry
on. Measured on a frozen 120-sentence build: max |codes difference| 4.8e-7 on codes of size
~2-5, word encoder weights 1.2e-7, the prediction encoder's 1.7e-5 (Adam's steps on near-zero
gradients carry rounding further), and the same assignment for every row; the tests allow 1e-4
times a tensor's largest magnitude (at least 1), far below what a wrong slice, weight or missed
reduction gives (differences of 1e-2 and more). Fine-tuning adds each part's gradient once on
either side, so it is exact. Against one process that runs each batch whole (the default), the
fine-tuned weights differ by float rounding (3.4e-7 measured); the store then differs by up to
5.9e-4 of its largest entry, K-Means and LACOAT still assign every row alike, and VQLC, whose
training carries such rounding into other codes, assigned 219 of 7,337 rows elsewhere.
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
# The apptest run's settings (tests/conftest.py `apptest_run`) on 120 sentences, as the interrupt
# test builds (tests/pipeline/test_interrupt.py): every stage and every comparison below is the same
# on 300 (the apptest run's), at two fifths of the fine-tuning and extraction; extraction in chunks
# of 32 texts, so that both ranks extract some.
N_TEXTS, N_FAITHFULNESS = 120, 10
APPTEST_ARGS = ["--preset", "default", "--limit", str(N_TEXTS), "--n-concepts", "10",
                "--faithfulness-texts", str(N_FAITHFULNESS), "--chunk-texts", "32"]
METHODS = ["vqlc", "kmeans", "lacoat"]


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


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """The apptest settings in one process ('one'), each fine-tuning batch in the two parts the
    ranks run, and on two c10d nodes ('two'); models and data come from the project's cache."""
    cache = linked_cache(tmp_path_factory.mktemp("runs") / "cache")
    common = [*APPTEST_ARGS, "--cache-dir", str(cache)]
    _run([sys.executable, "-m", "vqlc_core", "build", *common, "--finetune-parts", "2", "--run-name", "one"])
    for p in two_nodes([cache, cache], "two", APPTEST_ARGS):
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
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


def test_dead_codes_are_replaced_alike_on_two_processes_and_on_one(fits):
    one, two = fits
    history = [json.loads((d / "history.json").read_text()) for d in (one, two)]
    assert [h["replaced"] for h in history[0]] == [h["replaced"] for h in history[1]]
    assert sum(h["replaced"] for h in history[0]) > 0
    np.testing.assert_allclose(np.load(two / "codes.npy"), np.load(one / "codes.npy"), rtol=0, atol=ATOL)
    np.testing.assert_allclose(np.load(two / "encoder.npy"), np.load(one / "encoder.npy"), rtol=0, atol=ATOL)
    np.testing.assert_array_equal(np.load(two / "assignments.npy"), np.load(one / "assignments.npy"))


def test_two_nodes_fine_tune_the_one_process_model_bit_for_bit(runs):
    one, two = (json.loads((runs / r / "finetune" / "finetune.json").read_text()) for r in ("one", "two"))
    assert (one["ranks"], two["ranks"]) == (1, 2) and one["config"]["mode"] == "full"
    assert (one["config"]["parts"], two["config"]["parts"]) == (2, 1)
    assert two["chosen_epoch"] == one["chosen_epoch"]
    assert [h["dev_accuracy"] for h in two["history"]] == [h["dev_accuracy"] for h in one["history"]]
    a, b = (read_safetensors(runs / r / "finetune" / "model.safetensors") for r in ("one", "two"))
    differ = sum(int((a[k] != b[k]).sum()) for k in a)
    print(f"fine-tuned weights: {differ} differ")
    assert a.keys() == b.keys() and differ == 0


def test_two_nodes_write_the_one_process_store_row_for_row(runs):
    one, two = ActivationStore(runs / "one" / "store"), ActivationStore(runs / "two" / "store")
    assert two.n_rows == one.n_rows > 1500  # 120 sentences of ~20 words and their predictions
    np.testing.assert_array_equal(two.read_all(), one.read_all())
    assert two.tokens.equals(one.tokens)
    assert two.meta["shards"] == one.meta["shards"]


def test_rank_0_writes_the_manifest_and_no_part_is_left(runs):
    manifest = json.loads((runs / "two" / "manifest.json").read_text())
    stages = ["texts", "finetune", "extract", "classifier", "annotate", "fitset", *METHODS, "evaluate", "maps"]
    assert [s for s in stages if manifest["stages"][s]["state"] == "complete"] == stages
    assert manifest["stages"]["vqlc"]["used_concepts"] > 0  # rank 0's record, not an empty one
    assert manifest["class_names"] == ["negative", "positive"]
    store = sorted(p.name for p in (runs / "two" / "store").iterdir())
    assert "final.npy" in store and "store.json" in store and not [n for n in store if "part" in n]
    assert not list((runs / "two").rglob("*.tmp")) and not (runs / "two" / "eval" / "parts").exists()


def test_two_processes_train_the_single_process_codebook(runs):
    files = sorted(p.relative_to(runs / "one") for p in (runs / "one").glob("methods/vqlc/model/**/method.safetensors"))
    assert len(files) == 2  # the word and the prediction codebooks (`split.py`)
    for weights in files:
        one, two = read_safetensors(runs / "one" / weights), read_safetensors(runs / "two" / weights)
        assert one.keys() == two.keys()
        for key in one:
            np.testing.assert_allclose(two[key].numpy(), one[key].numpy(), rtol=0,
                                       atol=ATOL * max(1.0, float(one[key].double().abs().max())),
                                       err_msg=f"{weights}: {key}")


@pytest.mark.parametrize("method", METHODS)
def test_two_nodes_assign_every_row_as_one_process_does(runs, method):
    assigned = f"methods/{method}/assignments.npy"
    one, two = np.load(runs / "one" / assigned), np.load(runs / "two" / assigned)
    print(f"{method}: {int((one != two).sum())} of {one.size} assignments differ")
    np.testing.assert_array_equal(two, one)


def test_two_nodes_evaluate_every_sentence_once_with_the_one_process_figures(runs):
    import pandas as pd

    one, two = runs / "one" / "eval", runs / "two" / "eval"
    rows = [pd.read_parquet(d / "faithfulness_rows.parquet") for d in (one, two)]
    keys = ["seed", "method", "target", "text_index", "predicted", "n_directions"]
    assert rows[1][keys].equals(rows[0][keys]) and rows[0]["text_index"].nunique() == N_FAITHFULNESS  # each sentence once
    np.testing.assert_allclose(rows[1]["conf_drop"], rows[0]["conf_drop"], atol=1e-4)  # other batch shapes only
    assert len(rows[1].attrs["ig_completeness"]) == N_FAITHFULNESS
    ins = [pd.read_parquet(d / "instrument_rows.parquet") for d in (one, two)]
    assert len(ins[1]) == len(ins[0]) > 0 and sorted(set(ins[1]["text_index"])) == sorted(set(ins[0]["text_index"]))
    tables = [pd.read_parquet(d / "faithfulness.parquet").set_index(["method", "target"]) for d in (one, two)]
    np.testing.assert_allclose(tables[1].loc[tables[0].index, "mean_conf_drop"], tables[0]["mean_conf_drop"], atol=1e-4)
