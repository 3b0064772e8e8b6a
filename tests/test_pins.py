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
