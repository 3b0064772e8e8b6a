"""Explain: one input's prediction, every word coloured by its concept or by its concept's score,
the waterfall of the input's concepts that adds up to the prediction, the train contexts nearest a
word within its concept, the concepts with a toggle each that ablates them live (the prediction
they give shown above the cards), and the prediction concept in its own panel."""

import html

import streamlit as st

import vqlc_ui

run, method = vqlc_ui.sidebar(need=("classifier",))
st.title("Explain a prediction")
# the attribution of the method shown only: it is most of an explanation's time (Compare asks for all)
text, ex, chosen = vqlc_ui.explained_text(run, "Type a sentence to explain.", attribute=(method,),
                                          choose=vqlc_ui.options)

a, b = st.columns(2)
a.metric("Prediction", ex["prediction"])
b.metric("Confidence", f"{ex['confidence']:.3f}")
if ex["truncated"]:
    st.warning("The input is longer than the model's maximum length; only its beginning was explained.")
vqlc_ui.sentence(run, ex, method, text, chosen["colour"])
salient = ", ".join(f"{s['word']} ({s['attribution']:.2f})" for s in ex["salient"])
st.caption(f"Salient words (Integrated Gradients at layer {ex['layer']}): {html.escape(salient)}")

st.subheader(f"What carries '{vqlc_ui.plain(ex['prediction'])}'")
vqlc_ui.contributions(ex, method, key=f"explain_{method}", run=run)
vqlc_ui.word_contexts(run, method, ex, text, key=f"explain_{method}")

st.subheader("Concepts behind the prediction", help="Toggle concepts to remove them from layer "
             f"{ex['layer']} together ({vqlc_ui.explanation.INTERVENTIONS[chosen['intervention']]}) and see the new "
             "prediction.")
cols = st.columns(2)
with cols[0]:
    ablated = vqlc_ui.ablation_panel(run, method, text, ex, intervention=chosen["intervention"])
with cols[1]:
    vqlc_ui.prediction_panel(run, method, ex)
    vqlc_ui.pin_button(run, method, text, key="pin_explain", ablated=ablated)
