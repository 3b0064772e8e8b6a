"""The detection score of a concept's name on held-out rows, by hand on a small token table."""

import numpy as np
import pandas as pd
import pytest

from vqlc_core.evaluate.name_detection import detection_scores

# (word, split, concept): concept 0 holds "good" and "fine" test rows and one "film"; concept 1 the rest
ROWS = [("good", "test", 0), ("good", "test", 0), ("fine", "test", 0), ("film", "test", 0),
        ("film", "test", 1), ("plot", "test", 1), ("good", "test", 1), ("acting", "test", 1),
        ("good", "train", 1), ("good", "train", 1)]  # train rows are never scored


@pytest.fixture
def table():
    tokens = pd.DataFrame([(w, s, "word") for w, s, _ in ROWS], columns=["word", "split", "kind"])
    pred = pd.DataFrame([("[PRED]", "test", "pred")], columns=["word", "split", "kind"])
    return pd.concat([tokens, pred], ignore_index=True), np.array([c for *_, c in ROWS] + [0])


def test_the_score_is_the_balanced_accuracy_of_the_name_on_held_out_rows(table):
    tokens, assignments = table
    got = detection_scores(assignments, tokens, {0: {"good", "fine"}, 1: {"film", "plot"}}).set_index("concept")
    # concept 0: 3 of its 4 test words are name words; its negatives are all 4 rows of concept 1,
    # one of which ("good") the name says yes to
    assert got.loc[0, "n_members"] == 4  # the prediction row is no word row
    assert got.loc[0, "tpr"] == pytest.approx(3 / 4) and got.loc[0, "tnr"] == pytest.approx(3 / 4)
    assert got.loc[0, "balanced_accuracy"] == pytest.approx(0.75)
    # concept 1: 2 of 4 members; negatives are concept 0's 4 test rows, one of which is "film"
    assert got.loc[1, "tpr"] == pytest.approx(0.5) and got.loc[1, "tnr"] == pytest.approx(0.75)


def test_a_name_of_words_the_concept_does_not_hold_scores_at_most_chance(table):
    tokens, assignments = table
    got = detection_scores(assignments, tokens, {0: {"acting", "plot"}, 2: {"good"}}).set_index("concept")
    assert got.loc[0, "tpr"] == 0 and got.loc[0, "balanced_accuracy"] <= 0.5
    assert 2 not in got.index  # no test member: no score
