"""The per-concept summary every method shares, on a hand-made token table: sizes, top words,
class counts, dominant class and purity, examples, and the row of a concept with no members."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from vqlc_core.concepts import ConceptSet, summarize
from vqlc_core.store import ArrayStore

CLASSES = ["negative", "positive"]
# (text_id, word_index, word, kind, label, concept); text 0 is positive, texts 1 and 2 negative
ROWS = [
    (0, 0, "Good", "word", 1, 0), (0, 1, "film", "word", 1, 1), (0, -1, "[PRED]", "pred", 1, 3),
    (1, 0, "good", "word", 0, 0), (1, 1, "good", "word", 0, 0), (1, 2, "bad", "word", 0, 1),
    (1, -1, "[PRED]", "pred", 0, 3),
    (2, 0, "GOOD", "word", 0, 0), (2, -1, "[PRED]", "pred", 0, 3),
]


@pytest.fixture
def table():
    df = pd.DataFrame(ROWS, columns=["text_id", "word_index", "word", "kind", "label", "concept"])
    df["split"] = "train"
    return df.drop(columns="concept"), df["concept"].to_numpy()


def test_the_summary_has_one_row_per_concept_with_its_size_and_prediction_rows(table):
    tokens, assignments = table
    s = summarize(tokens, assignments, 4, CLASSES).set_index("concept")
    assert list(s.index) == [0, 1, 2, 3]
    assert s["size"].tolist() == [4, 2, 0, 3]
    assert s["n_pred"].tolist() == [0, 0, 0, 3]


def test_top_words_are_counted_case_insensitively_most_first(table):
    tokens, assignments = table
    s = summarize(tokens, assignments, 4, CLASSES).set_index("concept")
    assert json.loads(s.at[0, "top_words"]) == [["good", 4]]
    assert sorted(map(tuple, json.loads(s.at[1, "top_words"]))) == [("bad", 1), ("film", 1)]
    assert json.loads(s.at[3, "top_words"]) == []  # prediction rows are not words
    assert len(json.loads(summarize(tokens, assignments, 4, CLASSES, top_k=1).at[1, "top_words"])) == 1


def test_dominant_class_and_purity_come_from_the_members_labels(table):
    tokens, assignments = table
    s = summarize(tokens, assignments, 4, CLASSES).set_index("concept")
    assert json.loads(s.at[0, "class_counts"]) == {"positive": 1, "negative": 3}
    assert (s.at[0, "dominant_class"], s.at[0, "purity"]) == ("negative", 0.75)
    assert (s.at[3, "dominant_class"], s.at[3, "purity"]) == ("negative", pytest.approx(2 / 3))
    assert s.at[1, "purity"] == 0.5


def test_a_concept_without_members_gets_an_empty_row(table):
    tokens, assignments = table
    row = summarize(tokens, assignments, 4, CLASSES).set_index("concept").loc[2]
    assert (row["size"], row["n_pred"], row["purity"], row["dominant_class"]) == (0, 0, 0.0, "")
    assert [json.loads(row[c]) for c in ("top_words", "class_counts", "examples")] == [[], {}, []]


def test_examples_are_a_seeded_sample_of_the_members(table):
    tokens, assignments = table
    a = summarize(tokens, assignments, 4, CLASSES, n_examples=2, seed=0).set_index("concept")
    b = summarize(tokens, assignments, 4, CLASSES, n_examples=2, seed=0).set_index("concept")
    members = {(t, w) for t, w, *_, k in ROWS if k == 0}
    examples = [tuple(e) for e in json.loads(a.at[0, "examples"])]
    assert len(examples) == 2 and set(examples) <= members
    assert a["examples"].tolist() == b["examples"].tolist()
    preds = [tuple(e) for e in json.loads(a.at[3, "examples"])]
    assert len(preds) == 2 and set(preds) < {(0, -1), (1, -1), (2, -1)} and preds == sorted(preds)


def test_a_label_outside_the_class_names_is_kept_as_its_number(table):
    tokens, assignments = table
    tokens = tokens.assign(label=tokens["label"].where(tokens["text_id"] != 2, 7))
    s = summarize(tokens, assignments, 4, CLASSES).set_index("concept")
    assert json.loads(s.at[0, "class_counts"]) == {"positive": 1, "negative": 2, "7": 1}


def test_a_concept_set_holds_the_mean_state_of_each_concepts_members(table):
    tokens, assignments = table
    x = np.arange(len(ROWS) * 3, dtype=np.float32).reshape(len(ROWS), 3)
    cs = ConceptSet.from_assignments("kmeans", ArrayStore(x, tokens, chunk_rows=4), assignments, 4, CLASSES)
    assert np.allclose(cs.vectors[0], x[assignments == 0].mean(axis=0))
    assert np.allclose(cs.vectors[2], 0.0)  # no members
    assert cs.label(0) == "c0: good" and cs.label(3) == "c3: (prediction rows)"
