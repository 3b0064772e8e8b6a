"""The public Python API: the notebook guide's "From Python" blocks run as written on a small real run,
and `open_run` and `Run.explainer` say what is wrong in one sentence."""

from __future__ import annotations

import re

import pytest

import vqlc_core
from tests.conftest import ROOT
from tests.runcopy import linked_copy
from vqlc_core import RunError, open_run


GUIDE = ROOT / "docs" / "guides" / "notebooks.md"


def readme_block(i: int = 0) -> str:
    """The i-th Python block of the notebook guide's "From Python" section (to the next heading
    or the page's end)."""
    text = GUIDE.read_text()
    section = text[text.index("## From Python"):]
    end = section.find("\n## ", 3)
    section = section if end < 0 else section[:end]
    return re.findall(r"```python\n(.*?)```", section, re.S)[i]


@pytest.mark.slow
def test_the_readmes_python_example_runs_on_a_run_named_default(apptest_run, tmp_path, monkeypatch, capsys):
    linked_copy(apptest_run.dir, tmp_path, "default")
    monkeypatch.setenv("VQLC_CACHE_DIR", str(tmp_path))
    exec(compile(readme_block(), str(GUIDE), "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[0] in apptest_run.class_names
    assert re.match(r"VQLC prediction concept c\d+: (mostly|mixed) .* p = ", out[1]), out[1]  # named by its members
    assert out[3].startswith("confidence change ")
    assert re.fullmatch(r"\(1, \d+, 384\)", out[4])  # MiniLM's width at the run's layer
    assert len(out) == 8 and all(re.match(r"c\d+: .+ \d+ [01]\.\d+$", line) for line in out[5:]), out[5:]


@pytest.mark.slow
def test_the_readmes_second_block_fits_an_array_with_no_run_and_draws_a_cloud_and_a_map(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VQLC_CACHE_DIR", str(tmp_path))  # no run anywhere
    exec(compile(readme_block(1), str(GUIDE), "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 6, out
    used = [re.fullmatch(r"(VQLC|K-Means) uses (\d+) concepts", line) for line in out[:2]]
    assert all(used) and all(30 <= int(u.group(2)) <= 40 for u in used), out[:2]  # 40 topics, 40 concepts
    records = [re.fullmatch(r"c\d+: (.+) (\d+) ([01]\.\d+)", line) for line in out[2:5]]
    assert all(records), out[2:5]
    for r in records:  # a concept's words are its topic's: t<topic>w<word>, one topic, so one parity class
        topics = {w.split("w")[0] for w in r.group(1).split(", ")}
        assert len(topics) == 1 and float(r.group(3)) == 1.0, r.group(0)
    assert out[5] == "True True"


def test_importing_the_package_loads_no_heavy_library_until_a_name_needs_one():
    import subprocess
    import sys

    code = ("import sys, vqlc_core as vq; heavy = ('torch', 'sklearn', 'plotly', 'pandas');"
            "print(*[m in sys.modules for m in heavy]); vq.VQLC; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    first, then = out.stdout.splitlines()
    assert first == "False False False False" and then == "True"
    assert "ConceptSet" in dir(vqlc_core)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        vqlc_core.nothing


def test_everything_in_all_is_importable_from_the_package():
    assert sorted(vqlc_core.__all__) == sorted(set(vqlc_core.__all__))
    for name in vqlc_core.__all__:
        assert getattr(vqlc_core, name) is not None, name


def test_open_run_names_the_runs_there_when_one_is_missing(apptest_run, tmp_path):
    linked_copy(apptest_run.dir, tmp_path, "mine")
    with pytest.raises(RunError, match=r"No run 'nope' under .*; the runs there: mine \(`vqlc build` builds one\)\."):
        open_run("nope", cache_dir=tmp_path)
    assert open_run("mine", cache_dir=tmp_path).dir == tmp_path / "runs" / "mine"
    assert open_run(apptest_run.dir).dir == apptest_run.dir  # a path works too


def test_an_explainer_of_a_method_the_run_lacks_is_one_sentence(apptest_run):
    with pytest.raises(RunError, match="has no finished method 'sae'; it has vqlc, kmeans, lacoat"):
        apptest_run.explainer(methods=("vqlc", "sae"))
