"""Glue between the dashboard pages and vqlc_core: cached loaders, the sidebar run and method
selectors, the guard that turns a run error into one sentence, and the views that several
pages share (a concept's own view, a concept card with its ablation toggle).

Runs live under `$VQLC_CACHE_DIR/runs/` (default `cache/runs/`). Every loader is keyed by the
run directory and its manifest's modification time, so a rebuilt run is reloaded.
"""

from __future__ import annotations

import hashlib
import html
import os
import threading
from contextlib import contextmanager
from pathlib import Path

import plotly.express as px
import streamlit as st

from vqlc_core import browse
from vqlc_core.runio import CorruptStage, RunError, read_json

EXAMPLE = "a gorgeous, witty and deeply moving film, though its final act drags on far too long ."


def cache_dir() -> Path:
    return Path(os.environ.get("VQLC_CACHE_DIR", "cache"))


def stamp(run) -> int:
    return (run.dir / "manifest.json").stat().st_mtime_ns


# --- cached loaders -------------------------------------------------------------------------

@st.cache_resource(show_spinner=False, max_entries=8)
def _run(run_dir: str, _stamp: int):
    from vqlc_core.pipeline import Run

    return Run(run_dir)


@st.cache_resource(show_spinner=False, max_entries=16)
def concepts(run_dir: str, _stamp: int, method: str):
    return _run(run_dir, _stamp).concept_set(method)


@st.cache_resource(show_spinner="Loading the model and the concept methods...", max_entries=2)
def explainer(run_dir: str, _stamp: int):
    import torch

    # One server process serves every session: one intra-op thread per forward keeps concurrent
    # explanations from oversubscribing the cores (on 2 cores, 2 threads barely beat 1).
    torch.set_num_threads(1)
    run = _run(run_dir, _stamp)
    methods = {m: (run.method(m), concepts(run_dir, _stamp, m)) for m in run.methods_built()}
    return run.explainer(methods)


@st.cache_data(show_spinner=False, max_entries=8)
def tokens(run_dir: str, _stamp: int):
    return _run(run_dir, _stamp).store.tokens


@st.cache_data(show_spinner=False, max_entries=8)
def texts(run_dir: str, _stamp: int):
    return _run(run_dir, _stamp).texts


@st.cache_data(show_spinner=False, max_entries=16)
def concept_map(run_dir: str, _stamp: int, method: str):
    return _run(run_dir, _stamp).concept_map(method)


@st.cache_data(show_spinner=False, max_entries=8)
def evaluation(run_dir: str, _stamp: int):
    run = _run(run_dir, _stamp)
    return run.faithfulness(), run.measures()


@st.cache_data(show_spinner=False, max_entries=256)
def explain(run_dir: str, _stamp: int, text: str) -> dict:
    return explainer(run_dir, _stamp).explain(text).to_dict()


@st.cache_data(show_spinner=False, max_entries=2048)
def ablate(run_dir: str, _stamp: int, text: str, method: str, ids: tuple[int, ...]) -> dict:
    return explainer(run_dir, _stamp).ablate_concepts(text, method, list(ids))


def cloud(run, method: str, k: int):
    """Path of concept k's word cloud (drawn once, then read from the run's ui/ folder)."""
    from vqlc_core.wordclouds import concept_cloud

    cs = concepts(str(run.dir), stamp(run), method)
    return concept_cloud(run.dir, method, k, cs.summary.at[k, "top_words"])


def _is_built(run_dir: Path) -> bool:
    """Whether the run has finished every stage (a cheap look at its manifest)."""
    stages = read_json(run_dir / "manifest.json").get("stages", {})
    return stages.get("maps", {}).get("state") == "complete"


def _default_run(names: list[str]) -> str | None:
    """The first fully built run, else the first run."""
    return next((n for n in names if _is_built(cache_dir() / "runs" / n)), names[0] if names else None)


_warming: set[tuple[str, int]] = set()


def _load_quietly(run_dir: str, sp: int) -> None:
    try:
        explainer(run_dir, sp)
    except Exception:  # the page that needs the explainer loads it again and shows the error
        _warming.discard((run_dir, sp))


def warm_up() -> None:
    """Load the chosen (or first) run's explainer in a background thread, once per run, so the
    Explain and Compare pages open fast; a page that needs it sooner waits for the same load
    (Streamlit computes one cache key once)."""
    from vqlc_core.pipeline import list_runs

    runs = {p.name: p for p in list_runs(cache_dir())}
    path = runs.get(st.session_state.get("run")) or runs.get(_default_run(list(runs)))
    if path is None or not _is_built(path):
        return
    key = (str(path), (path / "manifest.json").stat().st_mtime_ns)
    if key not in _warming:
        _warming.add(key)
        threading.Thread(target=_load_quietly, args=key, daemon=True, name="vqlc-warm-up").start()


# --- guard and sidebar ------------------------------------------------------------------------

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
    import dataclasses

    from vqlc_core.pipeline import Run, build

    run_dir = Path(run_dir)
    cfg = dataclasses.replace(Run(run_dir).cfg, cache_dir=run_dir.parent.parent, run=run_dir.name)
    bar = st.progress(0.0, text="starting")
    with guard():
        build(cfg, rebuild=stage, log=lambda msg: None,
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


def sidebar(need: tuple[str, ...] = (), choose_method: bool = True):
    """Run (and method) selectors. Stops the page with an explanation when no run is built or
    the chosen run lacks a stage in `need`. Returns (run, method or None)."""
    from vqlc_core.pipeline import list_runs

    runs = [p.name for p in list_runs(cache_dir())]
    if not runs:
        st.info(f"No run is built yet under {cache_dir() / 'runs'}. Open the **Build** page to build the "
                "default run, or run `python -m vqlc_core build`.")
        st.stop()
    run_dir = cache_dir() / "runs" / _select("Run", "run", runs, default=_default_run(runs))
    with guard():
        run = _run(str(run_dir), (run_dir / "manifest.json").stat().st_mtime_ns)
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


# --- shared views -----------------------------------------------------------------------------

def concept_view(run, method: str, k: int) -> None:
    """One concept: size, purity, class distribution, top words (or sentences) and contexts."""
    rd, sp = str(run.dir), stamp(run)
    cs = concepts(rd, sp, method)
    row = cs.summary.loc[k]
    st.subheader(cs.label(k, 5))
    a, b, c = st.columns(3)
    a.metric("Members", int(row["size"]))
    b.metric("Purity", f"{row['purity']:.2f}", help=f"share of members from class '{row['dominant_class']}'")
    c.metric("Prediction rows", int(row["n_pred"]))
    left, right = st.columns(2)
    with left:
        path = cloud(run, method, k)
        if path is not None:
            st.image(str(path), width="stretch")
        dist = browse.class_distribution(row)
        if len(dist):
            fig = px.bar(dist, x="class", y="count", title="Class distribution", height=260)
            st.plotly_chart(fig, width="stretch", key=f"dist_{method}_{k}")
    with right:
        top = ", ".join(f"{w} ({n})" for w, n in cs.top_words(k, 15)) or "none (prediction rows only)"
        st.markdown(f"**Top words**: {html.escape(top)}")
        ctx = browse.member_contexts(texts(rd, sp), tokens(rd, sp), cs.assignments, k, n=12, seed=run.cfg.seed)
        lines = [f"- {browse.highlight_html(r.text, r.start, r.end)}" for r in ctx.itertuples() if r.start >= 0]
        lines += [f"- {html.escape(t)} *(prediction)*" for t in browse.prediction_examples(texts(rd, sp), row)]
        st.markdown("**Contexts**\n\n" + "\n".join(lines), unsafe_allow_html=True)


def text_key(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def ablation_panel(run, method: str, text: str, ex: dict, cloud_width: int = 160) -> list[int]:
    """Cards for the concepts the explanation shows, each with an ablation toggle; then the
    prediction with the toggled concepts ablated together. Returns the toggled concept ids."""
    rd, sp = str(run.dir), stamp(run)
    chosen = []
    for c in browse.shown_concepts(ex, method):
        with st.container(border=True):
            st.markdown(f"**{html.escape(c['label'])}**  \n{html.escape(c['why'])}")
            path = cloud(run, method, c["concept"])
            if path is not None:
                st.image(str(path), width=cloud_width)
            if st.toggle("Ablate", key=f"abl_{method}_{c['concept']}_{text_key(text)}"):
                chosen.append(c["concept"])
    if chosen:
        r = ablate(rd, sp, text, method, tuple(sorted(chosen)))
        st.metric(f"Ablated {len(chosen)}: prediction", f"{r['prediction']} ({r['confidence']:.3f})",
                  delta=f"{r['delta']:+.3f} on '{ex['prediction']}'")
    return chosen


def pin_button(run, method: str, text: str, key: str) -> None:
    """A button that pins this input and its concepts for the Case study page."""
    if st.button("Pin for the case study", key=key, icon=":material/push_pin:"):
        pin = browse.make_pin(explainer(str(run.dir), stamp(run)), text, method)
        st.session_state.setdefault("pins", []).append({**pin, "run": run.dir.name})
        n = len(st.session_state["pins"])
        st.toast(f"Pinned: {n} pin{'s' if n != 1 else ''} in the case study.")
