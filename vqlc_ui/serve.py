"""Serve the dashboard with its libraries loaded first: `python -m vqlc_ui.serve [streamlit options]`
is `streamlit run app.py [streamlit options]`, except that torch, scikit-learn, scipy,
pandas, plotly and the rest that the pages import are imported before the server answers, and
the server's process-wide settings are made here, in `main`, and nowhere else.

Streamlit runs app.py only when a browser opens a page, so with `streamlit run` the first visitor
waits for those imports (about 2.5 s on a quiet 2-core machine, 5-7 s under load: most of a
page's first load). Here the server pays them once, before it listens; the page's script then
finds them in `sys.modules`. What the pages draw, and how, is unchanged.
"""

from __future__ import annotations

import ast
import gc
import importlib
import importlib.util
import io
import sys
from pathlib import Path

APP = Path(__file__).absolute().parents[1] / "app.py"


def page_files() -> list[Path]:
    """The page scripts app.py registers (its `st.Page("pages/....py", ...)` calls), in its order:
    the one list of pages, read from app.py's source."""
    tree = ast.parse(APP.read_text())
    return [APP.parent / node.args[0].value for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "Page" and node.args
            and isinstance(node.args[0], ast.Constant)]


def page_imports() -> list[str]:
    """Every module the pages import at their top level (`import a.b`; `from a.b import c`: a.b,
    and a.b.c when c is a module of the package a.b), sorted. Imports the packages it looks in."""
    out = set()
    for path in page_files():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import):
                out |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                out.add(node.module)
                if hasattr(importlib.import_module(node.module), "__path__"):  # a package: its modules too
                    out |= {f"{node.module}.{a.name}" for a in node.names
                            if importlib.util.find_spec(f"{node.module}.{a.name}") is not None}
    return sorted(out)


def preload() -> None:
    """Import what app.py's pages import (`page_imports`), and what Streamlit itself loads on a
    first run."""
    for name in page_imports():  # vqlc_ui brings vqlc_core, torch, scikit-learn, scipy, pandas, pyarrow, plotly
        importlib.import_module(name)
    # What loading a run's model imports: transformers' modeling code and, beneath it, torch's
    # compiler, sympy and accelerate (1,400 modules, 178,000 objects the collector tracks; about
    # 3 s under load, which the explainer's warm-up no longer spends beside the first page).
    importlib.import_module("transformers.modeling_utils")

    import pandas as pd
    import plotly.express as px
    import plotly.io
    from streamlit.string_util import is_emoji

    # First uses that load more: pandas' parquet engine, and plotly's default template (read from
    # its JSON on the first figure) and JSON encoder.
    buf = io.BytesIO()
    pd.DataFrame({"x": [0]}).to_parquet(buf)
    pd.read_parquet(io.BytesIO(buf.getvalue()))
    plotly.io.to_json(px.bar(pd.DataFrame({"x": ["a"], "y": [1]}), x="x", y="y"))

    is_emoji("🧩")  # the tab icon: its first check imports Streamlit's emoji table and compiles a large regex
    # The app names its pages with st.navigation. Streamlit otherwise starts in the old pages-folder
    # mode (a pages/ folder sits beside app.py): a first visit to a page's own address would run
    # that page alone, which reruns through app.py (`widgets.app_navigation`), two runs for one.
    from streamlit.runtime.pages_manager import PagesManager

    PagesManager.uses_pages_directory = False


def main(argv: list[str] | None = None) -> None:
    import torch

    # The server's process-wide settings, here alone. One server process serves every session:
    # one intra-op thread per forward keeps concurrent explanations from oversubscribing the
    # cores (on 2 cores, 2 threads barely beat 1); a build started from a page runs on every
    # core for its duration (`hardware.torch_threads`).
    torch.set_num_threads(1)
    # On a GPU, attention without cuDNN's kernels: cuDNN builds a plan for every new input
    # length, which put the Explain page's p95 for fresh 40-word inputs at 330 ms on an H200,
    # against 62-73 ms without it (57-58 ms either way for lengths seen before;
    # bench/gpu_attention.py). Flash and memory-efficient attention remain; a CPU is unaffected.
    torch.backends.cuda.enable_cudnn_sdp(False)
    preload()
    # The libraries' long-lived objects leave the collector's generations, so a full collection
    # no longer walks them: with the apptest run's explainer loaded it takes 3 ms, against 89 ms
    # had only the pages' imports been frozen (the model's own 24,000 objects stay collectable).
    gc.collect()
    gc.freeze()
    from streamlit.web.cli import main as streamlit

    streamlit(["run", str(APP), *(sys.argv[1:] if argv is None else argv)], prog_name="streamlit")


if __name__ == "__main__":
    main()
