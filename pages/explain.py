"""Explain: one input's prediction, every word coloured by its concept, and the prediction and
salient-word concepts with a toggle each that ablates the concept live; the prediction they give
is shown above the cards and stays in view beside them. The prediction concept is also shown by
its sentences (its nearest train prediction rows) and its share of word rows."""

import html

import streamlit as st

import vqlc_ui
from vqlc_core.views import browse

run, method = vqlc_ui.sidebar(need=("classifier",))
st.title("Explain a prediction")
# the attribution of the method shown only: it is most of an explanation's time (Compare asks for all)
text, ex = vqlc_ui.explained_text(run, "Type a sentence to explain.", attribute=(method,))
rd, sp = str(run.dir), vqlc_ui.stamp(run)
cs = vqlc_ui.concepts(rd, sp, method)

a, b = st.columns(2)
a.metric("Prediction", ex["prediction"])
b.metric("Confidence", f"{ex['confidence']:.3f}")
if ex["truncated"]:
    st.warning("The input is longer than the model's maximum length; only its beginning was explained.")
ids = ex["methods"][method]["word_concepts"]
vqlc_ui.colored_sentence(text, ex["words"], ids, browse.word_labels(ex, method, cs.label))
salient = ", ".join(f"{s['word']} ({s['attribution']:.2f})" for s in ex["salient"])
st.caption(f"Salient words (Integrated Gradients at layer {ex['layer']}): {html.escape(salient)}")

st.subheader(f"What carries '{vqlc_ui.plain(ex['prediction'])}'")
vqlc_ui.contributions(ex, method, key=f"explain_{method}", run=run)
st.subheader("Concepts behind the prediction")
st.caption("Toggle concepts to project them out of layer "
           f"{ex['layer']} together and see the new prediction.")
cols = st.columns(2)
with cols[0]:
    ablated = vqlc_ui.ablation_panel(run, method, text, ex)
with cols[1]:
    st.markdown("**Prediction representation: top concepts**")
    st.dataframe(ex["methods"][method]["prediction_concepts"], hide_index=True, column_config={
        "probability": st.column_config.NumberColumn(browse.NEIGHBOUR_SHARE, format="%.2f", help=browse.PROBABILITY_HELP)})
    st.caption(browse.PROBABILITY_HELP)
    vqlc_ui.prediction_concept(run, method, ex)
    vqlc_ui.pin_button(run, method, text, key="pin_explain", ablated=ablated)
