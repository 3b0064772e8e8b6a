"""Judges and labels: what `vqlc judge` and `vqlc label` wrote for the run. Per judge, the mean
rating of each method's concepts with its 95% interval and rank, and the parse rate; across
judges, their agreement; each judged sentence with every rating and the judge's reason; each
method's labels with their status, agreement and detection score. A label is written or edited on
the concept's own view (Concepts page), and shows wherever the concept appears."""

import pandas as pd
import plotly.express as px
import streamlit as st

import vqlc_ui
from vqlc_core import judge, labels

run, _ = vqlc_ui.sidebar(choose_method=False)
name = run.dir.name
st.title("LLM judges and concept labels")

st.header("Judges")
with vqlc_ui.guard():
    loaded = judge.load_results(run.dir)
if loaded is None:
    st.info(f"No judge has rated run '{name}' yet. `python -m vqlc_core judge --run {name}` rates it with the "
            "offline default (SmolLM2-135M served on this machine); `--judge name=...,url=...,model=...` points it "
            "at any OpenAI-compatible server, several times for several judges.")
else:
    res, ratings = loaded
    if res.get("note"):
        st.warning(res["note"], icon=":material/warning:")
    if stale := judge.stale_methods(run.dir, res):
        st.warning(f"The concepts of {', '.join(stale)} were rebuilt after the judge rated them: these ratings are of "
                   f"the earlier concepts; run `vqlc judge --run {name}` again.")
    strata = ", ".join(f"{k} {v}" for k, v in res.get("strata", {}).items())
    st.caption(f"{res['n_sentences']} dev sentences (seed {res.get('seed', 0)}; {strata}). For each, every method's "
               "concept of the prediction representation and of the most salient word was shown under a neutral "
               "letter in a shuffled order and rated 1 (Poor) to 3 (Good): if a model relied only on this concept, "
               "how well would it support the prediction? Answers that did not parse are counted, never rated.")
    for jname, j in res["judges"].items():
        st.subheader(f"Judge: {jname}")
        ep = j.get("endpoint", {})
        st.caption(vqlc_ui.plain(f"{ep.get('model', '?')} at {ep.get('server') or ep.get('url') or '?'}"))
        a, b, c, d, e = st.columns(5)
        a.metric("Parse rate", judge.percent(j.get("parse_rate")),
                 help=f"{j['parsed']} of {j['requests']} answers parsed; {j['unparseable']} could not be read and "
                      "are left out")
        b.metric("Sentences rated", j["parsed"])
        c.metric("Identical concepts rated alike", judge.percent(j.get("identical_rated_alike")),
                 help="where two letters showed the same concept for one sentence, the share the judge rated alike, "
                      "as it was told to: a check on how closely it reads")
        position = j.get("position") or {}
        d.metric("Variance explained by the letter", judge.percent(position.get("eta_squared")),
                 help="the share of the ratings' variance that the letter a concept was shown under explains (eta "
                      "squared); letters are shuffled per sentence, so a judge that reads the concepts keeps it small")
        e.metric("Reasons copied from the example", judge.percent(j.get("copied_reasons")),
                 help="the share of its reasons that repeat the worked example's word for word")
        if position.get("by_letter"):
            st.caption("Mean rating by letter: " + ", ".join(f"{k} {v:.2f}" for k, v in position["by_letter"].items())
                       + ". The table's last column is the mean each method would get from its letters alone.")
        table = pd.DataFrame(j["table"])
        if not len(table):
            st.caption("No answer parsed: this judge rated nothing.")
            continue
        st.dataframe(table[[c for c in ("role", "method", "n", "mean", "low", "high", "rank", "from_letters")
                            if c in table]], hide_index=True,
                     column_config={"mean": st.column_config.NumberColumn("mean rating", format="%.2f"),
                                    "low": st.column_config.NumberColumn("95% low", format="%.2f"),
                                    "high": st.column_config.NumberColumn("95% high", format="%.2f"),
                                    "rank": st.column_config.NumberColumn("rank", help="1 = best within the role; "
                                                                          "ties share a rank"),
                                    "from_letters": st.column_config.NumberColumn(
                                        "from the letters alone", format="%.2f",
                                        help="the mean rating this method would get if each of its ratings were the "
                                             "mean rating of the letter it was shown under")})
        st.plotly_chart(px.bar(table.assign(plus=table["high"] - table["mean"], minus=table["mean"] - table["low"]),
                               x="method", y="mean", color="role", barmode="group", error_y="plus",
                               error_y_minus="minus", range_y=[0, 3.2], height=300,
                               labels={"mean": "mean rating (1-3)"}), width="stretch", key=f"judge_chart_{jname}")

    st.subheader("Agreement between judges")
    agree = res.get("agreement")
    if not agree:
        st.caption("One judge: agreement needs two or more (`--judge` once per judge).")
    else:
        fmt = lambda v: "–" if v is None else f"{v:.2f}"  # noqa: E731
        a, b = st.columns(2)
        a.metric("Kendall's W", fmt(agree.get("kendalls_w")),
                 help=f"concordance of the judges' rankings over the {agree['items_all_judges']} items every judge rated")
        b.metric("Krippendorff's α (ordinal)", fmt(agree.get("krippendorff_alpha")),
                 help=f"over the {agree['items']} items any judge rated")
        st.dataframe(pd.DataFrame([{"judges": k, "Spearman ρ": v["spearman"], "items": v["items"]}
                                         for k, v in agree["pairwise"].items()]), hide_index=True)

    st.subheader("Ratings of each sentence")
    f1, f2 = st.columns(2)
    judges_shown = f1.multiselect("Judges", sorted(ratings["judge"].unique()), key="judge_filter")
    strata_shown = f2.multiselect("Strata", sorted(ratings["stratum"].unique()), key="stratum_filter")
    sub = ratings
    if judges_shown:
        sub = sub[sub["judge"].isin(judges_shown)]
    if strata_shown:
        sub = sub[sub["stratum"].isin(strata_shown)]
    sentences = sub.drop_duplicates("text_id")[["text_id", "stratum", "text"]]
    if not len(sentences):
        st.caption("No sentence matches the filters.")
    else:
        captions = {int(r.text_id): f"{r.stratum} · {r.text[:90]}" for r in sentences.itertuples()}
        chosen = st.selectbox(f"Sentence ({len(sentences)})", list(captions), format_func=captions.get,
                              key="judged_sentence")
        one = sub[sub["text_id"] == chosen]
        first = one.iloc[0]
        st.markdown(f"> {vqlc_ui.plain(str(first['text']))}")
        st.caption(vqlc_ui.plain(f"True label {first['label']}, prediction {first['prediction']} "
                                 f"({first['stratum']})."))
        for jname, answer in one.groupby("judge", sort=True):
            if not answer["parsed"].any():
                st.caption(vqlc_ui.plain(f"{jname}: its answer could not be parsed; it is counted as unparseable "
                                         "and rates nothing."))
            shown = answer.sort_values("letter")[["judge", "letter", "method", "role", "concept", "word", "view",
                                                  "rating", "reason"]]
            st.dataframe(shown, hide_index=True,
                         column_config={"view": st.column_config.TextColumn("shown to the judge", width="large"),
                                        "reason": st.column_config.TextColumn("reason", width="medium")})
    st.download_button("All ratings (CSV)", ratings.to_csv(index=False).encode(), f"{name}_judge_ratings.csv",
                       "text/csv", on_click="ignore")

st.header("Concept labels")
st.caption("`vqlc label` shows a model 20 member contexts of a concept, draws three labels and keeps a name when two "
           "agree, then scores it by detection: the balanced accuracy of the model telling held-out members from as "
           "many non-members by the label. Write or edit a label on the concept's own view (Concepts page, "
           "Open); an edited label is marked and kept when `vqlc label` runs again.")
any_labels = False
for m in run.methods_built():
    with vqlc_ui.guard():
        state, entries, meta = labels.read_labels(run.dir, m)
    if state == "none":
        continue
    any_labels = True
    st.subheader(m)
    if state == "stale":
        st.warning(f"The labels of {m} name an earlier build of its concepts and are not shown; run `vqlc label --run "
                   f"{name} --method {m}` again.")
        continue
    who = meta.get("labeller") or {}
    if meta.get("note"):
        st.warning(meta["note"], icon=":material/warning:")
    named = sum(bool(e.get("name")) for e in entries.values())
    st.caption(vqlc_ui.plain(f"{len(entries)} concepts labelled, {named} with a name, "
                             f"{sum(bool(e.get('edited')) for e in entries.values())} edited by hand; labeller "
                             f"{who.get('model', 'none')}."))
    frame = labels.labels_frame(entries)
    st.dataframe(frame, hide_index=True,
                 column_config={"detection": st.column_config.NumberColumn(
                     "detection", format="%.2f", help="balanced accuracy of telling held-out members from "
                                                      "non-members by the label (0.5 = chance)"),
                                "detection_low": st.column_config.NumberColumn("95% low", format="%.2f"),
                                "detection_high": st.column_config.NumberColumn("95% high", format="%.2f")})
    st.download_button(f"Labels of {m} (CSV)", frame.to_csv(index=False).encode(), f"{name}_{m}_labels.csv",
                       "text/csv", on_click="ignore", key=f"labels_csv_{m}")
if not any_labels:
    st.info(f"No concept of run '{name}' has a label yet. `python -m vqlc_core label --run {name} --method vqlc "
            "--max-concepts 20` labels the 20 largest with the offline default, or open a concept on the Concepts "
            "page and write one.")
