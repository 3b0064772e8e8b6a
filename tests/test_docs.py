"""The documentation's layout page (docs/reference/layout.md) is generated from the tree (`scripts/layout.py`): it is current,
`--check` says in one sentence when it is not, `--write` mends it and touches nothing else, and
every module of vqlc_core gets its line, the layers in their order."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_layout import LAYERS

SCRIPT = ROOT / "scripts" / "layout.py"
_spec = importlib.util.spec_from_file_location("layout_script", SCRIPT)
layout = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(layout)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_the_layout_page_is_current():
    done = run("--check")
    assert done.returncode == 0, done.stderr


def test_a_stale_section_is_one_sentence_and_write_mends_only_it(tmp_path):
    current = layout.with_layout(layout.PAGE.read_text(), layout.layout())
    start, end = layout.section(current)
    stale = current[:start] + current[start:end].replace("`vqlc_core/views/maps.py` — ",
                                                          "`vqlc_core/views/maps.py` — Old. ") + current[end:]
    path = tmp_path / "layout.md"
    path.write_text(stale)
    done = run("--check", str(path))
    assert done.returncode == 1
    message = [line for line in done.stderr.splitlines() if not line.startswith("note:")]
    assert len(message) == 1 and "Layout section differs from the tree" in message[0]
    assert "vqlc_core/views/maps.py` — Old." in message[0] and f"scripts/layout.py --write {path}" in message[0]
    assert run("--write", str(path)).returncode == 0
    assert path.read_text() == current  # the section mended, the rest of the file as it was
    assert run("--check", str(path)).returncode == 0


def test_a_page_without_markers_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "layout.md"
    path.write_text("# x\n\n## Layout\n\nby hand\n")
    for flag in ("--check", "--write"):
        done = run(flag, str(path))
        assert done.returncode == 1 and "has no Layout markers" in done.stderr
    assert path.read_text() == "# x\n\n## Layout\n\nby hand\n"


def test_the_layout_has_every_module_once_and_the_layers_in_order():
    text = layout.layout()
    lines = text.splitlines()
    for p in sorted((ROOT / "vqlc_core").rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        name = rel.removesuffix("__init__.py") if p.name == "__init__.py" else rel
        assert sum(line.lstrip().startswith(f"- `{name}` — ") for line in lines) == 1, name
    order = [line.split("`")[1] for line in lines if line.startswith("- `vqlc_core/") and line.split("`")[1].count("/") == 2]
    assert order == [f"vqlc_core/{sub}/" for sub in LAYERS]
    assert layout.LAYERS == LAYERS


@pytest.mark.parametrize("doc, first", [
    ("One. Two.", "One."),
    ("A wrapped\nsentence: it ends here. Then more.\n\nAnother paragraph.", "A wrapped sentence: it ends here."),
    ("Scores with a 95% bootstrap interval.\n", "Scores with a 95% bootstrap interval."),  # 'interval.' is no 'al.'
    ("An SAE (Gao et al. 2024, e.g. TopK) as a method. More.", "An SAE (Gao et al. 2024, e.g. TopK) as a method."),
    ("Files (`run.py`) and `x.y` names. Next", "Files (`run.py`) and `x.y` names."),
    ("No full stop on the first line\nnor on the second", "No full stop on the first line"),
    (None, layout.NO_DOCSTRING),
    ("  \n", layout.NO_DOCSTRING),
])
def test_first_sentence(doc, first):
    assert layout.first_sentence(doc) == first


def test_a_small_tree(tmp_path: Path):
    files = {
        "app.py": '"""The app. Details."""\n',
        "pages/b.py": '"""Page b."""\n', "pages/a.py": "x = 1\n",
        "vqlc_ui/__init__.py": '"""Glue."""\n', "vqlc_ui/w.py": '"""Widgets."""\n',
        "vqlc_core/__init__.py": '"""The library."""\n',
        "vqlc_core/views/__init__.py": '"""Views."""\n', "vqlc_core/views/maps.py": '"""Maps: <b>2-D</b>."""\n',
        "vqlc_core/base/__init__.py": '"""Ground."""\n', "vqlc_core/base/io.py": '"""IO."""\n',
        "vqlc_core/zextra/__init__.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert layout.layout(tmp_path) == "\n".join([
        "- `app.py` — The app.",
        f"- `pages/` — {layout.PAGES_NOTE}",
        f"  - `pages/a.py` — {layout.NO_DOCSTRING}",
        "  - `pages/b.py` — Page b.",
        "- `vqlc_ui/` — Glue.",
        "  - `vqlc_ui/w.py` — Widgets.",
        "- `vqlc_core/` — The library.",
        "- `vqlc_core/base/` — Ground.",
        "  - `vqlc_core/base/io.py` — IO.",
        "- `vqlc_core/views/` — Views.",
        "  - `vqlc_core/views/maps.py` — Maps: <b>2-D</b>.",
        f"- `vqlc_core/zextra/` — {layout.NO_DOCSTRING}",
    ]) + "\n"
    assert layout.missing_docstrings(tmp_path) == ["pages/a.py", "vqlc_core/zextra/"]
