"""Codebook map: the stored 2-D map of one method's concept vectors; choosing a point opens it."""

import streamlit as st

import vqlc_ui

run, method = vqlc_ui.sidebar(need=("maps",))
st.title(f"Codebook map: {method}")
st.caption("One point per concept (UMAP of the concept vectors, computed at build time): size = members, "
           "colour = dominant class. Click a point to open the concept.")
cs = vqlc_ui.concepts(str(run.dir), vqlc_ui.stamp(run), method)
# drawn once per run, method and concept names (a label written since redraws it)
fig = vqlc_ui.map_figure(str(run.dir), vqlc_ui.stamp(run), method, tuple(map(cs.label, range(cs.n_concepts))))
event = st.plotly_chart(fig, on_select="rerun", selection_mode="points",
                        key=f"map_{method}", width="stretch")

points = (event.selection.get("points") if event else None) or []
if points:
    data = points[0].get("customdata")
    st.session_state["concept"] = int(data[0] if isinstance(data, (list, tuple)) else data)
    st.session_state["concept_method"] = method
k = st.session_state.get("concept")
if k is not None and st.session_state.get("concept_method") == method:
    st.divider()
    vqlc_ui.concept_view(run, method, int(k))
