"""Case-study exports: figures, tables and the zip bundle are non-empty and well-formed; the
concepts the page ablated together come first; the LaTeX table fits a column of a two-column
paper (compiled when a TeX engine is installed); SVG text stays text; every figure has margins."""

import io
import json
import re
import shutil
import subprocess
import zipfile
from xml.etree import ElementTree

import numpy as np

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
    assert "\\begin{tabularx}" in tex and "\\$5" in tex and "100\\%" in tex


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
    "bundle concepts.tex caption": lambda pin: _bundle(pin, "concepts.tex").split("\\begin{tabularx}")[0],
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


@pytest.fixture
def together(pin) -> dict:
    """The pin as the page showed it with c1 and c2 ablated together."""
    return {**pin, "ablated": {"concepts": [1, 2], "delta": -0.366, "new_prediction": "negative",
                               "new_confidence": 0.524}}


def test_the_concepts_ablated_together_come_first_in_the_table_and_the_report(together):
    table = report.pins_table([together])
    assert list(table["ablated"]) == ["c1 + c2", "c1", "c2"]
    assert table["new_confidence"].iloc[0] == 0.524 and table["why"].iloc[0] == report.TOGETHER
    rows = [line for line in _bundle(together, "report.md").splitlines() if line.startswith("| c")]
    assert rows[0].startswith("| c1 + c2 | c1: great; c2: dull | ablated together") and "negative (0.524)" in rows[0]
    tex_rows = [line for line in report.table_latex(table).decode().splitlines() if line.endswith(r"\\")]
    assert tex_rows[2].startswith("c1: great; c2: dull &") and "negative (0.524)" in tex_rows[2]  # after head, pin
    assert "c1 + c2 together" in _svg_text(report.ablation_figure(together, "svg"))


def test_a_pin_made_before_pins_kept_the_combination_still_exports(pin):
    assert "ablated" not in pin
    assert list(report.pins_table([pin])["ablated"]) == ["c1", "c2"]
    assert {"report.md", "concepts.tex"} <= set(zipfile.ZipFile(io.BytesIO(report.bundle([pin]))).namelist())


def _columns(tex: str) -> list[str]:
    """The column types of the table's tabularx spec (`>{...}` and `@{...}` dropped)."""
    spec = re.search(r"\\begin\{tabularx\}\{\\columnwidth\}\{(.*)\}$", tex, re.M).group(1)
    return re.findall(r"[lcrX]|p\{[^{}]*\}", re.sub(r"[@>]\{[^{}]*\}", "", spec))


def test_the_latex_table_is_a_narrow_booktabs_table_with_each_sentence_once(together, pin):
    tex = report.table_latex(report.pins_table([together, {**pin, "text": "a dull & long film"}])).decode()
    n = len(_columns(tex))
    assert 2 <= n <= 6, _columns(tex)
    for rule in ("\\toprule", "\\midrule", "\\bottomrule"):
        assert rule in tex
    rows = [line for line in tex.splitlines() if line.endswith(r"\\") and not line.startswith(r"\multicolumn")]
    assert len(rows) == 1 + 3 + 2 and all(line.count("&") == n - 1 for line in rows)  # head, pin 1, pin 2
    assert tex.count(report.latex_escape(TEXT)) == 1 and tex.count("a dull \\& long film") == 1
    assert "\\textless{}b\\textgreater{}great" in tex  # '<' would print as '¡' in LaTeX's default font


@pytest.mark.skipif(shutil.which("pdflatex") is None,
                    reason="no TeX engine (apt-get install texlive-latex-recommended)")
def test_the_latex_table_compiles_into_one_column_of_a_two_column_paper(together, tmp_path):
    long = {**together, "concepts": [{**c, "label": c["label"] + ", " + ", ".join(["word"] * 30)}
                                     for c in together["concepts"]]}
    (tmp_path / "table.tex").write_bytes(report.table_latex(report.pins_table([long, together])))
    (tmp_path / "paper.tex").write_text("\\documentclass[twocolumn]{article}\n\\usepackage{booktabs,tabularx}\n"
                                        "\\begin{document}\n\\input{table}\n\\end{document}\n")
    out = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "paper.tex"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    log = (tmp_path / "paper.log").read_text(errors="replace")
    assert out.returncode == 0 and (tmp_path / "paper.pdf").exists(), out.stdout[-2000:]
    assert "Overfull \\hbox" not in log, re.findall(r"Overfull \\hbox.*", log)  # wider than the column


def _svg_text(svg: bytes) -> str:
    """The text of every <text> element of an SVG, joined by spaces."""
    root = ElementTree.fromstring(svg)
    return " ".join("".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text"))


@pytest.mark.parametrize("draw", [report.ablation_figure, report.sentence_figure])
def test_svg_figures_keep_their_words_as_text(together, draw):
    svg = draw(together, "svg")
    assert svg.count(b"<text") > 0
    text = _svg_text(svg)
    assert "run-7" in text and "minilm-x" in text
    if draw is report.sentence_figure:
        assert all(w in text for w in TEXT.split()), text  # '<b>great</b>' too, as typed
    else:
        assert all(c["label"] in text for c in together["concepts"]), text


@pytest.mark.parametrize("draw", [report.ablation_figure, report.sentence_figure])
def test_every_figure_has_a_white_margin_around_its_ink_the_footer_too(together, draw):
    ink = np.asarray(Image.open(io.BytesIO(draw(together, "png"))).convert("L")) < 250  # (H, W)
    margin = report.MARGIN_IN * 150 * 0.6  # the figures' dpi; a word's box may reach a little into the margin
    rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
    assert min(rows[0], cols[0], ink.shape[0] - 1 - rows[-1], ink.shape[1] - 1 - cols[-1]) >= margin
    footer = ink[rows[-1] - 8 : rows[-1] + 1]  # the provenance line is the lowest
    assert np.flatnonzero(footer.any(axis=0))[0] >= margin


def test_the_report_lists_each_pinned_concepts_tags_when_the_pin_has_them():
    pin = {"method": "vqlc", "text": "a fine film", "prediction": "positive", "confidence": 0.9, "words": [],
           "labels": {3: "c3: fine"}, "ablated": None, "tags": {"3": "ADJ (POS) 96% ✓"},
           "concepts": [{"concept": 3, "label": "c3: fine", "why": "salient word 'fine'", "delta": -0.2,
                         "new_prediction": "positive", "new_confidence": 0.7}]}
    md = report.markdown_report([pin])
    assert "- c3: ADJ (POS) 96% ✓" in md
    assert "Linguistic tags" not in report.markdown_report([{**pin, "tags": {}}])
