"""The standalone HTML export of a run's concepts (vqlc_core/views/export_html.py, `vqlc export-html`) on
the real apptest run: one file that asks for nothing outside itself, every concept with its cloud,
words, contexts and class distribution, the faithfulness table, text from the run escaped, and
one-sentence errors. tests/ui/test_browser_share.py opens it in chromium with the network blocked."""

from __future__ import annotations

import base64
import html
import re

import pandas as pd
import numpy as np
import pytest

from tests.conftest import CACHE, run_cli
from tests.runcopy import linked_copy
from vqlc_core.views import browse, export_html
from vqlc_core.base.runio import RunError, read_parquet, write_parquet
from vqlc_core.data.corpus import all_member_contexts, member_contexts
from vqlc_core.views.wordclouds import concept_cloud
from vqlc_core.methods.concepts import is_prediction_concept

EVIL = " <script>alert(1)</script>"


@pytest.fixture(scope="module")
def page(apptest_run) -> str:
    return export_html.render(apptest_run, "vqlc")


def evil_copy(apptest_run, cache):
    """A linked copy of apptest whose text behind concept 1's first context ends in a script tag;
    returns (run, concept)."""
    run = linked_copy(apptest_run.dir, cache)
    cs, texts = run.concept_set("vqlc"), run.texts
    k = next(k for k in cs.used_ids() if not is_prediction_concept(cs.summary.loc[k]))
    tid = member_contexts(texts, run.store.tokens, cs.assignments, k, n=export_html.N_CONTEXTS,
                          seed=run.cfg.seed)["text_id"].iloc[0]
    texts.loc[texts["text_id"] == tid, "text"] += EVIL
    (run.dir / "texts.parquet").unlink()  # the link to apptest's file, not the file
    write_parquet(run.dir / "texts.parquet", texts)
    return run, k


def test_the_export_asks_for_nothing_outside_the_file(page):
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert "http://" not in page.replace('http-equiv="', "") and "https://" not in page
    assert "<script" not in page.lower() and "@import" not in page
    urls = re.findall(r"url\(([^)]*)\)", page)
    assert urls and all(u.startswith('"data:image/png;base64,') for u in urls)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


def test_every_concept_is_in_the_grid_with_its_section_cloud_words_and_contexts(apptest_run, page):
    cs = apptest_run.concept_set("vqlc")
    ids = cs.used_ids()
    assert re.findall(r'<a class=card href="#c(\d+)">', page) == [str(k) for k in ids]
    assert re.findall(r'<section class=concept id="c(\d+)">', page) == [str(k) for k in ids]
    words = [k for k in ids if not is_prediction_concept(cs.summary.loc[k])]
    assert sorted(int(k) for k in re.findall(r"\.w(\d+)\{background-image", page)) == words
    for k in ids:
        section = page.split(f'id="c{k}">', 1)[1].split("</section>", 1)[0]
        assert html.escape(cs.label(k, 5)) in section
        assert "<li>" in section and "Class distribution" in section
    assert page.count("<mark>") >= len(words)
    assert page.count("<tr") == len(apptest_run.faithfulness()) + 1  # the header, then one row each


def test_the_export_fits_its_budget_for_hundreds_of_concepts(apptest_run, page):
    n = len(re.findall(r"<a class=card ", page))
    per_concept = len(page.encode()) / n
    print(f"\nexport: {len(page.encode()) / 1e3:.0f} kB for {n} concepts ({per_concept / 1e3:.1f} kB each)")
    assert per_concept * 400 < 15e6  # the default run's 400 concepts under 15 MB


def test_chosen_concepts_come_in_the_order_given_once_each(apptest_run):
    page = export_html.render(apptest_run, "kmeans", [5, 2, 5])
    assert re.findall(r'<a class=card href="#c(\d+)">', page) == ["5", "2"]
    assert "K-Means in run apptest" in page


def test_text_from_the_run_is_shown_escaped(apptest_run, tmp_path):
    run, k = evil_copy(apptest_run, tmp_path)
    page = export_html.render(run, "vqlc", [k])
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page


@pytest.mark.parametrize("method, concepts, said", [
    ("sparse", None, "Run 'apptest' has no finished method 'sparse'; choose one of vqlc, kmeans, lacoat."),
    ("vqlc", [3, 99], "Concept 99 does not exist: method 'vqlc' of run 'apptest' has concepts 0 to 39."),
])
def test_a_method_or_concept_that_is_not_there_is_one_sentence(apptest_run, method, concepts, said):
    with pytest.raises(RunError) as err:
        export_html.render(apptest_run, method, concepts)
    assert str(err.value) == said


@pytest.mark.slow
def test_the_command_writes_one_file_and_its_mistakes_are_one_line(apptest_run, tmp_path):
    out = tmp_path / "share" / "apptest.html"
    code, stdout, stderr = run_cli("export-html", "--run", "apptest", "--method", "lacoat", "--concepts", "1", "4",
                                   "--out", str(out), "--cache-dir", str(CACHE))
    assert code == 0, stderr
    assert f"wrote {out}" in stdout and out.exists()
    assert re.findall(r'<a class=card href="#c(\d+)">', out.read_text()) == ["1", "4"]
    code, _, stderr = run_cli("export-html", "--run", "apptest", "--concepts", "2", "--out", str(out.parent),
                              "--cache-dir", str(CACHE))  # a folder: the file gets its default name there
    assert code == 0 and (out.parent / "apptest-vqlc-concepts.html").exists(), stderr
    for args, said in [(["--run", "nope"], "No run 'nope' under"),
                       (["--run", "apptest", "--method", "sparse"], "has no finished method 'sparse'"),
                       (["--run", "apptest", "--concepts", "99"], "Concept 99 does not exist")]:
        code, _, stderr = run_cli("export-html", *args, "--out", str(tmp_path / "x.html"), "--cache-dir", str(CACHE))
        assert code == 2 and stderr.startswith("vqlc: error: ") and said in stderr, stderr
        assert stderr.count("\n") == 1 and "Traceback" not in stderr
    assert not (tmp_path / "x.html").exists()


def test_the_texts_file_of_an_evil_copy_is_its_own(apptest_run, tmp_path):
    evil_copy(apptest_run, tmp_path)
    assert not read_parquet(apptest_run.dir / "texts.parquet")["text"].str.contains("<script>").any()


def test_every_card_and_section_carries_the_concepts_tags_as_the_pages_show_them(apptest_run, page):
    from vqlc_core.evaluate import tag_alignment as ta

    p = apptest_run.tag_profiles("vqlc")
    cs = apptest_run.concept_set("vqlc")
    n_tagged = 0
    for k in cs.used_ids():
        line = ta.tags_line(ta.top_tags(p, k))
        if line:
            n_tagged += 1
            assert f"<p class=tags>Tags: {html.escape(line)}</p>" in page, k
    assert n_tagged >= 1 and page.count("<small class=tags>") == n_tagged


# --- speed: contexts in one pass, clouds stored once, progress ------------------------------------

def test_contexts_found_in_one_pass_are_each_concepts_member_contexts(apptest_run):
    cs, texts, tokens, seed = apptest_run.concept_set("vqlc"), apptest_run.texts, apptest_run.store.tokens, 0
    ids = cs.used_ids()
    for n in (export_html.N_CONTEXTS, 3):
        together = all_member_contexts(texts, tokens, cs.assignments, ids, n=n, seed=seed)
        assert list(together) == ids
        is_word = tokens["kind"].to_numpy() == "word"
        for k in ids:  # the seeded sample the concept view always took, each word at its place in its text
            rows = np.flatnonzero((cs.assignments == k) & is_word)
            if len(rows) > n:
                rows = np.sort(np.random.default_rng(seed).choice(rows, size=n, replace=False))
            got = together[k]
            assert got["text_id"].tolist() == tokens["text_id"].to_numpy()[rows].tolist()
            assert got["word_index"].tolist() == tokens["word_index"].to_numpy()[rows].tolist()
            found = got[got["start"] >= 0]
            assert all(t[a:b] == w for t, a, b, w in zip(found["text"], found["start"], found["end"], found["word"]))
            pd.testing.assert_frame_equal(got, member_contexts(texts, tokens, cs.assignments, k, n=n, seed=seed))
        assert any(len(c) == n for c in together.values())  # some concepts were sampled, not taken whole
        worded = sum(len(c) > 0 for c in together.values())  # prediction concepts have no word members
    assert sum((c["start"] >= 0).sum() for c in together.values()) > worded  # words found in their texts


def test_each_section_shows_the_contexts_the_concept_view_samples(apptest_run, page):
    cs = apptest_run.concept_set("vqlc")
    words = [k for k in cs.used_ids() if not is_prediction_concept(cs.summary.loc[k])]
    for k in words:
        section = page.split(f'id="c{k}">', 1)[1].split("</section>", 1)[0]
        ctx = member_contexts(apptest_run.texts, apptest_run.store.tokens, cs.assignments, k,
                              n=export_html.N_CONTEXTS, seed=apptest_run.cfg.seed)
        shown = [browse.highlight_html(r.text, r.start, r.end) for r in ctx.itertuples() if r.start >= 0]
        assert shown and re.findall(r"<li>(.*?)</li>", section)[:len(shown)] == shown, k


def test_progress_is_told_once_per_concept_drawn_with_done_and_total(apptest_run):
    calls = []
    page = export_html.render(apptest_run, "lacoat", progress=lambda done, total: calls.append((done, total)))
    n = len(apptest_run.concept_set("lacoat").used_ids())
    assert n > 1 and calls == [(i, n) for i in range(1, n + 1)]
    assert page == export_html.render(apptest_run, "lacoat")
    chosen = []
    export_html.render(apptest_run, "kmeans", [5, 2, 5], progress=lambda done, total: chosen.append((done, total)))
    assert chosen == [(1, 2), (2, 2)]


def test_progress_text_says_how_many_are_drawn_and_about_how_long_is_left():
    assert export_html.progress_text(0, 400, 0.0) == "0 of 400 concepts drawn"
    assert export_html.progress_text(100, 400, 10.0) == "100 of 400 concepts drawn, about 30 s left"
    assert export_html.progress_text(40, 400, 20.0) == "40 of 400 concepts drawn, about 3 min left"
    assert export_html.progress_text(400, 400, 50.0) == "400 of 400 concepts drawn"


def test_an_export_stores_each_cloud_in_the_run_and_the_next_export_reads_it(apptest_run, tmp_path):
    run = linked_copy(apptest_run.dir, tmp_path)  # an empty ui/ folder: no cloud drawn yet
    first = export_html.render(run, "vqlc")
    stored = sorted((run.dir / "ui" / "wordclouds" / "vqlc").glob("*.png"))
    drawn = {p: p.stat().st_mtime_ns for p in stored}
    assert stored and len(stored) == len(re.findall(r"\.w\d+\{background-image", first))
    cs = run.concept_set("vqlc")
    for path in stored:  # the file shows the stored picture itself, the one the pages show
        k = int(path.name.split("-")[0])
        assert concept_cloud(run.dir, "vqlc", k, cs.cloud_words(k)) == path
        assert f'.w{k}{{background-image:url("data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()}")}}' in first
    assert export_html.render(run, "vqlc") == first
    assert {p: p.stat().st_mtime_ns for p in stored} == drawn  # read, not drawn again


@pytest.mark.slow
def test_the_command_shows_its_progress_on_stderr(apptest_run, tmp_path):
    out = tmp_path / "two.html"
    code, stdout, stderr = run_cli("export-html", "--run", "apptest", "--method", "kmeans", "--concepts", "3", "1",
                                   "--out", str(out), "--cache-dir", str(CACHE))
    assert code == 0 and out.exists(), stderr
    assert "concepts drawn" in stderr and "2/2" in stderr, stderr
    assert "concepts drawn" not in stdout and f"wrote {out}" in stdout
