"""A corrupt or mismatched run directory is found on load, named in one sentence with the stage
to rebuild, and rebuilt from that stage by `build(rebuild=...)`, `--rebuild STAGE` or the
dashboard's Rebuild button. Each test damages a private copy of the small apptest run."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT
from tests.runcopy import APPTEST_ARGS, sealed_copy
from vqlc_core.pipeline.build import build
from vqlc_core.pipeline.run import Run
from vqlc_core.base.runio import CorruptStage


@pytest.fixture
def run(apptest_run, tmp_path):
    return sealed_copy(apptest_run.dir, tmp_path / "cache")


def _cfg(run):
    return run.rebuild_config()


def _flip_last_byte(path):
    b = bytearray(path.read_bytes())
    b[-1] ^= 0xFF
    path.write_bytes(bytes(b))


def test_a_run_as_written_verifies_clean(run):
    assert run.verify() == {}
    assert "store/vectors_00000.npy" in run.manifest.data["stages"]["extract"]["files"]


def test_a_changed_shard_of_the_same_size_is_found_by_its_digest(run):
    _flip_last_byte(run.dir / "store" / "vectors_00000.npy")
    assert run.verify(deep=False) == {}  # the size alone cannot tell
    assert "sha256 differs" in run.verify()["extract"]
    with pytest.raises(CorruptStage) as e:
        run.check()
    assert e.value.stage == "extract"
    assert str(e.value).startswith("Stage 'extract' of run 'copy' is corrupt (store/vectors_00000.npy changed")
    assert str(e.value).endswith("rerun with --rebuild extract.")


def test_a_truncated_shard_and_a_reshaped_array_are_found_by_their_size(run):
    shard = run.dir / "store" / "vectors_00000.npy"
    shard.write_bytes(shard.read_bytes()[:1000])
    np.save(run.dir / "methods" / "kmeans" / "vectors.npy", np.zeros((7, 384), np.float32))
    problems = run.verify(deep=False)
    assert "1000 bytes, expected" in problems["extract"]
    assert "shape (7, 384)" in problems["kmeans"]
    assert list(problems)[0] == "extract"  # the earliest stage is the one to rebuild


def test_a_missing_file_is_named(run):
    (run.dir / "classifier" / "head.safetensors").unlink()
    assert run.verify(deep=False) == {"classifier": "classifier/head.safetensors is missing"}


def test_invalidating_a_stage_invalidates_every_stage_after_it(run):
    assert run.invalidate_from("vqlc") == ["vqlc", "kmeans", "lacoat", "evaluate", "maps"]
    again = Run(run.dir)
    assert again.manifest.is_complete("fitset") and not again.manifest.is_complete("vqlc")


def test_rebuilding_a_corrupt_stage_restores_it(run, caplog):
    path = run.dir / "methods" / "vqlc" / "map.parquet"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CorruptStage, match="rerun with --rebuild maps"):
        build(_cfg(run))
    caplog.set_level(logging.INFO, logger="vqlc_core")
    build(_cfg(run), rebuild="maps")
    assert Run(run.dir).verify() == {}
    assert "[maps] running" in caplog.messages and "[evaluate] already complete, skipped" in caplog.messages


@pytest.mark.slow
def test_the_command_line_names_the_corrupt_stage_and_rebuilds_it(run):
    _flip_last_byte(run.dir / "methods" / "lacoat" / "map.parquet")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "vqlc_core", "build", "--run", "copy", *APPTEST_ARGS, "--cache-dir", str(run.dir.parents[1])]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "vqlc: error: Stage 'maps' of run 'copy' is corrupt (" in out.stderr
    assert "rerun with --rebuild maps." in out.stderr
    out = subprocess.run(cmd + ["--rebuild", "maps"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert Run(run.dir).verify() == {}


@pytest.mark.slow
def test_the_dashboard_shows_the_sentence_and_a_rebuild_button_that_works(run, monkeypatch):
    path = run.dir / "methods" / "kmeans" / "map.parquet"
    path.write_bytes(path.read_bytes()[:-10])
    monkeypatch.setenv("VQLC_CACHE_DIR", str(run.dir.parents[1]))
    at = AppTest.from_file(str(ROOT / "pages" / "explain.py"), default_timeout=300)
    at.session_state["run"] = "copy"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Stage 'maps' of run 'copy' is corrupt" in at.error[0].value
    at.button(key="rebuild_maps").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "rebuilt from stage 'maps'" in at.success[0].value
    assert Run(run.dir).verify() == {}
