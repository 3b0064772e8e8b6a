"""A view's state in its URL (`st.query_params`): run, method, concept, input text and ablated
concepts, so that a link opens the same view in another browser.

Once per session, before the sidebar draws its widgets, `restore` puts a link's state where the
widgets read it; `settle` checks, once the run is loaded, what only the run can tell (does the
method exist, does the concept) and says in one sentence what a link got wrong. Every page then
puts its state back with `publish`, which also shows the link, with a copy button, in the sidebar.
"""

from __future__ import annotations

from urllib.parse import urlencode

import streamlit as st

from . import loaders

KEYS = ("run", "method", "concept", "text", "ablate")
_RESTORED, _PENDING, _VIEW = "_share_restored", "_share_pending", "_share_view"


# --- the URL's words ---------------------------------------------------------------------------

# The whole link wraps in the narrow sidebar, and its copy button stays in view (Streamlit shows it on hover only).
_LINK_STYLE = ('<style>[data-testid="stSidebar"] [data-testid="stCode"] button '
               "{opacity: 1 !important; visibility: visible !important;}</style>")


def parse_ablate(value: str) -> dict[str, list[int]]:
    """'vqlc:3,vqlc:5,kmeans:2' -> {'vqlc': [3, 5], 'kmeans': [2]}; an item that is not
    method:number is left out."""
    out: dict[str, list[int]] = {}
    for item in str(value).split(","):
        method, _, k = item.strip().partition(":")
        if method and k.strip().isdigit():
            out.setdefault(method, []).append(int(k))
    return out


def format_ablate(chosen: dict[str, list[int]]) -> str:
    """The inverse of `parse_ablate`: methods in the order given, each one's ids sorted."""
    return ",".join(f"{m}:{int(k)}" for m, ids in chosen.items() for k in sorted(ids))


def encode(state: dict) -> dict[str, str]:
    """The query parameters of a view's state, in KEYS order; None and no ablated concept are left
    out (an empty input text is kept: the link then opens an empty box)."""
    out = {}
    for key in KEYS:
        value = state.get(key)
        if key == "ablate":
            value = format_ablate(value or {}) or None
        if value is not None:
            out[key] = str(value)
    return out


def link(base: str | None, params: dict[str, str]) -> str:
    """The link to a view: the page's address (`st.context.url`) with its query string."""
    return (base or "") + ("?" + urlencode(params) if params else "")


# --- from the URL --------------------------------------------------------------------------------

def _keep(key: str, value) -> None:
    """Set a value kept across pages (see `widgets.persisted`); each page's widget starts from it."""
    st.session_state[key] = value
    for k in [k for k in st.session_state if str(k).startswith(f"_w_{key}_")]:
        del st.session_state[k]


def restore(runs: list[str]) -> None:
    """Once per session, before the sidebar's widgets: the link's run, method and input text into
    the session, its concept and ablated concepts kept for `settle` and `take_ablation`. A run
    that is not here is said in one sentence, and that link's concept and ablations are dropped."""
    if st.session_state.get(_RESTORED):
        return
    st.session_state[_RESTORED] = True
    qp = st.query_params.to_dict()
    run = qp.get("run")
    known = run is None or run in runs
    if not known:
        st.warning(f"The link names run '{run}', which is not built here; choose a run in the sidebar.")
    elif run is not None:
        _keep("run", run)
    for key in ("method", "text"):
        if key in qp:
            _keep(key, qp[key])
    pending = {k: qp[k] for k in ("method", "concept") if k in qp and (known or k == "method")}
    if known and "ablate" in qp:
        pending["ablate"] = parse_ablate(qp["ablate"])
    st.session_state[_PENDING] = pending


def settle(run, method: str | None) -> None:
    """Check the link's method and concept against the loaded run, once: a concept that exists
    becomes the open concept; a method or concept that does not is said in one sentence. Pages
    without a method (Compare, Case study) drop them."""
    pending = st.session_state.get(_PENDING) or {}
    asked_method, concept = pending.pop("method", None), pending.pop("concept", None)
    if method is None:
        return
    if asked_method is not None and asked_method != method:
        st.warning(f"Run '{run.dir.name}' has no finished method '{asked_method}'; showing '{method}' instead.")
        return
    if concept is None:
        return
    n = loaders.concepts(str(run.dir), loaders.stamp(run), method).n_concepts
    if not concept.strip().isdigit() or int(concept) >= n:
        st.warning(f"Concept '{concept}' does not exist: method '{method}' of run '{run.dir.name}' has concepts "
                   f"0 to {n - 1}.")
        return
    st.session_state["concept"], st.session_state["concept_method"] = int(concept), method


def take_ablation(method: str) -> set[int]:
    """The concepts of `method` the link asked to ablate, once (the toggles start switched on)."""
    return set((st.session_state.get(_PENDING) or {}).get("ablate", {}).pop(method, []))


# --- into the URL --------------------------------------------------------------------------------

def begin(run: str, method: str | None) -> None:
    """Start this script run's view (its run and method) and the sidebar's place for its link."""
    st.session_state[_VIEW] = {"state": {"run": run, "method": method}, "box": st.sidebar.empty()}
    publish()


def publish(**state) -> None:
    """Add `state` (concept=, text=, ablate={method: ids}) to this view, put the view in the URL
    and show its link in the sidebar, with a copy button."""
    view = st.session_state.get(_VIEW)
    if view is None:
        return
    if "ablate" in state:
        state["ablate"] = {**view["state"].get("ablate", {}), **state["ablate"]}
    view["state"].update(state)
    params = encode(view["state"])
    if st.query_params.to_dict() != params:
        st.query_params.from_dict(params)
    with view["box"].container():
        st.caption("Link to this view (the button at its right copies it)")
        st.html(_LINK_STYLE)
        st.code(link(st.context.url, params), language=None, wrap_lines=True)
