"""Names that say something: class-based TF-IDF against a hand computation, the content words of
a prediction concept's sentences, and the names a concept set gives its concepts."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from vqlc_core.methods.concepts import summarize
from vqlc_core.methods.naming import (class_phrase, class_tfidf, content_words, distinctive_content_words,
                                      distinctive_words)


def test_class_tfidf_equals_a_hand_computation():
    # two concepts over the words (the, good, bad): counts 3 1 0 and 3 0 2
    got = class_tfidf(np.array([[3, 1, 0], [3, 0, 2]])).toarray()
    A = 9 / 2  # mean words per concept
    f = {"the": 6, "good": 1, "bad": 2}
    want = [[3 / 4 * math.log(1 + A / f["the"]), 1 / 4 * math.log(1 + A / f["good"]), 0.0],
            [3 / 5 * math.log(1 + A / f["the"]), 0.0, 2 / 5 * math.log(1 + A / f["bad"])]]
    assert np.allclose(got, want)
    reduced = class_tfidf(np.array([[3, 1, 0], [3, 0, 2]]), reduce_frequent_words=True).toarray()
    assert np.allclose(reduced[0, :2], [math.sqrt(3 / 4) * math.log(1 + A / 6), math.sqrt(1 / 4) * math.log(1 + A / 1)])


def test_a_word_frequent_everywhere_weighs_less_than_a_word_of_one_concept():
    docs = [["the"] * 5 + ["good"] * 2, ["the"] * 5 + ["bad"] * 2, ["the"] * 5 + ["dull"]]
    names = [[w for w, _ in d] for d in distinctive_words(docs, 2)]
    assert names == [["good", "the"], ["bad", "the"], ["dull", "the"]]


def test_content_words_of_sentences_leave_out_stop_words_short_tokens_numbers_and_class_names():
    docs = ["the film is a gorgeous , witty piece : positive 10 / 10 x", "the film doesn't work : a dull , dull , dull mess"]
    got = [[w for w, _ in d] for d in distinctive_content_words(docs, 5, exclude=("positive", "negative"))]
    assert set(got[0]) == {"gorgeous", "witty", "piece", "film"}  # no word three times: all of them
    assert got[0][0] == "gorgeous"  # ties with witty and piece: alphabetical; film is in both documents
    assert got[0][-1] == "film"
    assert got[1] == ["dull"]  # the one word held three times; "doesn" and "work" once, "mess" once
    once = [[w for w, _ in d] for d in distinctive_content_words(docs, 5, min_count=1)]
    assert "doesn" not in once[1] and set(once[1]) == {"dull", "mess", "film", "work"}


def test_class_phrase_says_mostly_or_mixed():
    assert class_phrase({"positive": 93, "negative": 7}) == "mostly positive (93%)"
    assert class_phrase({"positive": 11, "negative": 9}) == "mixed (55% positive)"
    assert class_phrase({"positive": 93, "negative": 7}, what="predicted ") == "mostly predicted positive (93%)"
    assert class_phrase({"positive": 11, "negative": 9}, what="predicted ") == "mixed (55% predicted positive)"


def test_content_words_read_a_label_after_its_class_phrase():
    assert content_words("c405: mostly positive (93%) · gorgeous, a, x, 10", ("positive",)) == ["gorgeous"]
    assert content_words("c3: ., a, an") == []
    assert content_words("c7: oscar, award, the") == ["oscar", "award"]
    assert content_words("c7: intriguing, quirky, the — JJ (Penn tag, from tags)") == ["intriguing", "quirky"]


def test_the_summary_names_prediction_concepts_by_their_sentences():
    # texts 0, 1 and 3 are positive sentences, text 2 a negative one; concept 2 holds the
    # predictions of texts 0, 1 and 3, concept 3 that of text 2
    rows = [(0, 0, "a", 1, 0), (0, 1, "gorgeous", 1, 1), (0, 2, "film", 1, 1), (0, -1, "[PRED]", 1, 2),
            (1, 0, "gorgeous", 1, 1), (1, 1, "acting", 1, 1), (1, -1, "[PRED]", 1, 2),
            (3, 0, "gorgeous", 1, 1), (3, -1, "[PRED]", 1, 2),
            (2, 0, "a", 0, 0), (2, 1, "dull", 0, 1), (2, 2, "film", 0, 0), (2, -1, "[PRED]", 0, 3)]
    tokens = pd.DataFrame([(t, i, w, "pred" if i < 0 else "word", y) for t, i, w, y, _ in rows],
                          columns=["text_id", "word_index", "word", "kind", "label"])
    tokens["split"] = "train"
    s = summarize(tokens, np.array([c for *_, c in rows]), 4, ["negative", "positive"])
    sent = [json.loads(x) for x in s["sentence_words"]]
    assert sent[0] == [] and sent[1] == []  # word concepts have no prediction members
    assert [w for w, _ in sent[2]] == ["gorgeous"]  # the one word its sentences hold three times
    assert [w for w, _ in sent[3]] == ["dull", "film"]  # none three times: dull is in it alone
    assert [w for w, _ in json.loads(s.at[1, "distinctive_words"])][0] == "gorgeous"  # 3 of its 6 words


@pytest.mark.slow
def test_a_prediction_concept_on_the_apptest_run_is_named_by_its_prediction_members(apptest_run):
    run = apptest_run
    cs = run.concepts("vqlc")
    ex = run.explainer(methods=("vqlc",)).explain("a gorgeous, witty and deeply moving film .")
    top = ex.methods["vqlc"].prediction_concepts[0]
    k = top.concept
    row = cs.summary.loc[k]
    assert k >= run.cfg.methods.n_concepts and int(row["n_pred"]) == int(row["size"]) > 0  # its own set
    label = top.label
    assert label.startswith(f"c{k}: mostly predicted ") or label.startswith(f"c{k}: mixed (")
    words = content_words(label, run.class_names)
    assert words
    # every name word is in the sentences of its train prediction members
    tok = run.store.tokens
    members = (cs.assignments == k) & (tok["kind"] == "pred").to_numpy() & (tok["split"] == "train").to_numpy()
    ids = set(tok.loc[members, "text_id"])
    member_words = set(tok.loc[tok["text_id"].isin(ids) & (tok["kind"] == "word"), "word"].str.lower())
    assert set(words) <= member_words
