"""The shard writer and the store that reads its shards: rows are cut into fixed-size float16
shards, the last one short, and come back equal and in order."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.conftest import blobs
from vqlc_core.base.runio import RunError, read_npy
from vqlc_core.data.store import TOKEN_COLUMNS, ActivationStore, ShardWriter, finalize_store


def write_store(path, x: np.ndarray, shard_rows: int, pieces: list[int]) -> ShardWriter:
    """Append `x` in pieces of the given sizes, as extraction appends chunks, then finish it."""
    w = ShardWriter(path, x.shape[1], shard_rows)
    start = 0
    for n in pieces:
        w.append(x[start : start + n])
        start += n
    w.close()
    tokens = pd.DataFrame({"text_id": np.arange(len(x)), "split": "train", "word_index": 0, "word": "w",
                           "kind": "word", "label": 0})[TOKEN_COLUMNS]
    tokens.to_parquet(path / "tokens.parquet", index=False)
    finalize_store(path, {"n_rows": len(x), "dim": x.shape[1], "shard_rows": shard_rows,
                          "shards": [ShardWriter.shard_name(i) for i in range(w.n_shards)]})
    return w


def test_rows_are_split_into_shards_of_the_given_size_with_a_short_last_one(tmp_path):
    x, _ = blobs(n_per=25, k=4, dim=8)  # 100 rows
    w = write_store(tmp_path, x, shard_rows=30, pieces=[7, 50, 1, 42])
    shards = [read_npy(tmp_path / ShardWriter.shard_name(i)) for i in range(w.n_shards)]
    assert [len(s) for s in shards] == [30, 30, 30, 10]
    assert all(s.dtype == np.float16 and s.shape[1] == 8 for s in shards)
    assert np.array_equal(np.concatenate(shards), x.astype(np.float16))
    assert sorted(p.name for p in tmp_path.glob("*.npy")) == [f"vectors_{i:05d}.npy" for i in range(4)]


def test_append_reports_the_shards_each_call_completed(tmp_path):
    w = ShardWriter(tmp_path, dim=2, shard_rows=4)
    rows = np.ones((1, 2))
    assert w.append(np.repeat(rows, 3, axis=0)) == []
    assert w.append(np.repeat(rows, 10, axis=0)) == [0, 1, 2]
    assert w.append(rows) == []
    w.close()
    assert w.n_shards == 4 and len(read_npy(tmp_path / ShardWriter.shard_name(3))) == 2


def test_a_store_of_exactly_whole_shards_has_no_empty_last_shard(tmp_path):
    x, _ = blobs(n_per=10, k=4, dim=4)
    w = write_store(tmp_path, x, shard_rows=20, pieces=[40])
    assert w.n_shards == 2 and not (tmp_path / ShardWriter.shard_name(2)).exists()


def test_a_written_store_reads_back_equal_in_every_order(tmp_path):
    x, _ = blobs(n_per=25, k=4, dim=8)
    write_store(tmp_path, x, shard_rows=30, pieces=[100])
    store = ActivationStore(tmp_path)
    want = x.astype(np.float16).astype(np.float32)
    assert (store.n_rows, store.dim) == (100, 8)
    assert np.array_equal(store.read_all(), want)
    assert np.array_equal(store.read(np.array([99, 0, 31])), want[[99, 0, 31]])
    assert np.array_equal(np.concatenate(list(store.iter_batches(16, shuffle=False))), want)
    shuffled = np.concatenate(list(store.iter_batches(16, shuffle=True, seed=1)))
    assert not np.array_equal(shuffled, want)
    assert np.array_equal(np.sort(shuffled, axis=0), np.sort(want, axis=0))


def test_a_truncated_shard_is_refused_naming_the_stage_to_rebuild(tmp_path):
    x, _ = blobs(n_per=25, k=4, dim=8)
    write_store(tmp_path, x, shard_rows=30, pieces=[100])
    np.save(tmp_path / ShardWriter.shard_name(1), x[:5].astype(np.float16))
    with pytest.raises(RunError, match=r"expected \(30, 8\) float16, got \(5, 8\).*rebuild the 'extract' stage"):
        ActivationStore(tmp_path)


def test_a_capped_fit_set_keeps_every_prediction_row_and_samples_the_words():
    from vqlc_core.data.store import cap_fit_set

    rows = np.arange(0, 3000, 2)  # 1,500 rows, every tenth a prediction row
    is_pred = (np.arange(len(rows)) % 10) == 0
    capped = cap_fit_set(rows, is_pred, max_rows=1000, seed=0)
    assert len(capped) == 1000 and np.all(np.diff(capped) > 0) and set(capped) <= set(rows)
    assert set(rows[is_pred]) <= set(capped)  # all 150 prediction rows
    assert np.array_equal(capped, cap_fit_set(rows, is_pred, max_rows=1000, seed=0))
    assert not np.array_equal(capped, cap_fit_set(rows, is_pred, max_rows=1000, seed=1))
    assert np.array_equal(cap_fit_set(rows, is_pred, max_rows=5000), rows)  # under the cap: untouched
