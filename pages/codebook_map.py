"""Codebook map: the stored 2-D map of one method's concept vectors; choosing a point opens it."""

import html

import plotly.express as px
import streamlit as st

import vqlc_ui
from vqlc_core.maps import marker_size

run, method = vqlc_ui.sidebar(need=("maps",))
st.title(f"Codebook map: {method}")
st.caption("One point per concept (UMAP of the concept vectors, computed at build time): size = members, "
           "colour = dominant class. Click a point to open the concept.")
df = vqlc_ui.concept_map(str(run.dir), vqlc_ui.stamp(run), method).copy()
df["marker"] = marker_size(df["size"])
df["top_words"] = df["top_words"].map(html.escape)  # plotly's hover reads tags; words from the corpus are text
cs = vqlc_ui.concepts(str(run.dir), vqlc_ui.stamp(run), method)
fig = px.scatter(df, x="x", y="y", size="marker", size_max=28, color="dominant_class", custom_data=["concept"],
                 hover_name=[html.escape(cs.label(int(k))) for k in df["concept"]], height=560,
                 hover_data={"top_words": True, "size": True, "purity": ":.2f", "marker": False, "x": False,
                             "y": False})
fig.update_layout(xaxis_title=None, yaxis_title=None, legend_title_text="dominant class")
event = st.plotly_chart(fig, on_select="rerun", selection_mode="points", key=f"map_{method}", width="stretch")

points = (event.selection.get("points") if event else None) or []
if points:
    data = points[0].get("customdata")
    st.session_state["concept"] = int(data[0] if isinstance(data, (list, tuple)) else data)
    st.session_state["concept_method"] = method
k = st.session_state.get("concept")
if k is not None and st.session_state.get("concept_method") == method:
    st.divider()
    vqlc_ui.concept_view(run, method, int(k))
