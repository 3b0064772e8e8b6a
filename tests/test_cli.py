"""The command line answers every user mistake with one sentence and exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def run_cli(*args, cwd=ROOT):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "vqlc_core", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def files(tmp_path):
    good = tmp_path / "good.csv"
    good.write_text("text,label\n" + "".join(f"sentence number {i} is fine,{i % 2}\n" for i in range(40)))
    (tmp_path / "nocol.csv").write_text("body,label\nhello,1\nworld,0\n")
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "latin1.csv").write_bytes("text,label\ncaf\xe9 cr\xe8me,1\nna\xefve,0\n".encode("latin-1"))
    return tmp_path


@pytest.mark.parametrize("args, phrase", [
    (["extract", "--preset", "nope"], "invalid choice"),
    (["extract", "--model", "no-such-model"], "minilm"),
    (["extract", "--dataset", "{d}/nocol.csv"], "text"),
    (["extract", "--dataset", "{d}/empty.csv"], "empty"),
    (["extract", "--dataset", "{d}/latin1.csv"], "UTF-8"),
    (["extract", "--dataset", "{d}/missing.csv"], "not found"),
    (["extract", "--dataset", "{d}/good.csv", "--layer", "99"], "layers 1..6"),
])
def test_a_user_mistake_gets_one_sentence_not_a_traceback(files, args, phrase):
    args = [a.replace("{d}", str(files)) for a in args]
    out = run_cli(*args, "--run", "cli-test", "--cache-dir", str(files / "cache"))
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert phrase.lower() in out.stderr.lower(), out.stderr
    err = [line for line in out.stderr.strip().splitlines() if line.startswith("vqlc: error") or "error:" in line]
    assert len(err) == 1, out.stderr


def test_help_explains_every_option():
    out = run_cli("build", "--help")
    assert out.returncode == 0
    for opt in ("--preset", "--model", "--dataset", "--layer", "--pooling", "--aggregation", "--batch-size",
                "--run", "--n-concepts", "--methods", "--force"):
        assert opt in out.stdout
