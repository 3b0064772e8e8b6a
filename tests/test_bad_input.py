"""Bad input, table by table, through the command line, the library and the Explain page: every
case ends in a correct result or in one clear sentence, never a traceback and never a hang (each
call runs under a timeout). The library and page cases read the small apptest run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import CACHE, ROOT
from tests.runcopy import APPTEST_ARGS, sealed_copy
from vqlc_core.data.inputs import CONTROL
from vqlc_core.base.runio import RunError

TIMEOUT = 120  # s: every case, however bad, is answered well within this

TEXTS = {
    "empty": "",
    "whitespace only": " \t\n  \r\n ",
    "100,000 characters": ("a quiet , patient film that rewards attention . " * 2041)[:100_000],
    "emoji": "what a 😍 film 🎬🍿 , loved it 👍🏽",
    "right-to-left": "הסרט היה נפלא الفيلم كان رائعا the film",
    "zero-width characters": "a\u200b great\u200c film\u200d with\ufeff heart\u2060",
    "control characters and NUL": "bad\x00 film\x07 \x1b[31m really\x08 dull\x7f",
    "only NUL": "\x00\x00\x00",
    "html and script": "<b>fine</b> <script>alert('x')</script> <img src=x onerror=alert(1)> film",
    "only punctuation": "!!! ??? ... ,,, ;;; --- ***",
    "unknown tokens only": "\U000e0001\U0010fffd 𓀀𓀁 ☃☃",
    "one emoji": "🙂",
    "mathematical letters": "𝐚 𝐠𝐫𝐞𝐚𝐭 𝐟𝐢𝐥𝐦",
    "fullwidth letters": "ａ ｇｒｅａｔ ｆｉｌｍ",
    "one letter 150 times": "a" * 150,
    "NUL inside words": "gre\x00at fi\x07lm , tru\x1bly",
    "lone surrogate": "a fine \ud800 film \udfff",
    "one 100,000-character word": "a" * 100_000,
    "replacement characters": "a grim \ufffd film \ufffd",  # what the browser sends for typed lone surrogates
}
# The library answers these with one sentence, not a result: case -> a phrase of it
SENTENCES = {"empty": "is empty", "whitespace only": "is empty", "only NUL": "is empty",
             "lone surrogate": "lone surrogate (U+D800 at character 7)"}
SENTENCES.update({case: "knows none of the input's words (each becomes an unknown token), so there is nothing to "
                        "explain; type words in a script the model reads"
                  for case in ("unknown tokens only", "one emoji")})
SENTENCES.update({case: "but their Unicode NFKC form (e.g. fullwidth 'ｆ' as 'f') it does; normalise the text first"
                  for case in ("mathematical letters", "fullwidth letters")})
SENTENCES.update({"one letter 150 times": "more than 100 characters as one unknown token (its word-length limit), "
                                          "and the input's 1 such word(s) are up to 150 characters long",
                  "one 100,000-character word": "(its word-length limit), and the input's 1 such word(s) are up to "
                                                "100,000 characters long, so there is nothing to explain"})
EMPTY = {"empty", "whitespace only", "only NUL"}  # the page asks for a sentence (control characters are spaces)
NORMALISED = {"mathematical letters", "fullwidth letters"}  # the page explains their NFKC form


def _in_time(fn, *args):
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args).result(timeout=TIMEOUT)


def one_sentence(msg: str) -> None:
    assert msg and "Traceback" not in msg and "\n" not in msg.strip(), msg
    assert msg.rstrip().endswith("."), msg


# --- the library -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def explainer(apptest_run):
    from vqlc_core.explain.explainer import Explainer

    run = apptest_run
    methods = {m: (run.method(m), run.concept_set(m)) for m in run.methods_built()}
    return Explainer(run.classifier, run.layer, methods, ig_steps=run.cfg.eval.ig_steps)


@pytest.mark.parametrize("case", list(TEXTS))
def test_explain_answers_any_text_with_a_result_or_a_sentence(explainer, case):
    text = TEXTS[case]
    if case in SENTENCES:
        for call in (explainer.explain, lambda t: explainer.ablate(t, "vqlc", [0])):
            with pytest.raises(ValueError) as e:
                _in_time(call, text)
            assert SENTENCES[case] in str(e.value), e.value
            one_sentence(str(e.value))
        return
    ex = _in_time(explainer.explain, text)
    assert ex.prediction in explainer.classifier.class_names
    assert 0.0 < ex.confidence <= 1.0 and np.isfinite(ex.confidence)
    assert ex.truncated == (case == "100,000 characters")
    assert ex.words, "a text with known words gets words"
    for w in ex.words:  # every word is a real span of the input, without control characters
        span = CONTROL.sub(" ", text[w.start:w.end])
        assert 0 <= w.start < w.end <= len(text) and span.strip() == w.word
        assert not CONTROL.search(w.word), w
    for m, out in ex.methods.items():
        assert len(out.word_concepts) == len(ex.words)
    r = _in_time(explainer.ablate, text, "vqlc", [0, 1])
    assert r.prediction in explainer.classifier.class_names and np.isfinite(r.delta)


@pytest.mark.parametrize("value, phrase", [
    (None, "must be a string, not NoneType."),
    (42, "must be a string, not int."),
    (0.5, "must be a string, not float."),
    (b"a fine film", "must be a string, not bytes; decode it first"),
    (bytearray(b"film"), "must be a string, not bytearray; decode it first"),
    (["a", "fine", "film"], "must be a string, not list."),
])
def test_explaining_what_is_not_a_string_is_one_sentence(explainer, value, phrase):
    for call in (explainer.explain, lambda v: explainer.ablate(v, "vqlc", [0])):
        with pytest.raises(ValueError) as e:
            _in_time(call, value)
        assert phrase in str(e.value), e.value
        one_sentence(str(e.value))


@pytest.mark.parametrize("text, cleaned, notice", [
    ("a fine film", "a fine film", None),
    ("a\tfine\nfilm\r\n", "a\tfine\nfilm\r\n", None),
    ("bad\x00 film\x07", "bad  film ", "2 control character(s) were replaced by spaces."),
    ("\x1b[31mred\x7f\x85", " [31mred  ", "3 control character(s)"),
    ("a \ud800 film \udfff", "a \ufffd film \ufffd", "2 character(s) that are not valid Unicode"),
    ("😀 \ud83d", "😀 \ufffd", "1 character(s) that are not valid Unicode"),
    ("x\ud800\x00", "x\ufffd ", "lone surrogates) were replaced by \ufffd. 1 control character(s)"),
])
def test_typed_text_is_cleaned_to_the_same_length_with_a_notice(text, cleaned, notice):
    from vqlc_core.data.inputs import clean_input

    got, note = clean_input(text)
    assert got == cleaned and len(got) == len(text)
    assert (note is None) if notice is None else (notice in note), note
    got.encode("utf-8")  # nothing left that cannot be sent or shown


@pytest.mark.parametrize("text, cleaned, notice", [
    ("ａ ｇｒｅａｔ ｆｉｌｍ", "a great film", "normalised to Unicode NFKC before tokenizing: 10 character(s)"),
    ("𝐚 𝐠𝐫𝐞𝐚𝐭 𝐟𝐢𝐥𝐦", "a great film", "e.g. '𝐚' as 'a'."),
    ("a ﬁne ﬁlm", "a fine film", "2 character(s) in a compatibility form"),
    ("cafe\u0301", "café", "letters and their combining marks joined"),
    ("ｆｉｌｍ\x00", "film ", "NFKC before tokenizing: 4 character(s) in a compatibility form (fullwidth or "
                         "mathematical letters, ligatures, ...) are now in their plain form, e.g. 'ｆ' as 'f'. "
                         "1 control character(s)"),
    ("a grim \ufffd film \ufffd", "a grim \ufffd film \ufffd", "The text holds 2 replacement character(s)"),
    ("a \ud800 film \ufffd", "a \ufffd film \ufffd", "1 character(s) that are not valid Unicode (lone surrogates) were "
                                                "replaced by \ufffd. The text holds 1 replacement character(s)"),
    ("café", "café", None),
])
def test_typed_text_is_normalised_to_nfkc_and_replacement_characters_are_named(text, cleaned, notice):
    from vqlc_core.data.inputs import clean_input

    got, note = clean_input(text)
    assert got == cleaned
    assert (note is None) if notice is None else (notice in note), note
    assert clean_input(got)[0] == got  # cleaning twice changes nothing more


@pytest.mark.parametrize("method, ids, phrase", [
    ("vqlc", [-1], "outside"),
    ("vqlc", [10_000], "outside"),
    ("vqlc", ["seven"], "whole numbers"),
    ("vqlc", [[1, 2], [3]], "whole numbers"),
    ("no-such-method", [1], "Unknown concept method"),
])
def test_ablating_bad_concept_ids_is_one_sentence(explainer, method, ids, phrase):
    with pytest.raises(ValueError) as e:
        _in_time(explainer.ablate, "a fine film", method, ids)
    assert phrase in str(e.value)
    one_sentence(str(e.value))


@pytest.fixture
def data(tmp_path):
    def write(name, text):
        (tmp_path / name).write_text(text)
        return tmp_path / name

    return write


@pytest.mark.parametrize("name, body, phrase", [
    ("nocols.csv", "body,y\nhello,1\nworld,0\n", "no text column 'text'"),
    ("onecls.csv", "text,label\n" + "".join(f"text {i},pos\n" for i in range(20)), "single class"),
    ("nolabel.csv", "text,label\nfine film,1\ndull film,\nok film,0\n", "have no label"),
    ("notext.csv", "text,label\nfine film,1\n,0\nok film,0\n", "have no text"),
    ("header.csv", "text,label\n", "no rows"),
    ("blank.csv", "   \n\n", "empty"),
    ("rows.jsonl", '{"text": "fine", "label": 1}\n{"text": "dull"\n', "could not be read"),
    ("data.pkl", "not really a pickle", "not a .csv"),
])
def test_a_bad_dataset_file_is_one_sentence(data, name, body, phrase):
    from vqlc_core.data.datasets import load_dataset

    with pytest.raises(RunError) as e:
        _in_time(load_dataset, str(data(name, body)))
    assert phrase in str(e.value), e.value
    one_sentence(str(e.value))


def test_a_dataset_name_that_is_nothing_is_one_sentence():
    from vqlc_core.data.datasets import load_dataset

    with pytest.raises(RunError, match="Unknown dataset"):
        load_dataset("no-such-dataset")


@pytest.fixture
def run_copy(apptest_run, tmp_path):
    return sealed_copy(apptest_run.dir, tmp_path / "cache")


def _cfg(run, **kw):
    return run.rebuild_config().replace(**kw)


@pytest.mark.parametrize("kw, phrase", [
    ({"n_concepts": 100_000, "rebuild": "fitset"}, "concepts were requested"),
    ({"limit": 50}, "has stage 'texts' built with --limit 300, not 50; pass --rebuild texts"),
    ({"layer": 99}, "has stage 'extract' built with --layer (default), not 99; pass --rebuild extract"),
    ({"vqlc_beta": 0.5}, "has stage 'vqlc' built with --beta 0.25, not 0.5; pass --rebuild vqlc"),
    ({"rebuild": "no-such-stage"}, "Unknown stage"),
    ({"n_concepts": 1}, "at least 2"),
    ({"methods": ("vqlc", "pca")}, "Unknown method"),
])
def test_building_with_a_bad_config_is_one_sentence(run_copy, kw, phrase):
    from vqlc_core.pipeline.build import build

    rebuild = kw.pop("rebuild", None)
    with pytest.raises(RunError) as e:
        _in_time(lambda: build(_cfg(run_copy, **kw), rebuild=rebuild))
    assert phrase in str(e.value), e.value
    one_sentence(str(e.value))


def test_a_refused_rebuild_invalidates_nothing(run_copy):
    from vqlc_core.pipeline.build import build
    from vqlc_core.pipeline.run import Run

    before = json.loads((run_copy.dir / "manifest.json").read_text())["stages"]
    with pytest.raises(RunError, match="has stage 'vqlc' built with --beta 0.25, not 0.5; pass --rebuild vqlc"):
        build(_cfg(run_copy, vqlc_beta=0.5), rebuild="maps")
    assert Run(run_copy.dir).manifest.data["stages"] == before and Run(run_copy.dir).is_built()


# --- the command line --------------------------------------------------------------------------

def run_cli(*args):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "vqlc_core", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT * 2)


def _other_version(run):
    m = json.loads((run.dir / "manifest.json").read_text())
    m["format_version"] = 99
    (run.dir / "manifest.json").write_text(json.dumps(m))


def _truncate_shard(run):
    shard = run.dir / "store" / "vectors_00000.npy"
    shard.write_bytes(shard.read_bytes()[:4096])


@pytest.mark.slow
@pytest.mark.parametrize("args, damage, phrase", [
    (["--dataset", "{d}/nocols.csv"], None, "no text column"),
    (["--dataset", "{d}/onecls.csv"], None, "single class"),
    (["--dataset", "{d}/nolabel.csv"], None, "have no label"),
    (["--dataset", "{d}/huge.csv"], None, "limit"),
    (["--model", "/no/such/model/dir"], None, "not found"),
    (["--model", "{d}"], None, "no config.json"),
    (["--dataset", "{d}/good.csv", "--layer", "99"], None, "layers 1..6"),
    (["--dataset", "{d}/good.csv", "--n-concepts", "5000", "--limit", "40"], None, "concepts were requested"),
    (["--limit", "3"], None, "at least 10"),
    (["--rebuild", "nope"], None, "invalid choice"),
    (["--run", "copy", *APPTEST_ARGS], _truncate_shard, "rerun with --rebuild extract"),
    (["--run", "copy", *APPTEST_ARGS], _other_version, "expected format 3, got 99"),
])
def test_a_bad_command_line_is_one_sentence(apptest_run, tmp_path, args, damage, phrase):
    d = tmp_path
    (d / "nocols.csv").write_text("body,y\nhello,1\nworld,0\n")
    (d / "onecls.csv").write_text("text,label\n" + "".join(f"text {i},pos\n" for i in range(20)))
    (d / "nolabel.csv").write_text("text,label\nfine film,1\ndull film,\nok film,0\n")
    (d / "good.csv").write_text("text,label\n" + "".join(f"sentence number {i} is fine,{i % 2}\n" for i in range(40)))
    with open(d / "huge.csv", "wb") as f:  # sparse: 201 MB on paper, nothing on disk
        f.write(b"text,label\n")
        f.truncate(201 * 2**20)
    cache = d / "cache"
    for sub in ("downloads", "datasets", "models"):
        (cache / sub).parent.mkdir(parents=True, exist_ok=True)
        (cache / sub).symlink_to(CACHE / sub, target_is_directory=True)
    if damage:
        damage(sealed_copy(apptest_run.dir, cache))
    args = [a.replace("{d}", str(d)) for a in args]
    if "--run" not in args:
        args += ["--run", "bad"]
    out = run_cli("build", *args, "--cache-dir", str(cache))
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert phrase.lower() in out.stderr.lower(), out.stderr
    errors = [line for line in out.stderr.strip().splitlines() if "error:" in line]
    assert len(errors) == 1, out.stderr


# --- run names and a failed first build -----------------------------------------------------------

def _scratch_cache(d: Path) -> Path:
    """A cache under `d` that shares the project's downloads and models, with a finished-looking
    run `keep` and a file beside the cache, so a test sees anything deleted or written."""
    cache = d / "cache"
    cache.mkdir()
    for sub in ("downloads", "datasets", "models"):
        (cache / sub).symlink_to(CACHE / sub, target_is_directory=True)
    (cache / "runs" / "keep").mkdir(parents=True)
    (cache / "runs" / "keep" / "manifest.json").write_text("{}")
    (d / "beside.txt").write_text("not the cache's")
    (d / "nocols.csv").write_text("body,y\nhello,1\nworld,0\n")
    return cache


def _tree(d: Path) -> dict[str, bytes | None]:
    """Every path under `d` with its bytes (None for a folder or a link); linked folders are
    listed, not entered."""
    out = {}
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            p = Path(root) / n
            out[str(p.relative_to(d))] = p.read_bytes() if p.is_file() and not p.is_symlink() else None
    return out


# (command, --run, --force): each name would leave runs/ or make something no page lists
BAD_NAMES = [
    ("extract", "", False),
    ("build", "", True),
    ("train", ".", False),
    ("build", "..", True),
    ("build", "../escaped", False),
    ("extract", "{abs}", False),
    ("build", "a b/c", False),
    ("train", "two\nlines", False),
    ("build", "runs/keep", True),
    ("extract", "~", False),
]


@pytest.mark.slow
@pytest.mark.parametrize("command, name, force", BAD_NAMES,
                         ids=[f"{c} --run {n!r}{' --force' if f else ''}" for c, n, f in BAD_NAMES])
def test_a_run_name_that_is_not_one_plain_folder_is_refused_before_anything_is_written(tmp_path, command, name,
                                                                                        force):
    cache = _scratch_cache(tmp_path)
    name = name.replace("{abs}", str(tmp_path / "abs"))
    before = _tree(tmp_path)
    # The dataset file would fail the build at once: a name that got through fails another way.
    out = run_cli(command, "--run", name, "--dataset", str(tmp_path / "nocols.csv"), "--cache-dir", str(cache),
                  *(["--force"] if force else []))
    assert out.returncode == 2, out.stderr
    assert [line for line in out.stderr.splitlines() if line.strip()] == [out.stderr.strip()], out.stderr
    assert "is not allowed" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert _tree(tmp_path) == before


def _finetune_none() -> list[str]:
    """`--finetune none` where builds have a fine-tuning stage: these tests need no trained model."""
    from vqlc_core.pipeline.config import SECTIONS

    return ["--finetune", "none"] if "finetune" in SECTIONS else []


REVIEWS_CSV = "sentence,stars\n" + "".join(f"sentence number {i} is {'fine' if i % 2 else 'dull'},{i % 2}\n"
                                          for i in range(40))


# (first try, what fails, second try): the first build of run 'first' fails; the second, with
# other settings, must build and take those settings
FIRST_TRIES = [
    (["--dataset", "{d}/s.csv"], "no text column 'text'",
     ["--dataset", "{d}/s.csv", "--text-column", "sentence", "--label-column", "stars"]),
    (["--dataset", "{d}/s.csv", "--text-column", "sentence"], "no label column 'label'",
     ["--dataset", "{d}/s.csv", "--text-column", "sentence", "--label-column", "stars"]),
    (["--dataset", "{d}/absent.csv"], "was not found",
     ["--dataset", "{d}/s.csv", "--text-column", "sentence", "--label-column", "stars"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("first, phrase, then", FIRST_TRIES, ids=["wrong text column", "wrong label column",
                                                                  "missing dataset file"])
def test_a_failed_first_build_does_not_lock_its_name(tmp_path, first, phrase, then):
    from vqlc_core.pipeline.run import Run

    cache = _scratch_cache(tmp_path)
    (tmp_path / "s.csv").write_text(REVIEWS_CSV)
    args = ["--run", "first", "--cache-dir", str(cache), *_finetune_none()]
    out = run_cli("extract", *[a.replace("{d}", str(tmp_path)) for a in first], *args)
    assert out.returncode == 2 and phrase in out.stderr, out.stderr
    out = run_cli("extract", *[a.replace("{d}", str(tmp_path)) for a in then], *args)
    assert out.returncode == 0, out.stderr
    run = Run(cache / "runs" / "first")
    assert run.manifest.is_complete("extract")
    assert (run.cfg.data.dataset, run.cfg.data.text_column, run.cfg.data.label_column) == \
        (str(tmp_path / "s.csv"), "sentence", "stars")


# --- the Explain page ---------------------------------------------------------------------------

@pytest.fixture
def cache_env(apptest_run, monkeypatch):
    monkeypatch.setenv("VQLC_CACHE_DIR", str(CACHE))
    return apptest_run


@pytest.mark.slow
@pytest.mark.parametrize("case", list(TEXTS))
def test_the_explain_page_answers_any_text(cache_env, case):
    at = AppTest.from_file(str(ROOT / "pages" / "explain.py"), default_timeout=TIMEOUT)
    at.session_state["run"] = cache_env.dir.name
    at.session_state["method"] = "vqlc"
    at.session_state["text"] = TEXTS[case]
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    warnings = [w.value for w in at.warning]
    # Typed text is cleaned, with a notice: a lone surrogate is shown as U+FFFD, a control character as a space.
    assert any("not valid Unicode (lone surrogates)" in w for w in warnings) == (case == "lone surrogate")
    assert any("control character(s) were replaced" in w for w in warnings) == ("NUL" in case or "control" in case)
    if case in EMPTY:
        assert not at.error, [e.value for e in at.error]
        assert any("Type a sentence" in i.value for i in at.info)
        return
    assert any("normalised to Unicode NFKC" in w for w in warnings) == (case in NORMALISED)
    assert any("replacement character(s)" in w for w in warnings) == (case == "replacement characters")
    if case in SENTENCES and case not in {"lone surrogate", *NORMALISED}:
        assert [e.value for e in at.error] == [at.error[0].value] and SENTENCES[case] in at.error[0].value
        return
    assert not at.error, [e.value for e in at.error]
    assert next(m for m in at.metric if m.label == "Prediction").value in cache_env.class_names
    assert any("longer than the model's maximum length" in w for w in warnings) == (case == "100,000 characters")
    assert not any("<script" in m.value or "<img" in m.value for m in [*at.markdown, *at.caption])


@pytest.mark.slow
def test_rebuilding_a_stage_from_the_command_line_keeps_the_runs_own_settings(apptest_run, tmp_path):
    cache = tmp_path / "cache"
    copy = sealed_copy(apptest_run.dir, cache)  # built with --limit 300 --n-concepts 20, not the preset's
    for sub in ("downloads", "datasets", "models"):
        (cache / sub).symlink_to(CACHE / sub, target_is_directory=True)
    stamp = (copy.dir / "methods" / "vqlc" / "map.parquet").stat().st_mtime_ns
    r = run_cli("build", "--run", "copy", "--cache-dir", str(cache), "--rebuild", "maps")
    assert r.returncode == 0, r.stderr
    assert (copy.dir / "methods" / "vqlc" / "map.parquet").stat().st_mtime_ns != stamp  # drawn again
    from vqlc_core.pipeline.run import Run

    again = Run(copy.dir)
    assert again.is_built() and again.cfg.flat()["n_concepts"] == 20 and again.cfg.flat()["limit"] == 300
    r = run_cli("build", "--run", "copy", "--cache-dir", str(cache), "--rebuild", "maps", "--n-concepts", "7")
    assert r.returncode == 2 and "built with --n-concepts 20, not 7; pass --rebuild" in r.stderr, r.stderr
