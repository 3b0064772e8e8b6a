"""Which concepts the Concepts page's grid shows and in what order (vqlc_core/views/grid.py),
without Streamlit: the filter by aligned tag and every sort, on hand-made concepts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from vqlc_core.base.runio import RunError
from vqlc_core.evaluate import tag_alignment as ta
from vqlc_core.views import grid

# Five concepts of 20 train members each: 0 and 2 all adjectives, 1 all nouns (all title case),
# 3 half and half, 4 has no member tagged.
POS = [["ADJ"] * 20, ["NOUN"] * 20, ["ADJ"] * 19 + ["NOUN"], ["ADJ"] * 10 + ["NOUN"] * 10, [None] * 20]
SUMMARY = pd.DataFrame({"size": [20, 20, 5, 40, 20], "purity": [0.9, 0.6, np.nan, 0.7, 0.6]})


@pytest.fixture(scope="module")
def profiles() -> pd.DataFrame:
    assign = np.repeat(np.arange(5), 20)
    casing = ["Title" if k == 1 else "lower" for k in assign]
    tags = pd.DataFrame({"pos": pd.Categorical(sum(POS, [])), "casing": pd.Categorical(casing)})
    return ta.concept_profiles(assign, 5, tags, np.arange(len(assign)))


def test_the_aligned_index_holds_every_aligned_tag_most_concepts_first(profiles):
    index = grid.aligned_index(profiles)
    assert list(index)[:2] == ["casing: lower", "POS: ADJ"]
    assert index["casing: lower"] == [0, 2, 3, 4] and index["POS: ADJ"] == [0, 2]
    assert index["POS: NOUN"] == [1] and index["casing: Title"] == [1] and len(index) == 4
    assert list(index) == ta.aligned_tag_labels(profiles)
    assert all(index[label] == ta.concepts_aligned_with(profiles, label) for label in index)


def test_the_tag_filter_keeps_the_aligned_concepts_in_the_order_given(profiles):
    index = grid.aligned_index(profiles)
    assert grid.with_tag([4, 3, 2, 1, 0], index, "POS: ADJ") == [2, 0]
    assert grid.with_tag([4, 3, 2, 1, 0], index, grid.ANY_TAG) == [4, 3, 2, 1, 0]
    assert grid.with_tag([0, 1, 2], index, "POS: VERB") == []  # a tag no concept is aligned with


@pytest.mark.parametrize("how, order", [
    ("id", [3, 0, 4, 1, 2]),  # the order given
    ("size", [3, 0, 1, 4, 2]),  # ties by id
    ("purity", [0, 3, 1, 4, 2]),  # an unknown value last
    ("alignment", [0, 1, 2, 3, 4]),  # casing left out: concept 1's Title does not count; 4 has no tag
])
def test_a_sort_puts_the_largest_first_ties_by_id_and_unknown_values_last(profiles, how, order):
    assert grid.sorted_by([3, 0, 4, 1, 2], grid.sort_values(how, SUMMARY, profiles)) == order


def test_sorting_by_faithfulness_reads_the_concepts_confidence_drops():
    drops = pd.Series({2: 0.30, 0: 0.10, 4: 0.30})  # concepts 1 and 3 are no test sentence's prediction concept
    assert grid.sorted_by([0, 1, 2, 3, 4], grid.sort_values("faithfulness", SUMMARY, faithfulness=drops)) == \
        [2, 4, 0, 1, 3]
    with pytest.raises(ValueError, match="needs the concepts' faithfulness"):
        grid.sort_values("faithfulness", SUMMARY)


def test_a_run_without_tags_sorts_by_alignment_as_by_id():
    assert grid.sorted_by([3, 0, 4], grid.sort_values("alignment", SUMMARY, profiles=None)) == [0, 3, 4]


def test_an_unknown_sort_is_one_sentence():
    with pytest.raises(RunError, match=r"^Unknown sort 'colour'; choose one of id, size, purity, alignment, "
                                       r"faithfulness\.$"):
        grid.sort_values("colour", SUMMARY)
