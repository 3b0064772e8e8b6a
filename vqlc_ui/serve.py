"""Serve the dashboard with its libraries loaded first: `python -m vqlc_ui.serve [streamlit options]`
is `streamlit run app.py [streamlit options]`, except that torch, scikit-learn, scipy,
pandas, plotly and the rest that the pages import are imported before the server answers.

Streamlit runs app.py only when a browser opens a page, so with `streamlit run` the first visitor
waits for those imports (about 2.5 s on a quiet 2-core machine, 5-7 s under load: most of a
page's first load). Here the server pays them once, before it listens; the page's script then
finds them in `sys.modules`. What the pages draw, and how, is unchanged.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

APP = Path(__file__).absolute().parents[1] / "app.py"


def preload() -> None:
    """Import what app.py's pages import, and what Streamlit itself loads on a first run."""
    import vqlc_ui  # noqa: F401  (vqlc_core, torch, scikit-learn, scipy, pandas, pyarrow, plotly)

    # The pages' own imports, not pulled in by vqlc_ui.
    import vqlc_core.evaluate.sae_compare  # noqa: F401
    import vqlc_core.evaluate.tables  # noqa: F401
    import vqlc_core.views.charts  # noqa: F401
    import vqlc_core.views.export_html  # noqa: F401
    import vqlc_core.views.judging  # noqa: F401
    import vqlc_core.views.maps  # noqa: F401
    import vqlc_core.views.report  # noqa: F401
    import vqlc_ui.uploads  # noqa: F401

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
    preload()
    from streamlit.web.cli import main as streamlit

    streamlit(["run", str(APP), *(sys.argv[1:] if argv is None else argv)], prog_name="streamlit")


if __name__ == "__main__":
    main()
