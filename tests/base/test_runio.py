"""Atomic writes and run names: a failed write leaves the old file whole and no temporary file
behind; a run name can only ever be one folder under runs/."""

from __future__ import annotations

import numpy as np
import pytest

from vqlc_core.base.runio import RunError, atomic_path, check_run_name, read_json, read_npy, write_json, write_npy


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_write_that_fails_leaves_the_target_untouched_and_no_temporary_file(tmp_path):
    target = tmp_path / "table.json"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic_path(target) as tmp:
            tmp.write_text("half of the new cont")
            raise RuntimeError("disk full")
    assert target.read_text() == "old"
    assert leftovers(tmp_path) == []


def test_a_write_that_fails_creates_no_target(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(tmp_path / "new" / "x.npy") as tmp:
            tmp.write_bytes(b"\x93NUMPY")
            raise KeyboardInterrupt
    assert list((tmp_path / "new").iterdir()) == []


def test_a_write_that_succeeds_replaces_the_target_through_a_temporary_file_beside_it(tmp_path):
    target = tmp_path / "sub" / "a.txt"
    with atomic_path(target) as tmp:
        assert tmp.parent == target.parent and tmp != target and not target.exists()
        tmp.write_text("new")
    assert target.read_text() == "new"
    assert leftovers(target.parent) == []


def test_json_and_npy_are_read_back_as_written(tmp_path):
    write_json(tmp_path / "m.json", {"n": np.int64(3), "x": np.float32(0.5), "a": np.arange(3)})
    assert read_json(tmp_path / "m.json") == {"n": 3, "x": 0.5, "a": [0, 1, 2]}
    arr = np.arange(12, dtype=np.float16).reshape(3, 4)
    write_npy(tmp_path / "a.npy", arr)
    assert np.array_equal(read_npy(tmp_path / "a.npy"), arr) and read_npy(tmp_path / "a.npy").dtype == np.float16


def test_an_object_array_is_never_written_with_pickles(tmp_path):
    with pytest.raises(ValueError):
        write_npy(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object))
    assert not (tmp_path / "o.npy").exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize("name", ["default", "apptest", "run-2.b_c"])
def test_a_plain_run_name_is_accepted(name):
    assert check_run_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/b", "/abs", "a b", "~", None, 3])
def test_a_run_name_that_could_leave_its_folder_is_refused(name):
    with pytest.raises(RunError, match="is not allowed"):
        check_run_name(name)
