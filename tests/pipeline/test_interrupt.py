"""An interrupted build resumes to the very run an uninterrupted build writes.

`python -m vqlc_core build` is killed with SIGKILL at eight points (a stage's first file, a
fine-tuning checkpoint, the middle of extraction, of the classifier, of VQLC's training, of evaluation, ...), rerun each
time, and between kills half-written files are planted (a stray `.tmp`, a truncated shard and a
truncated table that no completion record vouches for). The final run is compared with a
reference build that ran beside it, uninterrupted.

Both builds run with one BLAS/OpenMP thread, so sums are reduced in the same order and integer
outputs (store rows, token table, fit set, assignments) must match exactly; float outputs are
compared with a tolerance of 1e-5 only to stay robust where a resumed optimizer step is
recomputed in float32.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import CACHE, ROOT

pytestmark = pytest.mark.slow

ARGS = ["--limit", "120", "--n-concepts", "10", "--faithfulness-texts", "10", "--chunk-texts", "30"]
METHODS = ("vqlc", "kmeans", "lacoat")
TIMEOUT = 400  # s for one process; a hang fails the test

# (name, what stdout must show or which file must appear, seconds to wait after it)
KILLS = [
    ("texts.parquet written", "file:texts.parquet", 0.0),
    ("fine-tune: the first epoch's checkpoint written", "file:finetune/checkpoint/*", 0.0),
    ("extract: first chunk part written", "file:store/parts/*.npy", 0.0),
    ("classifier running", "[classifier] running", 1.0),
    ("vqlc: a training checkpoint written", "file:methods/vqlc/**/checkpoint/*", 0.0),  # words/ of a split
    ("lacoat running", "[lacoat] running", 0.3),
    ("evaluate running", "[evaluate] running", 2.0),
    ("maps running", "[maps] running", 0.5),
]


def _cache(root: Path) -> Path:
    """A cache whose downloads, datasets and models are the repository's (nothing is fetched)."""
    root.mkdir(parents=True)
    for sub in ("downloads", "datasets", "models"):
        (root / sub).symlink_to(CACHE / sub, target_is_directory=True)
    return root


def _start(cache: Path, run: str) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "vqlc_core", "build", "--run", run, *ARGS, "--cache-dir", str(cache)]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _run_until(proc: subprocess.Popen, run_dir: Path, trigger: str, delay: float) -> tuple[bool, str]:
    """Let `proc` run until `trigger` (a stdout phrase or `file:<glob>` under run_dir), wait
    `delay` seconds, SIGKILL it. Returns (killed, its output)."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    t0 = time.monotonic()
    while proc.poll() is None and time.monotonic() - t0 < TIMEOUT:
        seen = (any(run_dir.glob(trigger[5:])) if trigger.startswith("file:")
                else any(trigger in line for line in list(lines)))
        if seen:
            time.sleep(delay)
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                reader.join(5)
                return True, "".join(lines)
            break
        time.sleep(0.02)
    if proc.poll() is None:
        proc.kill()
        pytest.fail(f"the build hung for {TIMEOUT} s:\n" + "".join(lines[-20:]))
    reader.join(5)
    return False, "".join(lines)


def _plant_half_written(run_dir: Path, name: str) -> None:
    """Files a kill during a write could leave, none of them recorded as finished."""
    if name.startswith("extract"):
        (run_dir / "store" / ".vectors_00000.npy.x1y2.tmp").write_bytes(b"\x93NUMPY half")
        if not (run_dir / "store" / "store.json").exists():
            (run_dir / "store" / "vectors_00000.npy").write_bytes(b"\x93NUMPY\x01\x00truncated")
    if name.startswith("evaluate"):
        (run_dir / "eval").mkdir(exist_ok=True)
        (run_dir / "eval" / "faithfulness.parquet").write_bytes(b"PAR1 truncated")
        (run_dir / "eval" / ".measures.json.abcd.tmp").write_text("{")


def _vectors(run_dir: Path) -> np.ndarray:
    return np.concatenate([np.load(p, allow_pickle=False) for p in sorted((run_dir / "store").glob("vectors_*.npy"))])


def _same(a: Path, b: Path) -> None:
    from safetensors.numpy import load_file

    assert np.array_equal(_vectors(a), _vectors(b)), "store vectors differ"
    pd.testing.assert_frame_equal(pd.read_parquet(a / "store/tokens.parquet"), pd.read_parquet(b / "store/tokens.parquet"))
    pd.testing.assert_frame_equal(pd.read_parquet(a / "texts.parquet"), pd.read_parquet(b / "texts.parquet"))
    assert np.array_equal(np.load(a / "fitset.npy"), np.load(b / "fitset.npy")), "fit sets differ"
    fa, fb = load_file(str(a / "finetune/model.safetensors")), load_file(str(b / "finetune/model.safetensors"))
    assert fa.keys() == fb.keys() and all(np.array_equal(fa[k], fb[k]) for k in fa), "fine-tuned weights differ"
    ha, hb = load_file(str(a / "classifier/head.safetensors")), load_file(str(b / "classifier/head.safetensors"))
    for k in ha:
        np.testing.assert_allclose(ha[k], hb[k], atol=1e-5, err_msg=f"classifier {k}")
    for m in METHODS:
        ma, mb = a / "methods" / m, b / "methods" / m
        assert np.array_equal(np.load(ma / "assignments.npy"), np.load(mb / "assignments.npy")), f"{m} assignments"
        np.testing.assert_allclose(np.load(ma / "vectors.npy"), np.load(mb / "vectors.npy"), atol=1e-5,
                                   err_msg=f"{m} concept vectors")
    fa, fb = pd.read_parquet(a / "eval/faithfulness.parquet"), pd.read_parquet(b / "eval/faithfulness.parquet")
    pd.testing.assert_frame_equal(fa, fb, check_exact=False, atol=1e-5)


def test_a_build_killed_at_eight_points_resumes_to_the_uninterrupted_run(tmp_path):
    cache = _cache(tmp_path / "cache")
    t0 = time.monotonic()
    reference = _start(cache, "reference")  # beside the interrupted one: one thread each
    run_dir = cache / "runs" / "killed"
    survived, log = [], []
    for name, trigger, delay in KILLS:
        killed, out = _run_until(_start(cache, "killed"), run_dir, trigger, delay)
        assert "Traceback" not in out, out
        log.append(out)
        if killed:
            survived.append(name)
            _plant_half_written(run_dir, name)
    final = _start(cache, "killed")
    out, _ = final.communicate(timeout=TIMEOUT)
    assert final.returncode == 0, out
    assert "already complete, skipped" in out  # the rerun resumed, it did not start over
    ref_out, _ = reference.communicate(timeout=TIMEOUT)
    assert reference.returncode == 0, ref_out
    print(f"\nkill points survived ({len(survived)}/{len(KILLS)}) in {time.monotonic() - t0:.0f} s: "
          + "; ".join(survived))
    assert len(survived) >= 5, f"only {survived} were reached before the build finished"
    _same(run_dir, cache / "runs" / "reference")
