"""A view's state in its URL (`st.query_params`), through `vqlc_core.views.links`: run, method,
concept, input text and ablated concepts, so that a link opens the same view in another browser.

Once per session, before the sidebar draws its widgets, `restore` puts a link's state where the
widgets read it; `settle` checks, once the run is loaded, what only the run can tell (does the
method exist, does the concept) and says in one sentence what a link got wrong. Every page then
puts its state back with `publish`, which also shows the link, with a copy button, in the sidebar.
"""

from __future__ import annotations

import html

import streamlit as st

from vqlc_core.base.runio import RunError
from vqlc_core.views import links

from . import loaders

_RESTORED, _PENDING, _VIEW = "_share_restored", "_share_pending", "_share_view"
# The link is drawn as plain HTML with a copy button of its own, not with st.code: st.code loads
# Streamlit's syntax highlighter (1.5 MB of JavaScript, every language's grammar), and running it
# was most of the browser's work on a page's first load (bench/first_load.py: the renderer's script
# time on Case study 2.2-2.9 s with it, 0.5-0.7 s without, under load 8-9). The whole link wraps in the
# narrow sidebar, and its copy button is always in view. One listener per browser page copies the
# link of the button clicked (navigator.clipboard where the page is a secure context, as on
# 127.0.0.1; else a selection copied with execCommand).
_LINK_STYLE = """<style>
.vqlc-link {display: flex; align-items: flex-start; gap: 0.25rem; background: rgba(128, 128, 128, 0.1);
            border-radius: 0.5rem; padding: 0.5rem 0.25rem 0.5rem 0.75rem;}
.vqlc-link code {flex: 1; min-width: 0; white-space: pre-wrap; overflow-wrap: anywhere; word-break: break-all;
                 background: none; padding: 0; font-size: 0.8rem; line-height: 1.5; color: inherit;}
.vqlc-link button {flex: none; border: none; background: none; cursor: pointer; padding: 0 0.25rem; color: inherit;
                   font-size: 1rem; line-height: 1.2; opacity: 1; visibility: visible;}
.vqlc-link button:hover {color: #ff4b4b;}
</style>
<script>
if (!window.vqlcCopyLink) {
  window.vqlcCopyLink = true;
  document.addEventListener("click", (e) => {
    const button = e.target instanceof Element ? e.target.closest(".vqlc-link button") : null;
    if (!button) return;
    const code = button.parentElement.querySelector("code");
    const text = code.textContent;
    const done = () => { button.textContent = "\u2713"; setTimeout(() => { button.textContent = "\u29c9"; }, 1500); };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done);
    } else {
      const range = document.createRange();
      range.selectNodeContents(code);
      const sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      if (document.execCommand("copy")) done();
      sel.removeAllRanges();
    }
  }, true);
}
</script>"""


def link_html(link: str) -> str:
    """The sidebar's link as HTML (the link escaped) with its copy button (see `_LINK_STYLE`)."""
    return (f'<div class="vqlc-link" data-testid="vqlcLink"><code>{html.escape(link)}</code>'
            '<button type="button" title="Copy the link" aria-label="Copy the link">\u29c9</button></div>')


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
        st.html(_LINK_STYLE + link_html(links.link(st.context.url, params)), unsafe_allow_javascript=True)
