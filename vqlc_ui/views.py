"""Views several pages show: one concept's own view, and the cards of an explanation's concepts
with a toggle each that ablates them together."""

from __future__ import annotations

import html

import plotly.express as px
import streamlit as st

from vqlc_core import browse
from vqlc_core.run import Run

from .loaders import ablate, cloud, concepts, stamp, texts, tokens
from .widgets import text_key


def concept_view(run: Run, method: str, k: int) -> None:
    """One concept: size, purity, class distribution, top words (or sentences) and contexts."""
    rd, sp = str(run.dir), stamp(run)
    cs = concepts(rd, sp, method)
    row = cs.summary.loc[k]
    st.subheader(cs.label(k, 5))
    a, b, c = st.columns(3)
    a.metric("Members", int(row["size"]))
    b.metric("Purity", f"{row['purity']:.2f}", help=f"share of members from class '{row['dominant_class']}'")
    c.metric("Prediction rows", int(row["n_pred"]))
    left, right = st.columns(2)
    with left:
        path = cloud(run, method, k)
        if path is not None:
            st.image(str(path), width="stretch")
        dist = browse.class_distribution(row)
        if len(dist):
            fig = px.bar(dist, x="class", y="count", title="Class distribution", height=260)
            st.plotly_chart(fig, width="stretch", key=f"dist_{method}_{k}")
    with right:
        top = ", ".join(f"{w} ({n})" for w, n in cs.top_words(k, 15)) or "none (prediction rows only)"
        st.markdown(f"**Top words**: {html.escape(top)}")
        ctx = browse.member_contexts(texts(rd, sp), tokens(rd, sp), cs.assignments, k, n=12, seed=run.cfg.seed)
        lines = [f"- {browse.highlight_html(r.text, r.start, r.end)}" for r in ctx.itertuples() if r.start >= 0]
        lines += [f"- {html.escape(t)} *(prediction)*" for t in browse.prediction_examples(texts(rd, sp), row)]
        st.markdown("**Contexts**\n\n" + "\n".join(lines), unsafe_allow_html=True)


def ablation_panel(run: Run, method: str, text: str, ex: dict, cloud_width: int = 160) -> list[int]:
    """Cards for the concepts the explanation shows, each with an ablation toggle; then the
    prediction with the toggled concepts ablated together. Returns the toggled concept ids."""
    chosen = []
    for c in browse.shown_concepts(ex, method):
        with st.container(border=True):
            st.markdown(f"**{html.escape(c['label'])}**  \n{html.escape(c['why'])}")
            path = cloud(run, method, c["concept"])
            if path is not None:
                st.image(str(path), width=cloud_width)
            if st.toggle("Ablate", key=f"abl_{method}_{c['concept']}_{text_key(text)}"):
                chosen.append(c["concept"])
    if chosen:
        r = ablate(str(run.dir), stamp(run), text, method, tuple(sorted(chosen)))
        st.metric(f"Ablated {len(chosen)}: prediction", f"{r['prediction']} ({r['confidence']:.3f})",
                  delta=f"{r['delta']:+.3f} on '{ex['prediction']}'")
    return chosen
