"""Case-study exports: figures, tables and the zip bundle are non-empty and well-formed."""

import io
import zipfile

import pytest

from vqlc_core import report

TEXT = "a $5 <b>great</b> film, 100% fun & not dull"


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
    return {"text": TEXT, "method": "vqlc", "prediction": "positive", "confidence": 0.89, "words": words,
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
    assert report.table_csv(table).decode().splitlines()[0].startswith("pin,method,text")
    tex = report.table_latex(table).decode()
    assert "\\begin{tabular}" in tex and "\\$5" in tex and "100\\%" in tex


def test_the_bundle_holds_the_report_tables_and_every_figure(pin):
    z = zipfile.ZipFile(io.BytesIO(report.bundle([pin])))
    names = set(z.namelist())
    assert {"report.md", "concepts.csv", "concepts.tex", "pins.json"} <= names
    assert {f"figures/pin1_{n}.{f}" for n in ("ablation", "sentence") for f in ("png", "svg")} <= names
    md = z.read("report.md").decode()
    assert "## Pin 1 (vqlc)" in md and "-0.310" in md and "figures/pin1_ablation.png" in md
