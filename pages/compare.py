"""Compare: every built method side by side on one input (in registry order, by display name), each with
its own ablation toggles; the corpus-level faithfulness table and chart; fit time and peak memory per method."""

import plotly.express as px
import streamlit as st

import vqlc_ui
from vqlc_core.methods.base import display_name
from vqlc_core.views import browse, charts
from vqlc_core.evaluate import sae_compare, tables

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

methods = run.methods_built()  # in registry order
for col, m in zip(st.columns(len(methods)), methods):
    with col:
        st.subheader(display_name(m))
        cs = vqlc_ui.concepts(rd, sp, m)
        ids = ex["methods"][m]["word_concepts"]
        st.markdown(browse.colored_sentence_html(text, ex["words"], ids, browse.word_labels(ex, m, cs.label)),
                    unsafe_allow_html=True)
        vqlc_ui.ablation_panel(run, m, text, ex, cloud_width=110)
        vqlc_ui.pin_button(run, m, text, key=f"pin_{m}")

st.header("Faithfulness over the test set")
st.caption("Each row ablates centred concept directions at layer l on every test sentence (and seed): the mean drop "
           "in the predicted class's confidence with its 95% bootstrap interval, the flip rate, and the share of the "
           "pooled representation's energy removed. The 'control' rows (global mean, random direction) and each "
           "method's 'random concept' row are what a concept must beat.")
faith, measures = vqlc_ui.evaluation(rd, sp)
st.dataframe(faith, hide_index=True)
st.plotly_chart(px.bar(**charts.faithfulness_chart(faith), barmode="group", height=340), width="stretch",
                key="faith_chart")
st.subheader("Against energy-matched controls")
st.caption("Each target's drop minus its control's on the same sentences and seeds, where the control is the other "
           "concept(s) of the same method, or random direction(s) drawn from the train states' distribution, whose "
           "ablation removes the energy closest to the target's. Above zero: the concept matters more than an "
           "equally large cut.")
st.markdown(tables.matched_table(run))
st.header("Cost and codebook use")
cost = browse.cost_table(measures)
st.dataframe(cost, hide_index=True)
st.plotly_chart(px.bar(cost.melt("method", ["fit_time_s", "peak_rss_mb"]), x="method", y="value", facet_col="variable",
                       height=280).update_yaxes(matches=None, showticklabels=True), width="stretch", key="cost_chart")
if comparison := sae_compare.load(run):  # written by `vqlc sae-compare`, dropped once a method is rebuilt
    st.header("Concepts against SAE features")
    st.caption("Per method: active features per word (L0), features that fire on no row, the share of test sentences "
               "a feature fires on (median / 90th percentile), R² of the dev rows' reconstruction (a centroid for "
               "clusters), a logistic-regression probe on each sentence's bag of features and how many features, "
               "by |coefficient|, reach 90% of its accuracy, and the confidence drop of ablating the prediction "
               "concept.")
    st.markdown(sae_compare.markdown(comparison))
