"""Concepts: a paginated grid of word clouds (or word lists) for one method, search by word, a
filter by aligned linguistic tag and a sort (size, purity, alignment, faithfulness), one concept's
view, and the method's concepts as one HTML file to share (`vqlc export-html`)."""

import html
import time

import streamlit as st

import vqlc_ui
from vqlc_ui import tags
from vqlc_core.views import browse, export_html
from vqlc_core.data.corpus import concepts_with_word
from vqlc_core.methods.concepts import is_prediction_concept, prediction_examples

PER_PAGE = 24
run, method = vqlc_ui.sidebar()
query = st.sidebar.text_input("Find concepts containing a word")
# The file is drawn with a progress bar first (hundreds of concepts take a while where the build
# drew no clouds), then handed over; on_click="ignore": the download reruns nothing.
export_key = (str(run.dir), method, vqlc_ui.stamp(run))
if st.sidebar.button("Prepare the HTML file", help="Draw every concept of this method (grid, word clouds, top "
                     "words, contexts, class distribution) and the run's faithfulness table into one file that "
                     "opens without a server or network; then download it."):
    bar, t0 = st.sidebar.progress(0.0, text="Drawing the concepts"), time.perf_counter()

    def drawn(done: int, total: int) -> None:
        bar.progress(done / total, text=export_html.progress_text(done, total, time.perf_counter() - t0))

    st.session_state["concepts_export"] = (export_key, export_html.render(run, method, progress=drawn))
    bar.empty()
prepared = st.session_state.get("concepts_export")
if prepared is not None and prepared[0] == export_key:
    st.sidebar.download_button("Download as one HTML file", prepared[1], export_html.default_out(run, method).name,
                               "text/html", on_click="ignore", icon=":material/download:")
st.title(f"Concepts: {method}")
rd, sp = str(run.dir), vqlc_ui.stamp(run)
cs = vqlc_ui.concepts(rd, sp, method)
ids = cs.used_ids()

if query.strip():
    hits = concepts_with_word(vqlc_ui.tokens(rd, sp), cs.assignments, query)
    st.caption(f"{len(hits)} concept(s) hold '{html.escape(query.strip())}'.")
    ids = [int(k) for k in hits["concept"]]
with vqlc_ui.guard():
    ids = tags.filter_and_sort(run, method, sp, ids)
tags.missing_caption(run)

chosen = st.session_state.get("concept")
if chosen is not None and st.session_state.get("concept_method") == method and 0 <= chosen < cs.n_concepts:
    if st.button("Back to all concepts", icon=":material/arrow_back:"):
        st.session_state.pop("concept")
        st.rerun()
    vqlc_ui.concept_view(run, method, chosen)
    st.divider()

n_pages = browse.page_count(len(ids), PER_PAGE)
page = st.sidebar.number_input(f"Page (of {n_pages})", 1, n_pages, 1) if n_pages > 1 else 1
shown, _ = browse.paginate(ids, page, PER_PAGE)
cols = st.columns(4)
for i, k in enumerate(shown):
    row = cs.summary.loc[k]
    with cols[i % 4].container(border=True):
        st.markdown(f"**{vqlc_ui.plain(cs.label(k))}**  \n{int(row['size'])} members, purity {row['purity']:.2f} "
                    f"({vqlc_ui.plain(str(row['dominant_class']))})")
        tags.tags_caption(run, method, k, sp)
        if is_prediction_concept(row):
            for t in prediction_examples(vqlc_ui.texts(rd, sp), row, n=3):
                st.caption(vqlc_ui.plain(t))
        else:
            vqlc_ui.concept_picture(run, method, k)
        if st.button("Open", key=f"open_{method}_{k}"):
            st.session_state["concept"], st.session_state["concept_method"] = k, method
            st.rerun()
