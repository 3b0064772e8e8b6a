"""The package's layout is its architecture: subpackages in layers, imports pointing down only,
no cycles, no private names across modules, and no module over 350 lines of code (its docstrings,
the API reference's text, are not counted). Checked by reading every module's imports
(function-level ones included) from its source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

PKG = ROOT / "vqlc_core"
# Lowest first: a module may import its own subpackage and the ones before it, never one after.
LAYERS = ("base", "data", "methods", "explain", "evaluate", "llm", "views", "pipeline")
MAX_LINES = 350


def _modules(pkg: Path | None = None) -> dict[str, Path]:
    pkg, out = pkg or PKG, {}
    for p in sorted(pkg.rglob("*.py")):
        parts = p.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _imports(name: str, path: Path, pkg: Path | None = None) -> list[tuple[str, list[str], bool]]:
    """(imported module of package `pkg`, names taken from it, at module level?) for every import."""
    tree = ast.parse(path.read_text())
    top = set(map(id, tree.body))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    mods, root = _modules(pkg), (pkg or PKG).name
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith(root):
                continue
            for a in node.names:  # `from pkg import module` imports the module
                sub = f"{target}.{a.name}"
                out.append((sub, [], id(node) in top) if sub in mods else (target, [a.name], id(node) in top))
        elif isinstance(node, ast.Import):
            out += [(a.name, [], id(node) in top) for a in node.names if a.name.startswith(root)]
    return out


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in LAYERS:
        return len(LAYERS)  # vqlc_core itself (the public API) and __main__ sit on top
    return LAYERS.index(parts[1])


def _graph(pkg: Path | None = None) -> dict[str, set[str]]:
    mods = _modules(pkg)
    return {m: {t for t, _, _ in _imports(m, p, pkg) if t in mods and t != m} for m, p in mods.items()}


def test_every_module_sits_in_a_layer_subpackage():
    loose = [m for m in _modules() if m.count(".") == 1 and m.split(".")[1] not in LAYERS + ("__main__",)]
    assert loose == [], f"modules outside the layer subpackages: {loose}"


def test_imports_point_down_the_layers_only():
    upward = [f"{m} -> {t}" for m, ts in _graph().items() for t in ts if _layer(t) > _layer(m)]
    assert upward == [], "upward imports:\n" + "\n".join(upward)


@pytest.mark.parametrize("pkg", [PKG, ROOT / "vqlc_ui"], ids=["vqlc_core", "vqlc_ui"])
def test_the_import_graph_has_no_cycle(pkg):
    """No cycle, counting imports inside functions too (a lazy import hides a cycle, it does not
    break it)."""
    graph, state, cycles = _graph(pkg), {}, []

    def visit(m, stack):
        state[m] = "open"
        for t in sorted(graph[m]):
            if state.get(t) == "open":
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t, stack + [t])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == [], "import cycles:\n" + "\n".join(cycles)


def test_no_private_name_is_imported_from_another_module():
    private = [f"{m}: {t}.{n}" for m, p in _modules().items() for t, names, _ in _imports(m, p)
               for n in names if n.startswith("_") and not n.startswith("__")]
    assert private == [], "private names crossing modules:\n" + "\n".join(private)


# The one module whose vqlc_core imports may sit inside functions: the command line parses with the
# settings alone and imports a command's implementation in the function that runs it, so `--help`
# imports no torch. Those imports still point down the layers and count for the cycle check.
LAZY_IMPORTERS = ("vqlc_core.pipeline.cli",)


def test_package_imports_sit_at_module_level():
    lazy = sorted({f"{m} -> {t}" for m, p in _modules().items() if m not in LAZY_IMPORTERS
                   for t, _, top in _imports(m, p) if not top})
    assert lazy == [], "vqlc_core imports inside functions:\n" + "\n".join(lazy)


def test_the_command_line_imports_implementations_inside_functions_only_downwards():
    """cli's function-level imports (the commands' implementations) are there and, like every
    import, point down the layers (`test_imports_point_down_the_layers_only` reads them too)."""
    cli = "vqlc_core.pipeline.cli"
    inner = {t for t, _, top in _imports(cli, _modules()[cli]) if not top}
    assert "vqlc_core.pipeline.build" in inner and "vqlc_core.pipeline.run" in inner
    assert all(_layer(t) <= _layer(cli) for t in inner)


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def code_lines(text: str) -> int:
    """The lines of a module, less those of its docstrings (module, class and function ones)."""
    tree = ast.parse(text)
    docs = 0
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            docs += body[0].end_lineno - body[0].lineno + 1
    return len(text.splitlines()) - docs


def test_code_lines_leave_docstrings_out():
    assert code_lines('"""Mod.\n\nMore."""\n\n\ndef f():\n    """One.\n\n    Two.\n    """\n    return 1\n') == 4


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_module_is_at_most_350_lines(path):
    n = code_lines(path.read_text())
    assert n <= MAX_LINES, f"{path.relative_to(ROOT)} has {n} lines of code (at most {MAX_LINES})"


def test_the_checks_catch_an_upward_import_and_a_cycle(tmp_path, monkeypatch):
    """The walker itself: a fake package with an upward edge and a cycle is caught."""
    pkg = tmp_path / "vqlc_core"
    for sub in ("base", "pipeline"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "base" / "a.py").write_text("from vqlc_core.pipeline import b\n")
    (pkg / "pipeline" / "b.py").write_text("from vqlc_core.base.a import x\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "PKG", pkg)
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "ROOT", tmp_path)
    with pytest.raises(AssertionError, match="vqlc_core.base.a -> vqlc_core.pipeline.b"):
        test_imports_point_down_the_layers_only()
    with pytest.raises(AssertionError, match="import cycles"):
        test_the_import_graph_has_no_cycle(pkg)


@pytest.mark.parametrize("path", sorted((ROOT / "pages").glob("*.py")), ids=lambda p: p.name)
def test_a_page_imports_the_packages_public_names_and_no_other_page(path):
    """The pages sit on top: they import vqlc_ui and vqlc_core (never each other, never a private
    name), so their layer is above both packages' and the graph stays acyclic."""
    tree = ast.parse(path.read_text())
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] == "pages" or node.level:
                bad.append(f"from {'.' * node.level}{node.module} import ...")
            bad += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.split(".")[0] == "pages"]
    assert bad == [], f"{path.name}: {bad}"


# tests/<folder>/ for each vqlc_core subpackage, and for what sits beside the package
TEST_FOLDERS = {**{sub: ROOT / "vqlc_core" / sub for sub in LAYERS}, "ui": ROOT / "vqlc_ui", "bench": ROOT / "bench"}


def test_the_tests_mirror_the_package():
    """A test folder is named after a subpackage of vqlc_core (or `ui` for vqlc_ui and the pages,
    `bench` for the benchmark scripts), and a test module named after a module sits in the
    folder of that module's subpackage: a reader finds a module's tests where the module is."""
    tests = ROOT / "tests"
    folders = sorted(p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    assert set(folders) <= set(TEST_FOLDERS), f"test folders with no subpackage: {set(folders) - set(TEST_FOLDERS)}"
    home = {}  # module name -> the test folders it may be tested in
    for folder, src in TEST_FOLDERS.items():
        for p in src.glob("*.py"):
            home.setdefault(p.stem, set()).add(folder)
    misplaced = [str(t.relative_to(tests)) for t in tests.rglob("test_*.py")
                 if t.parent != tests and t.stem[len("test_"):] in home and t.parent.name not in home[t.stem[len("test_"):]]]
    assert misplaced == [], f"tests outside their module's folder: {misplaced}"
    assert sorted(t.name for t in tests.glob("test_*.py")) == sorted(
        ["test_api.py", "test_bad_input.py", "test_docs.py", "test_layout.py", "test_security.py"]), \
        "a new test module belongs in the folder of the subpackage it tests"
