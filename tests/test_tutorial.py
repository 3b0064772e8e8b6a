"""The tutorial is a notebook that runs: every cell of scripts/tutorial.py executes on a small
real run and prints or draws something, the site's page and the .ipynb carry those outputs, and
the page in docs/ holds the cells the script has now."""

from __future__ import annotations

import importlib.util
import json
import re

from tests.conftest import ROOT
from tests.runcopy import linked_copy

_spec = importlib.util.spec_from_file_location("tutorial_script", ROOT / "scripts" / "tutorial.py")
tutorial = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tutorial)


def code_cells(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)\n```", page, re.S)


def test_every_cell_of_the_tutorial_runs_on_a_small_run_and_shows_its_output(apptest_run, tmp_path, monkeypatch):
    linked_copy(apptest_run.dir, tmp_path / "cache", "small")
    monkeypatch.setenv("VQLC_CACHE_DIR", str(tmp_path / "cache"))
    written = tutorial.write("small", tmp_path / "docs")
    page = (tmp_path / "docs" / "tutorial.md").read_text()
    nb = json.loads((tmp_path / "docs" / "tutorial.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] for c in code)  # every cell printed, returned or drew something
    assert any("image/png" in o.get("data", {}) for c in code for o in c["outputs"])
    assert (tmp_path / "docs" / "tutorial" / "figure-1.png") in written
    assert "Traceback" not in page and page.count("```text") >= len(code) - 1
    assert apptest_run.class_names[0] in page  # the run's own classes, printed by the first cell


def test_the_tutorial_page_in_the_docs_has_the_scripts_cells():
    page = (ROOT / "docs" / "tutorial.md").read_text()
    run = re.search(r"--run (\S+)`", page).group(1)
    assert code_cells(page) == [text for kind, text in tutorial.cells(run) if kind == "code"], \
        "docs/tutorial.md is older than scripts/tutorial.py; run `python scripts/tutorial.py`"
