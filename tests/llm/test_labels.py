"""Concept labels where concepts appear: a label (written by `vqlc label`, or by the user on a
concept's view) names its concept on the cards, the map, the explanations, Compare and the HTML
export, an edited one marked as such; labels of an earlier build of a method's concepts are not
shown and are moved aside, never merged; user text in a label is escaped. On private linked
copies of the real apptest run; tests/llm/test_judge.py writes labels with the real local model."""

from __future__ import annotations

import html
import json

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT
from tests.runcopy import linked_copy
from vqlc_core.views import browse, export_html
from vqlc_core.llm import judge_results, labels, runfacts
from vqlc_core.pipeline.run import Run
from vqlc_core.base.runio import RunError
from vqlc_ui import plain
from vqlc_core.methods.concepts import is_prediction_concept

EVIL = "<b>bold</b> [link](http://x.invalid)"


@pytest.fixture
def run(apptest_run, tmp_path):
    return linked_copy(apptest_run.dir, tmp_path / "cache")


def a_word_concept(run: Run, method: str = "vqlc") -> int:
    cs = run.concept_set(method)
    return next(k for k in range(cs.n_concepts) if cs.sizes[k] and not is_prediction_concept(cs.summary.loc[k]))


def own_manifest(run: Run) -> dict:
    """Replace the copy's link to apptest's manifest by a file of its own; return its contents."""
    data = json.loads((run.dir / "manifest.json").read_text())
    (run.dir / "manifest.json").unlink()
    (run.dir / "manifest.json").write_text(json.dumps(data))
    return data


def test_a_written_label_names_its_concept_and_is_marked_edited(run):
    k = a_word_concept(run)
    cs = run.concept_set("vqlc")
    before = cs.label(k)
    assert before.startswith(f"c{k}: ") and "(edited)" not in before
    labels.set_label(run.dir, "vqlc", k, "  negation   words ", "Words that deny.", "mixed")
    # the same loaded concept set sees the new file: no reload needed, in this or another process
    assert cs.label(k) == cs.label(k, 5) == f"c{k}: negation words (edited)"
    assert run.concept_set("vqlc").label(k) == f"c{k}: negation words (edited)"
    assert run.concept_set("kmeans").label(k) != cs.label(k)  # labels belong to one method
    other_seed = run.cfg.method_seeds[1:]
    if other_seed:  # another seed's concepts are other concepts
        assert "(edited)" not in run.concept_set("vqlc", seed=other_seed[0]).label(k)
    entry = labels.load_labels(run.dir, "vqlc")[k]
    assert (entry["status"], entry["description"], entry["edited"]) == ("mixed", "Words that deny.", True)
    assert labels.label_facts(entry) == "Label written by hand. Words that deny."
    frame = labels.labels_frame(labels.load_labels(run.dir, "vqlc"))
    assert frame.set_index("concept").loc[k, "edited"] and pd.isna(frame.set_index("concept").loc[k, "agreement"])
    assert f"| {k} | mixed | negation words (edited) | – | – | Words that deny. |" in \
        labels.labels_table(labels.load_labels(run.dir, "vqlc"))


def test_a_label_the_model_agreed_on_shows_its_status_agreement_and_detection(run):
    k = a_word_concept(run)
    entry = {"concept": k, "kind": "word", "status": "clear", "name": "film words", "description": "Film terms.",
             "agreement": 2, "samples": [], "unparseable": 1, "n_shown": 20, "edited": False,
             "detection": {"balanced_accuracy": 0.75, "low": 0.5, "high": 1.0, "members": 4, "non_members": 4,
                           "unparseable": 0}}
    labels.save_labels(run.dir, "vqlc", {k: entry})
    assert run.concept_set("vqlc").label(k) == f"c{k}: film words"
    assert labels.label_facts(entry) == ("LLM label: clear, 2/3 samples agree, detection 0.75 [0.50, 1.00] balanced "
                                         "accuracy on 4 + 4 held-out contexts. Film terms.")
    assert "| film words | 2/3 | 0.75 [0.50, 1.00] |" in labels.labels_table({k: entry})
    no_name = {**entry, "name": None, "agreement": 1, "detection": None}
    labels.save_labels(run.dir, "vqlc", {k: no_name})
    assert "(edited)" not in run.concept_set("vqlc").label(k) and "film" not in run.concept_set("vqlc").label(k)
    assert labels.label_facts(no_name) is None
    assert f"| {k} | clear | – | 1/3 | – | Film terms. |" in labels.labels_table({k: no_name})  # no name kept


def test_an_explanation_shows_the_labels_of_now_not_of_when_it_was_computed(run):
    ex = run.explainer().explain("the plot is thin but the actors seem to enjoy themselves").to_dict()
    k = ex["methods"]["vqlc"]["prediction_concepts"][0]["concept"]
    s = ex["salient"][0]["concepts"]["vqlc"]["concept"]
    labels.set_label(run.dir, "vqlc", k, "prediction concept")
    if s != k:
        labels.set_label(run.dir, "vqlc", s, "salient concept")
    cs = run.concept_set("vqlc")
    now = browse.relabel(ex, {"vqlc": cs.label})
    assert now["methods"]["vqlc"]["prediction_concepts"][0]["label"] == f"c{k}: prediction concept (edited)"
    assert now["salient"][0]["concepts"]["vqlc"]["label"] == cs.label(s) and "(edited)" in cs.label(s)
    listed = {c["concept"]: c["label"] for c in now["methods"]["vqlc"]["contributions"]}
    assert listed[s] == cs.label(s)  # the attribution's list (the input's word concepts), named as now
    assert k not in listed or k in ex["methods"]["vqlc"]["word_concepts"]  # a prediction concept is no part of it
    assert now["methods"]["kmeans"] == ex["methods"]["kmeans"]  # other methods as they were
    shown = {c["concept"]: c["label"] for c in browse.shown_concepts(now, "vqlc")}
    assert shown[k] == cs.label(k)
    assert ex["methods"]["vqlc"]["prediction_concepts"][0]["label"] != cs.label(k)  # the original is untouched


def test_labels_of_an_earlier_build_are_not_shown_and_are_moved_aside_not_merged(run):
    k = a_word_concept(run)
    labels.set_label(run.dir, "vqlc", k, "old concept")
    digest = runfacts.concepts_digest(run.dir, "vqlc")
    assert digest and json.loads(labels.labels_path(run.dir, "vqlc").read_text())[labels.DIGEST] == digest
    assert labels.labels_state(run.dir, "vqlc") == "current"

    manifest = own_manifest(run)  # the method is rebuilt: its assignments have another digest
    manifest["stages"]["vqlc"]["files"]["methods/vqlc/assignments.npy"]["sha256"] = "f" * 64
    (run.dir / "manifest.json").write_text(json.dumps(manifest))
    assert labels.labels_state(run.dir, "vqlc") == "stale"
    assert labels.load_labels(run.dir, "vqlc") == {} and "old concept" not in run.concept_set("vqlc").label(k)

    labels.set_label(run.dir, "vqlc", k + 1, "new concept")
    assert labels.load_labels(run.dir, "vqlc").keys() == {k + 1}  # the old label was not merged in
    aside = run.dir / "llm" / f"labels_vqlc.{digest[:12]}.json"
    assert json.loads(aside.read_text())["concepts"][str(k)]["name"] == "old concept"  # nothing lost

    res = {"concepts": {"vqlc": digest, "kmeans": runfacts.concepts_digest(run.dir, "kmeans"), "lacoat": None}}
    assert judge_results.stale_methods(run.dir, res) == ["vqlc"]


def test_a_bad_label_or_labels_file_is_one_sentence(run):
    for name, phrase in (("   ", "needs a name"), ("x" * 81, "at most 80 characters")):
        with pytest.raises(RunError, match=phrase):
            labels.set_label(run.dir, "vqlc", 0, name)
    with pytest.raises(RunError, match="status is one of"):
        labels.set_label(run.dir, "vqlc", 0, "fine", status="great")
    path = labels.labels_path(run.dir, "vqlc")
    path.parent.mkdir(exist_ok=True)
    path.write_text("[1, 2")
    with pytest.raises(RunError, match="is not valid") as err:
        labels.load_labels(run.dir, "vqlc")
    assert "\n" not in str(err.value)
    assert run.concept_set("vqlc").label(0).startswith("c0: ")  # the views still show top words


def test_the_html_export_names_a_labelled_concept_and_escapes_it(run):
    k = a_word_concept(run)
    labels.set_label(run.dir, "vqlc", k, EVIL, "a <script>alert(1)</script> description")
    page = export_html.render(run, "vqlc")
    assert html.escape(f"c{k}: {EVIL} (edited)") in page
    assert "Label written by hand. a &lt;script&gt;alert(1)&lt;/script&gt; description" in page
    assert "<b>bold</b>" not in page and "<script>alert(1)" not in page


# --- the dashboard --------------------------------------------------------------------------

def page(cache, name: str, **state) -> AppTest:
    at = AppTest.from_file(str(ROOT / "pages" / f"{name}.py"), default_timeout=120)
    at.session_state["run"] = "apptest"
    at.session_state["method"] = "vqlc"
    for key, value in state.items():
        at.session_state[key] = value
    return at


def ran(at: AppTest) -> AppTest:
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


@pytest.mark.slow
def test_a_label_written_on_the_concept_view_shows_on_every_page(run, monkeypatch):
    monkeypatch.setenv("VQLC_CACHE_DIR", str(run.dir.parent.parent))
    k = a_word_concept(run)
    at = ran(page(run, "concepts", concept=k, concept_method="vqlc"))
    name = next(t for t in at.text_input if t.label == "Name")
    assert name.value == ""  # no label yet
    name.input(EVIL)
    next(t for t in at.text_input if t.label == "Description (optional)").input("what I saw")
    next(b for b in at.button if b.label == "Save the label").click()
    ran(at)
    want = f"c{k}: {EVIL} (edited)"
    assert labels.load_labels(run.dir, "vqlc")[k]["edited"] is True
    assert plain(want) in [h.value for h in at.subheader]  # as markdown shows it: as typed, no link, no bold
    assert any("Label written by hand" in c.value for c in at.caption)
    assert next(t for t in at.text_input if t.label == "Name").value == EVIL  # the form shows the saved label

    at = ran(page(run, "codebook_map"))
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    hover = [n for trace in spec["data"] for n in trace.get("hovertext", [])]
    assert html.escape(want) in hover

    sentence = next(t for t in run.texts["text"] if "bold" not in t)
    ex = run.explainer().explain(sentence).to_dict()
    words = ex["methods"]["vqlc"]["word_concepts"]
    if k not in words:  # put the labelled concept on this sentence's first word instead
        k2 = words[0]
        labels.set_label(run.dir, "vqlc", k2, EVIL)
        want = f"c{k2}: {EVIL} (edited)"
    at = ran(page(run, "explain", text=sentence))
    (body,) = [m.value for m in at.html if "<span" in m.value]  # the coloured sentence
    want = want.replace(f"c{want[1:].split(':')[0]}:", f"VQLC {want[1:].split(':')[0]}:", 1)  # ids per method there
    assert f'title="{html.escape(want, quote=True)}' in body and "<b>bold</b>" not in body  # its members may follow

    at = ran(page(run, "labels"))
    (table,) = [d.value for d in at.dataframe]
    assert table.set_index("concept").loc[k, "edited"] and table.set_index("concept").loc[k, "name"] == EVIL
    n = len(labels.load_labels(run.dir, "vqlc"))  # every one written by hand
    assert any(plain(f"{n} concepts labelled, {n} with a name, {n} edited by hand; labeller none.") in c.value
               for c in at.caption)
    at = ran(page(run, "judges"))
    assert any("No judge has rated" in i.value for i in at.info) and not at.dataframe


@pytest.mark.slow
def test_a_pin_made_before_a_label_was_written_shows_the_label_in_the_case_study(run, monkeypatch):
    from vqlc_core.views.pins import add_pin, load_pins

    monkeypatch.setenv("VQLC_CACHE_DIR", str(run.dir.parent.parent))
    pin = browse.make_pin(run.explainer(), "the plot is thin but the actors seem to enjoy themselves", "vqlc",
                          source=browse.provenance(run, "vqlc"))
    add_pin(run.dir, pin)
    k = pin["concepts"][0]["concept"]
    labels.set_label(run.dir, "vqlc", k, "thin plots")
    at = ran(page(run, "case_study"))
    assert f"c{k}: thin plots (edited)" in at.dataframe[0].value["label"].tolist()
    assert load_pins(run.dir)[0]["concepts"][0]["label"] == pin["concepts"][0]["label"]  # the stored pin as made
