"""The per-concept summary every method shares, on a hand-made token table: sizes, top words,
class counts, dominant class and purity, examples, and the row of a concept with no members;
concept vectors and the mean from train rows only, and centred directions."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from vqlc_core.explain.ablation import orthonormal_basis, project_out
from vqlc_core.methods.concepts import ConceptSet, summarize
from vqlc_core.base.runio import RunError
from vqlc_core.data.store import ArrayStore

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
    assert cs.label(0) == "c0: good" and cs.label(3) == "c3: mostly labelled negative (66%) · good"


def test_an_aligned_tag_shows_beside_the_words_not_instead_of_them(table):
    tokens, assignments = table
    x = np.arange(len(ROWS) * 3, dtype=np.float32).reshape(len(ROWS), 3)
    cs = ConceptSet.from_assignments("kmeans", ArrayStore(x, tokens, chunk_rows=4), assignments, 4, CLASSES)
    cs.tag_names = {0: "ADJ (POS, from tags)", 3: "negative (sentiment, from tags)"}
    assert cs.label(0) == "c0: good — ADJ (POS, from tags)"
    assert cs.label(3) == "c3: mostly labelled negative (66%) · good"  # a prediction concept is named by its members


def test_a_prediction_concepts_class_phrase_counts_what_the_model_predicted(table):
    """Concept 3 holds the predictions of texts 0 (labelled positive), 1 and 2 (labelled
    negative); the model predicted positive for texts 0 and 1: its name counts those predictions,
    not the labels (a positive review the model called negative is no 'negative' member)."""
    from vqlc_core.methods.naming import predicted_class_counts

    tokens, assignments = table
    x = np.arange(len(ROWS) * 3, dtype=np.float32).reshape(len(ROWS), 3)
    cs = ConceptSet.from_assignments("kmeans", ArrayStore(x, tokens, chunk_rows=4), assignments, 4, CLASSES)
    predicted = np.array([None] * len(ROWS), dtype=object)
    predicted[[2, 6, 8]] = ["positive", "positive", "negative"]  # the [PRED] rows of texts 0, 1, 2
    cs.predicted_counts = predicted_class_counts(assignments, predicted, np.arange(len(ROWS)))
    assert cs.predicted_counts == {3: {"positive": 2, "negative": 1}}
    assert cs.label(3) == "c3: mostly predicted positive (66%) · good"
    only_train = predicted_class_counts(assignments, predicted, np.arange(7))  # text 2 left out
    assert only_train == {3: {"positive": 2}}


def test_a_concept_set_iterates_the_records_of_its_concepts_with_members(table):
    tokens, assignments = table
    x = np.arange(len(ROWS) * 3, dtype=np.float32).reshape(len(ROWS), 3)
    cs = ConceptSet.from_assignments("kmeans", ArrayStore(x, tokens, chunk_rows=4), assignments, 4, CLASSES)
    records = list(cs)
    assert [c.id for c in records] == [0, 1, 3]  # concept 2 has no members
    good, pred = records[0], records[2]
    assert (good.label, good.size, good.top_words[0], good.dominant_class) == ("c0: good", 4, ("good", 4), "negative")
    assert good.class_counts == {"positive": 1, "negative": 3} and good.purity == 0.75 and not good.is_prediction
    assert np.allclose(good.vector, x[assignments == 0].mean(axis=0))
    assert pred.is_prediction and pred.size == 3 and len(pred.examples) == 3
    assert json.loads(json.dumps(good.to_dict()))["vector"] == good.vector.tolist()


def split_store(x: np.ndarray, splits: list[str], assignments: np.ndarray, chunk_rows: int = 3) -> ArrayStore:
    tokens = pd.DataFrame({"text_id": np.arange(len(x)), "word_index": 0, "word": [f"w{k}" for k in assignments],
                           "kind": "word", "label": 0, "split": splits})
    return ArrayStore(x, tokens, chunk_rows=chunk_rows)


def test_test_rows_never_change_a_concept_vector_and_train_rows_do():
    rng = np.random.default_rng(0)
    assignments = np.array([0, 0, 1, 1, 0, 1, 2, 2, 0, 1])
    splits = ["train", "train", "train", "test", "dev", "train", "train", "test", "test", "train"]
    x = rng.normal(size=(10, 5)).astype(np.float32)
    base = ConceptSet.from_assignments("kmeans", split_store(x, splits, assignments), assignments, 3, CLASSES)
    moved = x.copy()
    moved[[3, 4, 7, 8]] += 100.0  # every dev and test row
    same = ConceptSet.from_assignments("kmeans", split_store(moved, splits, assignments), assignments, 3, CLASSES)
    assert np.array_equal(base.vectors, same.vectors) and np.array_equal(base.mean, same.mean)
    pd.testing.assert_frame_equal(base.summary, same.summary)
    train = np.array(splits) == "train"
    assert np.allclose(base.vectors[0], x[train & (assignments == 0)].mean(0))
    assert np.allclose(base.mean, x[train].mean(0))
    moved = x.copy()
    moved[5] += 1.0  # one train row of concept 1
    other = ConceptSet.from_assignments("kmeans", split_store(moved, splits, assignments), assignments, 3, CLASSES)
    assert not np.allclose(base.vectors[1], other.vectors[1]) and not np.allclose(base.mean, other.mean)
    assert np.array_equal(base.vectors[[0, 2]], other.vectors[[0, 2]])
    assert np.array_equal(same.assignments, assignments)  # dev and test rows keep their concept


def test_the_summary_counts_train_members_and_keeps_the_all_row_size(table):
    tokens, assignments = table
    tokens = tokens.assign(split=np.where(tokens["text_id"] == 2, "test", "train"))  # text 2: "GOOD" and a [PRED]
    s = summarize(tokens, assignments, 4, CLASSES).set_index("concept")
    assert s["size"].tolist() == [3, 2, 0, 2] and s["size_all"].tolist() == [4, 2, 0, 3]
    assert json.loads(s.at[0, "class_counts"]) == {"positive": 1, "negative": 2}
    examples = {tuple(e) for k in s.index for e in json.loads(s.at[k, "examples"])}
    assert not any(t == 2 for t, _ in examples)  # a test sentence is never shown as a member


def test_ablating_a_centred_direction_leaves_the_mean_untouched():
    """Two concepts sit at m + u and m - u (u orthogonal to m): the train mean is m, the centred
    directions are +-u, and projecting them out keeps m whole, while the uncentred vector
    m + u takes most of m with it. Test rows far away change nothing."""
    m, u = np.zeros(6, np.float32), np.zeros(6, np.float32)
    m[0], u[1] = 3.0, 1.0
    x = np.stack([m + u, m + u, m - u, m - u, m + 50 * u + 7, m - 9])
    assignments = np.array([0, 0, 1, 1, 0, 1])
    cs = ConceptSet.from_assignments("kmeans", split_store(x, ["train"] * 4 + ["test"] * 2, assignments),
                                     assignments, 2, CLASSES)
    assert np.allclose(cs.mean, m)
    assert np.allclose(cs.directions([0, 1]), [u, -u]) and np.allclose(cs.directions([0], centred=False), m + u)
    mean = torch.as_tensor(cs.mean)[None]
    centred = project_out(mean, orthonormal_basis(cs.directions([0])))
    uncentred = project_out(mean, orthonormal_basis(cs.directions([0], centred=False)))
    assert torch.allclose(centred, mean, atol=1e-6)
    assert float((mean - uncentred).norm()) > 0.9 * float(mean.norm())


def test_a_concept_without_train_members_has_a_zero_direction(table):
    tokens, assignments = table
    x = np.arange(len(ROWS) * 3, dtype=np.float32).reshape(len(ROWS), 3)
    cs = ConceptSet.from_assignments("kmeans", ArrayStore(x, tokens), assignments, 4, CLASSES)
    assert np.array_equal(cs.directions([2]), np.zeros((1, 3))) and cs.directions([0, 1]).shape == (2, 3)


def test_a_saved_concept_set_keeps_its_train_mean(table, tmp_path):
    tokens, assignments = table
    x = np.random.default_rng(0).normal(size=(len(ROWS), 3)).astype(np.float32)
    cs = ConceptSet.from_assignments("kmeans", ArrayStore(x, tokens), assignments, 4, CLASSES)
    cs.save(tmp_path / "c")
    back = ConceptSet.load(tmp_path / "c", n_rows=len(ROWS), dim=3)
    assert np.array_equal(back.mean, cs.mean) and np.array_equal(back.directions([0, 1]), cs.directions([0, 1]))
    (tmp_path / "c" / "mean.npy").unlink()  # a set saved before the mean was kept
    old = ConceptSet.load(tmp_path / "c")
    assert np.array_equal(old.directions([0], centred=False), cs.vectors[[0]])
    with pytest.raises(RunError, match="rebuild"):
        old.directions([0])


def test_concepts_need_train_rows(table):
    tokens, assignments = table
    x = np.zeros((len(ROWS), 3), np.float32)
    with pytest.raises(ValueError, match="No train rows"):
        ConceptSet.from_assignments("kmeans", ArrayStore(x, tokens.assign(split="test")), assignments, 4, CLASSES)


def test_each_concept_vector_definition_equals_a_hand_computation():
    """'train': the mean of a concept's train members; 'fitset': of its train members among the fit
    rows (a concept with none there keeps its train mean); 'centre': the centres given (the
    fit-set mean without them); test rows shape none of them."""
    rng = np.random.default_rng(1)
    assignments = np.array([0, 0, 1, 1, 0, 1, 2, 2, 0, 1, 2, 0])
    splits = ["train", "train", "train", "test", "dev", "train", "train", "test", "test", "train", "train", "train"]
    x = rng.normal(size=(12, 4)).astype(np.float32)
    store = split_store(x, splits, assignments)
    fit = np.array([0, 2, 3, 5, 11])  # test row 3 among the fit rows; no fit row of concept 2
    centres = rng.normal(size=(3, 4)).astype(np.float32)
    cs = ConceptSet.from_assignments("kmeans", store, assignments, 3, CLASSES, fit_rows=fit, centres=centres,
                                     vectors="fitset")
    train = np.array(splits) == "train"
    by_train = np.stack([x[train & (assignments == k)].mean(0) for k in range(3)])
    by_fit = np.stack([x[[0, 11]].mean(0), x[[2, 5]].mean(0), by_train[2]])
    assert np.allclose(cs.vectors, by_fit, atol=1e-6) and cs.info["concept_vectors"] == "fitset"
    assert np.allclose(cs.with_vectors("train").vectors, by_train, atol=1e-6)
    assert np.allclose(cs.with_vectors("centre").vectors, centres)
    assert np.allclose(cs.with_vectors("train").mean, x[train].mean(0), atol=1e-6)  # one mean for every definition
    plain = ConceptSet.from_assignments("kmeans", store, assignments, 3, CLASSES, fit_rows=fit, vectors="centre")
    assert np.allclose(plain.vectors, by_fit, atol=1e-6)  # no centres of its own: the fit-set mean
    with pytest.raises(RunError, match="choose one of fitset, train, centre"):
        cs.with_vectors("median")
