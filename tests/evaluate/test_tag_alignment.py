"""Linguistic tags (ConceptX's human-defined concepts) of the store's words, and concepts aligned
with them: hand-tagged sentences through MiniLM's real word split and spaCy's real English
pipeline, synthetic concepts at and below the 90% threshold, a corpus in another language, and
the annotate stage, report and Concepts page on the small real run."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_cli
from vqlc_core.base.runio import RunError
from vqlc_core.data.corpus import word_spans
from vqlc_core.data.tags import annotate, casing, polarity, position, suffix
from vqlc_core.evaluate import tag_alignment as ta
from vqlc_core.methods.concepts import is_prediction_concept
from vqlc_core.views.grid import ANY_TAG

HAND = ["Mr. Smith didn't pay $5,000 for the well-known film in New York.",
        "It's a wonderful, heart-breaking story; I can't recommend it enough!",
        "The U.S. army won't tell us on 3 June 2020 ."]


def store_rows(backbone, texts: list[str]) -> pd.DataFrame:
    """The token table the extraction writes for `texts`: each text's words as the store splits
    them (the model's word alignment), then its prediction row."""
    _, words = backbone.tokenize(texts)
    recs = []
    for t, ws in enumerate(words):
        recs += [(t, i, w.word, "word", t % 2) for i, w in enumerate(ws)] + [(t, -1, "[PRED]", "pred", t % 2)]
    return pd.DataFrame(recs, columns=["text_id", "word_index", "word", "kind", "label"])


@pytest.fixture(scope="module")
def hand(minilm):
    tok = store_rows(minilm, HAND)
    ann = annotate(pd.DataFrame({"text_id": range(len(HAND)), "text": HAND}), tok, ["neg", "pos"],
                   np.array([1, 0, 1]), progress=False)
    return pd.concat([tok, ann.table], axis=1), ann


def tags_of(df: pd.DataFrame, text_id: int, word: str, nth: int = 0) -> dict:
    rows = df[(df["text_id"] == text_id) & (df["word"] == word)]
    assert len(rows) > nth, f"the store has no {word!r} in text {text_id}: {df[df.text_id == text_id].word.tolist()}"
    return {k: (None if pd.isna(v) else v) for k, v in rows.iloc[nth].items()}


def test_names_punctuation_and_positions(hand):
    df, ann = hand
    assert ann.missing == {}
    smith = tags_of(df, 0, "Smith")
    assert (smith["pos"], smith["tag"], smith["ner"], smith["casing"]) == ("PROPN", "NNP", "PERSON", "Title")
    assert tags_of(df, 0, "New")["ner"] == tags_of(df, 0, "York")["ner"] == "GPE"
    assert tags_of(df, 0, "Mr")["position"] == "first" and tags_of(df, 0, "Smith")["position"] is None
    end = tags_of(df, 0, ".", nth=1)  # "Mr." gives the first "."
    assert (end["pos"], end["casing"], end["position"]) == ("PUNCT", "punct", "last")
    assert tags_of(df, 1, "!")["position"] == "last"


def test_a_word_spacy_merges_gets_the_merged_tokens_tags(hand):
    df, _ = hand
    # the store splits "Mr." and "5,000" and "U.S." at punctuation; spaCy keeps each whole
    assert tags_of(df, 0, "Mr")["pos"] == tags_of(df, 0, ".")["pos"] == "PROPN"
    for w in ("5", ",", "000"):
        t = tags_of(df, 0, w)
        assert (t["pos"], t["tag"], t["ner"]) == ("NUM", "CD", "MONEY"), (w, t)
    assert {tags_of(df, 2, w)["ner"] for w in ("U", "S")} == {"GPE"}
    assert tags_of(df, 0, "5")["casing"] == "number"


def test_contractions_take_the_head_token_and_its_sentiment(hand):
    df, _ = hand
    # "didn't": the store has "didn" "'" "t", spaCy "did" "n't"; "didn" overlaps both and takes
    # its head "did" (n't hangs off the verb, not off "did", so the first is taken)
    assert tags_of(df, 0, "didn")["pos"] == "AUX"
    assert tags_of(df, 0, "t")["pos"] == tags_of(df, 0, "'")["pos"] == "PART"
    assert tags_of(df, 0, "t")["dep"] == "neg"
    # "won't" is spaCy's "wo" + "n't": the store's "won" is not the verb "won", so no sentiment
    won = tags_of(df, 2, "won")
    assert won["pos"] == "AUX" and won["sentiment"] is None


def test_hyphens_numbers_sentiment_and_suffixes(hand):
    df, _ = hand
    assert [tags_of(df, 0, w)["tag"] for w in ("well", "-", "known")] == ["RB", "HYPH", "VBN"]
    assert [tags_of(df, 2, w)["ner"] for w in ("3", "June", "2020")] == ["DATE"] * 3
    wonderful = tags_of(df, 1, "wonderful")
    assert (wonderful["pos"], wonderful["sentiment"], wonderful["suffix"]) == ("ADJ", "positive", "-ful")
    assert tags_of(df, 1, "breaking")["suffix"] == "-ing"
    assert tags_of(df, 1, "story")["sentiment"] is None  # not in VADER's lexicon


def test_prediction_rows_carry_the_predicted_and_true_class_only(hand):
    df, _ = hand
    pred = df[df["kind"] == "pred"]
    assert pred["predicted"].tolist() == ["pos", "neg", "pos"]
    assert pred["true"].tolist() == ["neg", "pos", "neg"]
    assert pred[["pos", "ner", "casing", "sentiment"]].isna().all().all()
    assert df.loc[df["kind"] == "word", ["predicted", "true"]].isna().all().all()


def test_word_level_tags():
    assert [casing(w) for w in ("film", "Film", "NASA", "iPhone", "2020", "...", "x2")] == \
        ["lower", "Title", "UPPER", "mixed", "number", "punct", "lower"]
    assert [suffix(w) for w in ("quickly", "sing", "nothing", "happiness", "red", "3ly")] == \
        ["-ly", None, "-ing", "-ness", None, None]
    assert [position(0, 5), position(4, 5), position(2, 5), position(0, 1)] == ["first", "last", None, "first"]
    lex = {"great": 3.1, "bad": -2.5, "okay": 0.2}
    assert [polarity(w, lex) for w in ("Great", "bad", "okay", "film")] == ["positive", "negative", "neutral", None]


def test_store_words_are_found_in_their_text_in_order():
    text = "the cat saw the other cat"
    assert word_spans(text, ["the", "cat", "saw", "the", "other", "cat"]) == \
        [(0, 3), (4, 7), (8, 11), (12, 15), (16, 21), (22, 25)]
    assert word_spans("a b", ["a", "zzz", "b"]) == [(0, 1), None, (2, 3)]


def test_a_corpus_in_another_language_keeps_the_word_tag_sets(minilm):
    texts = ["Der Film war leider viel zu lang und ziemlich langweilig.",
             "Die Schauspieler spielen wunderbar, aber die Handlung ist schwach."]
    tok = store_rows(minilm, texts)
    ann = annotate(pd.DataFrame({"text_id": [0, 1], "text": texts}), tok, ["neg", "pos"], np.array([0, 1]),
                   progress=False)
    assert set(ann.missing) == {"pos", "tag", "ner", "dep", "sentiment"}
    assert "not read as English" in ann.missing["pos"]
    assert ann.table[["pos", "ner", "sentiment"]].isna().all().all()
    words = (tok["kind"] == "word").to_numpy()
    assert ann.table.loc[words, "casing"].notna().all()
    assert ann.table.loc[tok["word_index"] == 0, "position"].eq("first").all()


def synthetic(adj_share: float, n: int = 100, unknown: int = 0):
    """Two concepts of n tagged members each: concept 0 with `adj_share` adjectives (the rest
    nouns) and `unknown` untagged members, concept 1 all nouns."""
    n_adj = int(round(adj_share * n))
    pos = ["ADJ"] * n_adj + ["NOUN"] * (n - n_adj) + [None] * unknown + ["NOUN"] * n
    assign = np.array([0] * (n + unknown) + [1] * n)
    tags = pd.DataFrame({"pos": pd.Categorical(pos)})
    return assign, tags


@pytest.mark.parametrize("share, aligned", [(0.95, True), (0.9, True), (0.8, False)])
def test_a_concept_is_aligned_with_adj_only_above_the_threshold(share, aligned):
    assign, tags = synthetic(share)
    p = ta.concept_profiles(assign, 2, tags, np.arange(len(assign)))
    assert ta.concepts_aligned_with(p, "POS: ADJ") == ([0] if aligned else [])
    assert ta.concepts_aligned_with(p, "POS: NOUN") == [1]
    names = ta.tag_names(p)
    assert (names.get(0) == "ADJ (POS, from tags)") == aligned
    counts = ta.alignment_counts(p, np.bincount(assign)).set_index("tag_set")
    assert counts.loc["pos", "aligned"] == (2 if aligned else 1)
    assert counts.loc["pos", "rows"] == pytest.approx(1.0 if aligned else 0.5)


def test_too_many_untagged_members_or_too_few_members_leave_a_concept_unaligned():
    assign, tags = synthetic(1.0, n=50, unknown=40)  # 44% untagged
    p = ta.concept_profiles(assign, 2, tags, np.arange(len(assign)))
    assert ta.concepts_aligned_with(p, "POS: ADJ") == []
    assign, tags = synthetic(1.0, n=50, unknown=30)  # 37.5% untagged: aligned
    p = ta.concept_profiles(assign, 2, tags, np.arange(len(assign)))
    assert ta.concepts_aligned_with(p, "POS: ADJ") == [0]
    assign, tags = synthetic(1.0, n=ta.MIN_MEMBERS - 1)
    p = ta.concept_profiles(assign, 2, tags, np.arange(len(assign)))
    assert ta.concepts_aligned_with(p, "POS: ADJ") == []
    with pytest.raises(RunError, match="threshold"):
        ta.concept_profiles(assign, 2, tags, np.arange(len(assign)), threshold=1.5)


def test_only_train_rows_shape_a_concepts_tags():
    assign, tags = synthetic(0.8)
    p = ta.concept_profiles(assign, 2, tags, np.flatnonzero(tags["pos"].to_numpy() != "NOUN"))
    assert ta.concepts_aligned_with(p, "POS: ADJ") == [0]  # the nouns left out, the adjectives are all of it


@pytest.mark.slow
def test_the_annotate_stage_report_and_names_on_the_small_run(apptest_run):
    run = apptest_run
    tags = run.tags
    assert tags is not None and len(tags) == run.store.n_rows
    words = (run.store.tokens["kind"] == "word").to_numpy()
    assert tags.loc[words, "pos"].notna().mean() > 0.9
    assert tags.loc[~words, "predicted"].notna().all()
    table = ta.alignment_table(run)
    assert set(table["method"]) == set(run.methods_built())
    for m in run.methods_built():
        cs = run.concepts(m)
        p = run.tag_profiles(m, cs=cs)
        for k, name in cs.tag_names.items():
            # a prediction concept is named by its members' classes and sentences, not by a tag
            # a word concept keeps its words, the tag beside them
            assert (cs.label(k) == f"c{k}: {cs.name(k)} — {name}" or cs.labels.name(k)
                    or is_prediction_concept(cs.summary.loc[k]))
            tag_set, tag = next((s, t) for s, t, al in zip(p.loc[p.concept == k, "tag_set"],
                                                           p.loc[p.concept == k, "tag"],
                                                           p.loc[p.concept == k, "aligned"]) if al and name.startswith(t))
            assert k in ta.concepts_aligned_with(p, ta.tag_label(tag_set, tag))
    code, out, err = run_cli("report", "--run", run.dir.name, "--cache-dir", str(run.dir.parent.parent))
    assert code == 0, err
    assert "Concepts aligned with linguistic tags" in out and "| POS |" in out
    code, out, err = run_cli("report", "--run", run.dir.name, "--cache-dir", str(run.dir.parent.parent),
                             "--align-threshold", "1.5")
    assert code == 2 and "threshold must be a share" in err and "Traceback" not in err


@pytest.mark.slow
def test_the_concepts_page_filters_by_tag_and_cards_show_tags(cache_env):
    from tests.ui.test_pages import page, rendered

    # a method with an aligned tag besides casing (on 300 texts and K = 20 not every method has one)
    method, p, label = next((m, p, lab) for m in cache_env.methods_built() for p in [cache_env.tag_profiles(m)]
                            for lab in ta.aligned_tag_labels(p) if not lab.startswith("casing"))
    at = rendered(page("concepts", method=method), "concepts")
    f = next(s for s in at.sidebar.selectbox if s.label == "Aligned with tag")
    assert f.options[0] == ANY_TAG and f"{label} ({len(ta.concepts_aligned_with(p, label))})" in f.options
    f.select(label).run()
    want = ta.concepts_aligned_with(p, label)
    cards = [m.value for m in at.markdown if m.value.startswith("**c")]
    assert [int(c[3:].split(":")[0]) for c in cards] == want[:24]
    tag = label.split(": ", 1)[1]
    shown = [c.value for c in at.caption if c.value.startswith("Tags:")]
    assert len(shown) == len(cards) and all(tag in s and "✓" in s for s in shown)


@pytest.mark.slow
def test_the_stored_alignment_table_is_reused_only_for_the_same_inputs(apptest_run, tmp_path):
    from pandas.testing import assert_frame_equal

    from tests.runcopy import linked_copy

    run = linked_copy(apptest_run.dir, tmp_path)
    fresh = ta.alignment_table(run)
    first = ta.cached_alignment_table(run)
    assert (run.dir / ta.ALIGNMENT_FILE).exists()
    assert_frame_equal(first, fresh)
    stored = json.loads((run.dir / ta.ALIGNMENT_FILE).read_text())
    i = stored["table"]["columns"].index("aligned")
    stored["table"]["data"] = [[*row[:i], -1, *row[i + 1:]] for row in stored["table"]["data"]]  # a marked copy
    (run.dir / ta.ALIGNMENT_FILE).write_text(json.dumps(stored))
    assert (ta.cached_alignment_table(run)["aligned"] == -1).all()  # same inputs: read back, not computed
    assert_frame_equal(ta.cached_alignment_table(run, 0.8), ta.alignment_table(run, 0.8))  # another threshold
    stored["key"]["files"]["vqlc"] = {"methods/vqlc/assignments.npy": {"sha256": "another build"}}
    (run.dir / ta.ALIGNMENT_FILE).write_text(json.dumps(stored))
    assert_frame_equal(ta.cached_alignment_table(run), fresh)  # a rebuilt method: computed again


def test_card_lines_give_every_concepts_top_tags_in_one_pass():
    rng = np.random.default_rng(0)
    tags = pd.DataFrame({"pos": pd.Categorical(rng.choice(["ADJ", "NOUN", "VERB"], 600, p=[0.6, 0.3, 0.1])),
                         "casing": pd.Categorical(rng.choice(["lower", "Title"], 600, p=[0.9, 0.1]))})
    assign = rng.integers(0, 6, 600)
    p = ta.concept_profiles(assign, 6, tags, np.arange(600))
    lines = ta.card_lines(p)
    assert lines and lines == {k: line for k in range(6) if (line := ta.tags_line(ta.top_tags(p, k)))}


def test_the_alignment_rule_is_written_from_its_constants_and_nowhere_else():
    import re

    from tests.conftest import ROOT

    rule = ta.ALIGNMENT_RULE
    assert f"{ta.ALIGN_THRESHOLD:.0%}" in rule and f"{ta.MAX_UNKNOWN:.0%}" in rule and f"{ta.MIN_MEMBERS} tagged" in rule
    for path in [*(ROOT / "pages").glob("*.py"), *(ROOT / "vqlc_ui").glob("*.py")]:
        text = path.read_text()
        assert not re.search(r"\d+% of (its|whose) tagged", text), f"{path.name} retypes the alignment rule"
