"""Labels: what `vqlc label` wrote for the run, and the labels written by hand: each method's labels
with their status, agreement and detection score. A label is written or edited on the concept's
own view (Concepts page), and shows wherever the concept appears. The data is prepared by
vqlc_core.views.judging; this page renders it."""

import streamlit as st

import vqlc_ui
from vqlc_core.views import judging

run, _ = vqlc_ui.sidebar(choose_method=False)
name = run.dir.name
st.title("Concept labels")
st.caption("`vqlc label` shows a model 20 member contexts of a concept, draws three labels and keeps a name when two "
           "agree, then scores it by detection: the balanced accuracy of the model telling held-out members from as "
           "many non-members by the label. Write or edit a label on the concept's own view (Concepts page, "
           "Open); an edited label is marked and kept when `vqlc label` runs again.")
any_labels = False
for m in run.methods_built():
    with vqlc_ui.guard():
        view = judging.labels_view(run.dir, m)
    if view is None:
        continue
    any_labels = True
    st.subheader(m)
    if view.state == "stale":
        st.warning(f"The labels of {m} name an earlier build of its concepts and are not shown; run `vqlc label --run "
                   f"{name} --method {m}` again.")
        continue
    if view.note:
        st.warning(view.note, icon=":material/warning:")
    st.caption(vqlc_ui.plain(f"{view.labelled} concepts labelled, {view.named} with a name, {view.edited} edited by "
                             f"hand; labeller {view.labeller}."))
    st.dataframe(view.frame, hide_index=True,
                 column_config={"detection": st.column_config.NumberColumn(
                     "detection", format="%.2f", help="balanced accuracy of telling held-out members from "
                                                      "non-members by the label (0.5 = chance)"),
                                "detection_low": st.column_config.NumberColumn("95% low", format="%.2f"),
                                "detection_high": st.column_config.NumberColumn("95% high", format="%.2f")})
    st.download_button(f"Labels of {m} (CSV)", view.frame.to_csv(index=False).encode(), f"{name}_{m}_labels.csv",
                       "text/csv", on_click="ignore", key=f"labels_csv_{m}")
if not any_labels:
    st.info(f"No concept of run '{name}' has a label yet. `python -m vqlc_core label --run {name} --method vqlc "
            "--max-concepts 20` labels the 20 largest with the offline default, or open a concept on the Concepts "
            "page and write one.")
