"""Judges: what `vqlc judge` wrote for the run. Per judge, the mean rating of each method's
concepts with its 95% interval and rank, the parse rate and the checks on how it reads; across
judges, their agreement; each judged sentence with every rating and the judge's reason. The data
is prepared by vqlc_core.views.judging; this page renders it."""

import plotly.express as px
import streamlit as st

import vqlc_ui
from vqlc_core.views import judging

run, _ = vqlc_ui.sidebar(choose_method=False)
name = run.dir.name
st.title("LLM judges")

with vqlc_ui.guard():
    results = judging.judge_results(run.dir)
if results is None:
    st.info(f"No judge has rated run '{name}' yet. `python -m vqlc_core judge --run {name}` rates it with the "
            "offline default (SmolLM2-135M served on this machine); `--judge name=...,url=...,model=...` points it "
            "at any OpenAI-compatible server, several times for several judges. Concept labels are on the Labels "
            "page.")
    st.stop()

if results.note:
    st.warning(results.note, icon=":material/warning:")
if results.stale:
    st.warning(f"The concepts of {', '.join(results.stale)} were rebuilt after the judge rated them: these ratings are "
               f"of the earlier concepts; run `vqlc judge --run {name}` again.")
st.caption(f"{results.n_sentences} dev sentences (seed {results.seed}; {results.strata}). For each, every method's "
           "concept of the prediction representation and of the most salient word was shown under a neutral letter in "
           "a shuffled order and rated 1 (Poor) to 3 (Good): if a model relied only on this concept, how well would it "
           "support the prediction? Answers that did not parse are counted, never rated.")
for j in results.judges:
    st.subheader(f"Judge: {j.name}")
    st.caption(vqlc_ui.plain(j.source))
    a, b, c, d, e = st.columns(5)
    a.metric("Parse rate", j.parse_rate, help=f"{j.parsed} of {j.requests} answers parsed; {j.unparseable} could not "
                                              "be read and are left out")
    b.metric("Sentences rated", j.parsed)
    c.metric("Identical concepts rated alike", j.identical_alike,
             help="where two letters showed the same concept for one sentence, the share the judge rated alike, as it "
                  "was told to: a check on how closely it reads")
    d.metric("Variance explained by the letter", j.letter_variance,
             help="the share of the ratings' variance that the letter a concept was shown under explains (eta "
                  "squared); letters are shuffled per sentence, so a judge that reads the concepts keeps it small")
    e.metric("Reasons copied from the example", j.copied_reasons,
             help="the share of its reasons that repeat the worked example's word for word")
    if j.by_letter:
        st.caption(f"Mean rating by letter: {j.by_letter}. The table's last column is the mean each method would get "
                   "from its letters alone.")
    if not len(j.table):
        st.caption("No answer parsed: this judge rated nothing.")
        continue
    st.dataframe(j.table, hide_index=True,
                 column_config={"mean": st.column_config.NumberColumn("mean rating", format="%.2f"),
                                "low": st.column_config.NumberColumn("95% low", format="%.2f"),
                                "high": st.column_config.NumberColumn("95% high", format="%.2f"),
                                "rank": st.column_config.NumberColumn("rank", help="1 = best within the role; ties "
                                                                      "share a rank"),
                                "from_letters": st.column_config.NumberColumn(
                                    "from the letters alone", format="%.2f",
                                    help="the mean rating this method would get if each of its ratings were the mean "
                                         "rating of the letter it was shown under")})
    st.plotly_chart(px.bar(j.bars, x="method", y="mean", color="role", barmode="group", error_y="plus",
                           error_y_minus="minus", range_y=[0, 3.2], height=300, labels={"mean": "mean rating (1-3)"}),
                    width="stretch", key=f"judge_chart_{j.name}")

st.subheader("Agreement between judges")
agree = results.agreement
if agree is None:
    st.caption("One judge: agreement needs two or more (`--judge` once per judge).")
else:
    if agree.position_bias:
        st.warning(agree.position_bias, icon=":material/warning:")
    a, b, c, d = st.columns(4)
    a.metric("Kendall's W", agree.kendalls_w,
             help=f"concordance of the judges' rankings over the {agree.items_all_judges} items every judge rated")
    b.metric("Krippendorff's α (ordinal)", agree.alpha, help=f"over the {agree.items} items any judge rated")
    c.metric("W after letter means", agree.residual_kendalls_w,
             help="Kendall's W once each judge's mean rating per letter is taken out of its ratings: the agreement "
                  "left when position bias is removed; undefined when nothing varies beyond the letters' means")
    d.metric("α after letter means (interval)", agree.residual_alpha,
             help="Krippendorff's α (interval) of the same residual ratings")
    if agree.letter_effects:
        st.caption(f"Variance explained by the letter, per judge: {agree.letter_effects}. Letters are the same for "
                   "every judge, so judges that rate by the letter agree without reading the concepts.")
    st.dataframe(agree.pairwise, hide_index=True)

st.subheader("Ratings of each sentence")
ratings = results.ratings
judges, strata = judging.filter_options(ratings)
f1, f2 = st.columns(2)
sub = judging.filter_ratings(ratings, f1.multiselect("Judges", judges, key="judge_filter"),
                             f2.multiselect("Strata", strata, key="stratum_filter"))
captions = judging.sentence_choices(sub)
if not captions:
    st.caption("No sentence matches the filters.")
else:
    chosen = st.selectbox(f"Sentence ({len(captions)})", list(captions), format_func=captions.get,
                          key="judged_sentence")
    sentence = judging.sentence_view(sub, chosen)
    st.markdown(f"> {vqlc_ui.plain(sentence.text)}")
    st.caption(vqlc_ui.plain(f"True label {sentence.label}, prediction {sentence.prediction} ({sentence.stratum})."))
    for jname, parsed, shown in sentence.answers:
        if not parsed:
            st.caption(vqlc_ui.plain(f"{jname}: its answer could not be parsed; it is counted as unparseable and rates "
                                     "nothing."))
        st.dataframe(shown, hide_index=True,
                     column_config={"view": st.column_config.TextColumn("shown to the judge", width="large"),
                                    "reason": st.column_config.TextColumn("reason", width="medium")})
st.download_button("All ratings (CSV)", ratings.to_csv(index=False).encode(), f"{name}_judge_ratings.csv", "text/csv",
                   on_click="ignore")
