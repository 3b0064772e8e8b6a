"""Datasets from their sources: presets on real data, seeded splits, user files, and each mistake
a user can make answered with one clear sentence."""

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from vqlc_core.base.runio import SourceError
from vqlc_core.data.datasets import load_dataset, split_dataset

CACHE = Path(__file__).resolve().parents[2] / "cache"  # the project's git-ignored cache: downloads happen once



@pytest.fixture(scope="session")
def cache_dir() -> Path:
    CACHE.mkdir(exist_ok=True)
    return CACHE


@pytest.fixture(scope="session")
def mr(cache_dir):
    return load_dataset("mr", cache_dir=cache_dir)


@pytest.fixture(scope="session")
def movies(cache_dir):
    return load_dataset("movies", cache_dir=cache_dir)


# ---------------------------------------------------------------- presets


def test_mr_has_4000_balanced_sentences(mr):
    assert len(mr.texts) == 4000
    assert mr.labels.dtype == np.int64
    assert np.bincount(mr.labels).tolist() == [2000, 2000]
    assert mr.class_names == ["negative", "positive"]
    assert mr.groups is None
    assert mr.texts[0].startswith("the rock is destined to be the 21st century's new")


def test_mr_loads_from_its_parquet_cache_without_the_tarball(mr, cache_dir):
    assert (cache_dir / "datasets" / "mr.parquet").is_file()
    start = time.perf_counter()
    again = load_dataset("mr", cache_dir=cache_dir)
    assert time.perf_counter() - start < 2
    assert again.texts == mr.texts and (again.labels == mr.labels).all()


def test_movies_sentences_carry_their_reviews_label(movies, cache_dir):
    assert len(np.unique(movies.groups)) == 1500
    assert len(movies.texts) > 30_000 and all(t.strip() for t in movies.texts)
    per_review = pd.DataFrame({"g": movies.groups, "y": movies.labels}).groupby("g")["y"]
    assert (per_review.nunique() == 1).all()
    assert np.bincount(per_review.first().to_numpy()).tolist() == [750, 750]


def test_movies_groups_never_straddle_splits(movies):
    split = split_dataset(movies.labels, movies.groups, seed=0)
    per_review = pd.DataFrame({"g": movies.groups, "s": split}).groupby("g")["s"].nunique()
    assert (per_review == 1).all()
    reviews = pd.DataFrame({"g": movies.groups, "s": split}).drop_duplicates("g")["s"].value_counts()
    assert reviews.to_dict() == {"train": 1200, "dev": 150, "test": 150}


def test_bbc_has_2225_articles_in_five_sorted_topics():
    bbc = load_dataset("bbc")
    assert len(bbc.texts) == 2225
    counts = dict(zip(bbc.class_names, np.bincount(bbc.labels).tolist()))
    assert counts == {"business": 510, "entertainment": 386, "politics": 417, "sport": 511, "tech": 401}
    assert all("\n" not in t and "  " not in t for t in bbc.texts)


def test_limit_keeps_a_seeded_stratified_subset(mr, cache_dir):
    a = load_dataset("mr", cache_dir=cache_dir, limit=200, seed=3)
    b = load_dataset("mr", cache_dir=cache_dir, limit=200, seed=3)
    c = load_dataset("mr", cache_dir=cache_dir, limit=200, seed=4)
    assert len(a.texts) == 200 and np.bincount(a.labels).tolist() == [100, 100]
    assert a.texts == b.texts and a.texts != c.texts
    assert set(a.texts) <= set(mr.texts)


# ---------------------------------------------------------------- splits


def test_split_is_stratified_and_deterministic_for_a_seed(mr):
    split = split_dataset(mr.labels, seed=0)
    assert (split == split_dataset(mr.labels, seed=0)).all()
    assert not (split == split_dataset(mr.labels, seed=1)).all()
    for c in (0, 1):
        counts = pd.Series(split[mr.labels == c]).value_counts().to_dict()
        assert counts == {"train": 1600, "dev": 200, "test": 200}


def test_split_rejects_fractions_that_do_not_sum_to_one():
    with pytest.raises(SourceError, match="sum to 1"):
        split_dataset(np.array([0, 1, 0, 1]), fractions=(0.8, 0.3, 0.1))


# ---------------------------------------------------------------- user files

ROWS = [("a fine film", "pos"), ("a dull film", "neg"), ("great acting", "pos"), ("boring plot", "neg"),
        ("lovely score", "pos"), ("weak ending", "neg")]


def _frame() -> pd.DataFrame:
    return pd.DataFrame({"review": [t for t, _ in ROWS], "sentiment": [y for _, y in ROWS], "extra": range(6)})


def _write_frame(df: pd.DataFrame, path) -> None:
    """Write `df` as the file type its suffix names."""
    if path.suffix == ".csv":
        df.to_csv(path, index=False)
    elif path.suffix == ".jsonl":
        df.to_json(path, orient="records", lines=True)
    else:
        df.to_parquet(path, index=False)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_user_file_roundtrips_with_custom_columns(tmp_path, suffix):
    path = tmp_path / f"reviews{suffix}"
    df = _frame()
    _write_frame(df, path)
    ds = load_dataset(str(path), text_column="review", label_column="sentiment")
    assert ds.name == "reviews"
    assert ds.texts == [t for t, _ in ROWS]
    assert ds.class_names == ["neg", "pos"]
    assert ds.labels.tolist() == [1, 0, 1, 0, 1, 0]


def test_integer_labels_sort_as_numbers(tmp_path):
    path = tmp_path / "numbers.csv"
    pd.DataFrame({"text": ["a", "b", "c", "d"], "label": [10, 2, 2, 10]}).to_csv(path, index=False)
    ds = load_dataset(str(path))
    assert ds.class_names == ["2", "10"] and ds.labels.tolist() == [1, 0, 0, 1]


def _write(tmp_path: Path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


@pytest.mark.parametrize("make, kwargs, phrase", [
    (lambda d: str(d / "absent.csv"), {}, "was not found"),
    (lambda d: "imdb", {}, "presets mr, movies, bbc"),
    (lambda d: _write(d, "cols.csv", "body,label\nhi,1\nho,0\n"), {}, "no text column 'text' \\(columns found: 'body', 'label'\\)"),
    (lambda d: _write(d, "cols.csv", "text,y\nhi,1\nho,0\n"), {}, "no label column 'label'"),
    (lambda d: _write(d, "empty.csv", ""), {}, "is empty"),
    (lambda d: _write(d, "header.csv", "text,label\n"), {}, "has no rows"),
    (lambda d: _write(d, "latin.csv", "text,label\ncaf\xe9,1\nthé,0\n".encode("latin-1")), {}, "not UTF-8"),
    (lambda d: _write(d, "gaps.csv", "text,label\na,1\nb,\nc,0\nd,\n"), {}, "2 of 4 rows .* have no label"),
    (lambda d: _write(d, "one.csv", "text,label\na,pos\nb,pos\n"), {}, "single class \\('pos'\\)"),
    (lambda d: _write(d, "broken.parquet", "not parquet at all"), {}, "could not be read as parquet"),
    (lambda d: _write(d, "broken.jsonl", '{"text": "a", "label": 1}\n{oops\n'), {}, "could not be read as JSON lines"),
    (lambda d: _write(d, "data.txt", "text,label\na,1\n"), {}, "not a .csv, .jsonl, .json or .parquet file"),
    (lambda d: _write(d, "big.csv", "text,label\n" + "a,1\nb,0\n" * 400), {"max_bytes": 1000}, "above the .* limit"),
    (lambda d: _write(d, "ok.csv", "text,label\na,1\nb,0\nc,2\n"), {"limit": 2}, "at least 3"),
])
def test_each_user_mistake_is_one_helpful_sentence(tmp_path, make, kwargs, phrase):
    with pytest.raises(SourceError, match=phrase) as info:
        load_dataset(make(tmp_path), **kwargs)
    message = str(info.value)
    assert "\n" not in message and message.endswith(".")


def test_a_missing_column_names_the_flag_that_sets_it(tmp_path):
    with pytest.raises(SourceError, match="name the label column with --label-column"):
        load_dataset(_write(tmp_path, "cols.csv", "text,y\nhi,1\nho,0\n"))


def test_an_unreadable_file_keeps_its_cause(tmp_path):
    with pytest.raises(SourceError, match="could not be read as parquet") as info:
        load_dataset(_write(tmp_path, "broken.parquet", "not parquet at all"))
    assert info.value.__cause__ is not None



@pytest.mark.parametrize("make, kwargs, flag", [
    (lambda d: _write(d, "cols.csv", "body,label\nhi,1\nho,0\n"), {}, "--text-column"),
    (lambda d: _write(d, "cols.csv", "text,y\nhi,1\nho,0\n"), {}, "--label-column"),
    (lambda d: _write(d, "one.csv", "text,label\na,pos\nb,pos\n"), {}, "--label-column"),
    (lambda d: _write(d, "ok.csv", "text,label\na,1\nb,0\nc,2\n"), {"limit": 2}, "--limit"),
    (lambda d: "imdb", {}, "--dataset"),
    (lambda d: _write(d, "big.csv", "text,label\n" + "a,1\nb,0\n" * 400), {"max_bytes": 1000}, None),
])
def test_a_message_names_the_flag_to_change_not_a_setting(tmp_path, make, kwargs, flag):
    with pytest.raises(SourceError) as info:
        load_dataset(make(tmp_path), **kwargs)
    message = str(info.value)
    assert flag is None or flag in message, message
    assert "setting" not in message and "max_bytes" not in message, message


# ---------------------------------------------------------------- cells as written

LOOK_MISSING = ["NaN", "nan", "null", "NULL", "None", "NA", "N/A", "n/a", "#N/A", "<NA>", "-nan", "1.#IND", "007"]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_a_text_or_label_that_looks_like_a_missing_value_is_kept_as_written(tmp_path, suffix):
    labels = ["NA" if i % 2 else "None" for i in range(len(LOOK_MISSING))]
    df = pd.DataFrame({"text": LOOK_MISSING, "label": labels})
    path = tmp_path / f"words{suffix}"
    _write_frame(df, path)
    ds = load_dataset(str(path))
    assert ds.texts == LOOK_MISSING
    assert ds.class_names == ["NA", "None"] and ds.labels.tolist() == [int(y == "None") for y in labels]


@pytest.mark.parametrize("name, body, phrase", [
    ("gap.csv", "text,label\nNaN,1\n,0\nnull,0\n", "1 of 3 rows .* have no text"),
    ("gap.jsonl", '{"text": "NaN", "label": 1}\n{"text": null, "label": 0}\n{"text": "null", "label": 0}\n',
     "1 of 3 rows .* have no text"),
    ("nolabel.csv", "text,label\nNaN,1\nnull,\nNone,0\n", "1 of 3 rows .* have no label"),
])
def test_only_an_empty_cell_is_missing(tmp_path, name, body, phrase):
    with pytest.raises(SourceError, match=phrase):
        load_dataset(_write(tmp_path, name, body))
