"""The dashboard's data helpers: concept colours, word spans, word search, contexts, prediction
concepts shown by their nearest train sentences, HTML, pages of the concept grid and the cost table."""

import colorsys
import json
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import is_color_like, to_rgb

from tests.conftest import ROOT
from vqlc_core.views import browse
from vqlc_core.data.corpus import concepts_with_word, member_contexts, word_spans
from vqlc_core.methods.concepts import word_share


def tokens_of(texts: list[list[str]]) -> pd.DataFrame:
    rows = [(t, i, w, "word", 0) for t, words in enumerate(texts) for i, w in enumerate(words)]
    rows += [(t, -1, "[PRED]", "pred", 0) for t in range(len(texts))]
    return pd.DataFrame(rows, columns=["text_id", "word_index", "word", "kind", "label"])


def test_concept_colors_are_distinct_light_css_colours():
    colours = [browse.concept_color(k) for k in range(200)]
    assert len(set(colours)) == 200
    assert all(re.fullmatch(r"#[0-9a-f]{6}", c) and is_color_like(c) for c in colours), colours
    assert min(colorsys.rgb_to_hls(*to_rgb(c))[1] for c in colours) >= 0.75  # dark text stays readable


def test_neighbouring_concepts_get_clearly_different_colours():
    rgb = np.array([to_rgb(browse.concept_color(k)) for k in range(400)])
    assert np.abs(np.diff(rgb, axis=0)).sum(axis=1).min() > 0.3


def test_a_concept_keeps_its_colour_in_another_process():
    code = "from vqlc_core.views.browse import concept_color; print(*map(concept_color, range(20)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"PYTHONHASHSEED": "12345", "PATH": ""})
    assert out.stdout.split() == [browse.concept_color(k) for k in range(20)], out.stderr


def test_word_spans_find_each_occurrence_of_a_repeated_word_in_order():
    text = "a bad , a good film"
    spans = word_spans(text, ["a", "bad", ",", "a", "good", "film"])
    assert [text[s:e] for s, e in spans] == ["a", "bad", ",", "a", "good", "film"]
    assert spans[3] == (8, 9)  # the second "a", not the "a" inside "bad"


def test_member_contexts_locate_the_member_word_in_its_sentence():
    texts = pd.DataFrame({"text_id": [0, 1], "text": ["the cat saw the dog", "the end"]})
    tokens = tokens_of([["the", "cat", "saw", "the", "dog"], ["the", "end"]])
    assignments = np.zeros(len(tokens), dtype=np.int64)
    assignments[3] = 1  # the second "the" of text 0
    ctx = member_contexts(texts, tokens, assignments, 1)
    assert len(ctx) == 1 and (ctx.start[0], ctx.end[0]) == (12, 15)
    assert browse.highlight_html(ctx.text[0], 12, 15) == "the cat saw <mark><b>the</b></mark> dog"


def test_concepts_with_word_counts_members_case_insensitively():
    tokens = tokens_of([["Good", "film"], ["good", "good"]])
    assignments = np.array([2, 0, 2, 1, 0, 0])
    hits = concepts_with_word(tokens, assignments, " GOOD ")
    assert hits.to_dict("list") == {"concept": [2, 1], "count": [2, 1]}
    assert concepts_with_word(tokens, assignments, "").empty


# A hand-made store for prediction concepts: (text_id, split, word_index, word, kind, concept, vector).
# Concept 0's vector is the origin; its train prediction rows lie at distances 3, 1 and 2, a train
# word and the test and dev prediction rows lie nearer. Concept 2 has no train member at all.
PREDICTION_ROWS = [
    (0, "train", 0, "a", "word", 1, (5.0, 5.0)), (0, "train", 1, "good", "word", 0, (0.0, 0.1)),
    (0, "train", 2, "film", "word", 1, (5.0, 4.0)), (0, "train", -1, "[PRED]", "pred", 0, (3.0, 0.0)),
    (1, "train", 0, "so", "word", 1, (4.0, 5.0)), (1, "train", 1, "bad", "word", 1, (4.0, 4.0)),
    (1, "train", -1, "[PRED]", "pred", 0, (0.0, 1.0)),
    (2, "train", 0, "fine", "word", 1, (6.0, 5.0)), (2, "train", -1, "[PRED]", "pred", 0, (-2.0, 0.0)),
    (3, "train", 0, "the", "word", 1, (5.0, 6.0)), (3, "train", 1, "end", "word", 1, (6.0, 6.0)),
    (3, "train", -1, "[PRED]", "pred", 1, (5.0, 5.5)),
    (4, "test", 0, "great", "word", 0, (0.0, 0.0)), (4, "test", -1, "[PRED]", "pred", 0, (0.0, 0.0)),
    (5, "dev", 0, "dull", "word", 0, (0.1, 0.0)), (5, "dev", -1, "[PRED]", "pred", 0, (0.5, 0.0)),
    (6, "test", 0, "meh", "word", 2, (9.0, 9.0)), (6, "test", -1, "[PRED]", "pred", 2, (9.0, 9.0)),
]
PREDICTION_TEXTS = pd.DataFrame({"text_id": range(7), "text": ["a good film", "so bad", "fine", "the end", "great",
                                                                "dull", "meh"]})


@pytest.fixture
def prediction_store():
    from vqlc_core.methods.concepts import ConceptSet, summarize
    from vqlc_core.data.store import ArrayStore

    t, split, wi, word, kind, concept, x = map(list, zip(*PREDICTION_ROWS))
    tokens = pd.DataFrame({"text_id": t, "split": split, "word_index": wi, "word": word, "kind": kind, "label": 0})
    assignments = np.array(concept)
    vectors = np.array([[0.0, 0.0], [5.0, 5.0], [9.0, 9.0]], dtype=np.float32)
    cs = ConceptSet("kmeans", assignments, vectors, summarize(tokens, assignments, 3, ["negative", "positive"]),
                    ["negative", "positive"])
    return tokens, ArrayStore(np.array(x, dtype=np.float32), tokens, chunk_rows=4), cs


def test_a_prediction_concept_is_shown_by_its_train_prediction_rows_nearest_its_vector_first(prediction_store):
    tokens, store, cs = prediction_store
    shown = browse.nearest_prediction_members(PREDICTION_TEXTS, tokens, store, cs, 0, batch_size=2)
    assert shown["text_ids"] == [1, 2, 0] and shown["texts"] == ["so bad", "fine", "a good film"]
    assert shown["distances"] == pytest.approx([1.0, 2.0, 3.0])
    assert browse.nearest_prediction_members(PREDICTION_TEXTS, tokens, store, cs, 0, n=2)["text_ids"] == [1, 2]


def test_a_test_or_dev_prediction_row_is_never_shown_even_at_the_concept_vector(prediction_store):
    tokens, store, cs = prediction_store
    shown = browse.nearest_prediction_members(PREDICTION_TEXTS, tokens, store, cs, 0, n=10)
    assert not {4, 5} & set(shown["text_ids"]) and len(shown["texts"]) == 3
    empty = browse.nearest_prediction_members(PREDICTION_TEXTS, tokens, store, cs, 2)  # test rows only
    assert empty["texts"] == [] and empty["size"] == 0 and np.isnan(empty["word_share"])


def test_the_word_share_counts_the_train_members_only(prediction_store):
    tokens, store, cs = prediction_store
    shares = [browse.nearest_prediction_members(PREDICTION_TEXTS, tokens, store, cs, k)["word_share"] for k in (0, 1)]
    assert shares == pytest.approx([1 / 4, 7 / 8])  # "good" and 3 predictions; 7 words and 1 prediction
    assert word_share({"size": 19031, "n_pred": 571}) == pytest.approx(0.97, abs=1e-3)
    assert np.isnan(word_share({"size": 0, "n_pred": 0}))
    assert [browse.percent(x) for x in (686 / 689, 0.29, 1.0, 0.0)] == ["99%", "29%", "100%", "0%"]  # never "all" early


def test_the_mostly_words_message_is_one_sentence_only_when_word_rows_dominate(prediction_store):
    _, _, cs = prediction_store
    assert browse.mostly_words_message(cs, 1) == (
        "The prediction representation falls into c1, a concept made mostly of word rows (87% of its 8 train "
        "members are words), so it names the prediction poorly.")
    assert browse.mostly_words_message(cs, 0) is None  # mostly prediction rows
    assert browse.mostly_words_message(cs, 2) is None  # no train member
    half = cs.summary.copy()
    half.loc[1, ["size", "n_pred"]] = [8, 4]
    assert browse.mostly_words_message(type(cs)("kmeans", cs.assignments, cs.vectors, half, cs.class_names), 1) is None


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


@pytest.mark.parametrize("n_items, per_page, pages", [(0, 24, 1), (1, 24, 1), (24, 24, 1), (25, 24, 2), (97, 24, 5)])
def test_page_count_covers_every_item_and_is_at_least_one(n_items, per_page, pages):
    assert browse.page_count(n_items, per_page) == pages


def test_paginate_splits_ids_into_pages_with_a_short_last_page():
    ids = list(range(100, 110))
    assert browse.paginate(ids, 1, 4) == ([100, 101, 102, 103], 3)
    assert browse.paginate(ids, 3, 4) == ([108, 109], 3)
    pages = [browse.paginate(ids, p, 4)[0] for p in (1, 2, 3)]
    assert sum(pages, []) == ids


def test_paginate_clamps_a_page_out_of_range_and_handles_no_ids():
    ids = list(range(10))
    assert browse.paginate(ids, 99, 4) == ([8, 9], 3)
    assert browse.paginate(ids, 0, 4) == ([0, 1, 2, 3], 3)
    assert browse.paginate(ids, -5, 4) == ([0, 1, 2, 3], 3)
    assert browse.paginate([], 1, 24) == ([], 1)
    assert browse.paginate([], 7, 24) == ([], 1)


def test_cost_table_has_one_row_per_method_and_leaves_missing_measures_empty():
    measures = {"methods": {
        "vqlc": {"fit_time_s": 12.5, "peak_rss_mb": 800.0, "n_fit_rows": 1685, "perplexity": 17.2, "dead_codes": 3,
                 "mean_purity": 0.71, "not_a_cost": 1},
        "kmeans": {"fit_time_s": 0.4, "peak_rss_mb": 300.0, "n_fit_rows": 1685, "mean_purity": 0.66},
    }}
    cost = browse.cost_table(measures)
    assert list(cost.columns) == ["method", "fit_time_s", "peak_rss_mb", "n_fit_rows", "perplexity", "dead_codes",
                                  "mean_purity", "test_prediction_distinct", "test_prediction_purity",
                                  "test_prediction_largest_share"]
    assert cost["method"].tolist() == ["vqlc", "kmeans"]
    assert cost.set_index("method").at["vqlc", "dead_codes"] == 3
    assert cost.set_index("method")[["perplexity", "dead_codes"]].loc["kmeans"].isna().all()
    assert cost.melt("method", ["fit_time_s", "peak_rss_mb"])["value"].tolist() == [12.5, 0.4, 800.0, 300.0]


def test_cost_table_of_no_methods_is_empty_with_its_columns():
    cost = browse.cost_table({"methods": {}})
    assert cost.empty and "fit_time_s" in cost.columns


def test_the_build_stores_the_example_explanation_that_the_explainer_gives_live(apptest_run, tmp_path):
    from tests.runcopy import sealed_copy
    from vqlc_core.pipeline.stage_runs import stage_maps
    from vqlc_core.views.wordclouds import cloud_path

    run = sealed_copy(apptest_run.dir, tmp_path)
    stage_maps(run, "maps")
    stored = browse.precomputed_explanation(run.dir, browse.EXAMPLE)
    assert stored is not None and browse.precomputed_explanation(run.dir, browse.EXAMPLE + " !") is None
    live = run.explainer({m: (run.method(m), run.concept_set(m)) for m in run.methods_built()}).explain(browse.EXAMPLE)
    live = live.to_dict()
    assert stored["prediction"] == live["prediction"] and stored["words"] == live["words"]
    assert stored["confidence"] == pytest.approx(live["confidence"], abs=1e-5)
    assert [s["word"] for s in stored["salient"]] == [s["word"] for s in live["salient"]]
    for m in run.methods_built():
        assert stored["methods"][m]["word_concepts"] == live["methods"][m]["word_concepts"]
        cs = run.concept_set(m)
        for c in browse.shown_concepts(stored, m):  # the page's cards open without drawing
            words = cs.cloud_words(c["concept"])
            assert not json.loads(words) or cloud_path(run.dir, m, c["concept"], words).exists()
        for k in cs.used_ids():  # every cloud: no page or HTML export draws one
            words = cs.cloud_words(k)
            assert not json.loads(words) or cloud_path(run.dir, m, k, words).exists(), (m, k)


def test_an_unreadable_stored_explanation_is_ignored(tmp_path):
    (tmp_path / "ui").mkdir()
    (tmp_path / browse.EXAMPLE_FILE).write_text("{not json")
    assert browse.precomputed_explanation(tmp_path, browse.EXAMPLE) is None
    assert browse.precomputed_explanation(tmp_path / "missing", browse.EXAMPLE) is None


# Inputs whose Markdown (math, escapes, code, strike-through, emphasis, headings, links, tables,
# an indented code block) broke the coloured sentence when it went through st.markdown.
MARKDOWN_INPUTS = ["it cost $5 and $10 , great", "a \\ b film", "C:\\temp\\new", "a `quoted` word",
                   "~~x~~ *x* _x_ **y**", "# not a [heading](x) | a <b>cell</b> & 5 > 3", "one\n\n    two :smile:"]


def _sentence_app(text: str) -> None:
    import vqlc_ui
    from vqlc_core.data.corpus import word_spans

    words = [{"start": s, "end": e} for s, e in word_spans(text, text.split())]
    vqlc_ui.colored_sentence(text, words, list(range(len(words))), {0: "c0: $x$ *y*"})


def _shown_text(body: str) -> str:
    """What a browser shows of HTML made of escaped text: tags (and the concept ids in <sub>) dropped."""
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", re.sub(r"<sub[^>]*>.*?</sub>", "", body)))


@pytest.mark.parametrize("text", MARKDOWN_INPUTS)
def test_the_coloured_sentence_is_html_that_no_markdown_touches(text):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_sentence_app, args=(text,), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not [m for m in at.markdown if "<span" in m.value], "the sentence went through Markdown"
    (body,) = [h.value for h in at.main.html]
    assert _shown_text(body) == text  # every character of every word, as typed
    assert body.count("<span title=") == len(text.split()) and 'title="c0: $x$ *y*"' in body


@pytest.mark.parametrize("text", MARKDOWN_INPUTS)
def test_literal_html_turns_every_markdown_trigger_of_the_text_into_a_reference(text):
    from vqlc_ui.escape import literal_html

    body = literal_html(browse.highlight_html(text, 0, len(text.split()[0])))
    assert _shown_text(body) == text and "<mark><b>" in body
    outside_tags = re.sub(r"<[^>]+>|&#\d+;|&\w+;", "", body)
    assert not re.search(r"[\\`*_~$#\[\]|<>&!:()]", outside_tags), outside_tags
