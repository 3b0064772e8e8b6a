"""The dashboard's data helpers: concept colours, word spans, word search, contexts, HTML."""

import numpy as np
import pandas as pd

from vqlc_core import browse


def tokens_of(texts: list[list[str]]) -> pd.DataFrame:
    rows = [(t, i, w, "word", 0) for t, words in enumerate(texts) for i, w in enumerate(words)]
    rows += [(t, -1, "[PRED]", "pred", 0) for t in range(len(texts))]
    return pd.DataFrame(rows, columns=["text_id", "word_index", "word", "kind", "label"])


def test_concept_colors_are_stable_and_differ_between_neighbours():
    assert browse.concept_color(7) == browse.concept_color(7)
    assert len({browse.concept_color(k) for k in range(10)}) == 10
    assert all(c.startswith("#") and len(c) == 7 for c in map(browse.concept_color, range(400)))


def test_word_spans_find_each_occurrence_of_a_repeated_word_in_order():
    text = "a bad , a good film"
    spans = browse.word_spans(text, ["a", "bad", ",", "a", "good", "film"])
    assert [text[s:e] for s, e in spans] == ["a", "bad", ",", "a", "good", "film"]
    assert spans[3] == (8, 9)  # the second "a", not the "a" inside "bad"


def test_member_contexts_locate_the_member_word_in_its_sentence():
    texts = pd.DataFrame({"text_id": [0, 1], "text": ["the cat saw the dog", "the end"]})
    tokens = tokens_of([["the", "cat", "saw", "the", "dog"], ["the", "end"]])
    assignments = np.zeros(len(tokens), dtype=np.int64)
    assignments[3] = 1  # the second "the" of text 0
    ctx = browse.member_contexts(texts, tokens, assignments, 1)
    assert len(ctx) == 1 and (ctx.start[0], ctx.end[0]) == (12, 15)
    assert browse.highlight_html(ctx.text[0], 12, 15) == "the cat saw <mark><b>the</b></mark> dog"


def test_concepts_with_word_counts_members_case_insensitively():
    tokens = tokens_of([["Good", "film"], ["good", "good"]])
    assignments = np.array([2, 0, 2, 1, 0, 0])
    hits = browse.concepts_with_word(tokens, assignments, " GOOD ")
    assert hits.to_dict("list") == {"concept": [2, 1], "count": [2, 1]}
    assert browse.concepts_with_word(tokens, assignments, "").empty


def test_colored_sentence_escapes_user_text_and_labels():
    text = "<img src=x onerror=alert(1)> <script>x</script> ok"
    words, pos = [], 0
    for w in text.split():
        s = text.index(w, pos)
        words.append({"start": s, "end": s + len(w)})
        pos = s + len(w)
    html = browse.colored_sentence_html(text, words, list(range(len(words))), {0: 'c0: "<b>'})
    assert "&lt;img" in html and "<img src=x" not in html and "<script>" not in html
    assert 'title="c0: &quot;&lt;b&gt;"' in html
    assert html.count("<span") == len(words)
