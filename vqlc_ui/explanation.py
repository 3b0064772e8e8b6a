"""The explanation views of Explain and Compare: the choices of how a concept is removed and
scored, the input coloured by concept or by score, the waterfall that adds up to the prediction
with the ranked concepts and their words, the train contexts nearest a word of the input within
its concept, and the prediction concept's own panel ("training predictions like this one")."""

from __future__ import annotations

import html

import streamlit as st

from vqlc_core.views import browse, names, waterfall
from vqlc_core.views.nearest import MAX_ROWS
from vqlc_core.pipeline.run import Run

from .escape import literal_html, plain
from .loaders import (beyond_the_class, concepts, deletion_figure, nearest_contexts, prediction_members, stamp,
                      waterfall_figure)
from .tags import card_line
from .widgets import guard, persisted, text_key

INTERVENTIONS = {"local": "where the concept's words are",
                 "global": "at every position (the faithfulness tables' intervention)"}
COLOURINGS = ("by concept", "by score")
SHAPLEY_HELP = ("Shapley values over the input's word concepts under the same intervention, in place of each concept "
                "removed alone: exact up to 10 concepts, else estimated from antithetic permutations (± its standard "
                "error). They add up to the drop of removing them all; slower.")
WATERFALL_HELP = ("From p(predicted class) with every word concept of the input removed together (top), one bar per "
                  "concept (red supports the prediction, blue opposes it; the rest share one bar), and the "
                  "interaction (the joint drop minus the sum of the bars), to p(x) (bottom): the bars add up exactly.")


def options(key: str = "") -> dict:
    """The row of choices above an explanation: where a concept is removed (its words' positions
    or every position), whether concepts are scored by Shapley values, and how the sentence's
    words are coloured; kept across Explain and Compare. Returns {"intervention", "shapley",
    "colour"}."""
    a, b, c = st.columns([5, 2, 3], vertical_alignment="bottom")
    intervention = a.radio("Remove a concept", list(INTERVENTIONS), format_func=INTERVENTIONS.get, horizontal=True,
                           key=persisted("intervention", "local"),
                           help="Where a concept's centred direction is projected out of layer l: only at the tokens of "
                                "the input's words assigned to it, or at every token as the corpus-level faithfulness "
                                "tables do (one concept there often flips the prediction alone).")
    shapley = b.toggle("Shapley values", key=persisted("shapley", False), help=SHAPLEY_HELP)
    colour = c.radio("Colour words", COLOURINGS, horizontal=True, key=persisted("colour_by", COLOURINGS[0]),
                     help="by concept: one colour per concept; by score: red where the word's concept supports the "
                          "prediction, blue where it opposes it (SHAP's text plot)")
    for name, value in (("intervention", intervention), ("shapley", shapley), ("colour_by", colour)):
        st.session_state[name] = value
    return {"intervention": intervention, "shapley": bool(shapley), "colour": colour}


def sentence(run: Run, ex: dict, method: str, text: str, colour: str) -> None:
    """The input, every word coloured by its concept or by its concept's score (`options`), the
    concept's name (and score) on hover. Drawn with st.html: the input is shown as typed."""
    m = ex["methods"][method]
    labels = browse.word_labels(ex, method, names.title_of(concepts(str(run.dir), stamp(run), method), method))
    if colour == COLOURINGS[1] and m.get("contributions") is not None:
        body = waterfall.score_sentence_html(text, ex["words"], m["word_concepts"],
                                             waterfall.word_contributions(m), labels)
    else:
        body = browse.colored_sentence_html(text, ex["words"], m["word_concepts"], labels)
    st.html(f'<div class="vqlc-sentence" style="white-space:pre-wrap;line-height:2">{body}</div>')


def how_scored(m: dict) -> str:
    """One phrase: how the record's scores were computed (Shapley or single removal, where)."""
    where = INTERVENTIONS.get(m.get("intervention") or "global", m.get("intervention"))
    what = "Shapley value of removing the concepts" if m.get("shapley") else "the drop when the concept alone is removed"
    return f"{what} {where}"


def additive_view(ex: dict, method: str, key: str, top: int = waterfall.TOP, label_width: int = 42) -> bool:
    """The method's waterfall (`waterfall.waterfall_figure`); False, with a note, for an
    explanation stored without concept contributions."""
    m = ex["methods"][method]
    if m.get("contributions") is None:
        st.caption("This explanation was stored without concept contributions; type the sentence again.")
        return False
    fig = waterfall_figure(m, ex["confidence"], ex["prediction"], top, label_width)  # drawn once per record
    st.plotly_chart(fig, width="stretch", key=f"waterfall_{key}")
    return True


def _badges(run: Run, method: str, k: int) -> str:
    line = card_line(str(run.dir), stamp(run), method, k) if run is not None else ""
    return " ".join(f":gray-badge[{t.replace('[', '(').replace(']', ')')}]" for t in names.tag_badges(line))


def ranked_list(ex: dict, method: str, run: Run | None = None) -> None:
    """The input's word concepts ranked by score (as `how_scored` says), each with the input
    words it acts through, its prediction when removed alone and its tags as badges."""
    m = ex["methods"][method]
    words, pred = ex["words"], ex["prediction"]
    lines = []
    for c in waterfall.word_contributions(m):
        # literal_html: a word, label or class name is shown as typed (a `$` pair is no math)
        where = ", ".join(f"<mark>{literal_html(html.escape(words[i]['word']))}</mark>" for i in c["words"])
        side = "supports" if c["score"] >= 0 else "opposes"
        err = f" ± {c['stderr']:.3f}" if (c.get("stderr") or 0) > 0 else ""
        lines.append(f"- `{c['score']:+.3f}`{err} {side} **{literal_html(html.escape(pred))}**: "
                     f"{literal_html(html.escape(c['label']))} — via {where or 'no word'}"
                     f" (removed alone: {literal_html(html.escape(c['ablated_prediction']))}, "
                     f"p = {c['ablated_proba']:.3f}) {_badges(run, method, c['concept'])}".rstrip())
    st.markdown("\n".join(lines), unsafe_allow_html=True)


def contributions(ex: dict, method: str, key: str, run: Run | None = None) -> None:
    """What carries the prediction under one method: the waterfall, the ranked concepts with
    their words, and the deletion curve as they are removed together in that order."""
    m = ex["methods"][method]
    if not additive_view(ex, method, key):
        return
    pred = plain(ex["prediction"])
    st.caption(f"Score: {how_scored(m)}, at layer {ex['layer']}. All together: drop {m['joint']:+.3f}; interaction "
               f"share {m['interaction']:.2f} (0: the scores add up to the joint drop).", help=WATERFALL_HELP)
    ranked_list(ex, method, run)
    if m.get("deletion"):
        # on_change="rerun": the curve is drawn when the expander is opened, not on the page's first load
        # (a plotly chart costs the browser as much drawn hidden as shown)
        box = st.expander(f"Deletion curve: p('{pred}') as the ranked concepts are removed together",
                          key=f"deletion_open_{key}", on_change="rerun")
        if box.open:
            with box:
                curve = (ex["confidence"], *map(float, m["deletion"]))
                st.plotly_chart(deletion_figure(curve, ex["prediction"]), width="stretch", key=f"deletion_{key}")


def word_contexts(run: Run, method: str, ex: dict, text: str, key: str, n: int = 3) -> None:
    """For a word of the input (chosen; the top concept's first word at first): the `n` train
    members of its concept nearest this occurrence's layer-l vector, each in its sentence with
    the member highlighted, so a reader sees why the word sits where it sits."""
    m = ex["methods"][method]
    ids, words = m["word_concepts"], ex["words"]
    if not words:
        return
    top = waterfall.word_contributions(m)
    first = top[0]["words"][0] if top and top[0]["words"] else 0
    i = st.selectbox("Why a word sits in its concept: nearest train contexts of", range(len(words)), index=first,
                     format_func=lambda j: f"{words[j]['word']} ({names.method_concept(method, ids[j])})",
                     key=f"near_{key}_{text_key(text)}",  # one choice per input: another has other words
                     help=f"The train members of the word's concept whose layer-{ex['layer']} state is nearest this "
                          f"word's (among at most {MAX_ROWS:,} of them, a seeded sample), each in its sentence.")
    with guard():
        near = nearest_contexts(str(run.dir), stamp(run), method, text, int(i), int(ids[i]), n)
    if near.empty:
        st.caption("Its concept has no train word to show.")
        return
    lines = [f"- {literal_html(browse.highlight_html(r.text, r.start, r.end))} "
             f"<small>(distance {r.distance:.2f})</small>" if r.start >= 0 else f"- {literal_html(html.escape(r.text))}"
             for r in near.itertuples()]
    st.markdown("\n".join(lines), unsafe_allow_html=True)


def prediction_panel(run: Run, method: str, ex: dict, n: int = 5) -> None:
    """The prediction concept, no part of the input, in its own panel: the train predictions
    nearest its vector, what it adds beyond the class on the test set (its drop minus the class
    direction's and minus the other controls', `browse.prediction_controls`), its share of word
    rows, and the prediction representation's top concepts."""
    top = ex["methods"][method]["prediction_concepts"]
    if not top:
        return
    k, rd, sp = int(top[0]["concept"]), str(run.dir), stamp(run)
    cs = concepts(rd, sp, method)
    st.subheader("Training predictions like this one", help=browse.PROBABILITY_HELP)
    st.markdown(f"**{plain(top[0]['label'])}** ({browse.NEIGHBOUR_SHARE} {top[0]['probability']:.2f}): the "
                "prediction representation's concept, shown by its train sentences nearest its vector:")
    with guard():
        members = prediction_members(rd, sp, method, k, n)
    if members["texts"]:
        st.markdown("\n".join(f"- {plain(t)}" for t in members["texts"]))
    else:
        st.caption("None of its train members is a prediction row.")
    beyond = beyond_the_class(rd, sp, method)
    if beyond is not None:
        st.caption(plain(beyond["sentence"]))
    controls = browse.prediction_controls(run, method)
    if not controls.empty:
        st.dataframe(controls, hide_index=True)
    note = browse.mostly_words_message(cs, k)
    if note:  # it gives the share of word rows too
        st.info(plain(note), icon=":material/info:")
    elif members["size"]:
        st.caption(f"Word rows: {browse.percent(members['word_share'])} of its {members['size']:,} train members.")
    with st.expander("The prediction representation's top concepts"):
        st.dataframe(top, hide_index=True, column_config={"probability": st.column_config.NumberColumn(
            browse.NEIGHBOUR_SHARE, format="%.2f", help=browse.PROBABILITY_HELP)})
