"""A view's state in its link (vqlc_ui/share.py), page by page with AppTest on a private linked copy
of the apptest run: a link opens its run, method, concept, input and ablations; a page puts its
view back in the URL; a link to something that is not there is one sentence; case-study pins
are saved with the run, so a new session sees them, and they can be removed. The link's words
themselves (vqlc_core.views.links) are tested without Streamlit in test_links.py."""

from __future__ import annotations

import html
import re

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT
from tests.runcopy import linked_copy
from vqlc_core.views.links import parse_ablate
from vqlc_core.views.pins import load_pins
from vqlc_ui import plain

SENTENCE = "the plot is thin but the actors seem to enjoy themselves"  # plain words, one word each


@pytest.fixture
def run(apptest_run, tmp_path, monkeypatch):
    """The apptest run in a cache of its own (its ui/ folder too), as the dashboard reads it."""
    monkeypatch.setenv("VQLC_CACHE_DIR", str(tmp_path))
    return linked_copy(apptest_run.dir, tmp_path)


def opened(page: str, **params) -> AppTest:
    """A new session of `page` opened from a link with query parameters `params`."""
    at = AppTest.from_file(str(ROOT / "pages" / f"{page}.py"), default_timeout=180)
    at.query_params.update(params)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def shown_link(at: AppTest) -> str:
    """The link the sidebar shows (as HTML, escaped, beside its copy button: `share.link_html`)."""
    (code,) = [html.unescape(re.search(r"<code>(.*?)</code>", h.value, re.S).group(1)) for h in at.sidebar.html
               if 'class="vqlc-link"' in h.value]
    return code


@pytest.mark.slow
def test_a_link_opens_its_run_method_and_concept(run):
    at = opened("concepts", run="apptest", method="kmeans", concept="3")
    assert at.sidebar.selectbox[1].value == "kmeans"
    assert at.subheader[0].value == plain(run.concept_set("kmeans").label(3, 5))  # shown as it is, no Markdown
    assert dict(at.query_params) == {"run": "apptest", "method": "kmeans", "concept": "3"}
    assert shown_link(at) == "?run=apptest&method=kmeans&concept=3"  # AppTest has no address; a browser adds it


@pytest.mark.slow
def test_a_link_opens_its_input_with_its_ablations(run):
    first = opened("explain", run="apptest", method="vqlc", text=SENTENCE)
    toggles = first.toggle
    assert len(toggles) >= 2
    toggles[1].set_value(True)
    first.run()
    key = toggles[1].key  # abl_vqlc_<concept>_<text tag>
    assert dict(first.query_params) == {"run": "apptest", "method": "vqlc", "text": SENTENCE,
                                        "ablate": f"vqlc:{key.split('_')[2]}"}

    again = opened("explain", **first.query_params)  # a new session, as a new browser opens the link
    assert again.text_area[0].value == SENTENCE
    assert [(t.key, t.value) for t in again.toggle] == [(t.key, t.value) for t in first.toggle]
    assert metrics(again) == metrics(first)
    assert "Ablated 1: prediction" in metrics(again)


@pytest.mark.slow
def test_compare_keeps_each_methods_ablations_in_its_link(run):
    first = opened("compare", run="apptest", text=SENTENCE)
    by_method = {t.key.split("_")[1]: t for t in reversed(first.toggle)  # the first Ablate toggle of each method
                 if t.key.startswith("abl_")}
    for t in by_method.values():
        t.set_value(True)
    first.run()
    asked = parse_ablate(first.query_params["ablate"])
    assert sorted(asked) == sorted(by_method) and all(len(ids) == 1 for ids in asked.values())
    again = opened("compare", **first.query_params)
    assert [(t.key, t.value) for t in again.toggle] == [(t.key, t.value) for t in first.toggle]


ONE_SENTENCE = re.compile(r"^[^.]+\.$")


@pytest.mark.slow
@pytest.mark.parametrize("page, params, said", [
    ("concepts", {"run": "nope", "method": "vqlc"}, "The link names run 'nope', which is not built here"),
    ("explain", {"run": "apptest", "method": "sparse", "text": SENTENCE},
     "Run 'apptest' has no finished method 'sparse'; showing 'vqlc' instead"),
    ("concepts", {"run": "apptest", "method": "vqlc", "concept": "99"},
     "Concept '99' does not exist: method 'vqlc' of run 'apptest' has concepts 0 to 39"),
    ("codebook_map", {"run": "apptest", "method": "vqlc", "concept": "c2"}, "Concept 'c2' does not exist"),
], ids=["run", "method", "concept out of range", "concept not a number"])
def test_a_link_to_something_missing_is_one_sentence_and_the_page_still_shows(run, page, params, said):
    at = opened(page, **params)
    (warning,) = [w.value for w in at.warning]
    assert warning.startswith(said) and ONE_SENTENCE.match(warning), warning
    assert at.title and not at.title[0].value.startswith("Build")
    assert "concept" not in at.query_params  # the link the page offers now holds what it shows


@pytest.mark.slow
def test_pins_are_saved_with_the_run_seen_by_a_new_session_and_removable(run):
    at = opened("explain", run="apptest", method="vqlc", text=SENTENCE)
    at.button(key="pin_explain").click().run()
    assert [(p["run"], p["method"], p["text"]) for p in load_pins(run.dir)] == [("apptest", "vqlc", SENTENCE)]
    at.button(key="pin_explain").click().run()
    assert any("Already pinned" in t.value for t in at.toast) and len(load_pins(run.dir)) == 1

    study = opened("case_study", run="apptest")  # another session: the pin comes from the file
    assert study.subheader[0].value.startswith("Pin 1: vqlc")
    assert {b.label for b in study.get("download_button")} >= {"Table (CSV)", "Everything (zip with report.md)"}
    study.button(key="unpin1").click().run()
    assert load_pins(run.dir) == []
    assert "Nothing is pinned from run 'apptest' yet" in study.info[0].value
