"""A view's state as a link's query parameters and back (vqlc_core/views/links.py), without
Streamlit: what a link writes, what it reads, and how it refuses what is not there."""

from __future__ import annotations

import re

import pytest

from vqlc_core.base.runio import RunError
from vqlc_core.views.links import check_concept, check_method, decode, encode, format_ablate, link, parse_ablate

ONE_SENTENCE = re.compile(r"^[^.]+\.$")


def test_ablated_concepts_are_written_as_method_and_id_and_read_back():
    chosen = {"vqlc": [5, 3], "kmeans": [2]}
    assert format_ablate(chosen) == "vqlc:3,vqlc:5,kmeans:2"
    assert parse_ablate(format_ablate(chosen)) == {"vqlc": [3, 5], "kmeans": [2]}
    assert parse_ablate("vqlc:3,nonsense,kmeans:x,:4, lacoat:7") == {"vqlc": [3], "lacoat": [7]}


def test_an_ablated_id_that_is_not_a_plain_whole_number_is_left_out():
    assert parse_ablate("vqlc:²,vqlc:-1,vqlc:1.5,vqlc:٣,vqlc: 8 ") == {"vqlc": [8]}  # '²'.isdigit() is True


def test_a_link_holds_only_what_the_view_has():
    params = encode({"run": "r", "method": None, "concept": 4, "text": "", "ablate": {"vqlc": []}})
    assert params == {"run": "r", "concept": "4", "text": ""}
    assert link("http://127.0.0.1:8501/explain", {"run": "r", "text": "a <b> & c"}) == \
        "http://127.0.0.1:8501/explain?run=r&text=a+%3Cb%3E+%26+c"
    assert link(None, {}) == ""


def test_a_view_survives_its_link():
    state = {"run": "r", "method": "vqlc", "concept": 4, "text": "a <b> & c", "ablate": {"vqlc": [5, 3]}}
    view, refused = decode(encode(state), runs=["r"])
    assert refused is None
    assert view == {"run": "r", "method": "vqlc", "concept": "4", "text": "a <b> & c", "ablate": {"vqlc": [3, 5]}}
    assert list(encode(state)) == ["run", "method", "concept", "text", "ablate"]


def test_a_link_to_a_run_that_is_not_here_keeps_its_method_and_text_only():
    view, refused = decode({"run": "gone", "method": "kmeans", "concept": "3", "text": "hi", "ablate": "vqlc:1"},
                           runs=["default"])
    assert view == {"method": "kmeans", "text": "hi"}
    assert refused == "The link names run 'gone', which is not built here; choose a run in the sidebar."
    assert ONE_SENTENCE.match(refused)


def test_parameters_a_link_does_not_write_are_left_out():
    view, refused = decode({"concept": "2", "page": "x", "utm_source": "mail"}, runs=[])
    assert (view, refused) == ({"concept": "2"}, None)


@pytest.mark.parametrize("value", ["3", " 3 ", "0", "19"])
def test_a_concept_of_the_method_is_its_id(value):
    assert check_concept(value, 20, "vqlc", "r") == int(value)


@pytest.mark.parametrize("value", ["20", "99", "c2", "-1", "1e3", "²", "", "3; drop"])
def test_a_concept_that_is_not_the_methods_is_refused_in_one_sentence(value):
    with pytest.raises(RunError) as e:
        check_concept(value, 20, "vqlc", "r")
    assert str(e.value).startswith(f"Concept '{value}' does not exist: method 'vqlc' of run 'r' has concepts 0 to 19")
    assert ONE_SENTENCE.match(str(e.value))


def test_a_method_the_run_has_not_finished_is_refused_in_one_sentence():
    check_method("vqlc", "vqlc", "r")
    with pytest.raises(RunError, match=r"^Run 'r' has no finished method 'sparse'; showing 'vqlc' instead\.$"):
        check_method("sparse", "vqlc", "r")
