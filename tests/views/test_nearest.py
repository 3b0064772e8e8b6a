"""The train contexts nearest a word of the input within its concept: nearest first, train members
of that concept only, the member's span in its sentence, the cost bounded by a seeded sample."""

import numpy as np
import pandas as pd
import pytest

from vqlc_core.data.store import ArrayStore
from vqlc_core.views.nearest import input_word_vectors, member_rows, nearest_contexts, nearest_contexts_of

SENTENCES = [["the", "film", "saved", "it"], ["a", "song", "saved", "the", "day"], ["they", "saved", "nothing"]]


def small_corpus(splits=("train", "train", "test")):
    texts = pd.DataFrame({"text_id": range(3), "text": [" ".join(w) for w in SENTENCES]})
    rows = [(t, i, w, "word", 0, splits[t]) for t, words in enumerate(SENTENCES) for i, w in enumerate(words)]
    rows += [(t, -1, "[PRED]", "pred", 0, splits[t]) for t in range(3)]
    tokens = pd.DataFrame(rows, columns=["text_id", "word_index", "word", "kind", "label", "split"])
    rng = np.random.default_rng(0)
    X = rng.normal(size=(len(tokens), 8)).astype(np.float32)
    assignments = np.where(tokens["word"] == "saved", 1, 0)
    assignments[tokens["kind"] == "pred"] = 1  # a prediction row of the same concept is never a context
    return texts, tokens, ArrayStore(X, tokens), assignments


def test_the_nearest_member_of_the_concept_comes_first_with_its_span():
    texts, tokens, store, assignments = small_corpus()
    second = int(np.flatnonzero((tokens["text_id"] == 1) & (tokens["word"] == "saved"))[0])
    v = store.vectors[second] + 0.01
    near = nearest_contexts(texts, tokens, store, assignments, 1, v, n=3)
    assert near["row"].iloc[0] == second and list(near["word"]) == ["saved", "saved"]  # the test sentence's is left out
    r = near.iloc[0]
    assert r.text[r.start:r.end] == "saved" and (r.start, r.end) == (7, 12)
    assert near["distance"].is_monotonic_increasing


def test_a_concept_with_no_train_word_has_no_context():
    texts, tokens, store, assignments = small_corpus(splits=("test", "dev", "test"))
    assert nearest_contexts(texts, tokens, store, assignments, 1, np.zeros(8)).empty


def test_a_large_concept_is_read_through_a_seeded_sample():
    texts, tokens, store, assignments = small_corpus()
    rows = member_rows(tokens, np.zeros(len(tokens), dtype=int), 0, max_rows=5, seed=3)
    assert len(rows) == 5 and (np.diff(rows) > 0).all()
    assert (rows == member_rows(tokens, np.zeros(len(tokens), dtype=int), 0, max_rows=5, seed=3)).all()
    assert set(tokens.loc[rows, "kind"]) == {"word"}


@pytest.mark.slow
def test_on_a_small_run_the_nearest_context_of_a_train_word_is_itself(apptest_run):
    run, method = apptest_run, "vqlc"
    cs = run.concept_set(method)
    tokens = run.store.tokens
    text_id = int(tokens.loc[tokens["split"] == "train", "text_id"].iloc[0])
    text = str(run.texts.set_index("text_id").at[text_id, "text"])
    vectors = input_word_vectors(run.explainer([method]), text)  # the explainer's word vectors, as the page's
    words = tokens[(tokens["text_id"] == text_id) & (tokens["kind"] == "word")].sort_values("word_index")
    i = len(words) // 2
    row = int(words.index[i])
    k = int(cs.assignments[row])
    near = nearest_contexts_of(run, method, k, vectors[i])
    assert 1 <= len(near) <= 3 and (near["text_id"].isin(run.texts["text_id"])).all()
    assert set(tokens.loc[near["row"], "split"]) == {"train"} and (cs.assignments[near["row"]] == k).all()
    assert len(member_rows(tokens, cs.assignments, k)) == (cs.assignments[tokens["kind"].eq("word").to_numpy()
                                                                      & tokens["split"].eq("train").to_numpy()] == k).sum()
    assert int(near["row"].iloc[0]) == row and near["distance"].iloc[0] < 1e-2  # the word's own train row
