"""The dashboard's cached loaders (vqlc_ui/loaders.py): keyed by the run folder and the manifest's
modification time, so a run rebuilt while the dashboard is open is read afresh. Streamlit leaves
a parameter whose name starts with an underscore out of the cache key, so the version must not."""

from __future__ import annotations

import inspect

from vqlc_ui import loaders


def test_a_new_manifest_time_loads_the_run_afresh_and_the_same_one_reuses_it(apptest_run):
    run_dir = str(apptest_run.dir)
    first = loaders.load_run(run_dir, 1)
    assert loaders.load_run(run_dir, 1) is first
    assert loaders.load_run(run_dir, 2) is not first
    assert loaders.stamp(apptest_run) == (apptest_run.dir / "manifest.json").stat().st_mtime_ns


def test_no_loader_leaves_the_version_out_of_its_cache_key():
    for name, fn in vars(loaders).items():
        params = inspect.signature(fn).parameters if callable(fn) and hasattr(fn, "clear") else {}
        assert not [p for p in params if p.startswith("_")], name
