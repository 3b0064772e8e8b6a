"""The command line answers every user mistake with one sentence and exit status 2, and explains
every option it takes."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_cli
from vqlc_core.pipeline.cli import parser


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
    code, _, err = run_cli(*args, "--run", "cli-test", "--cache-dir", str(files / "cache"))
    assert code == 2, err
    assert "Traceback" not in err
    assert phrase.lower() in err.lower(), err
    errors = [line for line in err.strip().splitlines() if line.startswith("vqlc: error") or "error:" in line]
    assert len(errors) == 1, err


def commands() -> argparse._SubParsersAction:
    (sub,) = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sub


def subcommands() -> dict[str, argparse.ArgumentParser]:
    return dict(commands().choices)


def options(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in p._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def test_every_command_is_listed_with_a_help_line():
    helps = {a.dest: a.help for a in commands()._choices_actions}
    assert set(helps) == set(subcommands()) >= {"extract", "train", "build", "runs"}
    assert all(h and len(h.split()) >= 3 for h in helps.values()), helps


@pytest.mark.parametrize("command", ["extract", "train", "build", "runs", "export-html", "sae-compare"])
def test_every_option_of_a_command_has_its_own_help_text(command):
    opts = options(subcommands()[command])
    assert len(opts) >= 2
    for a in opts:
        words = re.sub(r"\(default: [^)]*\)|%\(default\)s", "", a.help or "").split()
        flag_words = {w for f in a.option_strings for w in f.lstrip("-").split("-")}
        assert len(words) >= 2, f"{command} {a.option_strings[0]} has no help"
        assert {w.lower().strip(",.():") for w in words} - flag_words, \
            f"{command} {a.option_strings[0]}: the help only repeats the flag: {a.help!r}"


def test_the_build_help_names_the_options_a_user_needs_first():
    p = subcommands()["build"]
    flags = {f for a in options(p) for f in a.option_strings}
    assert {"--preset", "--model", "--dataset", "--layer", "--n-concepts", "--methods", "--run", "--force",
            "--rebuild"} <= flags
    assert "--n-concepts" in p.format_help()


HEAVY = {"torch", "transformers", "sklearn", "scipy", "plotly", "pandas"}


@pytest.mark.parametrize("command", ["", "build", "extract", "train", "report", "export-html", "sae-compare", "judge",
                                     "label", "runs"], ids=lambda c: c or "vqlc")
def test_help_answers_without_importing_torch_or_any_heavy_library(command):
    """`vqlc --help` and every command's --help parse with the settings alone: `-X importtime`
    lists every module the process imported, and none is torch, transformers, scikit-learn,
    SciPy, plotly or pandas (a command's implementation is imported when it runs)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "vqlc_core", *command.split(), "--help"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: vqlc {command}".rstrip()) and "--help" in out.stdout, out.stdout
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in out.stderr.splitlines()
                if line.startswith("import time:")}
    assert "vqlc_core" in imported and not imported & HEAVY, sorted(imported & HEAVY)
