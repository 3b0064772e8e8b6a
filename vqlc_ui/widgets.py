"""Widgets the pages share: the guard that turns a run error into one sentence, the rebuild
button it offers, the sidebar's run and method selectors, the shared input text and the pin
button. Values chosen on one page are kept for the others in `st.session_state`.
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from pathlib import Path

import streamlit as st

from vqlc_core import browse
from vqlc_core.run import Run, default_run, list_runs
from vqlc_core.runio import CorruptStage, RunError

from . import loaders

EXAMPLE = "a gorgeous, witty and deeply moving film, though its final act drags on far too long ."


@contextmanager
def guard():
    """Show a run error, a bad input or a missing file as one sentence and stop the page."""
    try:
        yield
    except CorruptStage as e:
        st.error(str(e))
        rebuild_button(e.run_dir, e.stage)
        st.stop()
    except (RunError, ValueError) as e:
        st.error(str(e))
        st.stop()
    except FileNotFoundError as e:
        st.error(f"A file of this run is missing ({Path(e.filename or '?').name}); rebuild the run.")
        st.stop()


def rebuild_button(run_dir: Path, stage: str) -> None:
    """Offer to build `stage` of the run and every stage after it again, with a progress bar."""
    if not st.button(f"Rebuild '{stage}'", key=f"rebuild_{stage}", type="primary", icon=":material/build:"):
        return
    from vqlc_core.pipeline import build

    run_dir = Path(run_dir)
    bar = st.progress(0.0, text="starting")
    with guard():
        build(Run(run_dir).rebuild_config(), rebuild=stage,
              on_stage=lambda i, n, name: bar.progress(i / n, text=f"{name} ({i}/{n})"))
    st.success(f"Run '{run_dir.name}' is rebuilt from stage '{stage}'; reload the page.")


def _page() -> str:
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return getattr(ctx, "page_script_hash", "") or "page"


def persisted(key: str, default):
    """A widget key, one per page, for a value kept across pages in `st.session_state[key]`:
    Streamlit drops a widget's state when a page without it runs, so each page's widget starts
    from the kept value and the page copies the widget's value back."""
    wkey = f"_w_{key}_{_page()[:8]}"
    if wkey not in st.session_state:
        st.session_state[wkey] = st.session_state.get(key, default)
    return wkey


def _select(label: str, key: str, options: list, default=None, **kw):
    wkey = persisted(key, options[0] if default is None else default)
    if st.session_state[wkey] not in options:
        st.session_state[wkey] = options[0]
    st.session_state[key] = st.sidebar.selectbox(label, options, key=wkey, **kw)
    return st.session_state[key]


def text_input(label: str = "Input text", height: int = 100) -> str:
    """The input text, shared by Explain and Compare."""
    text = st.text_area(label, key=persisted("text", EXAMPLE), height=height)
    st.session_state["text"] = text
    return text


def text_key(text: str) -> str:
    """A short stable tag of `text`, for widget keys that belong to one input."""
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def sidebar(need: tuple[str, ...] = (), choose_method: bool = True):
    """Run (and method) selectors. Stops the page with an explanation when no run is built or
    the chosen run lacks a stage in `need`. Returns (run, method or None)."""
    cache = loaders.cache_dir()
    runs = [p.name for p in list_runs(cache)]
    if not runs:
        st.info(f"No run is built yet under {cache / 'runs'}. Open the **Build** page to build the "
                "default run, or run `python -m vqlc_core build`.")
        st.stop()
    run_dir = cache / "runs" / _select("Run", "run", runs, default=default_run(cache))
    with guard():
        run = loaders.load_run(str(run_dir), (run_dir / "manifest.json").stat().st_mtime_ns)
        run.check(deep=False)  # sizes only: cheap enough for every rerun; the build checks digests
    missing = [s for s in need if not run.manifest.is_complete(s)]
    built = run.methods_built()
    if missing or (choose_method and not built):
        what = missing[0] if missing else "a concept method"
        st.warning(f"Run '{run.dir.name}' has no finished '{what}' stage yet; finish it with "
                   f"`python -m vqlc_core build --run {run.dir.name}` or choose another run.")
        st.stop()
    method = _select("Concept method", "method", built) if choose_method else None
    return run, method


def pin_button(run: Run, method: str, text: str, key: str) -> None:
    """A button that pins this input and its concepts for the Case study page."""
    if st.button("Pin for the case study", key=key, icon=":material/push_pin:"):
        pin = browse.make_pin(loaders.explainer(str(run.dir), loaders.stamp(run)), text, method)
        st.session_state.setdefault("pins", []).append({**pin, "run": run.dir.name})
        n = len(st.session_state["pins"])
        st.toast(f"Pinned: {n} pin{'s' if n != 1 else ''} in the case study.")
