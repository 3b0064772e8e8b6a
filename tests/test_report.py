"""Case-study exports: figures, tables and the zip bundle are non-empty and well-formed."""

import io
import json
import zipfile

import pytest
from PIL import Image

from vqlc_core.views import report

TEXT = "a $5 <b>great</b> film, 100% fun & not dull"
SOURCE = {"run": "run-7", "model": "minilm-x", "layer": 4, "method": "vqlc", "seed": 13}  # browse.provenance


@pytest.fixture
def pin() -> dict:
    words, pos = [], 0
    for i, w in enumerate(TEXT.split()):
        s = TEXT.index(w, pos)
        words.append({"word": w, "start": s, "end": s + len(w), "concept": i % 3})
        pos = s + len(w)
    concepts = [{"concept": 1, "label": "c1: great, $x_1$", "why": "prediction concept (p = 0.80)", "delta": -0.31,
                 "new_prediction": "negative", "new_confidence": 0.58},
                {"concept": 2, "label": "c2: dull, not", "why": "salient word 'dull'", "delta": 0.04,
                 "new_prediction": "positive", "new_confidence": 0.93}]
    return {**SOURCE, "text": TEXT, "prediction": "positive", "confidence": 0.89, "words": words,
            "labels": {0: "c0: a", 1: "c1: great", 2: "c2: dull"}, "concepts": concepts}


@pytest.mark.parametrize("draw", [report.ablation_figure, report.sentence_figure])
def test_figures_are_png_and_svg(pin, draw):
    assert draw(pin, "png").startswith(b"\x89PNG\r\n\x1a\n")
    assert b"<svg" in draw(pin, "svg")
    with pytest.raises(ValueError, match="Unknown figure format"):
        draw(pin, "gif")


def test_the_table_has_a_row_per_pinned_concept_in_csv_and_latex(pin):
    table = report.pins_table([pin, pin])
    assert len(table) == 4 and list(table["pin"]) == [1, 1, 2, 2]
    assert report.table_csv(table).decode().splitlines()[0].startswith("pin,run,model,layer,method,seed,text")
    tex = report.table_latex(table).decode()
    assert "\\begin{tabular}" in tex and "\\$5" in tex and "100\\%" in tex


def test_the_bundle_holds_the_report_tables_and_every_figure(pin):
    z = zipfile.ZipFile(io.BytesIO(report.bundle([pin])))
    names = set(z.namelist())
    assert {"report.md", "concepts.csv", "concepts.tex", "pins.json"} <= names
    assert {f"figures/pin1_{n}.{f}" for n in ("ablation", "sentence") for f in ("png", "svg")} <= names
    md = z.read("report.md").decode()
    assert "## Pin 1 (vqlc)" in md and "-0.310" in md and "figures/pin1_ablation.png" in md


def _bundle(pin, name: str) -> str:
    return zipfile.ZipFile(io.BytesIO(report.bundle([pin]))).read(name).decode()


def _report_captions(pin) -> str:
    md = _bundle(pin, "report.md")
    return "\n".join(line for line in md.splitlines() if line.startswith("*Pin 1, "))


# export -> its text (figures: the file's own metadata)
EXPORTS = {
    "table.csv": lambda pin: report.table_csv(report.pins_table([pin])).decode(),
    "table.tex": lambda pin: report.table_latex(report.pins_table([pin])).decode(),
    "bundle concepts.tex caption": lambda pin: _bundle(pin, "concepts.tex").split("\\begin{tabular}")[0],
    "report.md": lambda pin: _bundle(pin, "report.md").split("> ")[0],
    "report.md figure captions": _report_captions,
    "pins.json": lambda pin: _bundle(pin, "pins.json"),
    "ablation png": lambda pin: json.dumps(Image.open(io.BytesIO(report.ablation_figure(pin, "png"))).text),
    "sentence png": lambda pin: json.dumps(Image.open(io.BytesIO(report.sentence_figure(pin, "png"))).text),
    "ablation svg": lambda pin: report.ablation_figure(pin, "svg").decode(),
    "sentence svg": lambda pin: report.sentence_figure(pin, "svg").decode(),
}


@pytest.mark.parametrize("export", list(EXPORTS))
def test_every_export_says_which_run_model_layer_method_and_seed_it_shows(pin, export):
    text = EXPORTS[export](pin)
    for key in ("run", "model", "layer", "seed") + (("method",) if "concepts.tex" not in export else ()):
        assert str(SOURCE[key]) in text, (key, text[:300])


def test_the_figure_captions_name_every_figure_of_the_pin(pin):
    captions = _report_captions(pin).splitlines()
    assert len(captions) == 2 and all("run run-7, model minilm-x, layer 4, method vqlc, seed 13" in c
                                      for c in captions)


@pytest.mark.parametrize("run, method, text, found", [
    ("run-7", "vqlc", "a fine film", 0),
    ("run-7", "kmeans", "a fine film", None),
    ("other", "vqlc", "a fine film", None),
    ("run-7", "vqlc", "a fine film ", None),
    ("run-7", "vqlc", "a dull film", 1),
])
def test_an_input_is_pinned_once_per_run_and_method(run, method, text, found):
    from vqlc_core.views.browse import find_pin

    pins = [{**SOURCE, "text": "a fine film"}, {**SOURCE, "text": "a dull film"}]
    assert find_pin(pins, run, method, text) == found
