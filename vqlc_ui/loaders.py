"""Cached loaders: every part of a run the pages read, loaded once per server process.

Each loader is keyed by the run directory and its manifest's modification time (`stamp`, passed
as `version`), so a rebuilt run is reloaded (Streamlit leaves parameters named with a leading
underscore out of the key, so none is). Models go in `st.cache_resource`, tables and results in
`st.cache_data`.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import streamlit as st

from vqlc_core.pipeline.run import Run, cache_dir_default, default_run, is_built, list_runs
from vqlc_core.evaluate import instrument, tables
from vqlc_core.views import maps  # here, not in the map's loader: the server imports it before it listens


def cache_dir() -> Path:
    """Where the dashboard finds runs: $VQLC_CACHE_DIR, else ./cache."""
    return cache_dir_default()


def stamp(run: Run) -> int:
    """The run's manifest modification time: part of every cache key, so a rebuild reloads."""
    return (run.dir / "manifest.json").stat().st_mtime_ns


@st.cache_resource(show_spinner=False, max_entries=8)
def load_run(run_dir: str, version: int) -> Run:
    return Run(run_dir)


@st.cache_resource(show_spinner=False, max_entries=16)
def concepts(run_dir: str, version: int, method: str):
    return load_run(run_dir, version).concept_set(method)


@st.cache_resource(show_spinner="Loading the model and the concept methods...", max_entries=2)
def explainer(run_dir: str, version: int):
    run = load_run(run_dir, version)
    return run.explainer({m: (method_model(run_dir, version, m), concepts(run_dir, version, m))
                          for m in run.methods_built()})


@st.cache_resource(show_spinner=False, max_entries=8)
def method_model(run_dir: str, version: int, method: str):
    return load_run(run_dir, version).method(method)


@st.cache_data(show_spinner=False, max_entries=16)
def top_activations(run_dir: str, version: int, method: str):
    from vqlc_core.evaluate.features import read_top

    return read_top(run_dir, method)


@st.cache_data(show_spinner=False, max_entries=256)
def feature_contexts(run_dir: str, version: int, method: str, k: int) -> list[dict]:
    from vqlc_core.evaluate.features import feature_contexts as contexts

    top = top_activations(run_dir, version, method)
    run = load_run(run_dir, version)
    return contexts(method_model(run_dir, version, method), run.store, texts(run_dir, version), top, int(k))


@st.cache_data(show_spinner=False, max_entries=8)
def tokens(run_dir: str, version: int):
    return load_run(run_dir, version).store.tokens


@st.cache_data(show_spinner=False, max_entries=8)
def texts(run_dir: str, version: int):
    return load_run(run_dir, version).texts


@st.cache_data(show_spinner=False, max_entries=256)
def prediction_members(run_dir: str, version: int, method: str, k: int, n: int = 5) -> dict:
    """Concept k's train prediction rows nearest its concept vector and its share of word rows
    (`browse.nearest_prediction_members`), found once per run, method and concept."""
    from vqlc_core.views.browse import nearest_prediction_members

    store = load_run(run_dir, version).store
    return nearest_prediction_members(texts(run_dir, version), store.tokens, store, concepts(run_dir, version, method),
                                      int(k), n)


@st.cache_data(show_spinner=False, max_entries=16)
def concept_map(run_dir: str, version: int, method: str):
    return load_run(run_dir, version).concept_map(method)


@st.cache_data(show_spinner=False, max_entries=8)
def instruments(run_dir: str, version: int):
    """The Compare page's instruments, read and summarised once per run: their table (markdown)
    and the dose-response curves (None for a run built without instruments)."""
    run = load_run(run_dir, version)
    rows = run.instrument_rows()
    return tables.instrument_table(run), (None if rows.empty else instrument.dose_curves(rows))


# Figures, drawn once and shared by every session: plotly express takes 0.1-0.3 s a figure (more
# under load), which a page paid on every run of every session. A cached figure is only read:
# st.plotly_chart serialises it and changes nothing in it.
@st.cache_resource(show_spinner=False, max_entries=8)
def corpus_figures(run_dir: str, version: int) -> dict:
    """The Compare page's corpus-level charts and tables of one run (faithfulness, dose-response
    (None without instruments), cost), drawn once per run."""
    from vqlc_core.views import browse, charts

    faith, measures = evaluation(run_dir, version)
    curves = instruments(run_dir, version)[1]
    cost = browse.cost_table(measures)
    return {"faith_figure": charts.faithfulness_figure(faith), "faith_table": charts.display_frame(faith),
            "dose_figure": None if curves is None else charts.dose_figure(curves),
            "cost_figure": charts.cost_figure(cost), "cost_table": charts.display_frame(cost)}


@st.cache_resource(show_spinner=False, max_entries=16)
def map_figure(run_dir: str, version: int, method: str, names: tuple[str, ...]):
    """The Codebook map of one method (`maps.map_figure`), drawn once per run, method and set of
    concept names (`names`: every concept's label now, so a label written since redraws it)."""
    name_of = dict(enumerate(names))
    df = maps.plot_frame(concept_map(run_dir, version, method), lambda k: name_of[int(k)])
    return maps.map_figure(df, load_run(run_dir, version).class_names)


@st.cache_resource(show_spinner=False, max_entries=512)
def waterfall_figure(record: dict, confidence: float, prediction: str, top: int, label_width: int):
    """`waterfall.waterfall_figure` of one method's explanation record, drawn once per record
    (the record as shown: its concepts under their current names)."""
    from vqlc_core.views import waterfall

    return waterfall.waterfall_figure(record, confidence, prediction, top=top, label_width=label_width)


@st.cache_resource(show_spinner=False, max_entries=512)
def deletion_figure(curve: tuple[float, ...], prediction: str):
    """The deletion curve of an explanation: p(prediction) as its ranked concepts are removed together."""
    import plotly.express as px

    return px.line(x=list(range(len(curve))), y=list(curve), markers=True, height=220,
                   labels={"x": "concepts removed (ranked order)", "y": f"p({prediction})"})


@st.cache_data(show_spinner=False, max_entries=32)
def beyond_the_class(run_dir: str, version: int, method: str) -> dict | None:
    """`tables.beyond_the_class` read once per run and method, not on every rerun of Explain or Compare."""
    return tables.beyond_the_class(load_run(run_dir, version), method)


@st.cache_data(show_spinner=False, max_entries=8)
def evaluation(run_dir: str, version: int):
    run = load_run(run_dir, version)
    return run.faithfulness(), run.measures()


@st.cache_resource(show_spinner="Loading the model and the concept methods...", max_entries=2)
def service(run_dir: str, version: int):
    """The run's explainer behind the server's one queue: the requests of every session are
    served first come, first served, those that arrive together in one batch."""
    from vqlc_core.explain.serving import ExplainService

    return ExplainService(explainer(run_dir, version))


def session_alive() -> bool:
    """Whether the session running this script is still connected (and not told to stop)."""
    from streamlit.runtime import Runtime
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    if ctx is None or not Runtime.exists():
        return True  # not under a server (tests, bare mode): nobody can leave
    requests = getattr(ctx, "script_requests", None)
    stopping = getattr(getattr(requests, "_state", None), "name", "") == "STOP"
    return Runtime.instance().is_active_session(ctx.session_id) and not stopping


def _accepts(fn, name: str) -> bool:
    """Whether `fn` takes a keyword `name` (an explainer or service built before it does not)."""
    import inspect

    params = inspect.signature(fn).parameters
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _asked(fn, **options) -> dict | None:
    """The options that differ from the default, if `fn` takes them all; else None."""
    kw = {k: v for k, v in options.items() if v}
    return kw if all(_accepts(fn, k) for k in kw) else None


@st.cache_data(show_spinner=False, max_entries=256)
def _explain(run_dir: str, version: int, text: str, attribute: tuple[str, ...] | None = None, shapley: bool = False,
             intervention: str | None = None) -> dict:
    from vqlc_core.views.browse import precomputed_explanation

    # The example the pages open with was explained by the build: a first visit needs no model.
    stored = precomputed_explanation(run_dir, text)
    if stored and not shapley and all("contributions" in m and m.get("intervention") == intervention
                                      for m in stored["methods"].values()):  # stored before them: live
        return stored
    svc = service(run_dir, version)
    kw = _asked(svc.explain, shapley=shapley, intervention=intervention)
    if kw is not None:
        return svc.explain(text, alive=session_alive, attribute=attribute, **kw)
    # a service that passes no such option: the explainer itself (it serialises its own passes)
    exp = explainer(run_dir, version)
    kw = {k: v for k, v in {"shapley": shapley, "intervention": intervention}.items() if v and _accepts(exp.explain, k)}
    return exp.explain(text, attribute=None if attribute is None else list(attribute), **kw).to_dict()


# The fields of a prediction concept in the order tables show them: the build's stored example
# (JSON with sorted keys) and a live explanation must not show their columns in different orders.
PREDICTION_FIELDS = ("concept", "probability", "label")  # the number before the long name, in view


def _in_field_order(concept: dict) -> dict:
    return {**{f: concept[f] for f in PREDICTION_FIELDS if f in concept}, **concept}


def explain(run_dir: str, version: int, text: str, attribute: tuple[str, ...] | None = None, shapley: bool = False,
            intervention: str | None = None) -> dict:
    """The explanation of `text`, its concepts named for Explain and Compare by their current
    names (`names.concept_title`: a label written or edited after it was computed shows at once)
    and each prediction concept's fields in `PREDICTION_FIELDS` order, whether it was stored by
    the build or computed now; the concept attribution of the methods in `attribute` (None: every
    method), by Shapley values with `shapley`, under `intervention` ("local", "global"; None: the
    explainer's own)."""
    from vqlc_core.views.browse import relabel
    from vqlc_core.views.names import title_of

    ex = _explain(run_dir, version, text, attribute, bool(shapley), intervention)
    ex = relabel(ex, {m: title_of(concepts(run_dir, version, m), m) for m in ex["methods"]})
    return {**ex, "methods": {m: {**b, "prediction_concepts": [_in_field_order(c) for c in b["prediction_concepts"]]}
                              for m, b in ex["methods"].items()}}


@st.cache_data(show_spinner=False, max_entries=2048)
def ablate(run_dir: str, version: int, text: str, method: str, ids: tuple[int, ...],
           intervention: str | None = None) -> dict:
    svc = service(run_dir, version)
    if _asked(svc.ablate, intervention=intervention) is not None:
        return svc.ablate(text, method, ids, alive=session_alive, **({"intervention": intervention} if intervention else {}))
    exp = explainer(run_dir, version)
    kw = {"intervention": intervention} if intervention and _accepts(exp.ablate, "intervention") else {}
    return exp.ablate(text, method, list(ids), **kw).to_dict()


@st.cache_data(show_spinner=False, max_entries=256)
def nearest_contexts(run_dir: str, version: int, method: str, text: str, index: int, k: int, n: int = 3):
    """The train members of concept k nearest the layer-l vector of word `index` of `text`
    (`nearest.nearest_contexts`), found once per run, method, text and word."""
    from vqlc_core.views.nearest import input_word_vectors, nearest_contexts as nearest

    run = load_run(run_dir, version)
    vector = input_word_vectors(explainer(run_dir, version), text)[int(index)]
    return nearest(texts(run_dir, version), run.store.tokens, run.store, concepts(run_dir, version, method).assignments,
                   int(k), vector, n, seed=int(run.cfg.seed))


@st.cache_data(show_spinner=False, max_entries=4096)
def thumbnail(path: str, mtime_ns: int, width: int) -> bytes:
    """The PNG at `path` scaled to `width` pixels, drawn once: Streamlit would otherwise decode
    and scale the full cloud on every rerun of every session."""
    import io

    from PIL import Image

    with Image.open(path) as im:
        small = im.resize((width, max(1, round(im.height * width / im.width))), Image.BILINEAR)
        out = io.BytesIO()
        small.save(out, format="PNG")
    return out.getvalue()


def cloud(run: Run, method: str, k: int) -> Path | None:
    """Path of concept k's word cloud (drawn once, then read from the run's ui/ folder)."""
    from vqlc_core.views.wordclouds import concept_cloud

    cs = concepts(str(run.dir), stamp(run), method)
    return concept_cloud(run.dir, method, k, cs.cloud_words(k))


log = logging.getLogger(__name__)
_warming: set[tuple[str, int]] = set()
# Seconds the warm-up waits after the first page's script: the browser is still drawing that page
# and fetching its code and images from this process, and a model load beside it (CPU and the
# GIL) slows that down. bench/first_load.py on 2 cores under load (about 4.5): Explain's first
# load 3.97 s at once, 3.29 s after this wait; a second visit 0.6-1.2 s faster.
WARM_UP_DELAY_S = 4.0


def _load_quietly(run_dir: str, sp: int) -> None:
    time.sleep(WARM_UP_DELAY_S)
    try:
        explainer(run_dir, sp)
    except Exception:  # the page that needs the explainer loads it again and shows the error
        log.info("vqlc: warming up the explainer of %s failed; the page will load it and say why", run_dir,
                 exc_info=True)
        _warming.discard((run_dir, sp))


def warm_up() -> None:
    """Load the chosen (or default) run's explainer in a background thread, once per run, so the
    Explain and Compare pages open fast; a page that needs it sooner waits for the same load
    (Streamlit computes one cache key once). The app calls it after the page's script, and the
    load starts `WARM_UP_DELAY_S` later, once the browser has drawn the page, so it does not slow
    the first page down."""
    runs = {p.name: p for p in list_runs(cache_dir())}
    path = runs.get(st.session_state.get("run")) or runs.get(default_run(cache_dir()))
    if path is None or not is_built(path):
        return
    key = (str(path), (path / "manifest.json").stat().st_mtime_ns)
    if key not in _warming:
        _warming.add(key)
        threading.Thread(target=_load_quietly, args=key, daemon=True, name="vqlc-warm-up").start()
