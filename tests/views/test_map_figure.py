"""What the Codebook map page plots of a stored map: marker diameters that grow with a concept's
size and stay within their bounds, hover texts (labels, top words, class names) escaped, since
plotly reads tags there and the words come from the corpus, hover fields named in words, and
class colours that differ in hue."""

from __future__ import annotations

import colorsys
import json

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgb

from vqlc_core.methods.concepts import ConceptSet, summarize
from vqlc_core.views.maps import (CLASS_COLORS, MARKER_MAX, MARKER_MIN, concept_map, hover_text, map_figure,
                                  marker_size, plot_frame)

EVIL = "<script>alert(1)</script>"


def test_marker_size_grows_with_concept_size_within_its_bounds():
    sizes = np.array([0, 1, 2, 10, 100, 1_000, 10_000])
    m = marker_size(sizes)
    assert m[0] == m[1] == MARKER_MIN and m[-1] == MARKER_MAX
    assert np.all(np.diff(m[1:]) > 0)  # strictly larger for every larger concept
    assert m[-1] / m[1] > 4  # the big concepts stand out


def test_marker_size_keeps_the_order_of_unsorted_sizes():
    sizes = np.random.default_rng(0).integers(0, 5_000, size=200)
    m = marker_size(pd.Series(sizes))
    assert ((MARKER_MIN <= m) & (m <= MARKER_MAX)).all()
    order = np.argsort(sizes, kind="stable")
    assert np.all(np.diff(m[order]) >= 0)
    assert np.all(np.diff(m[order])[np.diff(sizes[order]) > 0] > 0)


def test_marker_size_of_no_concepts_empty_ones_and_custom_bounds():
    assert marker_size([]).shape == (0,)
    assert marker_size([0, 0, 1]).tolist() == [MARKER_MIN] * 3  # nothing to scale: all at the floor
    m = marker_size([1, 16, 81], smallest=10, largest=40)
    assert m.tolist() == pytest.approx([10, 25, 40])  # fourth roots 1, 2, 3 spread evenly


def test_hover_text_escapes_tags_and_ampersands_and_keeps_the_rest():
    assert hover_text([EVIL, "a & b", "don't", 3]) == \
        ["&lt;script&gt;alert(1)&lt;/script&gt;", "a &amp; b", "don't", "3"]
    assert hover_text([]) == []


def evil_concepts() -> ConceptSet:
    """Three concepts over eight words: c0 (5 words, top word a script tag), c1 empty, c2 (3 words);
    the second class name is markup."""
    words = [EVIL] * 4 + ["fine"] + ["ok"] * 3
    assignments = np.array([0] * 5 + [2] * 3)
    tokens = pd.DataFrame({"text_id": np.arange(8), "word_index": 0, "word": words, "kind": "word",
                           "label": [1] * 5 + [0] * 3})
    classes = ["neg", "<b>pos</b>"]
    vectors = np.random.default_rng(0).normal(size=(3, 8)).astype(np.float32)
    return ConceptSet("kmeans", assignments, vectors, summarize(tokens, assignments, 3, classes), classes)


def test_plot_frame_escapes_every_hover_text_and_sizes_the_markers():
    cs = evil_concepts()
    points = concept_map(cs)
    before = points.copy()
    df = plot_frame(points, cs.label)
    pd.testing.assert_frame_equal(points, before)  # the stored map is not changed
    assert df["concept"].tolist() == [0, 2]
    assert df["top_words"].iloc[0].startswith("&lt;script&gt;alert(1)&lt;/script&gt;")
    assert df["name"].tolist() == ["c0: &lt;script&gt;alert(1)&lt;/script&gt;, fine", "c2: ok"]
    assert df["dominant_class"].tolist() == ["&lt;b&gt;pos&lt;/b&gt;", "neg"]
    assert df["marker"].tolist() == [MARKER_MAX, pytest.approx(MARKER_MIN + (MARKER_MAX - MARKER_MIN)
                                                               * (3**0.25 - 1) / (5**0.25 - 1))]


def test_the_plotted_map_carries_no_raw_tag():
    cs = evil_concepts()
    df = plot_frame(concept_map(cs), cs.label)
    fig = map_figure(df, cs.class_names)  # as the page draws it
    spec = json.loads(fig.to_json())
    text = json.dumps([{k: t.get(k) for k in ("customdata", "hovertext", "hovertemplate", "name")}
                       for t in spec["data"]])
    assert "&lt;script&gt;" in text and "&lt;b&gt;pos" in text
    assert "<script" not in text and "<b>pos" not in text


def test_the_map_hover_names_each_field_in_words_and_keeps_the_concept_id_first(apptest_run):
    cs = apptest_run.concept_set("vqlc")
    df = plot_frame(apptest_run.concept_map("vqlc"), cs.label)
    fig = map_figure(df, cs.class_names)
    for t in fig.data:
        assert "=" not in t.hovertemplate and "_" not in t.hovertemplate.replace("customdata", "")
        assert all(f"{name}: " in t.hovertemplate for name in ("top words", "members", "purity", "dominant class"))
        assert t.hovertemplate.startswith("<b>%{hovertext}</b>")  # the concept's name first
    assert sorted(int(c[0]) for t in fig.data for c in t.customdata) == sorted(df["concept"])  # a click opens it
    assert fig.layout.legend.title.text == "dominant class"


def hue(colour: str) -> float:
    return colorsys.rgb_to_hls(*to_rgb(colour))[0] * 360


def test_the_classes_differ_in_hue_and_keep_their_colour_across_methods(apptest_run):
    classes = apptest_run.class_names
    colours = {}
    for m in apptest_run.methods_built():
        cs = apptest_run.concept_set(m)
        fig = map_figure(plot_frame(apptest_run.concept_map(m), cs.label), classes)
        for t in fig.data:
            assert colours.setdefault(t.name, t.marker.color) == t.marker.color, (m, t.name)
    assert set(colours) == set(classes)
    a, b = (colours[c] for c in classes[:2])
    assert abs(hue(a) - hue(b)) % 360 > 90, (a, b)  # not two shades of one hue
    assert abs(colorsys.rgb_to_hls(*to_rgb(a))[1] - colorsys.rgb_to_hls(*to_rgb(b))[1]) > 0.1  # nor one lightness
    assert len(set(CLASS_COLORS)) == len(CLASS_COLORS)
