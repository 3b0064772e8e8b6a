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


def test_word_rows_and_prediction_rows_are_budgeted_apart():
    from vqlc_core.data.store import budget_fit_set

    rows = np.arange(0, 6000, 2)  # 3,000 rows, every other one a prediction row: as many texts as word rows
    is_pred = (np.arange(len(rows)) % 2) == 0
    got, info = budget_fit_set(rows, is_pred, max_words=1000, max_predictions=500, seed=0)
    kept_pred = np.isin(got, rows[is_pred])
    assert np.all(np.diff(got) > 0) and set(got) <= set(rows)
    assert (~kept_pred).sum() == 1000 and kept_pred.sum() == 500  # many texts do not crowd out the words
    assert info == {"word_rows": 1500, "word_rows_kept": 1000, "prediction_rows": 1500, "prediction_rows_kept": 500}
    assert np.array_equal(got, budget_fit_set(rows, is_pred, 1000, 500, seed=0)[0])
    assert not np.array_equal(got, budget_fit_set(rows, is_pred, 1000, 500, seed=1)[0])
    assert np.array_equal(budget_fit_set(rows, is_pred, 5000, 5000)[0], rows)  # under both budgets: untouched


def test_a_sampled_prediction_budget_keeps_each_class_share():
    from vqlc_core.data.store import budget_fit_set

    rows = np.arange(1000)
    is_pred = np.ones(1000, dtype=bool)
    strata = np.where(np.arange(1000) < 900, 0, 1)  # 90% of the texts predicted class 0
    got, _ = budget_fit_set(rows, is_pred, 10, 101, seed=0, strata=strata)
    assert len(got) == 101 and (got >= 900).sum() == 10  # 10.1 of 101 rounds to 10; class 0 keeps 91
