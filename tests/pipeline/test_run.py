"""A run directory as the dashboard finds it: which runs exist, which are built, which one opens
first, and the configuration a rebuild uses. Manifests are written by hand in tmp_path."""

from __future__ import annotations

import json

import pytest

from vqlc_core.pipeline.config import BuildConfig
from vqlc_core.pipeline.run import FORMAT_VERSION, Run, cache_dir_default, default_run, is_built, list_runs
from vqlc_core.pipeline.stages import stage_names

KMEANS = ("kmeans",)


def write_run(cache, name: str, methods=KMEANS, missing=(), **flat):
    """A run folder holding only a manifest: every stage of `methods` complete except `missing`."""
    cfg = BuildConfig(run=name, cache_dir=cache).replace(methods=methods, **flat)
    stages = {s: {"state": "complete"} for s in stage_names(methods) if s not in missing}
    path = cache / "runs" / name
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps({"format_version": FORMAT_VERSION, "config": cfg.to_json(),
                                                    "stages": stages}))
    return path


def test_a_run_is_built_when_every_stage_of_its_methods_is_complete(tmp_path):
    path = write_run(tmp_path, "full", methods=("vqlc", "kmeans"))
    assert is_built(path)
    assert Run(path).is_built()


@pytest.mark.parametrize("missing", ["texts", "kmeans", "maps"])
def test_a_run_missing_one_stage_is_not_built(tmp_path, missing):
    path = write_run(tmp_path, "partial", methods=("vqlc", "kmeans"), missing=(missing,))
    assert not is_built(path)
    assert not Run(path).is_built()


def test_a_run_without_a_config_or_of_another_format_is_not_built(tmp_path):
    bare = tmp_path / "runs" / "bare"
    bare.mkdir(parents=True)
    (bare / "manifest.json").write_text(json.dumps({"format_version": 99, "config": {}, "stages": {}}))
    old = tmp_path / "runs" / "old"  # format 1 kept one flat config
    old.mkdir()
    stages = {s: {"state": "complete"} for s in stage_names()}
    (old / "manifest.json").write_text(json.dumps({"format_version": 1, "config": {"methods": ["kmeans"]},
                                                   "stages": stages}))
    assert not is_built(bare)
    assert not is_built(old)


def test_list_runs_sorts_runs_by_name_and_skips_folders_without_a_manifest(tmp_path):
    write_run(tmp_path, "b")
    write_run(tmp_path, "a", missing=("maps",))
    (tmp_path / "runs" / "0-not-a-run").mkdir()
    assert [p.name for p in list_runs(tmp_path)] == ["a", "b"]


def test_the_default_run_is_a_built_one_even_when_an_unbuilt_run_sorts_first(tmp_path):
    write_run(tmp_path, "a-interrupted", missing=("evaluate", "maps"))
    write_run(tmp_path, "b-built")
    write_run(tmp_path, "c-built")
    assert default_run(tmp_path) == "b-built"


def test_the_default_run_is_the_first_run_when_none_is_built(tmp_path):
    write_run(tmp_path, "b", missing=("maps",))
    write_run(tmp_path, "a", missing=("texts",))
    assert default_run(tmp_path) == "a"


def test_no_runs_means_no_default_run(tmp_path):
    assert default_run(tmp_path) is None
    assert default_run(tmp_path / "no-such-cache") is None
    (tmp_path / "runs").mkdir()
    assert default_run(tmp_path) is None


def test_the_default_cache_comes_from_the_environment(tmp_path, monkeypatch):
    write_run(tmp_path, "only")
    monkeypatch.setenv("VQLC_CACHE_DIR", str(tmp_path))
    assert cache_dir_default() == tmp_path
    assert default_run() == "only"
    monkeypatch.delenv("VQLC_CACHE_DIR")
    assert str(cache_dir_default()) == "cache"


def test_a_moved_run_rebuilds_in_its_own_folder_with_its_own_settings(tmp_path):
    path = write_run(tmp_path / "elsewhere", "old-name", n_concepts=7, seed=3)
    moved = tmp_path / "cache" / "runs" / "moved"
    moved.parent.mkdir(parents=True)
    path.rename(moved)
    cfg = Run(moved).rebuild_config()
    assert (cfg.run, cfg.cache_dir, cfg.run_dir) == ("moved", tmp_path / "cache", moved)
    assert (cfg.methods.n_concepts, cfg.seed, cfg.methods.methods) == (7, 3, KMEANS)
