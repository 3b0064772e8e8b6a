"""Compare: K-Means, LACOAT and VQLC side by side on one input, each with its own ablation
toggles; the corpus-level faithfulness table and chart; fit time and peak memory per method."""

import plotly.express as px
import streamlit as st

import vqlc_ui
from vqlc_core import browse

ORDER = ("kmeans", "lacoat", "vqlc")
run, _ = vqlc_ui.sidebar(need=("classifier", "evaluate"), choose_method=False)
st.title("Compare concept methods")
text = vqlc_ui.text_input(height=80)
if not text.strip():
    st.info("Type a sentence to compare the methods on.")
    st.stop()
rd, sp = str(run.dir), vqlc_ui.stamp(run)
with vqlc_ui.guard():
    ex = vqlc_ui.explain(rd, sp, text)
st.markdown(f"Prediction **{ex['prediction']}** (confidence {ex['confidence']:.3f})")

methods = [m for m in ORDER if m in run.methods_built()]
for col, m in zip(st.columns(len(methods)), methods):
    with col:
        st.subheader(m)
        cs = vqlc_ui.concepts(rd, sp, m)
        ids = ex["methods"][m]["word_concepts"]
        st.markdown(browse.colored_sentence_html(text, ex["words"], ids, browse.word_labels(ex, m, cs.label)),
                    unsafe_allow_html=True)
        vqlc_ui.ablation_panel(run, m, text, ex, cloud_width=140)
        vqlc_ui.pin_button(run, m, text, key=f"pin_{m}")

st.header("Faithfulness over the test set")
faith, measures = vqlc_ui.evaluation(rd, sp)
st.dataframe(faith, hide_index=True)
st.plotly_chart(px.bar(faith, x="target", y="mean_conf_drop", color="method", barmode="group", height=320,
                       hover_data=["flip_rate", "n"], labels={"mean_conf_drop": "mean confidence drop"}),
                width="stretch", key="faith_chart")
st.header("Cost and codebook use")
cost = browse.cost_table(measures)
st.dataframe(cost, hide_index=True)
st.plotly_chart(px.bar(cost.melt("method", ["fit_time_s", "peak_rss_mb"]), x="method", y="value", facet_col="variable",
                       height=280).update_yaxes(matches=None, showticklabels=True), width="stretch", key="cost_chart")
