"""A view's state in its URL (`st.query_params`), through `vqlc_core.views.links`: run, method,
concept, input text and ablated concepts, so that a link opens the same view in another browser.

Once per session, before the sidebar draws its widgets, `restore` puts a link's state where the
widgets read it; `settle` checks, once the run is loaded, what only the run can tell (does the
method exist, does the concept) and says in one sentence what a link got wrong. Every page then
puts its state back with `publish`, which also shows the link, with a copy button, in the sidebar.
"""

from __future__ import annotations

import streamlit as st

from vqlc_core.base.runio import RunError
from vqlc_core.views import links

from . import loaders

_RESTORED, _PENDING, _VIEW = "_share_restored", "_share_pending", "_share_view"
# The whole link wraps in the narrow sidebar, and its copy button stays in view (Streamlit shows it on hover only).
_LINK_STYLE = ('<style>[data-testid="stSidebar"] [data-testid="stCode"] button '
               "{opacity: 1 !important; visibility: visible !important;}</style>")


# --- from the URL --------------------------------------------------------------------------------

def _keep(key: str, value) -> None:
    """Set a value kept across pages (see `widgets.persisted`); each page's widget starts from it."""
    st.session_state[key] = value
    for k in [k for k in st.session_state if str(k).startswith(f"_w_{key}_")]:
        del st.session_state[k]


def restore(runs: list[str]) -> None:
    """Once per session, before the sidebar's widgets: the link's run, method and input text into
    the session, its concept and ablated concepts kept for `settle` and `take_ablation`. What the
    link got wrong (`links.decode`: a run that is not here) is said in one sentence."""
    if st.session_state.get(_RESTORED):
        return
    st.session_state[_RESTORED] = True
    view, refused = links.decode(st.query_params.to_dict(), runs)
    if refused:
        st.warning(refused)
    for key in ("run", "method", "text"):
        if key in view:
            _keep(key, view[key])
    st.session_state[_PENDING] = {key: view[key] for key in ("method", "concept", "ablate") if key in view}


def settle(run, method: str | None) -> None:
    """Check the link's method and concept against the loaded run, once: a concept that exists
    becomes the open concept; a method or concept that does not is said in one sentence. Pages
    without a method (Compare, Case study) drop them."""
    pending = st.session_state.get(_PENDING) or {}
    asked_method, concept = pending.pop("method", None), pending.pop("concept", None)
    if method is None:
        return
    try:
        if asked_method is not None:
            links.check_method(asked_method, method, run.dir.name)
        if concept is not None:
            n = loaders.concepts(str(run.dir), loaders.stamp(run), method).n_concepts
            st.session_state["concept"] = links.check_concept(concept, n, method, run.dir.name)
            st.session_state["concept_method"] = method
    except RunError as e:
        st.warning(str(e))


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
    params = links.encode(view["state"])
    if st.query_params.to_dict() != params:
        st.query_params.from_dict(params)
    with view["box"].container():
        st.caption("Link to this view (the button at its right copies it)")
        st.html(_LINK_STYLE)
        st.code(links.link(st.context.url, params), language=None, wrap_lines=True)
