"""Concept word clouds: a real PNG for real words, drawn once and read from the run's ui/ folder
after, and no cloud (and no crash) for a concept without words or one the library cannot draw."""

from __future__ import annotations

import io
import json
import logging

from PIL import Image

from vqlc_core.views.wordclouds import HEIGHT, WIDTH, cloud_path, concept_cloud, palette_png, render_cloud

WORDS = json.dumps([["good", 40], ["great", 25], ["wonderful", 9], ["fine", 3]])


def test_a_cloud_of_real_words_is_a_png_of_the_set_size():
    png = render_cloud({"good": 40.0, "great": 25.0, "fine": 3.0})
    image = Image.open(io.BytesIO(png))
    assert png.startswith(b"\x89PNG") and image.size == (WIDTH, HEIGHT)
    assert len(set(image.convert("L").getdata())) > 2  # words were drawn on the white background


def test_the_same_words_and_seed_draw_the_same_cloud():
    freqs = {"good": 40.0, "great": 25.0, "fine": 3.0}
    assert render_cloud(freqs, seed=3) == render_cloud(freqs, seed=3)


def test_a_palette_cloud_is_the_same_picture_in_far_fewer_bytes():
    png = render_cloud({"good": 40.0, "great": 25.0, "wonderful": 9.0, "fine": 3.0})
    small = palette_png(png)
    full, few = (Image.open(io.BytesIO(b)).convert("RGB") for b in (png, small))
    assert few.size == full.size and len(small) < len(png) / 2
    assert len(set(few.getdata())) <= 32
    diff = [abs(a - b) for pa, pb in zip(full.getdata(), few.getdata()) for a, b in zip(pa, pb)]
    assert sum(diff) / len(diff) < 8  # per channel, out of 255


def test_a_concept_cloud_is_drawn_once_into_the_run_and_then_reused(tmp_path):
    path = concept_cloud(tmp_path, "vqlc", 4, WORDS)
    assert path == cloud_path(tmp_path, "vqlc", 4, WORDS)
    assert path.parent == tmp_path / "ui" / "wordclouds" / "vqlc" and path.name.startswith("4-")
    assert path.read_bytes().startswith(b"\x89PNG")
    drawn = path.stat().st_mtime_ns
    assert concept_cloud(tmp_path, "vqlc", 4, WORDS) == path and path.stat().st_mtime_ns == drawn
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left


def test_other_top_words_get_a_new_cloud(tmp_path):
    other = json.dumps([["bad", 30], ["dull", 4]])
    assert concept_cloud(tmp_path, "vqlc", 4, other) != concept_cloud(tmp_path, "vqlc", 4, WORDS)


def test_a_concept_without_words_has_no_cloud(tmp_path):
    assert concept_cloud(tmp_path, "vqlc", 0, "[]") is None
    assert not (tmp_path / "ui").exists()


def test_a_concept_whose_cloud_cannot_be_drawn_has_no_cloud_and_logs_why(tmp_path, caplog):
    # Whole sentences taken for words (a tokenizer that never splits) leave the library no room.
    sentences = json.dumps([["word " * 60, 3], ["other " * 60, 2]])
    with caplog.at_level(logging.DEBUG, logger="vqlc_core.views.wordclouds"):
        assert concept_cloud(tmp_path, "vqlc", 2, sentences) is None
    assert "Couldn't find space to draw" in caplog.text
    assert not list(tmp_path.rglob("*.png"))
