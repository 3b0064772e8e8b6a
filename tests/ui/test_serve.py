"""`python -m vqlc_ui.serve`: `streamlit run app.py` with the libraries the pages import loaded
before the server listens, and the test and benchmark servers (bench/dashboard_server.py) started
that way. No test here depends on timing: each checks what is imported, and with what arguments
the server is started."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

import pytest

import dashboard_server
from tests.conftest import ROOT
from vqlc_ui import serve


def test_the_page_list_is_app_pys_and_the_preload_list_is_what_those_pages_import():
    files = serve.page_files()
    assert [p.stem for p in files][:3] == ["concepts", "codebook_map", "explain"] and all(p.exists() for p in files)
    assert sorted(p.name for p in files) == sorted(p.name for p in (ROOT / "pages").glob("*.py"))  # none left out
    got = serve.page_imports()
    assert {"vqlc_ui", "vqlc_core.views.charts", "vqlc_core.evaluate.tables", "plotly.express"} <= set(got)
    assert "vqlc_core.views" in got and "vqlc_core.views.browse" in got  # `from vqlc_core.views import browse`


def test_preload_imports_what_the_pages_import_and_leaves_pages_folder_mode():
    """In a fresh interpreter: after `preload`, the heavy libraries and every vqlc_core module a
    page imports are loaded, and Streamlit will not run a page alone as an old pages-folder app."""
    code = textwrap.dedent("""
        import sys
        from vqlc_ui import serve
        serve.preload()
        from streamlit.runtime.pages_manager import PagesManager
        wanted = ["torch", "sklearn", "pandas", "pyarrow.parquet", "plotly.express", "transformers.modeling_utils",
                  "vqlc_ui", "vqlc_core.pipeline.run", "vqlc_core.views.maps", "vqlc_core.views.charts",
                  "vqlc_core.views.judging", "vqlc_core.views.report", "vqlc_core.views.export_html",
                  "vqlc_core.evaluate.tables", "vqlc_core.evaluate.sae_compare", "streamlit.emojis"]
        print("missing", [m for m in wanted if m not in sys.modules])
        print("pages_folder", PagesManager.uses_pages_directory)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "missing []" in out.stdout, out.stdout
    assert "pages_folder False" in out.stdout, out.stdout
    # the cache decorators' warnings about the runtime that does not exist yet are kept quiet
    assert "No runtime found" not in out.stderr, out.stderr


def test_main_runs_streamlit_on_app_py_with_the_options_given(monkeypatch):
    """main makes the process-wide settings (one torch thread; no cuDNN attention; the libraries
    frozen out of the collector once preloaded), then serves app.py with the options given. The settings are
    recorded here, not made: this test's process is pytest's."""
    import gc

    import streamlit.web.cli
    import torch

    got, steps = {}, []
    monkeypatch.setattr(serve, "preload", lambda: steps.append("preload"))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: steps.append(f"threads {n}"))
    monkeypatch.setattr(torch.backends.cuda, "enable_cudnn_sdp", lambda on: steps.append(f"cudnn attention {on}"))
    monkeypatch.setattr(gc, "freeze", lambda: steps.append("freeze"))
    monkeypatch.setattr(streamlit.web.cli, "main",
                        lambda args, prog_name: (steps.append("serve"), got.update(args=args, prog=prog_name)))
    serve.main(["--server.port", "8765", "--server.address", "127.0.0.1"])
    assert steps == ["threads 1", "cudnn attention False", "preload", "freeze", "serve"]
    assert got == {"prog": "streamlit",
                   "args": ["run", str(ROOT / "app.py"), "--server.port", "8765", "--server.address", "127.0.0.1"]}


def _is_environ(node) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and getattr(node.value, "id", "") == "os"


def _process_wide_calls(path) -> list[str]:
    """Where the module at `path` changes its process: the collector (gc.freeze, gc.collect, ...),
    torch's global settings (torch.set_...), the environment (os.environ written, os.putenv);
    serve.main's own lines left out."""
    tree = ast.parse(path.read_text())
    skip = set()
    if path.name == "serve.py":
        main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
        skip = {id(n) for n in ast.walk(main)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Attribute) and node.attr.startswith("enable_") and "torch.backends." in ast.unparse(node):
            found.append((node.lineno, ast.unparse(node)))  # torch.backends.cuda.enable_cudnn_sdp and the like
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module, name = node.value.id, node.attr
            if (module == "gc" and not name.startswith(("get_", "is_"))) or (module == "torch" and name.startswith("set_")) \
                    or (module == "os" and name in ("putenv", "unsetenv")):
                found.append((node.lineno, f"{module}.{name}"))
        targets = getattr(node, "targets", None) or ([node.target] if isinstance(node, ast.AugAssign) else [])
        if any(isinstance(t, ast.Subscript) and _is_environ(t.value) for t in targets) or (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_environ(node.func.value)
                and node.func.attr in ("setdefault", "update", "pop", "popitem", "clear")):
            found.append((node.lineno, "os.environ written"))
    return [f"{path.name}:{line} {what}" for line, what in sorted(found)]


def test_process_wide_settings_are_made_in_serve_main_alone():
    """A cached loader or a page runs in whatever process imports it (AppTest's, a notebook's),
    so only the server's entry point may change the process."""
    paths = [*sorted((ROOT / "vqlc_ui").glob("*.py")), *sorted((ROOT / "pages").glob("*.py")), ROOT / "app.py"]
    assert [c for p in paths for c in _process_wide_calls(p)] == []


def test_the_process_wide_check_finds_what_it_looks_for(tmp_path):
    bad = tmp_path / "loaders.py"
    bad.write_text("import gc, os, torch\n\ndef load():\n    gc.freeze()\n    torch.set_num_threads(1)\n"
                   "    os.environ['X'] = '1'\n    os.environ.setdefault('Y', '2')\n    os.environ.get('Z')\n"
                   "    torch.backends.cuda.enable_cudnn_sdp(False)\n")
    assert _process_wide_calls(bad) == ["loaders.py:4 gc.freeze", "loaders.py:5 torch.set_num_threads",
                                        "loaders.py:6 os.environ written", "loaders.py:7 os.environ written",
                                        "loaders.py:9 torch.backends.cuda.enable_cudnn_sdp"]


def test_dashboard_server_uses_the_launcher_where_the_checkout_has_it(tmp_path):
    assert dashboard_server.launcher(ROOT) == ["-m", "vqlc_ui.serve"]
    old = tmp_path / "old"  # an older checkout: plain `streamlit run app.py`
    (old / "vqlc_ui").mkdir(parents=True)
    assert dashboard_server.launcher(old) == ["-m", "streamlit", "run", "app.py"]


def test_serve_starts_the_launcher_on_localhost(monkeypatch, tmp_path):
    """The server process `serve` starts: the launcher, bound to 127.0.0.1 (stopped before it runs)."""
    started = {}

    class Exited:
        pid, returncode = 0, 1

        def poll(self):
            return 1

        def wait(self, timeout=None):
            return 1

    def popen(args, **kw):
        started.update(args=args, cwd=kw["cwd"])
        return Exited()

    monkeypatch.setattr(dashboard_server.subprocess, "Popen", popen)
    monkeypatch.setattr(dashboard_server.os, "killpg", lambda *a: None)
    run = tmp_path / "runs" / "default"
    run.mkdir(parents=True)
    with pytest.raises(RuntimeError, match="exited with 1"):
        with dashboard_server.serve(run):
            pass
    args = started["args"]
    assert args[1:3] == ["-m", "vqlc_ui.serve"] and started["cwd"] == ROOT
    assert args[args.index("--server.address") + 1] == "127.0.0.1"
