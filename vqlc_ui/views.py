"""Views several pages show: one concept's own view, a concept's picture (its word cloud, or its
word list where no cloud can be drawn), and the cards of an explanation's concepts with a toggle
each that ablates them together, the prediction they give shown above the cards (the explanation's
own views are in `explanation`)."""

from __future__ import annotations

import html

import plotly.express as px
import streamlit as st

from vqlc_core.views import browse
from vqlc_core.pipeline.run import Run

from . import share
from vqlc_core.evaluate.features import activation_html
from vqlc_core.data.corpus import member_contexts
from vqlc_core.methods.concepts import prediction_examples

from .loaders import ablate, cloud, concepts, feature_contexts, stamp, texts, thumbnail, tokens, top_activations
from .escape import literal_html, plain
from .tags import tags_caption
from .widgets import guard, text_key, toast_after_rerun

# The ablation result stays in view while the cards under it scroll, so it is always beside the
# toggle just pressed (the header bar is 3.75rem high).
_STICKY = ("<style>div:has(> [class*='st-key-ablation_result_']) {position: sticky; top: 3.75rem; z-index: 3; "
           "background: var(--st-background-color, #fff);}</style>")


def colored_sentence(text: str, words: list[dict], concept_ids: list[int], labels: dict[int, str]) -> None:
    """The input with every word coloured by its concept, its label on hover (see
    `browse.colored_sentence_html`). Drawn with st.html, which applies no Markdown: a `$`, `\\`,
    backtick, `*`, `_` or `~` in the input is shown as typed, as are its line breaks."""
    body = browse.colored_sentence_html(text, words, concept_ids, labels)
    st.html(f'<div class="vqlc-sentence" style="white-space:pre-wrap;line-height:2">{body}</div>')


def concept_picture(run: Run, method: str, k: int, width: int | str = "stretch") -> None:
    """Concept k's word cloud, or its top words as text where no cloud can be drawn."""
    path = cloud(run, method, k)
    if path is not None:
        st.image(thumbnail(str(path), path.stat().st_mtime_ns, width) if isinstance(width, int) else str(path),
                 width=width)
        return
    words = [w for w, _ in concepts(str(run.dir), stamp(run), method).top_words(k, 15)]
    st.caption(plain(", ".join(words)) if words else "No words: its members are prediction rows.")


def concept_view(run: Run, method: str, k: int) -> None:
    """One concept: size, purity, class distribution, top words (or sentences) and contexts. The
    page's link opens it."""
    share.publish(concept=int(k))
    rd, sp = str(run.dir), stamp(run)
    cs = concepts(rd, sp, method)
    row = cs.summary.loc[k]
    st.subheader(plain(cs.label(k, 5)))
    tags_caption(run, method, k, sp)
    label_editor(run, method, k)
    a, b, c = st.columns(3)
    a.metric("Members", int(row["size"]))
    b.metric("Purity", f"{row['purity']:.2f}", help=f"share of members from class '{row['dominant_class']}'")
    c.metric("Prediction rows", int(row["n_pred"]))
    left, right = st.columns(2)
    with left:
        concept_picture(run, method, k)
        dist = browse.class_distribution(row)
        if len(dist):
            fig = px.bar(dist, x="class", y="count", title="Class distribution", height=260)
            st.plotly_chart(fig, width="stretch", key=f"dist_{method}_{k}")
    with right:
        st.markdown(browse.words_markdown(cs, k))
        if top_activations(rd, sp, method) is not None:
            feature_activations(run, method, k)
            return
        ctx = member_contexts(texts(rd, sp), tokens(rd, sp), cs.assignments, k, n=12, seed=run.cfg.seed)
        lines = [f"- {literal_html(browse.highlight_html(r.text, r.start, r.end))}" for r in ctx.itertuples()
                 if r.start >= 0]
        lines += [f"- {literal_html(html.escape(t))} *(prediction)*" for t in prediction_examples(texts(rd, sp), row)]
        st.markdown("**Contexts**\n\n" + "\n".join(lines), unsafe_allow_html=True)


_LABEL_SAVED = "_label_saved"


def saved_message(k: int) -> str:
    """What the page says once concept k's label is saved."""
    return f"Label of c{k} saved with the run, marked as edited."


def label_editor(run: Run, method: str, k: int) -> None:
    """Concept k's label (where it comes from, its description and detection score) and a form
    to write or edit it; a saved label is stored with the run, marked as edited, and shown
    wherever the concept appears, in every session."""
    from vqlc_core.llm.label_prompts import STATUSES
    from vqlc_core.llm.labels import MAX_NAME_CHARS, label_facts, set_label

    cs = concepts(str(run.dir), stamp(run), method)
    entry = (cs.labels.get(k) if cs.labels is not None else None) or {}
    facts = label_facts(entry)
    if facts:
        st.caption(plain(facts))
    # Said on the page as well as in a toast: a toast lives 4 s from when the browser draws it, and a
    # browser busy redrawing the page (a loaded machine) can pass those seconds before it shows.
    # The line stays while this concept's label is the one saved.
    saved = st.session_state.get(_LABEL_SAVED)
    if saved is not None and saved[:3] == (str(run.dir), method, k) and saved[3] == entry.get("name"):
        st.success(saved_message(k), icon=":material/check:")
    with st.expander("Edit the label" if entry.get("name") else "Write a label", icon=":material/edit:"):
        with st.form(key=f"label_form_{method}_{k}", border=False):
            name = st.text_input("Name", value=entry.get("name") or "", max_chars=MAX_NAME_CHARS,
                                 placeholder="a few words, e.g. number words")
            description = st.text_input("Description (optional)", value=entry.get("description") or "",
                                        placeholder="one sentence on what the members share")
            status = st.selectbox("Status", STATUSES, index=STATUSES.index(entry["status"])
                                  if entry.get("status") in STATUSES else 0)
            saved = st.form_submit_button("Save the label", type="primary")
        if saved:
            with guard():
                entry = set_label(run.dir, method, k, name, description, status)
            st.session_state[_LABEL_SAVED] = (str(run.dir), method, k, entry["name"])
            toast_after_rerun(saved_message(k))


def feature_activations(run: Run, method: str, k: int) -> None:
    """A feature's top-activating train contexts, each word shaded by the feature's activation
    on it (hover for the value), the most active first."""
    rd, sp = str(run.dir), stamp(run)
    ctx = feature_contexts(rd, sp, method, k)
    if not ctx:
        st.caption("This feature fires on no train word.")
        return
    scale = max(c["activation"] for c in ctx)
    lines = [f"- `{c['activation']:.2f}` {literal_html(activation_html(c, scale))}" for c in ctx]
    st.markdown("**Top-activating contexts** (shade: this feature's activation on each word)\n\n"
                + "\n".join(lines), unsafe_allow_html=True)


def ablation_panel(run: Run, method: str, text: str, ex: dict, cloud_width: int = 120,
                   intervention: str | None = None) -> list[int]:
    """The prediction with the toggled concepts ablated together (under `intervention`, "local"
    or "global"; None: the explainer's own), then a card for each concept the explanation shows
    (its picture, label, why it is shown, an Ablate toggle). The result is drawn above the cards
    and kept in view as they scroll; the page's link keeps the toggled concepts (a link's own
    start switched on). Returns the toggled concept ids."""
    st.html(_STICKY)
    result = st.container(key=f"ablation_result_{method}")
    chosen, asked = [], share.take_ablation(method)
    for c in browse.shown_concepts(ex, method):
        with st.container(border=True):
            picture, body = st.columns([2, 3], vertical_alignment="center")
            with picture:
                concept_picture(run, method, c["concept"], width=cloud_width)
            with body:
                st.markdown(f"**{plain(c['label'])}**  \n{plain(c['why'])}")
                tags_caption(run, method, c["concept"], stamp(run))
                key = f"abl_{method}_{c['concept']}_{text_key(text)}"
                if c["concept"] in asked:
                    st.session_state[key] = True
                if st.toggle("Ablate", key=key):
                    chosen.append(c["concept"])
    share.publish(ablate={method: chosen})
    with result:
        if chosen:
            with guard():
                r = ablate(str(run.dir), stamp(run), text, method, tuple(sorted(chosen)), intervention)
            st.metric(f"Ablated {len(chosen)}: prediction", f"{r['prediction']} ({r['confidence']:.3f})",
                      delta=f"{r['delta']:+.3f} on '{ex['prediction']}'")
        else:
            st.metric("Ablated 0: prediction", f"{ex['prediction']} ({ex['confidence']:.3f})",
                      help="Toggle Ablate on the concepts below to project them out of the layer together.")
    return chosen
