"""Case-study pins saved with their run (`<run>/ui/pins.json`): a real pin of the apptest run goes
through the JSON file and comes back as it was; an input is pinned once; a pin can be removed;
a broken file is one sentence."""

from __future__ import annotations

import json

import pytest

from tests.runcopy import linked_copy
from vqlc_core.views import browse
from vqlc_core.views.pins import add_pin, load_pins, pins_path, remove_pin, save_pins
from vqlc_core.base.runio import RunError

SENTENCE = "the plot is thin but the actors seem to enjoy themselves"


@pytest.fixture(scope="module")
def pinned(apptest_run):
    """Two real pins of the apptest run: the sentence under VQLC and under K-Means."""
    ex = apptest_run.explainer()
    return [browse.make_pin(ex, SENTENCE, m, source=browse.provenance(apptest_run, m)) for m in ("vqlc", "kmeans")]


@pytest.fixture
def run(apptest_run, tmp_path):
    return linked_copy(apptest_run.dir, tmp_path)


@pytest.mark.slow
def test_pins_round_trip_through_a_json_file_in_the_run(run, pinned):
    assert load_pins(run.dir) == []
    save_pins(run.dir, pinned)
    path = pins_path(run.dir)
    assert path == run.dir / "ui" / "pins.json"
    assert isinstance(json.loads(path.read_text()), list)  # plain JSON, nothing pickled
    back = load_pins(run.dir)
    assert back == pinned
    assert all(isinstance(k, int) for p in back for k in p["labels"])  # as make_pin keys them
    assert [f.name for f in path.parent.iterdir()] == ["pins.json"]  # no temporary file left behind


@pytest.mark.slow
def test_an_input_is_pinned_once_per_method_and_can_be_removed(run, pinned):
    vqlc, kmeans = pinned
    assert add_pin(run.dir, vqlc) == 1
    assert add_pin(run.dir, vqlc) is None
    assert add_pin(run.dir, kmeans) == 2
    assert remove_pin(run.dir, "apptest", "vqlc", SENTENCE)
    assert not remove_pin(run.dir, "apptest", "vqlc", SENTENCE)
    assert load_pins(run.dir) == [kmeans]


@pytest.mark.parametrize("content", ["{not json", '{"a": 1}', "[1, 2]"], ids=["not json", "an object", "no pins"])
def test_a_broken_pins_file_is_one_sentence(tmp_path, content):
    path = pins_path(tmp_path)
    path.parent.mkdir()
    path.write_text(content)
    with pytest.raises(RunError, match=r"^The case study's pins file .* delete it to start the case study afresh\.$"):
        load_pins(tmp_path)


@pytest.fixture(scope="module")
def two_concepts(apptest_run) -> list[int]:
    """Two concepts the Explain page shows for SENTENCE under VQLC (its words' when it shows one)."""
    ex = apptest_run.explainer().explain(SENTENCE).to_dict()
    shown = [c["concept"] for c in browse.shown_concepts(ex, "vqlc")]
    words = [k for k in dict.fromkeys(ex["methods"]["vqlc"]["word_concepts"]) if k not in shown]
    return (shown + words)[:2]


@pytest.mark.slow
def test_a_pin_records_the_concepts_ablated_together_and_what_they_gave(apptest_run, two_concepts):
    explainer = apptest_run.explainer()
    a, b = two_concepts
    pin = browse.make_pin(explainer, SENTENCE, "vqlc", source=browse.provenance(apptest_run, "vqlc"), ablated=[b, a])
    both = explainer.ablate(SENTENCE, "vqlc", [a, b])
    assert pin["ablated"]["concepts"] == sorted([a, b]) and browse.ablated_ids(pin) == sorted([a, b])
    assert pin["ablated"]["new_prediction"] == both.prediction
    assert pin["ablated"]["new_confidence"] == pytest.approx(both.confidence, abs=1e-6)
    assert pin["ablated"]["delta"] == pytest.approx(both.delta, abs=1e-6)
    for c in pin["concepts"]:  # and each shown concept alone, as before
        alone = explainer.ablate(SENTENCE, "vqlc", [c["concept"]])
        assert c["new_confidence"] == pytest.approx(alone.confidence, abs=1e-6)
    assert {a, b} <= set(pin["labels"])


@pytest.mark.slow
def test_each_set_of_ablated_concepts_is_its_own_pin_and_old_pins_still_load(run, pinned, two_concepts):
    vqlc = pinned[0]
    combined = browse.make_pin(run.explainer(), SENTENCE, "vqlc", source=browse.provenance(run, "vqlc"),
                               ablated=two_concepts)
    old = {k: v for k, v in vqlc.items() if k != "ablated"}  # a pin saved before pins kept the combination
    assert add_pin(run.dir, old) == 1
    assert add_pin(run.dir, vqlc) is None  # nothing ablated: the same view as the old pin
    assert add_pin(run.dir, combined) == 2 and add_pin(run.dir, combined) is None
    back = load_pins(run.dir)
    assert back[1]["ablated"] == combined["ablated"] and browse.ablated_ids(back[0]) == []
    assert remove_pin(run.dir, "apptest", "vqlc", SENTENCE, two_concepts)
    assert load_pins(run.dir) == [old]
