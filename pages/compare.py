"""Compare: every built method side by side on one input (in registry order, by display name), each
with its waterfall of the input's concepts (what tells the methods apart on this input) and its
ablation toggles; below, the figures per method in tabs: the attribution benchmark's (local against
global, where it was run), faithfulness, energy-matched controls, the instruments beyond the single
cut, cost, SAE features and linguistic tags."""

import streamlit as st

import vqlc_ui
from vqlc_ui import tags
from vqlc_core.methods.base import display_name
from vqlc_core.views import bench, charts
from vqlc_core.evaluate import instrument, sae_compare, tables, tag_alignment


def table(frame) -> None:
    """A display frame (`charts.display_frame`), each number shown as it was rounded there."""
    st.dataframe(frame, hide_index=True, column_config={
        c: st.column_config.NumberColumn(format=charts.AS_ROUNDED) for c in frame.select_dtypes("float").columns})


run, _ = vqlc_ui.sidebar(need=("classifier", "evaluate"), choose_method=False)
st.title("Compare concept methods")
text, ex, chosen = vqlc_ui.explained_text(run, "Type a sentence to compare the methods on.", height=80,
                                          choose=vqlc_ui.options)
rd, sp = str(run.dir), vqlc_ui.stamp(run)
st.markdown(f"Prediction **{vqlc_ui.plain(ex['prediction'])}** (confidence {ex['confidence']:.3f})",
            help=vqlc_ui.explanation.WATERFALL_HELP)

methods = run.methods_built()  # in registry order
for col, m in zip(st.columns(len(methods)), methods):
    with col:
        st.subheader(display_name(m))
        vqlc_ui.sentence(run, ex, m, text, chosen["colour"])
        if vqlc_ui.additive_view(ex, m, key=f"compare_{m}", top=6, label_width=26):
            b = ex["methods"][m]
            st.caption(f"All together: drop {b['joint']:+.3f}; interaction share {b['interaction']:.2f}.",
                       help=vqlc_ui.explanation.how_scored(b))
        with st.expander("Ranked concepts and ablation"):
            vqlc_ui.ranked_list(ex, m, run)
            ablated = vqlc_ui.ablation_panel(run, m, text, ex, cloud_width=110, intervention=chosen["intervention"])
        vqlc_ui.pin_button(run, m, text, key=f"pin_{m}", ablated=ablated)

st.header("Over the test set", help="Corpus-level figures per method: each ablates concept directions at layer l at "
          "every position (the global intervention) on every test sentence and seed.")
figures = vqlc_ui.corpus_figures(rd, sp)  # drawn once per run, shared by every session
comparison = sae_compare.load(run)  # written by `vqlc sae-compare`, dropped once a method is rebuilt
measured = bench.load_result(run.dir.name)  # written by bench/attribution.py, in a checkout of the repository
names = [*(["Attribution, local and global"] if measured else []), "Faithfulness", "Against matched controls",
         "Beyond the single cut", "Cost and codebook use", *(["Against SAE features"] if comparison else []),
         "Linguistic tags"]
# on_change="rerun": only the open tab is drawn (its charts and tables); another is drawn when chosen
tabs = dict(zip(names, st.tabs(names, key="compare_tab", on_change="rerun")))


def opened(name: str):
    """The tab `name` when it is the open one, else None."""
    return tabs[name] if name in tabs and tabs[name].open is not False else None


if measured and (tab := opened("Attribution, local and global")):
    with tab:
        st.subheader("The explanation's attribution", help=f"`bench/attribution.py` on {measured.get('n', '?')} "
                     "seeded test sentences of this run: each figure per method with the concept removed where its "
                     "words are (local, what Explain shows) and at every position (global, as the tables of the next "
                     "tabs), its mean with a 95% bootstrap interval. The lexicon (VADER) is an instrument only.")
        for frame in (bench.attribution_frame(measured), bench.method_frame(measured)):
            if len(frame.columns) > 1:
                st.dataframe(frame, hide_index=True)
if tab := opened("Faithfulness"):
    with tab:
        st.subheader("Faithfulness", help="Each row ablates centred concept directions at layer l on every test sentence "
                     "(and seed): the mean drop in the predicted class's confidence with its 95% bootstrap interval, the "
                     "flip rate, and the share of the pooled representation's energy removed. The 'control' rows (global "
                     "mean, random direction, class direction) and each method's 'random concept' row are what a concept "
                     "must beat.")
        st.plotly_chart(figures["faith_figure"], width="stretch", key="faith_chart")
        table(figures["faith_table"])
if tab := opened("Against matched controls"):
    with tab:
        st.subheader("Against energy-matched controls", help="Each target's drop minus its control's on the same "
                     "sentences and seeds, where the control is the other concept(s) of the same method (for a prediction "
                     "concept, another concept that holds train predictions), or random direction(s) drawn from the train "
                     "states' distribution, whose ablation removes the energy closest to the target's. Above zero: the "
                     "concept matters more than an equally large cut. The prediction concept is also set against the "
                     "class direction (the centred mean of the train predictions of the sentence's predicted class): at or "
                     "below zero, it says no more than the predicted class.")
        st.markdown(tables.matched_table(run))
if tab := opened("Beyond the single cut"):
    with tab:
        st.subheader("Beyond the single cut", help="The same prediction concepts and controls measured otherwise, on a "
                     "sample of the test sentences: " + "; ".join(f"{m}: {d}" for m, d in instrument.DESCRIPTIONS.items())
                     + ". ERASER's controls are as many random words of the same sentence; the others are the matched cuts. "
                       "Each row is the target's value minus its control's with its 95% interval.")
        ins_table = vqlc_ui.instruments(rd, sp)[0]
        if figures["dose_figure"] is not None:
            st.plotly_chart(figures["dose_figure"], width="stretch", key="dose_chart")
        st.markdown(ins_table)
if tab := opened("Cost and codebook use"):
    with tab:
        st.plotly_chart(figures["cost_figure"], width="stretch", key="cost_chart")
        table(figures["cost_table"])
if comparison and (tab := opened("Against SAE features")):
    with tab:
        st.caption("Per method: active features per word (L0), features that fire on no row, the share of test "
                   "sentences a feature fires on (median / 90th percentile), R² of the dev rows' reconstruction (a "
                   "centroid for clusters), a logistic-regression probe on each sentence's bag of features and how "
                   "many features, by |coefficient|, reach 90% of its accuracy, and the confidence drop of ablating "
                   "the prediction concept.")
        st.markdown(sae_compare.markdown(comparison))
if tab := opened("Linguistic tags"):
    with tab:
        if run.tags is None:
            st.info("This run has no linguistic tags yet; build it again to run the annotate stage.")
        else:
            st.caption("Concepts aligned with a tag, per method and tag set.", help="As ConceptX aligns concepts with "
                       f"human-defined ones: a concept is aligned with a tag when {tag_alignment.ALIGNMENT_RULE}. Per "
                       "method and tag set: concepts aligned (mean over seeds [95% interval]), their share of the concepts "
                       "with 5 or more train members, and the distinct tags they cover.")
            tags.missing_caption(run)
            st.dataframe(tags.comparison(rd, sp), hide_index=True)
