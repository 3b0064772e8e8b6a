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
from vqlc_core.runio import RunError

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
}
EMPTY = {"empty", "whitespace only"}  # the library answers these with a sentence, not a result


def _in_time(fn, *args):
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args).result(timeout=TIMEOUT)


def one_sentence(msg: str) -> None:
    assert msg and "Traceback" not in msg and "\n" not in msg.strip(), msg
    assert msg.rstrip().endswith("."), msg


# --- the library -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def explainer(apptest_run):
    from vqlc_core.explain import Explainer

    run = apptest_run
    methods = {m: (run.method(m), run.concept_set(m)) for m in run.methods_built()}
    return Explainer(run.classifier, run.layer, methods, ig_steps=run.cfg.eval.ig_steps)


@pytest.mark.parametrize("case", list(TEXTS))
def test_explain_answers_any_text_with_a_result_or_a_sentence(explainer, case):
    text = TEXTS[case]
    if case in EMPTY:
        with pytest.raises(ValueError) as e:
            _in_time(explainer.explain, text)
        one_sentence(str(e.value))
        return
    ex = _in_time(explainer.explain, text)
    assert ex.prediction in explainer.classifier.class_names
    assert 0.0 < ex.confidence <= 1.0 and np.isfinite(ex.confidence)
    assert ex.truncated == (case == "100,000 characters")
    for w in ex.words:  # every word is a real span of the input
        assert 0 <= w["start"] < w["end"] <= len(text) and text[w["start"]:w["end"]].strip() == w["word"]
    for m, out in ex.methods.items():
        assert len(out["word_concepts"]) == len(ex.words)
    r = _in_time(explainer.ablate_concepts, text, "vqlc", [0, 1])
    assert r["prediction"] in explainer.classifier.class_names and np.isfinite(r["delta"])


@pytest.mark.parametrize("method, ids, phrase", [
    ("vqlc", [-1], "outside"),
    ("vqlc", [10_000], "outside"),
    ("vqlc", ["seven"], "whole numbers"),
    ("vqlc", [[1, 2], [3]], "whole numbers"),
    ("no-such-method", [1], "Unknown concept method"),
])
def test_ablating_bad_concept_ids_is_one_sentence(explainer, method, ids, phrase):
    with pytest.raises(ValueError) as e:
        _in_time(explainer.ablate_concepts, "a fine film", method, ids)
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
    from vqlc_core.datasets import load_dataset

    with pytest.raises(RunError) as e:
        _in_time(load_dataset, str(data(name, body)))
    assert phrase in str(e.value), e.value
    one_sentence(str(e.value))


def test_a_dataset_name_that_is_nothing_is_one_sentence():
    from vqlc_core.datasets import load_dataset

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
    from vqlc_core.pipeline import build

    rebuild = kw.pop("rebuild", None)
    with pytest.raises(RunError) as e:
        _in_time(lambda: build(_cfg(run_copy, **kw), rebuild=rebuild))
    assert phrase in str(e.value), e.value
    one_sentence(str(e.value))


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
    (["--run", "copy", *APPTEST_ARGS], _other_version, "expected format 2, got 99"),
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
    assert not at.error, [e.value for e in at.error]
    if case in EMPTY:
        assert "Type a sentence" in at.info[0].value
        return
    assert next(m for m in at.metric if m.label == "Prediction").value in cache_env.class_names
    warnings = [w.value for w in at.warning]
    assert any("longer than the model's maximum length" in w for w in warnings) == (case == "100,000 characters")
    assert not any("<script" in m.value or "<img" in m.value for m in [*at.markdown, *at.caption])
