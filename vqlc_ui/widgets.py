"""Widgets the pages share: the guard that turns a run error into one sentence, the rebuild
button it offers, the sidebar's run and method selectors, the shared input text (cleaned, in the
browser and on the server) and the pin button (pins are saved with the run). Values chosen on
one page are kept for the others in `st.session_state`, and put in the page's link (`share`).
"""

from __future__ import annotations

import hashlib
import logging
from contextlib import contextmanager
from pathlib import Path

import streamlit as st

from vqlc_core.views import browse
from vqlc_core.views.browse import EXAMPLE  # the pages open on it; the build explains it ahead
from vqlc_core.data.inputs import clean_input
from vqlc_core.views.pins import add_pin, load_pins
from vqlc_core.pipeline.run import Run, default_run, list_runs
from vqlc_core.base.hardware import torch_threads, usable_cores
from vqlc_core.base.runio import CorruptStage, RunError
from vqlc_core.pipeline.run import unfinished_message

from . import loaders, share, tags

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


@contextmanager
def build_messages(show):
    """Pass what vqlc's stages log at INFO (the fine-tuning's time estimate, a stage's result)
    to `show(message)` while the block runs, as the command line prints them."""
    logger = logging.getLogger("vqlc_core")
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: show(record.getMessage())
    level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def rebuild_button(run_dir: Path, stage: str) -> None:
    """Offer to build `stage` of the run and every stage after it again, with a progress bar."""
    if not st.button(f"Rebuild '{stage}'", key=f"rebuild_{stage}", type="primary", icon=":material/build:"):
        return
    from vqlc_core.pipeline.build import build

    run_dir = Path(run_dir)
    bar = st.progress(0.0, text="starting")
    said = st.empty()
    with guard(), build_messages(said.text), torch_threads(usable_cores()):  # every core, as a build from the shell
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
    """The input text, shared by Explain and Compare. It is cleaned before the box is drawn
    (`clean_input`: NFKC, no lone surrogate, no control character), so the box shows what the
    model reads, with a notice of what changed while that text stays."""
    wkey = persisted("text", EXAMPLE)
    clean, notice = clean_input(st.session_state[wkey])
    if notice:
        st.session_state[wkey] = clean  # before the widget exists, so the box shows the cleaned text
        st.session_state["text_notice"] = (clean, notice)
    text = st.text_area(label, key=wkey, height=height)
    st.session_state["text"] = text
    share.publish(text=text)
    kept = st.session_state.get("text_notice")
    if kept and kept[0] == text:
        st.warning(kept[1], icon=":material/edit_note:")
    return text


def explained_text(run, empty: str, height: int = 100, attribute: tuple[str, ...] | None = None,
                   choose=None) -> tuple[str, dict, dict]:
    """The text box of Explain and Compare (`text_input`), the choices `choose()` draws under it
    (`explanation.options`: where a concept is removed, Shapley values, how words are coloured;
    none when None) and the explanation of what the box holds under those choices, with the
    concept attribution of the methods in `attribute` (None: every method); while the box is
    blank the page says `empty` and stops there. Returns (text, explanation, choices)."""
    text = text_input(height=height)
    if not text.strip():
        st.info(empty)
        st.stop()
    chosen = choose() if choose is not None else {}
    with guard():
        ex = loaders.explain(str(run.dir), loaders.stamp(run), text, attribute, chosen.get("shapley", False),
                             chosen.get("intervention"))
    return text, ex, chosen


# Streamlit's browser client encodes a lone surrogate (half of an emoji's UTF-16 pair, e.g. from
# a script or a broken paste) as invalid UTF-8, and its server closes the connection on it (code
# 1002) before any page runs. So every typed value is made well-formed in the browser, at the
# input event, before the client reads it.
WELL_FORMED_TYPING = """<script>
if (!window.vqlcWellFormed) {
  window.vqlcWellFormed = true;
  window.addEventListener("input", (e) => {
    const box = e.target;
    if (!(box instanceof HTMLTextAreaElement || box instanceof HTMLInputElement)) return;
    if (typeof box.value !== "string" || box.value.isWellFormed()) return;
    const proto = box instanceof HTMLTextAreaElement ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
    Object.getOwnPropertyDescriptor(proto, "value").set.call(box, box.value.toWellFormed());
  }, true);
}
</script>"""


def well_formed_typing() -> None:
    """Install, once per browser page, the script that replaces lone surrogates in typed text
    by U+FFFD before Streamlit's client sends it (see WELL_FORMED_TYPING)."""
    st.sidebar.html(WELL_FORMED_TYPING, unsafe_allow_javascript=True)


def text_key(text: str) -> str:
    """A short stable tag of `text`, for widget keys that belong to one input."""
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def app_navigation() -> None:
    """Leave Streamlit's pages-folder mode. A server's first visit, if it is to a page's own
    address (a shared link such as /explain?run=...) rather than the root, runs that page alone,
    as the pages/ folder of old multipage apps, without app.py (its navigation, page settings and
    model warm-up); only a run that calls st.navigation ends that mode, for the whole server. A
    page run that way ends it and runs again: the same page, through app.py."""
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


def toast_after_rerun(message: str) -> None:
    """Rerun the page and show `message` as a toast on the new run: a toast drawn just before
    `st.rerun()` is dropped with the rest of the run that is cut short."""
    st.session_state["_toast"] = message
    st.rerun()


def toast_kept() -> None:
    """Show the toast `toast_after_rerun` kept for this run, once."""
    if message := st.session_state.pop("_toast", None):
        st.toast(message)


def sidebar(need: tuple[str, ...] = (), choose_method: bool = True):
    """Run (and method) selectors, set from the page's link the first time (see `share`); a run
    with no finished concept method is not offered (the Build page lists it). Stops the page with
    an explanation when no run is built or the chosen run lacks a stage in `need`.
    Returns (run, method or None); the link to the view is kept up to date from here on."""
    app_navigation()
    well_formed_typing()  # every page with a run has a box to type in
    toast_kept()
    cache = loaders.cache_dir()
    runs = [p.name for p in list_runs(cache, usable=True)]  # a failed first build has nothing to show
    if not runs:
        unfinished = len(list_runs(cache)) - len(runs)
        st.info(f"No run is built yet under {cache / 'runs'}"
                + (f" ({unfinished} run(s) have no finished concept method; the **Build** page lists them with "
                   "what to do)" if unfinished else "")
                + ". Open the **Build** page to build the default run, or run `python -m vqlc_core build`.")
        st.stop()
    share.restore(runs)  # a link's run, method, concept and input, before the widgets read them
    run_dir = cache / "runs" / _select("Run", "run", runs, default=default_run(cache))
    with guard():
        run = loaders.load_run(str(run_dir), (run_dir / "manifest.json").stat().st_mtime_ns)
        run.check(deep=False)  # sizes only: cheap enough for every rerun; the build checks digests
    missing = [s for s in need if not run.manifest.is_complete(s)]
    built = run.methods_built()
    if missing or (choose_method and not built):
        st.warning(unfinished_message(run, missing[0] if missing else "a concept method"))
        st.stop()
    method = _select("Concept method", "method", built) if choose_method else None
    share.settle(run, method)
    share.begin(run.dir.name, method)
    return run, method


def pin_button(run: Run, method: str, text: str, key: str, ablated=()) -> None:
    """A button that pins this input as the page shows it, with the run's provenance, for the Case
    study page: its concepts, each one's ablation alone, and the concepts `ablated` (toggled on the
    page) together with the prediction they give. Pins are saved with the run
    (`vqlc_core.views.pins`), so they outlive the session; the same view of an input is not pinned
    again."""
    if st.button("Pin for the case study", key=key, icon=":material/push_pin:"):
        with guard():
            n = None
            if browse.find_pin(load_pins(run.dir), run.dir.name, method, text, ablated) is None:
                pin = browse.make_pin(loaders.explainer(str(run.dir), loaders.stamp(run)), text, method,
                                      source=browse.provenance(run, method), ablated=ablated)
                n = add_pin(run.dir, {**pin, "tags": tags.pin_tags(run, method, pin["labels"])})
        if n is None:
            st.toast("Already pinned: this input, method and ablation are in the case study.")
        else:
            st.toast(f"Pinned: {n} pin{'s' if n != 1 else ''} in the case study.")
