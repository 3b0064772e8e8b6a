"""A build on an uploaded file (vqlc_core/pipeline/uploads.py), without Streamlit: the file stored
once by its content, its columns read and guessed in each format, the build configuration it gives
(read back as the build reads it) and the one sentence for each thing a user can get wrong."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from vqlc_core.base.runio import RunError
from vqlc_core.pipeline.uploads import UPLOADS, default_run_name, guess_column, save_upload, upload_config
from vqlc_core.data.datasets import file_columns, load_dataset

ROWS = pd.DataFrame({"sentence": [f"text number {i} is {'good' if i % 2 else 'bad'}" for i in range(20)],
                     "stars": [i % 2 for i in range(20)], "id": range(20)})


def as_bytes(suffix: str) -> bytes:
    """ROWS written as a user's file of that format."""
    if suffix == ".csv":
        return ROWS.to_csv(index=False).encode()
    if suffix == ".jsonl":
        return "".join(json.dumps(r) + "\n" for r in ROWS.to_dict("records")).encode()
    buf = io.BytesIO()
    ROWS.to_parquet(buf)
    return buf.getvalue()


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_an_uploaded_file_gives_the_build_its_columns_as_the_command_line_reads_them(tmp_path, suffix):
    path = save_upload(f"My reviews{suffix}", as_bytes(suffix), tmp_path)
    cols = file_columns(path)
    assert cols == ["sentence", "stars", "id"]
    text = cols[guess_column(cols, "text")]
    label = cols[guess_column(cols, "label", avoid=text)]
    assert (text, label) == ("sentence", "stars")  # no 'text' or 'label' column: the first others
    cfg = upload_config("default", path, default_run_name(path), text, label, 0, tmp_path)
    assert (cfg.run, cfg.data.dataset, cfg.data.text_column, cfg.data.label_column, cfg.data.limit) == \
        ("My-reviews", str(path), "sentence", "stars", None)
    ds = load_dataset(cfg.data.dataset, text_column=cfg.data.text_column, label_column=cfg.data.label_column)
    assert ds.texts == list(ROWS["sentence"]) and len(ds.class_names) == 2


def test_the_named_columns_are_chosen_when_the_file_has_them():
    assert guess_column(["id", "label", "text"], "text") == 2
    assert guess_column(["id", "label", "text"], "label", avoid="text") == 1
    assert guess_column(["text"], "label", avoid="text") == 0  # nothing else to choose


def test_an_upload_is_stored_once_by_its_content_under_a_safe_name(tmp_path):
    first = save_upload("../../my reviews (final).csv", b"text,label\na,1\n", tmp_path)
    assert first.parent == tmp_path / UPLOADS and first.name.startswith("my-reviews-final-")
    assert save_upload("other name.csv", b"text,label\na,1\n", tmp_path).read_bytes() == first.read_bytes()
    assert save_upload("../../my reviews (final).csv", b"text,label\na,1\n", tmp_path) == first
    assert save_upload("../../my reviews (final).csv", b"text,label\nb,0\n", tmp_path) != first
    assert len(list((tmp_path / UPLOADS).iterdir())) == 3
    assert default_run_name(first) == "my-reviews-final"
    assert default_run_name(save_upload("....csv", b"x", tmp_path)) == "texts"


@pytest.mark.parametrize("name", ["notes.txt", "model.pkl", "data"])
def test_a_file_that_is_no_table_is_refused_in_one_sentence(tmp_path, name):
    with pytest.raises(RunError, match=rf"^'{name}' is not a \.csv, \.jsonl, \.json or \.parquet file; save the data "
                                       r"in one of those formats\.$"):
        save_upload(name, b"text,label\n", tmp_path)
    assert not (tmp_path / UPLOADS).exists()


@pytest.mark.parametrize("body, phrase", [
    (b"", "is empty"),
    (b"\xff\xfetext,label\n", "is not UTF-8 text"),
    (b'{"text": "fine", "label": 1}\n{"text": "dull"\n', "could not be read as JSON lines"),
])
def test_an_unreadable_upload_is_one_sentence(tmp_path, body, phrase):
    path = save_upload("bad.jsonl" if body.startswith(b"{") else "bad.csv", body, tmp_path)
    with pytest.raises(RunError, match=phrase):
        file_columns(path)


@pytest.mark.parametrize("run, text, label, limit, phrase", [
    ("mine", "sentence", "sentence", 0, "The text and the label column are both 'sentence'; choose two different"),
    ("../mine", "sentence", "stars", 0, "Run name '../mine' is not allowed"),
    ("", "sentence", "stars", 0, "Run name '' is not allowed"),
    ("mine", "sentence", "stars", 3, "--limit must be at least 10"),
])
def test_a_bad_choice_is_one_sentence(tmp_path, run, text, label, limit, phrase):
    path = save_upload("reviews.csv", as_bytes(".csv"), tmp_path)
    with pytest.raises(RunError, match=phrase):
        upload_config("default", path, run, text, label, limit, tmp_path)


def test_a_column_the_file_lacks_is_one_sentence_when_the_build_reads_it(tmp_path):
    path = save_upload("reviews.csv", as_bytes(".csv"), tmp_path)
    cfg = upload_config("default", path, "mine", "sentence", "label", 0, tmp_path)
    with pytest.raises(RunError, match=r"has no label column 'label' \(columns found: 'sentence', 'stars', 'id'\)"):
        load_dataset(cfg.data.dataset, text_column=cfg.data.text_column, label_column=cfg.data.label_column)
